"""The CUDA device against PyTorch (torch.cuda) in the same process, on the same GPU.

Rows: elementwise add and full sum of 64M floats (GB/s, beside the bandwidth of a plain device-to-device copy),
a 4096x4096 fp16 matmul (TFLOP/s), the per-kernel cost of replaying a jitted 100-kernel function (CUDA graph), and
the host cost of one small fused op run eagerly. Kernel rows are GPU time from events, best of several runs.
Run: python extra/bench_cuda.py   (needs an NVIDIA GPU, its driver and NVRTC; about a minute)
"""
from __future__ import annotations

import time

import numpy as np

from tinygrad import Device, Tensor, TinyJit, dtypes
from tinygrad.runtime import _cuda
from tinygrad.runtime.graph_cuda import CUDAGraph

N = 64 * 1024 * 1024
MATMUL = 4096
CHAIN = 100
REPS = 10


def best(fn, reps: int = REPS) -> float:
    return min(fn() for _ in range(reps))


def kernel_seconds(fn, *inputs: Tensor) -> float:
    """GPU seconds of the kernels `fn` launches on `inputs`: captured with TinyJit, each kernel timed with events."""
    jf = TinyJit(fn)
    for _ in range(2):
        jf(*inputs)
    items = jf.jit_cache

    def once() -> float:
        return sum(ei.prg.clprg(*[b._buf for b in ei.bufs], wait=True) for ei in items)
    once()
    return best(once)


def wall(fn, reps: int, sync) -> float:
    """Host seconds per call of `fn`, waiting for the GPU at the end of each round."""
    fn()
    sync()
    out = float("inf")
    for _ in range(5):
        st = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        out = min(out, (time.perf_counter() - st) / reps)
    return out


def chain(x: Tensor) -> Tensor:
    for _ in range(CHAIN):
        x = (x * 1.0001 + 0.5).contiguous()
    return x


def tinygrad_rows(dev) -> dict[str, float]:
    rows: dict[str, float] = {}
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal(N, dtype=np.float32), device="CUDA").realize()
    b = Tensor(rng.standard_normal(N, dtype=np.float32), device="CUDA").realize()
    nbytes = N * 4

    src, dst = a.lazydata.base.realized._buf, b.lazydata.base.realized._buf
    copy = wall(lambda: _cuda.transfer(dst, src, nbytes), 20, dev.synchronize)
    rows["copy GB/s"] = 2 * nbytes / copy / 1e9
    rows["add GB/s"] = 3 * nbytes / kernel_seconds(lambda x, y: x + y, a, b) / 1e9
    rows["sum GB/s"] = nbytes / kernel_seconds(lambda x: x.sum(), a) / 1e9

    m = [Tensor(rng.standard_normal((MATMUL, MATMUL), dtype=np.float32), device="CUDA").cast(dtypes.float16).realize()
         for _ in range(2)]
    jf = TinyJit(lambda x, y: x @ y)
    for _ in range(2):
        jf(*m)
    secs = sum(ei.prg.clprg(*[b._buf for b in ei.bufs], wait=True) for ei in jf.jit_cache)
    rows["matmul fp16 TFLOP/s"] = 2 * MATMUL**3 / secs / 1e12

    small = Tensor(rng.standard_normal(1024, dtype=np.float32), device="CUDA").realize()
    jc = TinyJit(chain)
    for _ in range(2):
        jc(small)
    graph = jc.graph if isinstance(jc.graph, CUDAGraph) else CUDAGraph(jc.jit_cache, jc.input_replace)
    inputs = [small.lazydata.base.realized]
    rows["jit replay us/kernel"] = wall(lambda: graph(inputs, {}), 200, dev.synchronize) / CHAIN * 1e6
    rows["eager small op us"] = wall(lambda: (small * 2 + 1).realize(), 200, dev.synchronize) * 1e6
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
        return best(once)

    rows["copy GB/s"] = 2 * N * 4 / gpu(lambda: out.copy_(a)) / 1e9
    rows["add GB/s"] = 3 * N * 4 / gpu(lambda: torch.add(a, b, out=out)) / 1e9
    rows["sum GB/s"] = N * 4 / gpu(lambda: a.sum()) / 1e9
    x = torch.randn(MATMUL, MATMUL, device="cuda", dtype=torch.float16, generator=g)
    y = torch.randn(MATMUL, MATMUL, device="cuda", dtype=torch.float16, generator=g)
    rows["matmul fp16 TFLOP/s"] = 2 * MATMUL**3 / gpu(lambda: x @ y) / 1e12

    small = torch.randn(1024, device="cuda", generator=g)

    def torch_chain(t):
        for _ in range(CHAIN):
            t = t * 1.0001 + 0.5
        return t
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch_chain(small)
    torch.cuda.current_stream().wait_stream(stream)
    cg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cg):
        torch_chain(small)
    # torch's chain is 2 kernels per step (mul, add): per kernel of the same chain length, as tinygrad fuses them
    rows["jit replay us/kernel"] = wall(cg.replay, 200, torch.cuda.synchronize) / CHAIN * 1e6
    rows["eager small op us"] = wall(lambda: small * 2 + 1, 200, torch.cuda.synchronize) * 1e6
    return rows


def main() -> None:
    dev = Device["CUDA"]
    print(f"{dev._dev.product_name} ({dev.arch}), CUDA driver {dev._dev.driver_version}")
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
    print(f"(add and sum are {N // 2**20}M floats; GB/s count bytes read and written; copy is a device-to-device copy; "
          f"the jit row replays {CHAIN} dependent kernels on 1024 floats as one CUDA graph, PyTorch's as "
          f"{2 * CHAIN} kernels of its graph divided by {CHAIN})")


if __name__ == "__main__":
    main()
