"""Cold starts say what they are doing: a count of kernels compiled, as one progress line.

The compiler calls `compiled(seconds)` for every kernel it compiles (a cache hit is not counted). At DEBUG>=1 every
call prints the count to stderr: on a terminal one line rewritten in place (`\\r`), elsewhere (a log file, CI) plain
lines. On a terminal it is also printed once this process has spent `show_compile_progress`'s seconds compiling (the
demo and the LLM CLI ask for 2 s), so a cold start says what it is doing.
"""
from __future__ import annotations

import atexit
import sys
import threading

from tinygrad.helpers import DEBUG


class _Progress:
    """How many kernels this process compiled and how long it took, printed as one progress line."""

    def __init__(self) -> None:
        self.count, self.seconds = 0, 0.0
        # show the line once compiling took this many seconds, even at DEBUG=0 (None: only at DEBUG>=1)
        self.after: float | None = None
        self._shown = False
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self.count += 1
            self.seconds += seconds
            tty = sys.stderr.isatty()
            # the CLIs' threshold is for a person waiting at a terminal; a log (or a test reading stderr) gets the
            # count at DEBUG>=1 only
            if not (DEBUG >= 1 or (tty and self.after is not None and self.seconds >= self.after)):
                return
            line = f"compiled {self.count} kernel{'s' if self.count != 1 else ''} ({self.seconds:.1f} s)"
            sys.stderr.write(f"\r{line}\033[K" if tty else f"{line}\n")
            sys.stderr.flush()
            self._shown = tty

    def end_line(self) -> None:
        """Finish a progress line rewritten in place (before other output)."""
        with self._lock:
            if self._shown:
                sys.stderr.write("\n")
                sys.stderr.flush()
                self._shown = False


compile_progress = _Progress()


def compiled(seconds: float) -> None:
    """The compiler's hook: one kernel was compiled (not found in a cache), taking `seconds`."""
    compile_progress.add(seconds)


def show_compile_progress(after: float = 2.0) -> None:
    """Print the compile progress line once this process has spent `after` seconds compiling (the demo and the LLM
    CLI call this: a cold start then says what it is doing)."""
    if compile_progress.after is None:
        atexit.register(compile_progress.end_line)
    compile_progress.after = after
