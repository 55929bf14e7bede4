"""Row-wise reduction chains on the CPU: softmax and layernorm of a (rows, cols) float32 matrix, tinygrad beside numpy
and PyTorch in the same run (issue 30, item 1: one kernel per chain; the target is >= 0.8x PyTorch on the CPU).

tinygrad runs inside TinyJit (the kernel is compiled once; each call replays it), PyTorch eagerly, numpy as the
textbook expression. Each result is checked against PyTorch before timing. The table gives the time per call and the
effective bandwidth (the input read once and the output written once, whatever an implementation really moves).

Run from the repo root:  PYTHONPATH=. python extra/bench_rowreduce.py [--rows 8192 --cols 4096] [--round 0.3]
"""
from __future__ import annotations

import argparse

import benchlib
import numpy as np


def _numpy_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _numpy_layernorm(x):
    y = x - x.mean(-1, keepdims=True)
    return y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--round", type=float, default=0.3, help="seconds per timing round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import torch

    from tinygrad import Tensor, TinyJit
    a = np.random.default_rng(0).standard_normal((args.rows, args.cols)).astype(np.float32)
    xt = torch.from_numpy(a)
    x = Tensor(a).realize()
    cases = {
        "softmax": (lambda t: t.softmax(-1), lambda t: torch.softmax(t, -1), _numpy_softmax),
        "layernorm": (lambda t: t.layernorm(-1, eps=1e-5),
                      lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:], eps=1e-5), _numpy_layernorm),
    }
    nbytes = 2 * a.nbytes
    rows = []
    for name, (tiny_fn, torch_fn, np_fn) in cases.items():
        kernels = len([si for si in tiny_fn(x).schedule()])
        jitted = TinyJit(lambda f=tiny_fn: f(x).realize())
        want = torch_fn(xt).numpy()
        np.testing.assert_allclose(jitted().numpy(), want, atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(np_fn(a), want, atol=1e-4, rtol=1e-4)
        t_tiny = benchlib.timed(jitted, args.round, args.rounds)
        t_torch = benchlib.timed(lambda f=torch_fn: f(xt), args.round, args.rounds)
        t_np = benchlib.timed(lambda f=np_fn: f(a), args.round, args.rounds)
        rows.append((f"{name} {args.rows}x{args.cols} fp32", [
            str(kernels), benchlib.fmt(t_tiny, "ms"), benchlib.fmt(t_torch, "ms"), benchlib.fmt(t_np, "ms"),
            f"{nbytes / t_tiny / 1e9:.1f}", f"{nbytes / t_torch / 1e9:.1f}", f"{t_torch / t_tiny:.2f}x"]))
    print(benchlib.machine_line())
    print(f"torch threads {torch.get_num_threads()}")
    benchlib.print_table("row-wise reductions on the CPU (time per call; GB/s = input + output bytes / time)",
                         ["kernels", "tinygrad", "PyTorch", "numpy", "tiny GB/s", "torch GB/s", "vs PyTorch"], rows)


if __name__ == "__main__":
    benchlib.run_main(main)
