"""PyTorch's side of the benchmark: each row's workload through torch on the matching device (torch.cuda for CUDA,
the CPU for host devices), timed the same way (CUDA events, else the host clock), best of a few runs after a
warm-up. torch is imported only when a row runs: it is never a dependency of tinygrad."""
from __future__ import annotations

import math
import time
from typing import Any, Callable

from tinygrad.benchmark import workloads as W
from tinygrad.benchmark.timing import REPS, wall
from tinygrad.helpers import getenv

CHAIN = 100


def _dev(device: str) -> str:
    return "cuda" if device.startswith("CUDA") else "cpu"


def _timed(dev: str, fn: Callable[[], Any], reps: int = REPS) -> float:
    """Seconds of one call of `fn`: CUDA events around it on the GPU, the host clock on the CPU."""
    import torch
    fn()
    best = math.inf
    for _ in range(reps):
        if dev == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        else:
            st = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - st)
    return best


def _wall(dev: str, fn: Callable[[], Any], reps: int) -> float:
    import torch
    return wall(fn, torch.cuda.synchronize if dev == "cuda" else (lambda: None), reps)


def _rand(shape, dev: str, dtype_name: str = "float32"):
    import torch
    g = torch.Generator().manual_seed(0)
    return torch.randn(*shape, generator=g).to(getattr(torch, dtype_name)).to(dev)


def launch_host(device: str, s: W.Sizes) -> float:
    dev = _dev(device)
    x = _rand((1,), dev)
    return _wall(dev, lambda: x + 1, 200) * 1e6


def launch_device(device: str, s: W.Sizes) -> float:
    dev = _dev(device)
    x = _rand((1,), dev)
    return _timed(dev, lambda: x + 1, 50) * 1e6


def _copy(to_device: bool, pinned: bool) -> Callable:
    def measure(device: str, s: W.Sizes) -> float:
        import torch
        dev = _dev(device)
        if dev != "cuda":
            raise NotImplementedError("a host device copies within host memory")
        host = torch.ones(s.copy_bytes, dtype=torch.uint8)
        host = host.pin_memory() if pinned else host
        gpu = torch.empty(s.copy_bytes, dtype=torch.uint8, device=dev)
        return s.copy_bytes / _wall(dev, (lambda: gpu.copy_(host)) if to_device else (lambda: host.copy_(gpu)), 3) / 1e9
    return measure


def _numpy_copy(to_device: bool) -> Callable:
    """torch.tensor(ndarray, device=...) and .cpu().numpy(): the user-level counterparts of tinygrad's rows."""
    def measure(device: str, s: W.Sizes) -> float:
        import numpy as np
        import torch
        dev = _dev(device)
        if dev != "cuda":
            raise NotImplementedError("a host device copies within host memory")
        host = np.ones(s.copy_bytes // 4, np.float32)
        gpu = torch.ones(s.copy_bytes // 4, dtype=torch.float32, device=dev)
        fn = (lambda: torch.tensor(host, device=dev)) if to_device else (lambda: gpu.cpu().numpy())
        return s.copy_bytes / _wall(dev, fn, 3) / 1e9
    return measure


def d2d(device: str, s: W.Sizes) -> float:
    import torch
    dev = _dev(device)
    a = torch.ones(s.copy_bytes, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    return 2 * s.copy_bytes / _wall(dev, lambda: b.copy_(a), 5) / 1e9


def _same_precision() -> None:
    """Float32 matmuls and convolutions in PyTorch at tinygrad's precision: TF32 exactly where ALLOW_TF32=1. PyTorch's
    own defaults differ between the two (cuDNN convolutions allow TF32, cuBLAS matmuls do not), which would compare
    a float32 kernel with a TF32 one."""
    import torch
    tf32 = bool(getenv("ALLOW_TF32"))
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def _kernel(make: Callable[[str, W.Sizes], Callable], amount: Callable[[W.Sizes], float]) -> Callable:
    def measure(device: str, s: W.Sizes) -> float:
        dev = _dev(device)
        _same_precision()
        return amount(s) / _timed(dev, make(dev, s)) / 1e9
    return measure


def _matmul(n_of: Callable[[W.Sizes], int], dtype_name: str) -> Callable:
    def make(dev: str, s: W.Sizes) -> Callable:
        a, b = _rand((n_of(s), n_of(s)), dev, dtype_name), _rand((n_of(s), n_of(s)), dev, dtype_name)
        return lambda: a @ b
    return make


def _add(dev: str, s: W.Sizes) -> Callable:
    a, b = _rand((s.elements,), dev), _rand((s.elements,), dev)
    return lambda: a + b


def _sum(dev: str, s: W.Sizes) -> Callable:
    a = _rand((s.elements,), dev)
    return lambda: a.sum()


def _matvec(dev: str, s: W.Sizes) -> Callable:
    x, w = _rand((1, s.matvec), dev, "float16"), _rand((s.matvec, s.matvec), dev, "float16")
    return lambda: x @ w.T


def _conv(dt: str) -> Callable:
    def make(dev: str, s: W.Sizes) -> Callable:
        import torch
        x, w = _rand(s.conv, dev, dt), _rand((s.conv[1], s.conv[1], 3, 3), dev, dt)
        return lambda: torch.nn.functional.conv2d(x, w, padding=1)
    return make


def _softmax(dev: str, s: W.Sizes) -> Callable:
    x = _rand((s.elements // 1024, 1024), dev)
    return lambda: x.softmax(-1)


def _layernorm(dev: str, s: W.Sizes) -> Callable:
    import torch
    x = _rand((s.elements // 1024, 1024), dev)
    return lambda: torch.nn.functional.layer_norm(x, (1024,))


def _attention(dev: str, s: W.Sizes) -> Callable:
    import torch
    q, k, v = (_rand(s.attn, dev, "float16") for _ in range(3))
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def captured_chain(x):
    """A CUDA graph of CHAIN small dependent ops on `x` (y * 1.0001 + 0.5, two kernels each), captured after a
    warm-up on a side stream, as PyTorch requires."""
    import torch

    def chain():
        y = x
        for _ in range(CHAIN):
            y = y * 1.0001 + 0.5
        return y
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    return graph


def graph_replay(device: str, s: W.Sizes) -> float:
    """Microseconds per kernel of replaying captured_chain's graph (per op of the chain, as tinygrad fuses each)."""
    dev = _dev(device)
    if dev != "cuda":
        raise NotImplementedError("CUDA graphs only")
    return _wall(dev, captured_chain(_rand((1024,), dev)).replay, 20) / CHAIN * 1e6


# row -> measure, for the rows of tinygrad_rows.ROWS that PyTorch can run
ROWS: dict[str, Callable[[str, W.Sizes], float]] = {
    "launch latency, host": launch_host,
    "launch latency, device": launch_device,
    "host->device pageable": _copy(True, False),
    "device->host pageable": _copy(False, False),
    "Tensor(ndarray) to device": _numpy_copy(True),
    "Tensor.numpy() from device": _numpy_copy(False),
    "host->device pinned": _copy(True, True),
    "device->host pinned": _copy(False, True),
    "device->device copy": d2d,
    "add fp32": _kernel(_add, W.add_bytes),
    "sum fp32": _kernel(_sum, W.sum_bytes),
    "matmul fp32 small": _kernel(_matmul(lambda s: s.mm_small, "float32"), W.mm_small_flops),
    "matmul fp32 large": _kernel(_matmul(lambda s: s.mm_large, "float32"), W.mm_large_flops),
    "matmul fp16 large": _kernel(_matmul(lambda s: s.mm_large, "float16"), W.mm_large_flops),
    "matmul bf16 large": _kernel(_matmul(lambda s: s.mm_large, "bfloat16"), W.mm_large_flops),
    "matvec fp16 x@W.T": _kernel(_matvec, W.matvec_bytes),
    "conv2d fp32 3x3": _kernel(_conv("float32"), W.conv_flops),
    "conv2d fp16 3x3": _kernel(_conv("float16"), W.conv_flops),
    "softmax fp32": _kernel(_softmax, W.rowwise_bytes),
    "layernorm fp32": _kernel(_layernorm, W.rowwise_bytes),
    "attention fp16 causal": _kernel(_attention, W.attn_flops),
    "jit replay per kernel": graph_replay,
}
