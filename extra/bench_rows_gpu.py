"""Row-wise reduction chains on CUDA: softmax, log_softmax, layernorm and rmsnorm, tinygrad beside PyTorch in the same
process (issue 30, item 1: one kernel per chain, >= 0.9x PyTorch on the GPU).

Shapes: 8192x4096 (the issue's), 4096x1000 and 4096x1001 (rows no large power of two divides), 16384x128 (short rows),
and 512x50257 (a vocabulary's logits), each in float32 and float16. tinygrad runs inside TinyJit: `kernel` is the
GPU time of the jitted kernels launched by their runners (events), `jit` the host time per call of the jitted function
with the device synchronised after each round. PyTorch runs eagerly, timed with CUDA events. Each tinygrad result is
checked against PyTorch's (the largest absolute difference is the `maxerr` column; a row over its dtype's tolerance is
marked FAIL). GB/s counts the input read once and the output written once.

Run from the repo root:  CUDA=1 PYTHONPATH=. python extra/bench_rows_gpu.py [--ops softmax,layernorm] [--reps 20]
"""
from __future__ import annotations

import argparse

import numpy as np
from benchlib import cuda_event_seconds

SHAPES = ((8192, 4096), (4096, 1000), (4096, 1001), (16384, 128), (512, 50257))
# a float16 row computes in float16 (its max, sums and normalisation are rounded to half): half-precision tolerances
TOL = {"float32": 1e-4, "float16": 1e-2}


def _ops(torch):
    from tinygrad.nn import RMSNorm

    def rms_torch(t):
        return t * torch.rsqrt(t.square().mean(-1, keepdim=True) + 1e-6)
    return {
        "softmax": (lambda t: t.softmax(-1), lambda t: torch.softmax(t, -1)),
        "log_softmax": (lambda t: t.log_softmax(-1), lambda t: torch.log_softmax(t, -1)),
        "layernorm": (lambda t: t.layernorm(-1, eps=1e-5),
                      lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:], eps=1e-5)),
        "rmsnorm": (lambda t: RMSNorm(t.shape[-1])._norm(t), rms_torch),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="softmax,log_softmax,layernorm,rmsnorm")
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()

    import torch

    from tinygrad import Device, Tensor, TinyJit, dtypes
    from tinygrad.benchmark.timing import best, wall
    ops = _ops(torch)
    dev = Device["CUDA"]
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    header = f"{'op':<12}{'dtype':<9}{'shape':<12}{'kernels':>8}{'kernel us':>11}{'jit us':>9}{'torch us':>10}" \
             f"{'tiny GB/s':>11}{'torch GB/s':>11}{'ratio':>8}{'maxerr':>10}"
    print(header)
    rng = np.random.default_rng(0)
    for name in args.ops.split(","):
        tiny_fn, torch_fn = ops[name]
        for dname in args.dtypes.split(","):
            for shape in SHAPES:
                a = (rng.standard_normal(shape) * 3).astype(np.float32)
                x = Tensor(a, device="CUDA").cast(getattr(dtypes, dname)).realize()
                xt = torch.tensor(a, device="cuda").to(getattr(torch, dname))
                kernels = sum(1 for si in tiny_fn(x).schedule() if si.ast[0].op.name == "STORE")
                jitted = TinyJit(lambda t, f=tiny_fn: f(t).realize())
                for _ in range(3):
                    got = jitted(x)
                want = torch_fn(xt).float().cpu().numpy()
                err = float(np.abs(got.numpy().astype(np.float32) - want).max())
                t_kernel = best(lambda j=jitted: sum(ei.prg(ei.bufs, {}, wait=True) for ei in j.jit_cache),
                                args.reps)
                t_jit = wall(lambda j=jitted, t=x: j(t), dev.synchronize, args.reps)
                t_torch = cuda_event_seconds(torch, lambda f=torch_fn, t=xt: f(t), args.reps)
                nbytes = 2 * a.size * xt.element_size()
                mark = "" if err <= TOL[dname] * max(1.0, float(np.abs(want).max())) else " FAIL"
                print(f"{name:<12}{dname:<9}{'x'.join(map(str, shape)):<12}{kernels:>8}{t_kernel * 1e6:>11.1f}"
                      f"{t_jit * 1e6:>9.1f}{t_torch * 1e6:>10.1f}{nbytes / t_kernel / 1e9:>11.0f}"
                      f"{nbytes / t_torch / 1e9:>11.0f} {t_torch / t_kernel:>6.2f}x{err:>10.2e}{mark}")


if __name__ == "__main__":
    main()
