"""Cold start: wall time from launching a new Python process to the end of its first MLP training step.

For tinygrad this is timed with a cold on-disk kernel cache (CACHEDB pointing at a fresh file, so every kernel is
compiled) and a warm one (the same file again, after a first run filled it), and `import tinygrad` alone; PyTorch
and numpy run the same first step (bench_mlp.py's workload) in a new process, and `python -c pass`-like start-up is
the baseline. Each figure is the median of --runs new processes. The clock starts just before the parent launches
the child and stops when the child, having read its first step's loss, reads time.time(); interpreter start-up and
imports are included, the child's exit is not.

Run from the repo root:  PYTHONPATH=. python extra/bench_coldstart.py [--runs 3] [--tinygrad-python PATH]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time

import bench_mlp
import benchlib

# the child of an import-only run: no json, no benchlib, just the import and the clock
_IMPORT_CHILD = "import time{mod}; print('" + benchlib.RESULT_TAG + "{{\"t_end\": %r}}' % time.time())"


def import_child(module: str | None) -> list[str]:
    return ["-c", _IMPORT_CHILD.format(mod=f"; import {module}" if module else "")]


def step_child(impl: str, bs: int, opt: str) -> list[str]:
    return [os.path.abspath(bench_mlp.__file__), "--first-step", impl, "--bs", str(bs), "--opt", opt]


def launch(python: str, args: list[str], env: dict, cwd: str | None) -> float:
    """Seconds from launching `python args` to the time.time() its tagged result line reports."""
    start = time.time()
    result = benchlib.run_worker(python, args, env=env, cwd=cwd)
    return result["t_end"] - start


def median_of(runs: int, python: str, args: list[str], env: dict, cwd: str | None) -> float:
    return benchlib.median([launch(python, args, env, cwd) for _ in range(runs)])


def tinygrad_row(runs: int, python: str, env: dict, cwd: str | None, step: list[str], tmp: str,
                 tag: str) -> list[float]:
    """[import, first step with a cold cache, first step with a warm cache] medians for one tinygrad."""
    launch(python, import_child("tinygrad"), env, cwd)  # untimed: leaves the bytecode caches written
    imported = median_of(runs, python, import_child("tinygrad"), env, cwd)
    cold = []
    for i in range(runs):
        # NOTE: each cold run gets a file of its own; the first one is left filled for the warm runs
        cold.append(launch(python, step, {**env, "CACHEDB": os.path.join(tmp, f"{tag}-{i}.db")}, cwd))
    warm = median_of(runs, python, step, {**env, "CACHEDB": os.path.join(tmp, f"{tag}-0.db")}, cwd)
    return [imported, benchlib.median(cold), warm]


def library_row(runs: int, module: str, step: list[str], env: dict) -> list[str]:
    """Cells for a library without a kernel cache: its import, and its first step shown in both step columns."""
    launch(sys.executable, import_child(module), env, None)  # untimed, as for tinygrad
    imported = median_of(runs, sys.executable, import_child(module), env, None)
    first = benchlib.fmt(median_of(runs, sys.executable, step, env, None), "s")
    return [benchlib.fmt(imported, "s"), first, first]


def tinygrad_origin(python: str, env: dict, cwd: str | None) -> dict:
    """benchlib.tinygrad_origin() as seen by `python` in `env`: which tinygrad a child there imports."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    code = "import benchlib; benchlib.emit(benchlib.tinygrad_origin())"
    return benchlib.run_worker(python, ["-c", code], env={**env, "PYTHONPATH": path}, cwd=cwd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=benchlib.positive(int), default=3, help="new processes per figure (median)")
    parser.add_argument("--bs", type=benchlib.positive(int), default=bench_mlp.DEFAULT_BS, help="batch size")
    parser.add_argument("--opt", choices=sorted(bench_mlp.LR), default=bench_mlp.DEFAULT_OPT, help="optimizer")
    benchlib.add_foreign_arg(parser)
    args = parser.parse_args()
    foreign = args.tinygrad_python
    step = {impl: step_child(impl, args.bs, args.opt) for impl in ("tinygrad", "torch", "numpy")}
    # the parent's own cache settings must not leak into the children: each run sets CACHEDB itself
    env = {k: v for k, v in os.environ.items() if k not in ("CACHEDB", "CACHELEVEL")}
    rows: list[tuple[str, list[str]]] = []
    notes = []
    wall = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        ours = tinygrad_row(args.runs, sys.executable, env, None, step["tinygrad"], tmp, "ours")
        rows.append(("tinygrad (this repo)", [benchlib.fmt(t, "s") for t in ours]))
        origin = tinygrad_origin(sys.executable, env, None)
        notes.append(f"tinygrad (this repo): device {origin['device']}, C compiler {benchlib.compiler_note(False)}")
        if foreign:
            cwd = os.path.join(tmp, "foreign")
            os.mkdir(cwd)
            origin = tinygrad_origin(foreign, benchlib.foreign_env(), cwd)
            benchlib.assert_foreign(origin, foreign)
            label = benchlib.foreign_label(origin, foreign)
            theirs = tinygrad_row(args.runs, foreign, benchlib.foreign_env(), cwd, step["tinygrad"], tmp, "theirs")
            rows.append((label, [benchlib.fmt(t, "s") for t in theirs]))
            notes.append(f"{label}: device {origin['device']}, C compiler {benchlib.compiler_note(True)}")
        if importlib.util.find_spec("torch"):
            rows.append(("PyTorch eager", library_row(args.runs, "torch", step["torch"], env)))
        else:
            rows.append(("PyTorch (not installed)", ["-", "-", "-"]))
        rows.append(("numpy by hand", library_row(args.runs, "numpy", step["numpy"], env)))
        rows.append(("python, no imports", [benchlib.fmt(median_of(args.runs, sys.executable, import_child(None),
                                                                   env, None), "s"), "-", "-"]))

    print(benchlib.machine_line())
    benchlib.print_table(
        f"New process to the end of its first {bench_mlp.IN}-{bench_mlp.HIDDEN}-{bench_mlp.OUT} MLP training step "
        f"(batch {args.bs}, {args.opt}): median of {args.runs} processes",
        ["import only", "1st step, cold cache", "1st step, warm cache"], rows)
    notes.append("PyTorch and numpy keep no kernel cache: one measurement, shown in both step columns")
    notes.append(f"whole benchmark: {time.perf_counter() - wall:.0f} s")
    print("\n".join(notes))


if __name__ == "__main__":
    benchlib.run_main(main)
