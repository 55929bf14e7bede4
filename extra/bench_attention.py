"""Attention forward, tinygrad beside PyTorch's scaled_dot_product_attention in the same process (issue 30, item 2:
one kernel with an online softmax, >= 0.7x PyTorch's flash SDPA from 512 to 16k tokens).

Shapes: batch 4, 16 heads, head dim 64 and 128, sequence 512 to 16k (queries = keys), causal and not, float16 by
default. tinygrad runs inside TinyJit: `kernel` is the GPU time of the jitted kernels launched by their runners (on
the host: their wall time), `kernels` how many the attention took (1 when engine/fuse_attention.py merged it).
PyTorch runs eagerly (on CUDA its flash backend where it takes the shape), timed with CUDA events. The tinygrad output
is checked against PyTorch's (`maxerr`; FAIL past the dtype's tolerance). TFLOP/s counts 4 * B * H * Sq * Sk * d (the
two products), halved for causal, as PyTorch's benchmarks do.

Run from the repo root:
  CUDA=1 PYTHONPATH=. python extra/bench_attention.py [--device CUDA] [--dims 64,128] [--seqs 512,1024,...]
  PYTHONPATH=. python extra/bench_attention.py --device CLANG --dtype float32 --seqs 128,256 --heads 4 --batch 1
"""
from __future__ import annotations

import argparse
import time

import numpy as np

SEQS = (512, 1024, 2048, 4096, 8192, 16384)
TOL = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 5e-2}


def _torch_seconds(torch, fn, reps, cuda):
    """The least time of one call of `fn` over `reps` calls after a warm-up call (CUDA events on a GPU)."""
    fn()
    out = float("inf")
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            out = min(out, start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            out = min(out, time.perf_counter() - t0)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="CUDA")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dims", default="64,128")
    parser.add_argument("--seqs", default=",".join(map(str, SEQS)))
    parser.add_argument("--causal", default="0,1", help="0, 1 or 0,1")
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()

    import torch

    from tinygrad import Device, Tensor, TinyJit, dtypes
    from tinygrad.benchmark.timing import best
    cuda = args.device.upper().startswith("CUDA")
    tdev = "cuda" if cuda else "cpu"
    dev = Device[args.device]
    name = torch.cuda.get_device_name() if cuda else "host CPU"
    print(f"{args.device} ({name})  torch {torch.__version__}  {args.dtype}  B={args.batch} H={args.heads}")
    print(f"{'d':>4}{'seq':>7}{'causal':>7}{'kernels':>8}{'tiny ms':>10}{'torch ms':>10}{'tiny TF/s':>11}"
          f"{'torch TF/s':>11}{'ratio':>8}{'maxerr':>10}")
    rng = np.random.default_rng(0)
    tdt = getattr(torch, args.dtype)
    for d in map(int, args.dims.split(",")):
        for s in map(int, args.seqs.split(",")):
            shape = (args.batch, args.heads, s, d)
            arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
            tiny = [Tensor(a, device=args.device).cast(getattr(dtypes, args.dtype)).realize() for a in arrays]
            ref = [torch.tensor(a, device=tdev).to(tdt) for a in arrays]
            for causal in map(int, args.causal.split(",")):
                def fn(q, k, v, c=bool(causal)):
                    return q.scaled_dot_product_attention(k, v, is_causal=c).realize()
                kernels = sum(1 for si in tiny[0].scaled_dot_product_attention(
                    tiny[1], tiny[2], is_causal=bool(causal)).schedule() if si.ast[0].op.name == "STORE")
                jitted = TinyJit(fn)
                for _ in range(3):
                    got = jitted(*tiny)
                dev.synchronize()
                t_tiny = best(lambda j=jitted: sum(ei.prg(ei.bufs, {}, wait=True) for ei in j.jit_cache), args.reps)

                def tfn(c=bool(causal), ref=ref):
                    return torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=c)
                t_torch = _torch_seconds(torch, tfn, args.reps, cuda)
                want = tfn().float().cpu().numpy()
                err = float(np.abs(got.numpy().astype(np.float32) - want).max())
                flops = 4 * args.batch * args.heads * s * s * d / (2 if causal else 1)
                mark = "" if err <= TOL.get(args.dtype, 1e-2) * max(1.0, float(np.abs(want).max())) else " FAIL"
                print(f"{d:>4}{s:>7}{causal:>7}{kernels:>8}{t_tiny * 1e3:>10.3f}{t_torch * 1e3:>10.3f}"
                      f"{flops / t_tiny / 1e12:>11.2f}{flops / t_torch / 1e12:>11.2f}{t_torch / t_tiny:>7.2f}x"
                      f"{err:>10.2e}{mark}", flush=True)


if __name__ == "__main__":
    main()
