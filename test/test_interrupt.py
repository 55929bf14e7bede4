"""Ctrl-C stops eager work: a KeyboardInterrupt that lands in a finalizer (Buffer.__del__) is raised at the engine's
next check instead of being printed as "Exception ignored" and lost, and the process stays usable."""
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from test.helpers import default_sigint
from tinygrad import Tensor, dtypes
from tinygrad.device import Buffer

ROOT = Path(__file__).resolve().parents[1]


def test_an_interrupt_in_a_finalizer_is_raised_at_the_next_realize(monkeypatch):
    buf = Buffer("CLANG", 16, dtypes.float32).ensure_allocated()
    original = buf.allocator.free

    def interrupted_free(*args, **kwargs):
        original(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(buf.allocator, "free", interrupted_free)
    del buf  # CPython runs __del__ now; the interrupt must not escape from it, nor be lost
    monkeypatch.undo()
    x = Tensor([1.0, 2.0])
    with pytest.raises(KeyboardInterrupt):
        (x * 3).realize()
    # raised once; the process keeps working
    np.testing.assert_array_equal((x * 3).numpy(), [3.0, 6.0])


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_ctrl_c_stops_an_eager_loop():
    script = textwrap.dedent("""
        import sys
        from tinygrad import Tensor
        x = Tensor.ones(64).contiguous().realize()
        try:
            for n in range(10**9):
                x = (x * 1.0001 + 1).realize()
                if n == 2000:
                    print("running", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
        assert proc.stdout.readline().strip() == "running"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 3, (out, err)
        assert "Exception ignored" not in err


def test_ctrl_c_at_the_first_instruction_of_a_finalizer_is_deferred():
    import sys

    from tinygrad import helpers

    def finalizer():
        helpers._on_sigint(signal.SIGINT, sys._getframe())  # what the signal handler sees if Ctrl-C lands here

    helpers.guard_finalizers(finalizer)
    finalizer()  # deferred, not raised
    with pytest.raises(KeyboardInterrupt):
        helpers.raise_pending_interrupt()
    with pytest.raises(KeyboardInterrupt):  # anywhere else it is raised at once
        helpers._on_sigint(signal.SIGINT, sys._getframe())
