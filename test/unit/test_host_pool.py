"""tinygrad's own pool for gcc-built threaded CLANG kernels (tinygrad/runtime/include/host_pool.h): the kernels bind to
it, every part of a loop runs once with the part number and count that gcc's static split reads, the caller finishes
a loop whose worker can't run, loops from several Python threads at once are right, and TG_HOST_POOL=0 (the default)
keeps libgomp.
"""
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from tinygrad.runtime.host_cc import host_cc

ROOT = Path(__file__).resolve().parents[2]
N = 1000
# each iteration records the part that ran it and the part count
PARTS_SRC = textwrap.dedent("""\
    int omp_get_max_threads(void);
    int omp_get_thread_num(void);
    int omp_get_num_threads(void);
    void tg_parts(int* restrict part, int* restrict nparts) {
    #pragma omp parallel for num_threads(2) if(omp_get_max_threads() > 1)
      for (int i = 0; i < %d; i++) {
        part[i] = omp_get_thread_num();
        nparts[i] = omp_get_num_threads();
      }
    }
    """) % N


def _gnu_openmp() -> bool:
    """Whether threaded kernels here are built against GNU OpenMP (gcc), the ABI the pool provides."""
    if not sys.platform.startswith("linux") or not host_cc().openmp:
        return False
    from tinygrad.runtime.ops_clang import ClangCompiler
    return b"libgomp.so" in ClangCompiler("test_no_disk_cache").compile(PARTS_SRC)


pytestmark = pytest.mark.skipif(not _gnu_openmp(), reason="the pool replaces GNU OpenMP (gcc) on Linux only")

# run in a fresh interpreter: which OpenMP runtime a process binds to is decided once per process
CHILD = textwrap.dedent("""\
    import os, sys
    import numpy as np
    from tinygrad.runtime.ops_clang import ClangCompiler, ClangProgram, _pin_openmp_runtime
    src = sys.stdin.read()
    lib = ClangCompiler("test_no_disk_cache").compile(src)
    rt = _pin_openmp_runtime(True)
    if os.environ.get("PIN_ONE_CPU"):
        # after the pool is set up for 2 threads: its worker, started by the first loop, shares the caller's CPU
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    so = ClangProgram("tg_parts", lib)
    part, nparts = np.zeros(%d, np.int32), np.zeros(%d, np.int32)
    for _ in range(200):
        so._prg(part.ctypes.data, nparts.ctypes.data)
        # gcc's static split: part 0 has the first half, part 1 the second, and each sees a count of 2
        assert (part[:%d] == 0).all() and (part[%d:] == 1).all() and (nparts == 2).all(), (part, nparts)
    print("RUNTIME", "pool" if hasattr(rt, "_name") and rt._name.startswith("/proc/self/fd/") else rt._name)
    """) % (N, N, N // 2, N // 2)


def _child(**env) -> str:
    proc = subprocess.run([sys.executable, "-c", CHILD], input=PARTS_SRC, capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2", **env})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_kernels_bind_to_the_pool_and_run_every_part_once():
    assert "RUNTIME pool" in _child(TG_HOST_POOL="1")


def test_every_part_runs_when_the_worker_shares_the_callers_one_cpu():
    # the worker can only run when the caller gives the CPU up: the caller must run both parts, not wait for it
    assert "RUNTIME pool" in _child(TG_HOST_POOL="1", PIN_ONE_CPU="1")


def test_host_pool_0_keeps_libgomp():
    assert "RUNTIME libgomp" in _child(TG_HOST_POOL="0")
    assert "RUNTIME libgomp" in _child()  # the default (see docs/threads.md for why)


def test_loops_from_several_threads_at_once():
    from tinygrad import Tensor
    a = np.random.default_rng(0).standard_normal((256, 784)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((784, 64)).astype(np.float32)
    want = a @ b
    errors = []

    def work():
        try:
            for _ in range(5):
                got = (Tensor(a, device="CLANG") @ Tensor(b, device="CLANG")).numpy()
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
