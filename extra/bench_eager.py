"""Eager dispatch cost: one small fused op on 64 floats, realized every call, beside numpy and PyTorch eager.

The inputs are realized once beforehand and every expression runs a few times before timing, so tinygrad's method
cache is warm: what is left is scheduling, cache lookup and launch, per call. A second table times dependent chains
of 200 ops (`a = (a * 1.0001 + 0.5).realize()` and the same with int constants, on float32 and int32), each chain
ending in a device synchronisation, per op: a float constant must cost what an int one does. Each implementation
runs in a worker process of its own (see benchlib.py); the results of every worker are checked against numpy in
float64.

`--device CUDA` runs tinygrad on that device and PyTorch on torch.cuda (numpy stays on the host).

Run from the repo root:  PYTHONPATH=. python extra/bench_eager.py [--device CUDA] [--tinygrad-python PYTHON]
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
CHAIN = 200
# (name, dtype, start value or None for the random inputs, op): the int-constant chains start at -1, their fixed
# point, so 200 steps never overflow (a signed overflow in a C kernel is undefined)
CHAINS = [
    ("f32 x*1.0001+0.5", "float32", None, lambda a: a * 1.0001 + 0.5),
    ("f32 x*2+1", "float32", -1, lambda a: a * 2 + 1),
    ("i32 x*2+1", "int32", -1, lambda a: a * 2 + 1),
]


def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal(SIZE).astype(np.float32), rng.standard_normal(SIZE).astype(np.float32)


def chain_input(dtype: str, start) -> np.ndarray:
    return inputs()[0].astype(dtype) if start is None else np.full(SIZE, start, dtype)


def _flat(value) -> list[float]:
    return np.asarray(value, dtype=np.float64).ravel().tolist()


def _time_chains(make, step, sync, timing: dict) -> tuple[dict, dict]:
    """(seconds per op, final values) of each chain: `make(numpy array)` gives the library's array, `step(op, a)`
    one op of the chain, `sync()` waits for the device."""
    times, values = {}, {}
    for name, dtype, start, op in CHAINS:
        a0 = make(chain_input(dtype, start))

        def run(a0=a0, op=op):
            a = a0
            for _ in range(CHAIN):
                a = step(op, a)
            sync()
            return a
        values[name] = run()
        times[name] = benchlib.timed(run, **timing) / CHAIN
    return times, values


def work_tinygrad(timing: dict, device: str | None) -> dict:
    # only API that tinygrad 0.9.0 has too: this runs under its interpreter as well. The device came in the
    # environment (see main); `device` is for the other workers.
    from tinygrad import Device, GlobalCounters, Tensor
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
    dev = Device[Device.DEFAULT]
    times, values = _time_chains(lambda a: Tensor(a).realize(), lambda op, a: op(a).realize(), dev.synchronize,
                                 timing)
    out["chain_times"], out["chain_values"] = times, {k: _flat(v.numpy()) for k, v in values.items()}
    return out


def _time_all(x, y, timing: dict) -> dict:
    return {name: benchlib.timed(lambda expr=expr: expr(x, y), **timing) for name, expr in EXPRS}


def work_numpy(timing: dict, device: str | None) -> dict:
    x, y = inputs()
    out = {"values": {name: _flat(expr(x, y)) for name, expr in EXPRS}, "times": _time_all(x, y, timing)}
    times, values = _time_chains(lambda a: a, lambda op, a: op(a), lambda: None, timing)
    out["chain_times"], out["chain_values"] = times, {k: _flat(v) for k, v in values.items()}
    return out


def work_torch(timing: dict, device: str | None) -> dict:
    import torch
    on = "cuda" if device and device.upper().startswith("CUDA") else "cpu"
    sync = torch.cuda.synchronize if on == "cuda" else (lambda: None)
    xn, yn = inputs()
    x, y = torch.from_numpy(xn).to(on), torch.from_numpy(yn).to(on)
    out = {"values": {name: _flat(expr(x, y).cpu().numpy()) for name, expr in EXPRS},
           "threads": torch.get_num_threads(), "on": on}
    out["times"] = _time_all(x, y, timing)
    times, values = _time_chains(lambda a: torch.from_numpy(a).to(on), lambda op, a: op(a), sync, timing)
    out["chain_times"], out["chain_values"] = times, {k: _flat(v.cpu().numpy()) for k, v in values.items()}
    if on == "cpu":
        # one thread as well: on a shared 2-core machine a second intra-op thread often waits for a core
        torch.set_num_threads(1)
        out["times_1t"] = _time_all(x, y, timing)
        out["chain_times_1t"] = _time_chains(lambda a: torch.from_numpy(a), lambda op, a: op(a), sync, timing)[0]
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
    for name, dtype, start, op in CHAINS:
        want = chain_input(dtype, start).astype(np.float64)
        for _ in range(CHAIN):
            want = op(want)
        got = np.asarray(result["chain_values"][name])
        # 200 float32 roundings of values near 100: a relative error of 1e-5 is expected
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            raise RuntimeError(f"{label} computed a wrong result for chain {name}: {got[:4]}... instead of "
                               f"{want[:4]}...")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    benchlib.add_foreign_arg(parser)
    benchlib.add_timing_args(parser, round_s=0.1, rounds=7)
    parser.add_argument("--device", help="tinygrad's device (default: its default device); with CUDA, PyTorch runs "
                        "on torch.cuda")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    timing = {"round_s": args.round_s, "rounds": args.rounds}
    if args.worker:
        benchlib.emit(WORKERS[args.worker](timing, args.device))
        return

    script = os.path.abspath(__file__)
    common = ["--round-s", str(args.round_s), "--rounds", str(args.rounds)]
    if args.device:
        common += ["--device", args.device]
    # the device is chosen the way both this repo and tinygrad 0.9 read it: DEVICENAME=1 in the environment
    pick = {args.device.split(":")[0].upper(): "1"} if args.device else {}
    rows: list[tuple[str, dict | None, str]] = []
    ours = benchlib.run_worker(sys.executable, [script, "--worker", "tinygrad", *common], env={**os.environ, **pick})
    rows.append(("tinygrad (this repo)", ours, "times"))
    notes = [f"tinygrad (this repo): device {ours['origin']['device']}, C compiler {benchlib.compiler_note(False)}"]
    if args.tinygrad_python:
        python = args.tinygrad_python
        env = benchlib.foreign_env(pick)
        if pick and "CLANG" not in pick:
            del env["CLANG"]  # foreign_env's choice of the host device: one device at a time
        with tempfile.TemporaryDirectory() as cwd:
            theirs = benchlib.run_worker(python, [script, "--worker", "tinygrad", *common], env=env, cwd=cwd)
        benchlib.assert_foreign(theirs["origin"], python)
        label = benchlib.foreign_label(theirs["origin"], python)
        rows.append((label, theirs, "times"))
        notes.append(f"{label}: device {theirs['origin']['device']}, C compiler {benchlib.compiler_note(True)}")
    rows.append(("numpy", benchlib.run_worker(sys.executable, [script, "--worker", "numpy", *common]), "times"))
    if importlib.util.find_spec("torch"):
        torch_res = benchlib.run_worker(sys.executable, [script, "--worker", "torch", *common])
        if torch_res["on"] == "cuda":
            rows.append(("PyTorch eager (cuda)", torch_res, "times"))
        else:
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
    chains = [name for name, *_ in CHAINS]
    benchlib.print_table(
        f"Dependent chain of {CHAIN} eager ops on {SIZE} elements (a = op(a), realized each op; one synchronisation "
        f"at the end): time per op (best of {args.rounds} rounds)",
        chains, [(label, [benchlib.fmt(r["chain_" + key][n] if r else None, "us") for n in chains])
                 for label, r, key in rows])
    for label, result, _ in rows:
        if result and "kernels" in result:
            per = ", ".join(f"{n} {k}" for n, k in result["kernels"].items())
            notes.append(f"kernels per call, {label}: {per}")
    print("results of every row checked against numpy in float64")
    print("\n".join(notes))


if __name__ == "__main__":
    benchlib.run_main(main)
