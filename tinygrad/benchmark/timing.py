"""How the benchmark times things, for both sides: the best of several runs after a warm-up, and the host time
per call of a function called back to back with the device waited for at the end of each round."""
from __future__ import annotations

import math
import time
from typing import Any, Callable

REPS = 5


def best(fn: Callable[[], float], reps: int = REPS) -> float:
    """The least of `reps` values `fn()` returns (each a time it measured), after one call to warm up."""
    fn()
    return min(fn() for _ in range(reps))


def wall(fn: Callable[[], Any], sync: Callable[[], None], reps: int = 20) -> float:
    """Host seconds per call of `fn`, waiting (`sync`) for the device at the end of each round; the best round."""
    fn()
    sync()
    out = math.inf
    for _ in range(REPS):
        st = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        out = min(out, (time.perf_counter() - st) / reps)
    return out
