"""Threaded CLANG kernels under contention: each kernel of a few small and large workloads timed call by call, with 1
and 2 threads, alone and beside a busy process pinned to one core.

A threaded kernel waits for its slowest thread; on a busy machine a worker that the scheduler has put aside can make a
0.1 ms kernel take tens of milliseconds. The table gives, per kernel, whether it was split across threads and the best,
median and worst seconds of many calls, so such stalls show as a median or worst far above the best.

Threads run on tinygrad's own pool (TG_HOST_POOL=1, tinygrad/runtime/include/host_pool.h) or on libgomp (0); both
are timed.

Run from the repo root:  PYTHONPATH=. python extra/bench_threads.py [--calls 200] [--big-calls 3] [--big-n 4096]
[--small-only] [--no-busy]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

RESULT_TAG = "BENCH-THREADS "
# busy until its parent is gone, so a killed benchmark leaves no spinning process behind
_BUSY_LOOP = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    pass\n"


def _workloads(big: bool, big_n: int):
    """(name, function building the output Tensor from realized inputs) of each workload."""
    from tinygrad import Tensor

    def conv():
        x, w = Tensor.rand(1, 3, 32, 32).realize(), Tensor.rand(16, 3, 3, 3).realize()
        return x.conv2d(w)

    def matmul(n, k=None, m=None):
        def build():
            a, b = Tensor.rand(n, k or n).realize(), Tensor.rand(k or n, m or n).realize()
            return a @ b
        return build

    def add():
        a, b = Tensor.rand(1 << 24).realize(), Tensor.rand(1 << 24).realize()
        return a + b

    # the 128x96 @ 96x160 matmul is the smallest threaded kernel of the codegen corpus
    cases = [("conv 1x3x32x32", conv, False), ("matmul 64", matmul(64), False),
             ("matmul 128x96x160", matmul(128, 96, 160), False)]
    if big:
        cases += [(f"matmul {big_n}", matmul(big_n), True), ("add 16M", add, True)]
    return cases


def _worker(calls: int, big_calls: int, big: bool, big_n: int) -> None:
    """Time every kernel of every workload on CLANG in this process; print one tagged JSON line."""
    os.environ.setdefault("CLANG", "1")
    from tinygrad.engine.realize import lower_schedule
    results = []
    for name, build, is_big in _workloads(big, big_n):
        out = build()
        items = list(lower_schedule(out.schedule()))
        n = big_calls if is_big else calls
        for ei in items:
            threaded = "#pragma omp" in getattr(ei.prg, "src", "")
            for _ in range(1 if is_big else 5):
                ei.run(wait=True)
            times = []
            for _ in range(n):
                start = time.perf_counter()
                ei.run(wait=True)
                times.append(time.perf_counter() - start)
            results.append({"case": name, "kernel": getattr(ei.prg, "name", "?"), "threaded": threaded,
                            "best": min(times), "median": statistics.median(times), "worst": max(times)})
    print(RESULT_TAG + json.dumps(results), flush=True)


def _run_worker(threads: int, pool: str, args) -> list:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), CLANG="1", TG_HOST_POOL=pool)
    cmd = [sys.executable, __file__, "--worker", "--calls", str(args.calls), "--big-calls", str(args.big_calls),
           "--big-n", str(args.big_n)]
    if args.small_only:
        cmd.append("--small-only")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    raise RuntimeError(f"the worker printed no result:\n{out}")


def _start_busy() -> subprocess.Popen:
    """A python busy loop pinned to core 0: the contention a worker thread meets on a shared machine."""
    proc = subprocess.Popen([sys.executable, "-c", _BUSY_LOOP])
    try:
        os.sched_setaffinity(proc.pid, {0})
    except (AttributeError, OSError):
        pass
    return proc


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls of each small kernel")
    parser.add_argument("--big-calls", type=int, default=3, help="timed calls of each large kernel")
    parser.add_argument("--big-n", type=int, default=4096, help="size of the large square matmul")
    parser.add_argument("--small-only", action="store_true", help="skip the 4096 matmul and the 16M add")
    parser.add_argument("--no-busy", action="store_true", help="skip the runs beside a busy process")
    parser.add_argument("--threads", default="1,2", help="thread counts to compare")
    parser.add_argument("--pools", default="0,1", help="TG_HOST_POOL values to compare (0: libgomp, 1: the pool)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.calls, args.big_calls, not args.small_only, args.big_n)
        return
    rows = []
    for busy in ([False] if args.no_busy else [False, True]):
        for threads in (int(t) for t in args.threads.split(",")):
            # the pool only matters where there is a second thread
            for pool in (["1"] if threads < 2 else args.pools.split(",")):
                proc = _start_busy() if busy else None
                try:
                    res = _run_worker(threads, pool, args)
                finally:
                    if proc is not None:
                        proc.kill()
                        proc.wait()
                runtime = "-" if threads < 2 else ("pool" if pool == "1" else "libgomp")
                for r in res:
                    rows.append((r["case"], r["kernel"], threads, runtime, "busy" if busy else "alone", r["threaded"],
                                 r["best"], r["median"], r["worst"]))
    print(f"{'case':18} {'kernel':24} {'thr':>3} {'runtime':7} {'load':5} {'split':5} {'best ms':>9} {'median ms':>10} "
          f"{'worst ms':>9}")
    for case, kernel, threads, runtime, load, split, best, med, worst in rows:
        print(f"{case:18} {kernel[:24]:24} {threads:3d} {runtime:7} {load:5} {str(split):5} {best * 1e3:9.3f} "
              f"{med * 1e3:10.3f} {worst * 1e3:9.3f}")


if __name__ == "__main__":
    main()
