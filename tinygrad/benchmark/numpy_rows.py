"""numpy's side of the benchmark, for host devices: the rows numpy can run (its matmuls are the machine's BLAS,
OpenBLAS in the wheels), on the same workloads, timed by the host clock, best of a few runs after a warm-up. GPU
devices get no numpy column: numpy runs on the host."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tinygrad.benchmark import workloads as W
from tinygrad.benchmark.timing import wall


def _rand(shape, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape, dtype=np.float32).astype(dtype)


def _kernel(make: Callable[[W.Sizes], Callable[[], Any]], amount: Callable[[W.Sizes], float]) -> Callable:
    def measure(device: str, s: W.Sizes) -> float:
        return amount(s) / wall(make(s), lambda: None, reps=3) / 1e9
    return measure


def _add(s: W.Sizes):
    a, b = _rand((s.elements,)), _rand((s.elements,))
    out = np.empty_like(a)
    return lambda: np.add(a, b, out=out)


def _sum(s: W.Sizes):
    a = _rand((s.elements,))
    return lambda: a.sum()


def _copy(s: W.Sizes):
    a, b = np.ones(s.copy_bytes, np.uint8), np.empty(s.copy_bytes, np.uint8)
    return lambda: np.copyto(b, a)


def _matmul(n_of: Callable[[W.Sizes], int], dtype) -> Callable:
    def make(s: W.Sizes):
        a, b = _rand((n_of(s), n_of(s)), dtype), _rand((n_of(s), n_of(s)), dtype)
        return lambda: a @ b
    return make


def _matvec(s: W.Sizes):
    x, w = _rand((1, s.matvec), np.float16), _rand((s.matvec, s.matvec), np.float16)
    return lambda: x @ w.T


def _softmax(s: W.Sizes):
    x = _rand((s.elements // 1024, 1024))

    def run():
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    return run


def _layernorm(s: W.Sizes):
    x = _rand((s.elements // 1024, 1024))

    def run():
        m = x.mean(axis=-1, keepdims=True)
        return (x - m) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5)
    return run


# row -> measure, for the rows of tinygrad_rows.ROWS that numpy can run on the host
ROWS: dict[str, Callable[[str, W.Sizes], float]] = {
    "device->device copy": _kernel(_copy, lambda s: 2 * s.copy_bytes),
    "add fp32": _kernel(_add, W.add_bytes),
    "sum fp32": _kernel(_sum, W.sum_bytes),
    "matmul fp32 small": _kernel(_matmul(lambda s: s.mm_small, np.float32), W.mm_small_flops),
    "matmul fp32 large": _kernel(_matmul(lambda s: s.mm_large, np.float32), W.mm_large_flops),
    "matvec fp16 x@W.T": _kernel(_matvec, W.matvec_bytes),
    "softmax fp32": _kernel(_softmax, W.rowwise_bytes),
    "layernorm fp32": _kernel(_layernorm, W.rowwise_bytes),
}
