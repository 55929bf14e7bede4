"""Elementwise math on CUDA beside PyTorch and beside copy bandwidth (issue 30, item 4: gelu, silu, sigmoid, tanh,
exp, log and pow at >= 90% of copy bandwidth in fp16, bf16 and fp32).

Each op reads one tensor and writes one of the same dtype; GB/s counts both. `copy` is PyTorch's `clone` of the same
tensor (the device's copy bandwidth at this size, measured in the same run) and `of copy` is tinygrad's GB/s as a
share of it. tinygrad runs inside TinyJit and is timed by the GPU time of its jitted kernels (events), PyTorch eagerly
with CUDA events; both the least of `--reps` calls. Each result is checked against PyTorch's computed in float64
(`maxerr`, relative to the output's largest value; FAIL past the dtype's tolerance). Shapes: the issue's 8192x4096,
an odd 4097x1001 and a flat 2**24 + 3.

Run from the repo root:  CUDA=1 PYTHONPATH=. python extra/bench_elementwise.py [--ops gelu,silu] [--dtypes float16]
"""
from __future__ import annotations

import argparse
import math

import numpy as np
from benchlib import cuda_event_seconds

SHAPES = ((8192, 4096), (4097, 1001), ((1 << 24) + 3,))
TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}


def _ops(torch):
    """name -> (tinygrad function, PyTorch function, whether the input must be positive)."""
    tf = torch.nn.functional

    def gelu_erf(t):
        return t * 0.5 * (1 + (t * (1 / math.sqrt(2))).erf())
    return {
        "gelu": (lambda t: t.gelu(), lambda t: tf.gelu(t, approximate="tanh"), False),
        "gelu_erf": (gelu_erf, lambda t: tf.gelu(t), False),
        "silu": (lambda t: t.silu(), tf.silu, False),
        "sigmoid": (lambda t: t.sigmoid(), torch.sigmoid, False),
        "tanh": (lambda t: t.tanh(), torch.tanh, False),
        "exp": (lambda t: t.exp(), torch.exp, False),
        "log": (lambda t: t.log(), torch.log, True),
        "pow": (lambda t: t.pow(1.7), lambda t: torch.pow(t, 1.7), True),
        "relu": (lambda t: t.relu(), torch.relu, False),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="gelu,gelu_erf,silu,sigmoid,tanh,exp,log,pow,relu")
    parser.add_argument("--dtypes", default="float16,bfloat16,float32")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--shapes", default="all", help="'all' or 'first' (8192x4096 only)")
    args = parser.parse_args()

    import torch

    from tinygrad import Tensor, TinyJit, dtypes
    from tinygrad.benchmark.timing import best
    ops = _ops(torch)
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"{'op':<10}{'dtype':<10}{'shape':<12}{'kernels':>8}{'tiny us':>9}{'torch us':>10}{'tiny GB/s':>11}"
          f"{'torch GB/s':>11}{'copy GB/s':>10}{'of copy':>9}{'vs torch':>9}{'maxerr':>10}")
    rng = np.random.default_rng(0)
    shapes = SHAPES if args.shapes == "all" else SHAPES[:1]
    for dname in args.dtypes.split(","):
        for shape in shapes:
            a = (rng.standard_normal(shape) * 2).astype(np.float32)
            for name in args.ops.split(","):
                tiny_fn, torch_fn, positive = ops[name]
                src = np.abs(a) + 0.1 if positive else a
                x = Tensor(src, device="CUDA").cast(getattr(dtypes, dname)).realize()
                xt = torch.tensor(src, device="cuda").to(getattr(torch, dname))
                kernels = sum(1 for si in tiny_fn(x).schedule() if si.ast[0].op.name == "STORE")
                jitted = TinyJit(lambda t, f=tiny_fn: f(t).realize())
                for _ in range(3):
                    got = jitted(x)
                want = torch_fn(xt.double()).cpu().numpy()
                scale = max(1.0, float(np.nanmax(np.abs(want))))
                err = float(np.nanmax(np.abs(got.numpy().astype(np.float64) - want))) / scale
                t_tiny = best(lambda j=jitted: sum(ei.prg(ei.bufs, {}, wait=True) for ei in j.jit_cache), args.reps)
                t_torch = cuda_event_seconds(torch, lambda f=torch_fn, t=xt: f(t), args.reps)
                t_copy = cuda_event_seconds(torch, lambda t=xt: t.clone(), args.reps)
                nbytes = 2 * src.size * xt.element_size()
                mark = "" if err <= TOL[dname] * 4 else " FAIL"
                print(f"{name:<10}{dname:<10}{'x'.join(map(str, shape)):<12}{kernels:>8}{t_tiny * 1e6:>9.1f}"
                      f"{t_torch * 1e6:>10.1f}{nbytes / t_tiny / 1e9:>11.0f}{nbytes / t_torch / 1e9:>11.0f}"
                      f"{nbytes / t_copy / 1e9:>10.0f}{t_copy / t_tiny:>8.0%} {t_torch / t_tiny:>7.2f}x"
                      f"{err:>10.1e}{mark}", flush=True)


if __name__ == "__main__":
    main()
