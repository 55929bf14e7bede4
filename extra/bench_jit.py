"""Replay cost of a jitted 100-kernel function beside running it eagerly (tinygrad, numpy, PyTorch).

The function chains 100 small elementwise kernels on a 64-element tensor (`.contiguous()` makes each one a kernel
of its own), so the numbers are per-kernel dispatch costs, not arithmetic. Run: python extra/bench_jit.py
"""
from __future__ import annotations

import platform
import time

import numpy as np

from tinygrad import GlobalCounters, Tensor, TinyJit

N_KERNELS, SIZE = 100, 64


def chain(x: Tensor) -> Tensor:
    for _ in range(N_KERNELS):
        x = (x * 1.0001 + 0.5).contiguous()
    return x


def best_of(fn, reps: int, rounds: int = 5) -> float:
    """Best mean seconds per call over `rounds` rounds of `reps` calls."""
    best = float("inf")
    for _ in range(rounds):
        st = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - st) / reps)
    return best


def main() -> None:
    x_np = np.random.default_rng(0).standard_normal(SIZE).astype(np.float32)
    x = Tensor(x_np).realize()

    chain(x).realize()  # compile every kernel once: both paths then run warm
    eager = best_of(lambda: chain(x).realize(), 5)

    jitted = TinyJit(chain)
    for _ in range(3):
        jitted(x)
    before = GlobalCounters.kernel_count
    replay = best_of(lambda: jitted(x), 50)
    per_call = (GlobalCounters.kernel_count - before) / (5 * 50)
    assert per_call == N_KERNELS, f"replay launched {per_call} kernels per call"
    np.testing.assert_allclose(jitted(x).numpy(), chain(x).numpy(), rtol=1e-6)

    def numpy_chain():
        y = x_np
        for _ in range(N_KERNELS):
            y = y * np.float32(1.0001) + np.float32(0.5)
    rows = [("tinygrad eager (warm method cache)", eager), ("tinygrad TinyJit replay", replay),
            ("numpy", best_of(numpy_chain, 200))]
    try:
        import torch
        xt = torch.tensor(x_np)

        def torch_chain():
            y = xt
            for _ in range(N_KERNELS):
                y = y * 1.0001 + 0.5
        rows.append(("PyTorch eager", best_of(torch_chain, 200)))
    except ImportError:
        rows.append(("PyTorch eager (not installed)", float("nan")))

    print(f"{N_KERNELS} chained elementwise kernels on {SIZE} floats; {platform.processor() or platform.machine()}, "
          f"{__import__('os').cpu_count()} cores")
    print(f"{'':38s} {'per call':>12s} {'per kernel':>12s}")
    for name, secs in rows:
        print(f"{name:38s} {secs * 1e6:10.1f} us {secs * 1e6 / N_KERNELS:10.2f} us")


if __name__ == "__main__":
    main()
