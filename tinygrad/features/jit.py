"""TinyJit and CacheCollector (the 0.8-era import path; the JIT proper arrives with its own issue)."""
from __future__ import annotations

from typing import Any, Callable


class _CacheCollector:
    """Records every ExecItem run between `start()` and `finish()`, e.g. to look at the generated kernels."""

    def __init__(self) -> None:
        self.cache: list | None = None
        self.var_vals: dict = {}

    def start(self, var_vals: dict | None = None) -> None:
        self.cache, self.var_vals = [], dict(var_vals or {})

    def add(self, ei, var_vals: dict | None = None) -> None:
        if self.cache is not None:
            self.cache.append(ei)
            if var_vals:
                self.var_vals.update(var_vals)

    def finish(self) -> list:
        if self.cache is None:
            raise RuntimeError("CacheCollector.finish() without start()")
        ret, self.cache = self.cache, None
        return ret


CacheCollector = _CacheCollector()


class TinyJit:
    """Capture a function's kernels and replay them. Not implemented yet: raises a clear error when called."""

    def __init__(self, fxn: Callable):
        self.fxn = fxn
        self.jit_cache: list = []

    def reset(self) -> None:
        self.jit_cache = []

    def __call__(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("TinyJit is not implemented yet (it arrives with the symbolic shapes and JIT "
                                  "issue); call the function directly")
