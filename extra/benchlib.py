"""Shared helpers of the extra/bench_*.py scripts: timing, the machine line, the results table, and worker processes.

Every benchmark runs each implementation (this repo's tinygrad, numpy, PyTorch, and optionally another tinygrad such
as 0.9.0 in its own venv) in a worker process of its own: one script re-runs itself with `--worker NAME`, the worker
prints one tagged JSON line, and the parent collects it. Separate processes keep one library's threads and caches from
disturbing another's timings, and let a second interpreter run the same workload code.

This module is imported by those workers too, possibly under another interpreter with only tinygrad and numpy
installed: it must only use the standard library at import time and syntax that Python 3.8 accepts.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from typing import Callable

RESULT_TAG = "BENCH-RESULT "
# the knobs of this repo's tinygrad that a foreign tinygrad would also read but must not inherit from the parent
_FOREIGN_DROP = ("PYTHONPATH", "CACHEDB", "CACHELEVEL", "CPU", "CUDA", "CLANG", "JIT", "BEAM", "NOOPT")


# ---- timing ----

def best_of(fn: Callable[[], object], reps: int, rounds: int = 5) -> float:
    """Best mean seconds per call over `rounds` rounds of `reps` back-to-back calls.

    The minimum over rounds is the least disturbed estimate on a shared machine: other load only ever adds time.
    """
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - start) / reps)
    return best


def reps_for(fn: Callable[[], object], round_s: float, max_reps: int = 100_000) -> int:
    """How many calls of `fn` make one timing round of about `round_s` seconds (from the fastest of 3 calls)."""
    once = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        fn()
        once = min(once, time.perf_counter() - start)
    once = max(once, 1e-7)
    return max(1, min(max_reps, int(round_s / once)))


def timed(fn: Callable[[], object], round_s: float, rounds: int, warmup: int = 3) -> float:
    """Seconds per call of `fn` after `warmup` untimed calls: best of `rounds` rounds of about `round_s` each.

    Many short rounds beat a few long ones on a shared machine: the best round is more likely to fall in a quiet spell.
    """
    for _ in range(warmup):
        fn()
    return best_of(fn, reps_for(fn, round_s), rounds)


def cuda_event_seconds(torch, fn: Callable[[], object], reps: int) -> float:
    """The least GPU time of one call of `fn` over `reps` calls, from PyTorch's CUDA events, after a warm-up call."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = float("inf")
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        out = min(out, start.elapsed_time(end) / 1e3)
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)


# ---- the machine ----

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str:
    # read from the installed metadata: importing torch just to print its version would cost a second
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:
        return "?"
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def machine_line() -> str:
    """One line saying where the numbers come from: CPU, cores, OS, and the versions of Python, numpy and torch."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return (f"machine: {_cpu_model()}, {os.cpu_count()} cores ({usable} usable), {platform.system()} "
            f"{platform.release()}; Python {platform.python_version()}, numpy {_version('numpy')}, "
            f"torch {_version('torch')}")


# ---- the table ----

def fmt(value: float | None, unit: str) -> str:
    """A measurement in seconds written in `unit` (us, ms or s); None prints as '-'."""
    if value is None:
        return "-"
    scaled = value * {"us": 1e6, "ms": 1e3, "s": 1.0}[unit]
    digits = 0 if scaled >= 1000 else 1 if scaled >= 10 else 2 if scaled >= 1 else 3
    return f"{scaled:.{digits}f} {unit}"


def print_table(title: str, columns: list[str], rows: list[tuple[str, list[str]]]) -> None:
    """Print a title, a header line and one line per row; cells are already formatted strings."""
    name_w = max(len(name) for name, _ in rows)
    widths = [max(len(col), *(len(cells[i]) for _, cells in rows)) for i, col in enumerate(columns)]
    print(title)
    print("  ".join([" " * name_w] + [col.rjust(w) for col, w in zip(columns, widths)]))
    for name, cells in rows:
        print("  ".join([name.ljust(name_w)] + [cell.rjust(w) for cell, w in zip(cells, widths)]))


# ---- worker processes ----

def run_main(main: Callable[[], None]) -> None:
    """Run a benchmark's main(); a failed worker (RuntimeError) prints its reason and exits 1, without a traceback."""
    try:
        main()
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(1) from None


def emit(result: dict) -> None:
    """Print a worker's result where `run_worker` finds it (the last tagged line of its stdout)."""
    print(RESULT_TAG + json.dumps(result), flush=True)


def clang_dir() -> str | None:
    """A folder to put first on PATH so that `clang` resolves, or None when it already does.

    tinygrad 0.9.0's CLANG device runs the command `clang` by that name; Debian's clang-NN packages install only
    `clang-NN` on PATH, with the plain name beside it in /usr/lib/llvm-NN/bin.
    """
    if shutil.which("clang"):
        return None
    for major in range(30, 9, -1):
        found = shutil.which(f"clang-{major}")
        if found and os.path.exists(os.path.join(os.path.dirname(os.path.realpath(found)), "clang")):
            return os.path.dirname(os.path.realpath(found))
    raise RuntimeError("tinygrad 0.9.0's CLANG device needs a `clang` command, and none was found on PATH (nor a "
                       "clang-NN): install one, e.g. `apt-get install clang-14`")


def foreign_env(extra: dict | None = None) -> dict:
    """The environment for another tinygrad's interpreter: ours stays off its path, CLANG=1 picks the host device.

    Without CLANG=1, tinygrad 0.9.0 probes for GPU backends first and may choose one of them.
    """
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_DROP}
    env["CLANG"] = "1"
    extra_dir = clang_dir()
    if extra_dir:
        env["PATH"] = extra_dir + os.pathsep + env.get("PATH", "")
    env.update(extra or {})
    return env


def interpreter(path: str) -> str:
    """An argparse `type` for --tinygrad-python: `path` (or a command on PATH) as an absolute interpreter path."""
    full = shutil.which(path) or path
    if not (os.path.isfile(full) and os.access(full, os.X_OK)):
        raise argparse.ArgumentTypeError(f"{path!r} is not an executable file")
    return os.path.abspath(full)


def add_foreign_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tinygrad-python", metavar="PATH", type=interpreter,
                        help="also run the tinygrad workload with this interpreter, in a subprocess with CLANG=1 "
                        "(e.g. a venv with tinygrad 0.9.0 installed)")


def run_worker(python: str, args: list[str], env: dict | None = None, cwd: str | None = None,
               timeout: float = 300) -> dict:
    """Run `python args...` and return the JSON its last tagged stdout line holds; failures raise RuntimeError.

    With `cwd` elsewhere than the repo root (and PYTHONPATH dropped), a foreign interpreter imports its own tinygrad:
    only the script's folder, extra/, is put on its sys.path.
    """
    proc = subprocess.run([python, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    tagged = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_TAG)]
    if proc.returncode != 0 or not tagged:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"worker `{python} {' '.join(args)}` failed (exit {proc.returncode}):\n{tail}")
    return json.loads(tagged[-1][len(RESULT_TAG):])


def compiler_note(foreign: bool) -> str:
    """Which C compiler a tinygrad's CLANG device uses: this repo's rule ($CC, else clang, else cc) or 0.9.0's."""
    if foreign:
        where = clang_dir()
        return "clang" + (f" from {where}" if where else "")
    return os.environ.get("CC") or ("clang" if shutil.which("clang") else "cc")


def positive(kind: type) -> Callable[[str], float]:
    """An argparse `type` accepting only numbers of `kind` above zero."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above zero, got {text}")
        return value
    return parse


def add_timing_args(parser: argparse.ArgumentParser, round_s: float, rounds: int) -> None:
    parser.add_argument("--round-s", type=positive(float), default=round_s, help="seconds per timing round")
    parser.add_argument("--rounds", type=positive(int), default=rounds, help="timing rounds; the best is reported")


def tinygrad_origin() -> dict:
    """Where the imported tinygrad comes from and its installed version (None for an uninstalled checkout)."""
    import tinygrad
    from tinygrad import Device
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            ver = version("tinygrad")
        except PackageNotFoundError:
            ver = None
    except ImportError:
        ver = None
    return {"file": os.path.dirname(os.path.abspath(tinygrad.__file__)), "version": ver, "device": Device.DEFAULT}


def repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def assert_foreign(origin: dict, python: str) -> None:
    """Refuse a 'foreign' run that imported this repo's tinygrad: its row would silently duplicate ours."""
    if os.path.realpath(origin["file"]) == os.path.realpath(os.path.join(repo_root(), "tinygrad")):
        raise RuntimeError(f"{python} imported this repo's tinygrad ({origin['file']}), not its own: install "
                           "tinygrad into that interpreter's environment")


def foreign_label(origin: dict, python: str) -> str:
    return f"tinygrad {origin.get('version') or '?'} ({python})"
