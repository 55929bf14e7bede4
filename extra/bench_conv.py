"""Every convolution shape of ResNet-50 on CUDA beside cuDNN (PyTorch), forward and backward (issue 30, item 3: fp16
forward >= 0.7x cuDNN each, backward >= 0.5x; float32 through TF32 where ALLOW_TF32=1).

Rows: the 23 distinct conv2d shapes of torchvision's ResNet-50 (v1.5: the stride on the 3x3) at `--batch` (32 or
256), NCHW, no bias: the 7x7/2 stem, the bottlenecks' 1x1s and 3x3s, strided and not, and the 1x1/2 downsamples.
`uses` is how many times the model runs the shape; the last line weighs each row's times by it (the convolutions
of one forward or backward pass). Forward: x.conv2d(w). Backward (`--backward`): the input and weight gradients
from dy (cuDNN: aten.convolution_backward). tinygrad runs inside TinyJit and is timed by the GPU time of its jitted
kernels (events), PyTorch by CUDA events (benchlib.cuda_event_seconds); both the least of `--reps` calls. `path`
is the tinygrad kernels' first Opt (TC a:c: tensor cores, config c, merged M/N bits a; else SIMT opts). Each result
is checked against PyTorch's (`maxerr` relative to the output's largest value).

Run from the repo root (H100/H200):
  CUDA=1 PYTHONPATH=. python extra/bench_conv.py --batch 32 [--backward] [--dtype float32] [--reps 20]
"""
from __future__ import annotations

import argparse
import os

import numpy as np
from benchlib import cuda_event_seconds

# (name, in channels, out channels, input height = width, kernel, stride, padding, uses in ResNet-50)
SHAPES = [
    ("stem 7x7/2", 3, 64, 224, 7, 2, 3, 1),
    ("s1 1x1 64>64", 64, 64, 56, 1, 1, 0, 1),
    ("s1 3x3 64", 64, 64, 56, 3, 1, 1, 3),
    ("s1 1x1 64>256 (+ds)", 64, 256, 56, 1, 1, 0, 4),
    ("s1 1x1 256>64", 256, 64, 56, 1, 1, 0, 2),
    ("s2 1x1 256>128", 256, 128, 56, 1, 1, 0, 1),
    ("s2 3x3/2 128", 128, 128, 56, 3, 2, 1, 1),
    ("s2 1x1 128>512", 128, 512, 28, 1, 1, 0, 4),
    ("s2 ds 1x1/2 256>512", 256, 512, 56, 1, 2, 0, 1),
    ("s2 1x1 512>128", 512, 128, 28, 1, 1, 0, 3),
    ("s2 3x3 128", 128, 128, 28, 3, 1, 1, 3),
    ("s3 1x1 512>256", 512, 256, 28, 1, 1, 0, 1),
    ("s3 3x3/2 256", 256, 256, 28, 3, 2, 1, 1),
    ("s3 1x1 256>1024", 256, 1024, 14, 1, 1, 0, 6),
    ("s3 ds 1x1/2 512>1024", 512, 1024, 28, 1, 2, 0, 1),
    ("s3 1x1 1024>256", 1024, 256, 14, 1, 1, 0, 5),
    ("s3 3x3 256", 256, 256, 14, 3, 1, 1, 5),
    ("s4 1x1 1024>512", 1024, 512, 14, 1, 1, 0, 1),
    ("s4 3x3/2 512", 512, 512, 14, 3, 2, 1, 1),
    ("s4 1x1 512>2048", 512, 2048, 7, 1, 1, 0, 3),
    ("s4 ds 1x1/2 1024>2048", 1024, 2048, 14, 1, 2, 0, 1),
    ("s4 1x1 2048>512", 2048, 512, 7, 1, 1, 0, 2),
    ("s4 3x3 512", 512, 512, 7, 3, 1, 1, 2),
]


def _path(jit) -> str:
    """The first Opt of each jitted kernel that has any, joined: what path the convolution took."""
    out = []
    for ei in jit.jit_cache:
        opts = getattr(ei.prg, "opts", None)
        if opts:
            o = opts[0]
            out.append(f"TC {o.axis}:{o.amt}" if o.op.name == "TC" else f"{o.op.name} {o.axis}:{o.amt}")
    return ",".join(out) or "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--backward", action="store_true", help="input and weight gradients instead of the forward")
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--only", default="", help="rows whose name contains this")
    args = parser.parse_args()

    import torch

    from tinygrad import Tensor, TinyJit, dtypes
    from tinygrad.benchmark.timing import best
    # PyTorch at tinygrad's precision: TF32 exactly where ALLOW_TF32=1 (cuDNN's own default allows it)
    tf32 = bool(int(os.environ.get("ALLOW_TF32", "0")))
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    tdt, ndt = getattr(torch, args.dtype), np.float32
    tiny_dt = getattr(dtypes, args.dtype)
    kind = "backward (dx + dw)" if args.backward else "forward"
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  cuDNN {torch.backends.cudnn.version()}  "
          f"{args.dtype}{' TF32' if tf32 and args.dtype == 'float32' else ''}  batch {args.batch}  {kind}")
    print(f"{'conv':<24}{'uses':>5}{'kernels':>8}{'tiny us':>10}{'cuDNN us':>10}{'tiny TF/s':>10}{'cuDNN TF/s':>11}"
          f"{'ratio':>8}{'maxerr':>10}  path")
    rng = np.random.default_rng(0)
    total_tiny = total_ref = 0.0
    for name, cin, cout, hw, k, stride, pad, uses in SHAPES:
        if args.only and args.only not in name:
            continue
        n = args.batch
        oh = (hw + 2 * pad - k) // stride + 1
        x = rng.standard_normal((n, cin, hw, hw)).astype(ndt)
        w = (rng.standard_normal((cout, cin, k, k)) * (cin * k * k) ** -0.5).astype(ndt)
        dy = rng.standard_normal((n, cout, oh, oh)).astype(ndt)
        tx, tw, tdy = (Tensor(a, device="CUDA").cast(tiny_dt).realize() for a in (x, w, dy))
        px, pw, pdy = (torch.tensor(a, device="cuda").to(tdt) for a in (x, w, dy))
        flops = 2 * n * cout * oh * oh * cin * k * k * (2 if args.backward else 1)

        if args.backward:
            def tiny(x_, w_, dy_, s=stride, p=pad):
                x_.requires_grad, w_.requires_grad = True, True
                x_.grad = w_.grad = None
                x_.conv2d(w_, stride=s, padding=p).backward(dy_)
                return x_.grad.realize(), w_.grad.realize()

            def ref(s=stride, p=pad, px=px, pw=pw, pdy=pdy):
                return torch.ops.aten.convolution_backward(pdy, px, pw, None, [s, s], [p, p], [1, 1], False,
                                                           [0, 0], 1, [True, True, False])[:2]
        else:
            def tiny(x_, w_, dy_, s=stride, p=pad):
                return (x_.conv2d(w_, stride=s, padding=p).realize(),)

            def ref(s=stride, p=pad, px=px, pw=pw):
                return (torch.nn.functional.conv2d(px, pw, stride=s, padding=p),)
        jitted = TinyJit(tiny)
        for _ in range(3):
            got = jitted(tx, tw, tdy)
        want = ref()
        err = 0.0
        for g, r in zip(got, want):
            r = r.float().cpu().numpy()
            err = max(err, float(np.abs(g.float().numpy() - r).max()) / max(1.0, float(np.abs(r).max())))
        t_tiny = best(lambda j=jitted: sum(ei.prg(ei.bufs, {}, wait=True) for ei in j.jit_cache), args.reps)
        t_ref = cuda_event_seconds(torch, ref, args.reps)
        total_tiny, total_ref = total_tiny + uses * t_tiny, total_ref + uses * t_ref
        print(f"{name:<24}{uses:>5}{len(jitted.jit_cache):>8}{t_tiny * 1e6:>10.1f}{t_ref * 1e6:>10.1f}"
              f"{flops / t_tiny / 1e12:>10.1f}{flops / t_ref / 1e12:>11.1f}{t_ref / t_tiny:>7.2f}x{err:>10.1e}  "
              f"{_path(jitted)}", flush=True)
    if total_tiny:
        print(f"{'ResNet-50 convs (x uses)':<24}{'':>13}{total_tiny * 1e6:>10.1f}{total_ref * 1e6:>10.1f}{'':>21}"
              f"{total_ref / total_tiny:>7.2f}x")


if __name__ == "__main__":
    main()
