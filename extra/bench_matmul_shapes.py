"""Matmuls at the shapes LLMs and CNNs make, on CUDA beside cuBLAS (PyTorch), fp16 (issue 30, item 5: >= 0.85x cuBLAS
for M >= 256 with the default heuristics, >= 1.0x for M <= 16).

Rows: a Linear layer's x @ W.T (W stored as PyTorch and GGUF store it, out x in) at the Llama-3-8B/Qwen/Gemma
projection sizes for M = 1, 8, 16 (decode batches), 256, 512, 2048 and an odd 1000; x @ W with W in x's layout; and
batched attention products (q @ k.T and p @ v). tinygrad runs inside TinyJit and is timed by the GPU time of its
jitted kernels (events); PyTorch's torch.matmul with CUDA events; both the least of `--reps` calls. Each result is
checked against PyTorch's (`maxerr` relative to the output's largest value).

Run from the repo root:  CUDA=1 PYTHONPATH=. python extra/bench_matmul_shapes.py [--quick] [--reps 20]
"""
from __future__ import annotations

import argparse

import numpy as np
from benchlib import cuda_event_seconds

# (name, batch dims, M, N, K, B transposed): C[..., M, N] = A[..., M, K] @ B[..., K, N]
PROJ = ((4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096), (2048, 2048), (8192, 2048), (2048, 8192))
SHAPES = [(f"linear {n}x{k}", (), m, n, k, True) for m in (1, 8, 16, 256, 512, 1000, 2048) for n, k in PROJ] + \
    [("plain 4096^2", (), m, 4096, 4096, False) for m in (1, 16, 512, 4096)] + \
    [("attn q@k.T", (4, 32), 1024, 1024, 128, True), ("attn p@v", (4, 32), 1024, 128, 1024, False),
     ("attn q@k.T", (8, 12), 512, 512, 64, True), ("attn p@v", (8, 12), 512, 64, 512, False),
     ("attn q@k.T decode", (1, 32), 1, 4096, 128, True)]
QUICK = {"linear 4096x4096", "linear 14336x4096", "linear 4096x14336", "attn q@k.T", "attn p@v"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="fewer rows: the 8B projections and attention")
    args = parser.parse_args()

    import torch

    from tinygrad import Tensor, TinyJit
    from tinygrad.benchmark.timing import best
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  fp16, fp32 accumulation")
    print(f"{'shape':<22}{'batch':<8}{'M':>6}{'N':>7}{'K':>7}{'kernels':>8}{'tiny us':>10}{'cuBLAS us':>10}"
          f"{'tiny TF/s':>10}{'cuBLAS TF/s':>12}{'ratio':>8}{'target':>8}{'maxerr':>10}")
    rng = np.random.default_rng(0)
    for name, batch, m, n, k, bt in SHAPES:
        if args.quick and name.split(' decode')[0] not in QUICK:
            continue
        a = rng.standard_normal((*batch, m, k)).astype(np.float16)
        b = rng.standard_normal((*batch, n, k) if bt else (*batch, k, n)).astype(np.float16) * np.float16(k ** -0.5)
        ta, tb = Tensor(a, device="CUDA").realize(), Tensor(b, device="CUDA").realize()
        xa, xb = torch.tensor(a, device="cuda"), torch.tensor(b, device="cuda")

        def tiny(x, w, bt=bt):
            return (x @ (w.transpose(-1, -2) if bt else w)).realize()

        def ref(x=xa, w=xb, bt=bt):
            return torch.matmul(x, w.transpose(-1, -2) if bt else w)
        jitted = TinyJit(tiny)
        for _ in range(3):
            got = jitted(ta, tb)
        want = ref().float().cpu().numpy()
        err = float(np.abs(got.numpy().astype(np.float32) - want).max()) / max(1.0, float(np.abs(want).max()))
        kernels = len(jitted.jit_cache)
        t_tiny = best(lambda j=jitted: sum(ei.prg(ei.bufs, {}, wait=True) for ei in j.jit_cache), args.reps)
        t_ref = cuda_event_seconds(torch, ref, args.reps)
        flops = 2 * m * n * k * int(np.prod(batch or (1,)))
        target = "1.00x" if m <= 16 else ("0.85x" if m >= 256 else "")
        print(f"{name:<22}{'x'.join(map(str, batch)) or '-':<8}{m:>6}{n:>7}{k:>7}{kernels:>8}{t_tiny * 1e6:>10.1f}"
              f"{t_ref * 1e6:>10.1f}{flops / t_tiny / 1e12:>10.1f}{flops / t_ref / 1e12:>12.1f}"
              f"{t_ref / t_tiny:>7.2f}x{target:>8}{err:>10.1e}", flush=True)


if __name__ == "__main__":
    main()
