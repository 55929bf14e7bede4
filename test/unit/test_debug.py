"""DEBUG levels: 2 prints a line per launch, 4 the source once when compiled, 5 the AST, 6 the uops."""
import os
import re
import subprocess
import sys

SCRIPT = """
from tinygrad import Tensor
a = Tensor([1.0, 2.0, 3.0]).realize()
for _ in range(3):
    (a * 2 + 1).realize()
"""


def run(level: int) -> str:
    out = subprocess.run([sys.executable, "-c", SCRIPT], env={**os.environ, "DEBUG": str(level)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_debug2_one_line_per_launch_with_time():
    lines = [ln for ln in run(2).splitlines() if "***" in ln]
    kernels = [ln for ln in lines if "E_3" in ln]
    assert len(kernels) == 3, lines
    assert all(" ms" in ln and "GFLOPS" in ln and "GB/s" in ln for ln in kernels)


def test_op_estimate_counts_a_matmul():
    import numpy as np

    from tinygrad import Tensor
    from tinygrad.engine.realize import op_estimate
    from tinygrad.engine.schedule import create_schedule
    a = Tensor(np.ones((8, 16), np.float32)).realize()
    b = Tensor(np.ones((16, 4), np.float32)).realize()
    (si,) = create_schedule([(a @ b).lazydata])
    assert op_estimate(si.ast) == 2 * 8 * 16 * 4  # a multiply and an add per term


def test_debug4_prints_each_source_once():
    out = run(4)
    # the kernel's signature, once (C: "void E_3(", CUDA: "void __launch_bounds__(32) E_3(")
    assert out.count("E_3(") == 1, out


def test_debug5_ast_and_debug6_uops():
    out5, out6 = run(5), run(6)
    assert "BufferOps.STORE" in out5 and "BinaryOps.MUL" in out5
    assert "UOps.DEFINE_GLOBAL" in out6 and ("UOps.LOOP" in out6 or "UOps.SPECIAL" in out6) and "UOps.STORE" in out6


def test_debug2_shows_each_kernels_opts():
    script = "from tinygrad import Tensor\na = Tensor.rand(64, 64).realize()\n(a @ a).realize()\n"
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "DEBUG": "2"}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (line,) = [ln for ln in out.stdout.splitlines() if "***" in ln and "r_64_64_64" in ln]
    # e.g. [VECTORIZE 1:16 UPCAST 0:4] on CLANG, [VECTORIZE 1:4 UNROLL 2:4 LOCAL 1:16 LOCAL 0:16] on CUDA
    assert re.search(r"\[([A-Z]+ \d+:\d+ ?)+\]$", line.rstrip()), line
