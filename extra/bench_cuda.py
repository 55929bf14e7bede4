"""The CUDA device against PyTorch (torch.cuda) in the same process, on the same GPU.

Rows: elementwise add and full sum of 64M floats (GB/s, beside the bandwidth of a plain device-to-device copy),
a 4096x4096 fp16 matmul (TFLOP/s), a 1024x1024 fp32 matmul and an 8x64x56x56 3x3 fp32 conv2d (GFLOP/s), an
8192x8192 fp16 matrix-vector product both ways round (GB/s of the matrix), the per-kernel cost of replaying a
jitted 100-kernel function (CUDA graph), and the host cost of one small fused op run eagerly. Kernel rows are GPU
time from events, best of several runs.
Run: python extra/bench_cuda.py   (needs an NVIDIA GPU, its driver and NVRTC; about a minute)

`--sweep` also times the add and sum kernels for each block size (and the sum for each vector unroll) the CUDA
renderer can be set to, at several launch grids, each checked against numpy; `--old FILE` adds the kernels of
another version of tinygrad/renderer/cuda.py (say, the last commit's) at the launch written on their first line.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import sys

import numpy as np

from tinygrad import Device, Tensor, TinyJit, dtypes
from tinygrad.benchmark.timing import best, wall
from tinygrad.benchmark.tinygrad_rows import CHAIN, chain, kernel_seconds
from tinygrad.benchmark.torch_rows import captured_chain
from tinygrad.runtime import _cuda
from tinygrad.runtime.graph_cuda import CUDAGraph
from tinygrad.runtime.ops_cuda import CUDAProgram

N = 64 * 1024 * 1024
MATMUL = 4096
SMALL_MATMUL = 1024
MATVEC = 8192
# conv2d: a batch of 8 images of 64 channels, 56x56, 64 filters of 3x3, padding 1
CONV_IN, CONV_W = (8, 64, 56, 56), (64, 64, 3, 3)
CONV_FLOPS = 2 * 8 * 64 * 56 * 56 * 64 * 9
REPS = 10


def tinygrad_rows(dev) -> dict[str, float]:
    rows: dict[str, float] = {}
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal(N, dtype=np.float32), device="CUDA").realize()
    b = Tensor(rng.standard_normal(N, dtype=np.float32), device="CUDA").realize()
    nbytes = N * 4

    src, dst = a.lazydata.base.realized._buf, b.lazydata.base.realized._buf
    copy = wall(lambda: _cuda.transfer(dst, src, nbytes), dev.synchronize, 20)
    rows["copy GB/s"] = 2 * nbytes / copy / 1e9
    rows["add GB/s"] = 3 * nbytes / kernel_seconds(lambda x, y: x + y, a, b) / 1e9
    rows["sum GB/s"] = nbytes / kernel_seconds(lambda x: x.sum(), a) / 1e9

    m = [Tensor(rng.standard_normal((MATMUL, MATMUL), dtype=np.float32), device="CUDA").cast(dtypes.float16).realize()
         for _ in range(2)]
    rows["matmul fp16 TFLOP/s"] = 2 * MATMUL**3 / kernel_seconds(lambda x, y: x @ y, *m) / 1e12
    s = [Tensor(rng.standard_normal((SMALL_MATMUL, SMALL_MATMUL), dtype=np.float32), device="CUDA").realize()
         for _ in range(2)]
    rows["matmul 1024 fp32 GFLOP/s"] = 2 * SMALL_MATMUL**3 / kernel_seconds(lambda x, y: x @ y, *s) / 1e9
    x = Tensor(rng.standard_normal(CONV_IN, dtype=np.float32), device="CUDA").realize()
    w = Tensor(rng.standard_normal(CONV_W, dtype=np.float32), device="CUDA").realize()
    rows["conv2d fp32 GFLOP/s"] = CONV_FLOPS / kernel_seconds(lambda a, b: a.conv2d(b, padding=1), x, w) / 1e9
    v = Tensor(rng.standard_normal((1, MATVEC), dtype=np.float32), device="CUDA").cast(dtypes.float16).realize()
    wm = Tensor(rng.standard_normal((MATVEC, MATVEC), dtype=np.float32), device="CUDA").cast(dtypes.float16).realize()
    mv_bytes = MATVEC * MATVEC * 2
    # x @ W.T reads W's rows (a reduction along contiguous memory); x @ W reads down W's columns
    rows["matvec fp16 x@W.T GB/s"] = mv_bytes / kernel_seconds(lambda a, b: a @ b.T, v, wm) / 1e9
    rows["matvec fp16 x@W GB/s"] = mv_bytes / kernel_seconds(lambda a, b: a @ b, v, wm) / 1e9

    small = Tensor(rng.standard_normal(1024, dtype=np.float32), device="CUDA").realize()
    jc = TinyJit(chain)
    for _ in range(2):
        jc(small)
    graph = jc.graph if isinstance(jc.graph, CUDAGraph) else CUDAGraph(jc.jit_cache, jc.input_replace)
    inputs = [small.lazydata.base.realized]
    rows["jit replay us/kernel"] = wall(lambda: graph(inputs, {}), dev.synchronize, 200) / CHAIN * 1e6
    rows["eager small op us"] = wall(lambda: (small * 2 + 1).realize(), dev.synchronize, 200) * 1e6
    return rows


def torch_rows() -> dict[str, float]:
    import torch
    rows: dict[str, float] = {}
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(N, device="cuda", generator=g)
    b = torch.randn(N, device="cuda", generator=g)
    out = torch.empty_like(a)

    def gpu(fn) -> float:
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def once() -> float:
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return best(once, REPS)

    rows["copy GB/s"] = 2 * N * 4 / gpu(lambda: out.copy_(a)) / 1e9
    rows["add GB/s"] = 3 * N * 4 / gpu(lambda: torch.add(a, b, out=out)) / 1e9
    rows["sum GB/s"] = N * 4 / gpu(lambda: a.sum()) / 1e9
    x = torch.randn(MATMUL, MATMUL, device="cuda", dtype=torch.float16, generator=g)
    y = torch.randn(MATMUL, MATMUL, device="cuda", dtype=torch.float16, generator=g)
    rows["matmul fp16 TFLOP/s"] = 2 * MATMUL**3 / gpu(lambda: x @ y) / 1e12
    s1 = torch.randn(SMALL_MATMUL, SMALL_MATMUL, device="cuda", generator=g)
    s2 = torch.randn(SMALL_MATMUL, SMALL_MATMUL, device="cuda", generator=g)
    rows["matmul 1024 fp32 GFLOP/s"] = 2 * SMALL_MATMUL**3 / gpu(lambda: s1 @ s2) / 1e9
    ci, cw = torch.randn(CONV_IN, device="cuda", generator=g), torch.randn(CONV_W, device="cuda", generator=g)
    rows["conv2d fp32 GFLOP/s"] = CONV_FLOPS / gpu(lambda: torch.nn.functional.conv2d(ci, cw, padding=1)) / 1e9
    v = torch.randn(1, MATVEC, device="cuda", dtype=torch.float16, generator=g)
    wm = torch.randn(MATVEC, MATVEC, device="cuda", dtype=torch.float16, generator=g)
    rows["matvec fp16 x@W.T GB/s"] = MATVEC * MATVEC * 2 / gpu(lambda: v @ wm.T) / 1e9
    rows["matvec fp16 x@W GB/s"] = MATVEC * MATVEC * 2 / gpu(lambda: v @ wm) / 1e9

    small = torch.randn(1024, device="cuda", generator=g)

    cg = captured_chain(small)
    # torch's chain is 2 kernels per step (mul, add): per kernel of the same chain length, as tinygrad fuses them
    rows["jit replay us/kernel"] = wall(cg.replay, torch.cuda.synchronize, 200) / CHAIN * 1e6
    rows["eager small op us"] = wall(lambda: small * 2 + 1, torch.cuda.synchronize, 200) * 1e6
    return rows


def rendered(renderer, out: Tensor):
    """(name, ProgramSpec) of the one kernel that computes `out` from realized inputs, by `renderer`."""
    from tinygrad.codegen.kernel import LinearizerOptions
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule_with_vars
    from tinygrad.ops import BufferOps
    opts = LinearizerOptions("CUDA", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16)
    items = [si for si in create_schedule_with_vars([out.lazydata])[0] if si.ast[0].op is BufferOps.STORE]
    lin = Linearizer(items[-1].ast, opts)
    lin.gpu = False  # the sweep times the renderer's own plan (its knobs), which the add no longer takes by default
    lin.linearize()
    return lin.name, renderer(lin.name, lin.uops)


def sweep(dev, old: str | None) -> None:
    import tinygrad.renderer.cuda as cuda_renderer
    rng = np.random.default_rng(1)
    a_np, b_np = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    a, b = Tensor(a_np, device="CUDA").realize(), Tensor(b_np, device="CUDA").realize()
    out = Tensor.empty(N, device="CUDA").realize()
    a_buf, b_buf, out_buf = (t.lazydata.base.realized._buf for t in (a, b, out))
    want_add, want_sum = a_np + b_np, a_np.astype(np.float64).sum()
    x, y = Tensor.empty(N), Tensor.empty(N)  # for rendering only: a kernel does not depend on the device
    cases = {"add": (x + y, (out_buf, a_buf, b_buf), 3 * N * 4), "sum": (x.sum(), (out_buf, a_buf), N * 4)}
    variants = []
    if old:
        spec = importlib.util.spec_from_file_location("tg_old_cuda_renderer", old)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        variants.append(("before", module.CUDARenderer, None, None))
    variants += [(f"t{t} u{u}", cuda_renderer.CUDARenderer, t, u) for t in (256, 512) for u in (1, 2, 4, 8)]
    saved = cuda_renderer.THREADS, cuda_renderer.VEC_UNROLL
    sms = dev.sms
    print(f"sweep: GB/s (GPU time from events, best of {REPS}); grid in blocks; {sms} multiprocessors")
    for label, renderer, threads, unroll in variants:
        if threads is not None:
            cuda_renderer.THREADS, cuda_renderer.VEC_UNROLL = threads, unroll
        try:
            for kind, (tensor, bufs, nbytes) in cases.items():
                if kind == "add" and unroll not in (None, saved[1]):
                    continue  # elementwise kernels take a vector a thread: the unroll is the reductions'
                name, spec = rendered(renderer, tensor)
                prg = CUDAProgram(dev, name, dev.compiler.compile(spec.src), spec)
                written, block = spec.launch
                prg(*bufs, wait=True)
                got = np.empty(N if kind == "add" else 1, dtype=np.float32)
                _cuda.copyout(got, out_buf)
                ok = (got == want_add).all() if kind == "add" else abs(got[0] - want_sum) <= 1e-5 * np.abs(a_np).sum()
                grids = sorted({written[0], prg.default_dims[0][0], *(sms * k for k in (1, 2, 4, 8, 16))})
                if label == "before":
                    grids = [written[0]]  # as it was launched
                row = []
                for g in grids:
                    launch = functools.partial(prg, *bufs, global_size=(g, 1, 1), local_size=block, wait=True)
                    secs = best(launch, REPS)
                    mark = "*" if g == prg.default_dims[0][0] and label != "before" else ""
                    row.append(f"{g}{mark}:{nbytes / secs / 1e9:.0f}")
                print(f"  {label:10s} {kind:4s} regs={prg._prg.num_regs:3d} {'ok ' if ok else 'BAD'} {' '.join(row)}")
        finally:
            cuda_renderer.THREADS, cuda_renderer.VEC_UNROLL = saved
    print("  (* the launch tinygrad uses by default)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="time the renderer's knobs and launch grids too")
    parser.add_argument("--old", help="another tinygrad/renderer/cuda.py to compare in the sweep")
    args = parser.parse_args()
    dev = Device["CUDA"]
    print(f"{dev._dev.product_name} ({dev.arch}), CUDA driver {dev._dev.driver_version}")
    if args.sweep or args.old:
        sweep(dev, args.old)
    ours = tinygrad_rows(dev)
    dev.allocator.free_cache()  # give PyTorch the memory back
    try:
        theirs = torch_rows()
    except Exception as e:  # no torch, or a CPU-only build
        print(f"PyTorch not measured: {e}")
        theirs = {}
    print(f"{'':24s} {'tinygrad':>12s} {'PyTorch':>12s}")
    for k, v in ours.items():
        print(f"{k:24s} {v:12.2f} {theirs.get(k, float('nan')):12.2f}")
    for k in ("add GB/s", "sum GB/s"):
        print(f"{k[:3]} / copy: tinygrad {ours[k] / ours['copy GB/s']:.1%}"
              + (f", PyTorch {theirs[k] / theirs['copy GB/s']:.1%}" if theirs else ""))
    print(f"(add and sum are {N // 2**20}M floats; GB/s count bytes read and written; copy is a device-to-device copy; "
          f"the jit row replays {CHAIN} dependent kernels on 1024 floats as one CUDA graph, PyTorch's as "
          f"{2 * CHAIN} kernels of its graph divided by {CHAIN})")


if __name__ == "__main__":
    main()
