"""Eager dispatch cost: one small fused op on 64 floats, realized every call, beside numpy and PyTorch eager.

The inputs are realized once beforehand and every expression runs a few times before timing, so tinygrad's method
cache is warm: what is left is scheduling, cache lookup and launch, per call. Each implementation runs in a worker
process of its own (see benchlib.py); the results of every worker are checked against numpy in float64.

Run from the repo root:  PYTHONPATH=. python extra/bench_eager.py [--tinygrad-python /tmp/tg09/bin/python]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile

import benchlib
import numpy as np

SIZE = 64
# (name, expression): every library's arrays accept these operators and .sum(), so one lambda serves all of them
EXPRS = [
    ("x*2+1", lambda x, y: x * 2 + 1),
    ("(x*2+1)*x", lambda x, y: (x * 2 + 1) * x),
    ("x.sum()", lambda x, y: x.sum()),
    ("x+y", lambda x, y: x + y),
]


def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal(SIZE).astype(np.float32), rng.standard_normal(SIZE).astype(np.float32)


def _flat(value) -> list[float]:
    return np.asarray(value, dtype=np.float64).ravel().tolist()


def work_tinygrad(timing: dict) -> dict:
    # only API that tinygrad 0.9.0 has too: this runs under its interpreter as well
    from tinygrad import GlobalCounters, Tensor
    xn, yn = inputs()
    x, y = Tensor(xn).realize(), Tensor(yn).realize()
    out: dict = {"times": {}, "values": {}, "kernels": {}, "origin": benchlib.tinygrad_origin()}
    for name, expr in EXPRS:
        def call(expr=expr):
            return expr(x, y).realize()
        out["values"][name] = _flat(call().numpy())
        before = GlobalCounters.kernel_count
        call()
        out["kernels"][name] = GlobalCounters.kernel_count - before
        out["times"][name] = benchlib.timed(call, **timing)
    return out


def _time_all(x, y, timing: dict) -> dict:
    return {name: benchlib.timed(lambda expr=expr: expr(x, y), **timing) for name, expr in EXPRS}


def work_numpy(timing: dict) -> dict:
    x, y = inputs()
    return {"values": {name: _flat(expr(x, y)) for name, expr in EXPRS}, "times": _time_all(x, y, timing)}


def work_torch(timing: dict) -> dict:
    import torch
    xn, yn = inputs()
    x, y = torch.from_numpy(xn), torch.from_numpy(yn)
    out = {"values": {name: _flat(expr(x, y).numpy()) for name, expr in EXPRS}, "threads": torch.get_num_threads()}
    out["times"] = _time_all(x, y, timing)
    # one thread as well: on a shared 2-core machine a second intra-op thread often waits for a core
    torch.set_num_threads(1)
    out["times_1t"] = _time_all(x, y, timing)
    return out


WORKERS = {"tinygrad": work_tinygrad, "numpy": work_numpy, "torch": work_torch}


def check(label: str, result: dict) -> None:
    """Every implementation must compute what numpy computes in float64 from the same inputs."""
    x, y = (a.astype(np.float64) for a in inputs())
    for name, expr in EXPRS:
        want = np.asarray(expr(x, y)).ravel()
        got = np.asarray(result["values"][name])
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            raise RuntimeError(f"{label} computed a wrong result for {name}: {got[:4]}... instead of {want[:4]}...")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    benchlib.add_foreign_arg(parser)
    benchlib.add_timing_args(parser, round_s=0.1, rounds=7)
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    timing = {"round_s": args.round_s, "rounds": args.rounds}
    if args.worker:
        benchlib.emit(WORKERS[args.worker](timing))
        return

    script = os.path.abspath(__file__)
    common = ["--round-s", str(args.round_s), "--rounds", str(args.rounds)]
    rows: list[tuple[str, dict | None, str]] = []
    ours = benchlib.run_worker(sys.executable, [script, "--worker", "tinygrad", *common])
    rows.append(("tinygrad (this repo)", ours, "times"))
    notes = [f"tinygrad (this repo): device {ours['origin']['device']}, C compiler {benchlib.compiler_note(False)}"]
    if args.tinygrad_python:
        python = args.tinygrad_python
        with tempfile.TemporaryDirectory() as cwd:
            theirs = benchlib.run_worker(python, [script, "--worker", "tinygrad", *common],
                                         env=benchlib.foreign_env(), cwd=cwd)
        benchlib.assert_foreign(theirs["origin"], python)
        label = benchlib.foreign_label(theirs["origin"], python)
        rows.append((label, theirs, "times"))
        notes.append(f"{label}: device {theirs['origin']['device']}, C compiler {benchlib.compiler_note(True)}")
    rows.append(("numpy", benchlib.run_worker(sys.executable, [script, "--worker", "numpy", *common]), "times"))
    if importlib.util.find_spec("torch"):
        torch_res = benchlib.run_worker(sys.executable, [script, "--worker", "torch", *common])
        rows.append((f"PyTorch eager ({torch_res['threads']} threads, the default)", torch_res, "times"))
        rows.append(("PyTorch eager, 1 thread", torch_res, "times_1t"))
    else:
        rows.append(("PyTorch (not installed)", None, "times"))
    for label, result, _ in rows:
        if result is not None:
            check(label, result)

    print(benchlib.machine_line())
    names = [name for name, _ in EXPRS]
    benchlib.print_table(
        f"Eager op on {SIZE} float32s, realized every call, warm caches: time per call "
        f"(best of {args.rounds} rounds)",
        names, [(label, [benchlib.fmt(r[key][n] if r else None, "us") for n in names]) for label, r, key in rows])
    for label, result, _ in rows:
        if result and "kernels" in result:
            per = ", ".join(f"{n} {k}" for n, k in result["kernels"].items())
            notes.append(f"kernels per call, {label}: {per}")
    print("results of every row checked against numpy in float64")
    print("\n".join(notes))


if __name__ == "__main__":
    benchlib.run_main(main)
