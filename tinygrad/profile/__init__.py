"""The profiler: a Chrome/Perfetto trace of what the engine does, and the cold start's compile progress.

`with Profile("trace.json"): ...` (or `PROFILE=1` for the whole process, written at exit to profile.json, or to the
path PROFILE names) records "X" (complete) events in Chrome's trace event format, which chrome://tracing and
https://ui.perfetto.dev load:

- host spans on the "host" process, one track per Python thread: schedule, linearize, render, compile, copy;
- device spans on one process per device, one track per stream (every device here queues its work on one stream):
  a kernel each, timed by the device (a CUDA launch waits and returns the time its events measured; a host kernel is
  the wall time of its call), with its name, global/local size, estimated FLOPs and bytes, and the rates.

`python -m tinygrad.profile trace.json` prints the kernels that took the most time (summary.py).

The engine's hooks read the module attribute `current` (None unless profiling), so they cost one attribute load when
off. While profiling, realize takes the engine's per-kernel path (not a cached Plan's direct launches) and TinyJit
replays item by item (not as a device graph), so every kernel gets its own span.

Cold starts say what they are doing: progress.py counts the kernels compiled and prints a progress line.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import sys
import threading
import time
from typing import Any, Iterator

from tinygrad.helpers import getenv
from tinygrad.profile.progress import compiled, show_compile_progress

# the Profiler recording now, or None: the engine's hooks test this (one attribute load) before doing anything
current: Profiler | None = None


class Profiler:
    """Collects trace events; `dump(path)` writes them as Chrome trace JSON. Timestamps are microseconds since the
    profiler started (perf_counter), as the format wants."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        # device name -> its pid in the trace (the host is pid 0)
        self._pids: dict[str, int] = {}
        # host threads named in the trace so far
        self._threads: set[int] = set()

    def _us(self, t: float) -> float:
        return round((t - self.t0) * 1e6, 3)

    def _pid(self, device: str) -> int:
        pid = self._pids.get(device)
        if pid is None:
            pid = self._pids[device] = len(self._pids) + 1
            self._meta(pid, 0, "process_name", device)
            self._meta(pid, 0, "thread_name", "stream 0")
        return pid

    def _meta(self, pid: int, tid: int, what: str, name: str) -> None:
        self.events.append({"name": what, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})

    def host(self, name: str, start: float, end: float, args: dict[str, Any] | None = None) -> None:
        """A host span `name` from perf_counter time `start` to `end`, on the calling thread's track."""
        tid = threading.get_ident() % 1000003  # the format wants a small int; idents are addresses
        ev = {"name": name, "cat": "host", "ph": "X", "pid": 0, "tid": tid, "ts": self._us(start),
              "dur": round((end - start) * 1e6, 3), "args": args or {}}
        with self._lock:
            if tid not in self._threads:
                # the track's name: the thread's (MainThread, or a compile worker of precompile's pool)
                self._threads.add(tid)
                self._meta(0, tid, "thread_name", threading.current_thread().name)
            self.events.append(ev)

    def kernel(self, device: str, name: str, start: float, seconds: float, args: dict[str, Any]) -> None:
        """A device span: kernel `name` on `device`'s stream, launched at perf_counter time `start`, running
        `seconds` as the device measured it."""
        with self._lock:
            pid = self._pid(device)
            self.events.append({"name": name, "cat": "kernel", "ph": "X", "pid": pid, "tid": 0,
                                "ts": self._us(start), "dur": round(seconds * 1e6, 3), "args": args})

    def trace(self) -> dict[str, Any]:
        with self._lock:
            events = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "host"}}]
            # displayTimeUnit first: Perfetto's JSON tokenizer looks for it only in the first chunk of the file
            return {"displayTimeUnit": "ms", "traceEvents": events + list(self.events)}

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.trace(), f)


@contextlib.contextmanager
def span(name: str, **args: Any) -> Iterator[None]:
    """A host span around a block, when profiling (engine code: `with span("compile"): ...`)."""
    prof = current
    if prof is None:
        yield
        return
    st = time.perf_counter()
    try:
        yield
    finally:
        prof.host(name, st, time.perf_counter(), args)


class Profile(contextlib.ContextDecorator):
    """`with Profile("trace.json"):` records a trace of the block and writes it there (nothing written for None);
    the Profiler is `.profiler` (its events in `.profiler.trace()`). Profiles nest: the innermost records, and the
    outer one misses what ran inside it."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.profiler: Profiler | None = None

    def __enter__(self) -> Profile:
        global current
        self.prev, self.profiler = current, Profiler()
        current = self.profiler
        return self

    def __exit__(self, *exc) -> None:
        global current
        current = self.prev
        if self.path is not None and self.profiler is not None:
            self.profiler.dump(self.path)


def _profile_process(path: str) -> None:
    """PROFILE=1: record the whole process, written at exit."""
    global current
    prof = current = Profiler()

    def write() -> None:
        if not prof.events:
            # nothing ran (`python -m tinygrad.profile profile.json` with PROFILE=1 still set must not overwrite it)
            return
        prof.dump(path)
        print(f"tinygrad: profile written to {path} (python -m tinygrad.profile {path})", file=sys.stderr)
    atexit.register(write)


_knob = str(getenv("PROFILE"))
if _knob not in ("", "0"):
    _profile_process("profile.json" if _knob == "1" else _knob)


def kernel_args(name: str, global_size: Any, local_size: Any, ops: int, mem: int, seconds: float) -> dict[str, Any]:
    """The args of a kernel's device span (what DEBUG=2 prints): sizes, the estimated FLOPs and bytes, and rates."""
    rate = seconds if seconds > 0 else float("inf")
    return {"kernel": name, "global_size": list(global_size) if global_size is not None else None,
            "local_size": list(local_size) if local_size is not None else None, "flops": int(ops), "bytes": int(mem),
            "GFLOPS": ops / rate * 1e-9, "GB/s": mem / rate * 1e-9}


__all__ = ["Profile", "Profiler", "span", "kernel_args", "current", "compiled", "show_compile_progress"]
