"""The run log: what the engine ran while VIZ is on, in order, for the visualizer (tinygrad/viz) to draw.

Each entry is one ExecItem as it ran: its AST, its runner (a CompiledRunner keeps the kernel's ProgramSpec: source
and Opts), the buffers it read and wrote and the time it took. Buffers are named by a number given on first sight,
held through weak references only: the log never keeps a tensor's memory alive, and a buffer made later at a freed
one's address gets a number of its own.

While VIZ is off nothing here runs: the engine tests the knob before calling `record` (and the eager plan path of
engine/plan.pyx takes the recording path only while it is on).
"""
from __future__ import annotations

import weakref
from typing import Any


class RunEntry:
    """One item run: `bufs` are (number, device, size, dtype name) per buffer, the `n_outputs` outputs first."""
    __slots__ = ("ast", "runner", "name", "device", "bufs", "n_outputs", "time_s")

    def __init__(self, ast: tuple, runner: Any, name: str, device: str, bufs: tuple, n_outputs: int,
                 time_s: float | None):
        self.ast, self.runner, self.name, self.device = ast, runner, name, device
        self.bufs, self.n_outputs, self.time_s = bufs, n_outputs, time_s


class RunLog:
    """The entries recorded so far, at most `limit` of them (later ones are counted in `dropped`, so a long run
    under VIZ=1 grows the log by a bounded amount)."""

    def __init__(self, limit: int = 20000):
        self.limit = limit
        self.entries: list[RunEntry] = []
        self.dropped = 0
        self._numbers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._next = 0

    def buffer_number(self, buf: Any) -> int:
        n = self._numbers.get(buf)
        if n is None:
            n = self._numbers[buf] = self._next
            self._next += 1
        return n

    def record(self, ast: tuple, runner: Any, bufs: list, n_outputs: int, time_s: float | None) -> None:
        """Log one item run (called with ENGINE_LOCK held, by engine/realize.py)."""
        if len(self.entries) >= self.limit:
            self.dropped += 1
            return
        metas = tuple((self.buffer_number(b), b.device, b.size, b.dtype.name) for b in bufs)
        device = bufs[0].device if bufs else runner.dname
        self.entries.append(RunEntry(ast, runner, runner.display_name, device, metas, n_outputs, time_s))

    def clear(self) -> None:
        self.entries, self.dropped = [], 0


RUN_LOG = RunLog()
