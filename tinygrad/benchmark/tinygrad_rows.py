"""tinygrad's side of the benchmark: one measure per row, each taking (device name, Sizes) and returning the row's
value. Kernel rows are the kernels' own time, captured with TinyJit and launched by their runners: GPU events where
the device has them, else the host clock around the launch; best of several runs after a warm-up."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from tinygrad.benchmark import workloads as W
from tinygrad.benchmark.timing import best, wall
from tinygrad.device import Buffer, Device
from tinygrad.dtype import dtypes
from tinygrad.engine.jit import TinyJit
from tinygrad.tensor import Tensor

CHAIN = 100


def _jitted(fn: Callable, *inputs: Tensor) -> list:
    jf = TinyJit(fn)
    for _ in range(2):
        jf(*inputs)
    return jf.jit_cache


def kernel_seconds(fn: Callable, *inputs: Tensor) -> float:
    """Seconds the kernels of `fn(*inputs)` take on the device, launched one by one by their runners."""
    items = _jitted(fn, *inputs)
    return best(lambda: sum(ei.prg(ei.bufs, {}, wait=True) for ei in items))


def _rand(shape, device: str, dtype=dtypes.float32) -> Tensor:
    rng = np.random.default_rng(0)
    return Tensor(rng.standard_normal(shape, dtype=np.float32), device=device).cast(dtype).realize()


def _sync(device: str) -> Callable[[], None]:
    return getattr(Device[device], "synchronize", lambda: None)


def _buffer(device: str, nbytes: int) -> Buffer:
    return Buffer(device, nbytes, dtypes.uint8).allocate()


# ---- launches and copies -------------------------------------------------------------------------------------------
def launch_host(device: str, s: W.Sizes) -> float:
    """Microseconds of host time per launch of a one-element kernel, launched back to back."""
    ei = _jitted(lambda t: t + 1, _rand((1,), device))[-1]
    return wall(lambda: ei.prg(ei.bufs, {}), _sync(device), reps=200) * 1e6


def launch_device(device: str, s: W.Sizes) -> float:
    """Microseconds the device takes to run a one-element kernel (its events' time)."""
    ei = _jitted(lambda t: t + 1, _rand((1,), device))[-1]
    return best(lambda: ei.prg(ei.bufs, {}, wait=True), 50) * 1e6


def h2d(device: str, s: W.Sizes) -> float:
    host, buf = np.ones(s.copy_bytes, np.uint8), _buffer(device, s.copy_bytes)
    return s.copy_bytes / wall(lambda: buf.copyin(memoryview(host)), _sync(device), reps=3) / 1e9


def d2h(device: str, s: W.Sizes) -> float:
    host, buf = np.empty(s.copy_bytes, np.uint8), _buffer(device, s.copy_bytes)
    buf.copyin(memoryview(np.ones(s.copy_bytes, np.uint8)))
    return s.copy_bytes / wall(lambda: buf.copyout(memoryview(host)), _sync(device), reps=3) / 1e9


def numpy_out(device: str, s: W.Sizes) -> float:
    """Tensor.numpy() of a realized device tensor, end to end: what a user waits for (a new array each call)."""
    if not device.startswith("CUDA"):
        raise NotImplementedError("a host device copies within host memory")
    t = Tensor(np.ones(s.copy_bytes // 4, np.float32), device=device).realize()
    return s.copy_bytes / wall(t.numpy, _sync(device), reps=3) / 1e9


def numpy_in(device: str, s: W.Sizes) -> float:
    """Tensor(ndarray, device=...).realize() from a pageable numpy array, end to end."""
    if not device.startswith("CUDA"):
        raise NotImplementedError("a host device copies within host memory")
    host = np.ones(s.copy_bytes // 4, np.float32)
    return s.copy_bytes / wall(lambda: Tensor(host, device=device).realize(), _sync(device), reps=3) / 1e9


def _pinned(device: str):
    """The CUDA runtime module, which has pinned host buffers; host devices need none."""
    if not device.startswith("CUDA"):
        raise NotImplementedError("a host device copies within host memory")
    from tinygrad.runtime import _cuda
    if not hasattr(_cuda, "HostBuffer"):
        raise NotImplementedError("this build has no pinned host buffers")
    return _cuda


def h2d_pinned(device: str, s: W.Sizes) -> float:
    cu = _pinned(device)
    host, buf = cu.HostBuffer(Device[device].native, s.copy_bytes), _buffer(device, s.copy_bytes)
    return s.copy_bytes / wall(lambda: cu.copyin_pinned(buf._buf, host, s.copy_bytes), _sync(device), reps=3) / 1e9


def d2h_pinned(device: str, s: W.Sizes) -> float:
    cu = _pinned(device)
    host, buf = cu.HostBuffer(Device[device].native, s.copy_bytes), _buffer(device, s.copy_bytes)
    return s.copy_bytes / wall(lambda: cu.copyout_pinned(host, buf._buf, s.copy_bytes), _sync(device), reps=3) / 1e9


def d2d(device: str, s: W.Sizes) -> float:
    a, b = _buffer(device, s.copy_bytes), _buffer(device, s.copy_bytes)
    alloc, dev = a.allocator, Device[device]
    if alloc.can_transfer(alloc):
        def copy():
            alloc.transfer(b._buf, a._buf, s.copy_bytes, src_dev=dev, dest_dev=dev)
    else:
        def copy():
            b.copyin(a.as_buffer())
    return 2 * s.copy_bytes / wall(copy, _sync(device), reps=5) / 1e9  # bytes read and written


# ---- kernels -------------------------------------------------------------------------------------------------------
def _kernel(make: Callable[[str, W.Sizes], tuple], amount: Callable[[W.Sizes], float]) -> Callable:
    """A row timing the kernels of `fn(*inputs)` (from `make`), as `amount(sizes)` (bytes or flops) per second."""
    def measure(device: str, s: W.Sizes) -> float:
        fn, inputs = make(device, s)
        return amount(s) / kernel_seconds(fn, *inputs) / 1e9
    return measure


def _matmul(n_of: Callable[[W.Sizes], int], dt) -> Callable:
    def make(device: str, s: W.Sizes) -> tuple:
        n = n_of(s)
        return (lambda x, y: x @ y), (_rand((n, n), device, dt), _rand((n, n), device, dt))
    return make


def _rows2d(fn: Callable) -> Callable:
    return lambda device, s: (fn, (_rand((s.elements // 1024, 1024), device),))


def _attention(device: str, s: W.Sizes) -> tuple:
    q, k, v = (_rand(s.attn, device, dtypes.float16) for _ in range(3))
    return (lambda a, b, c: a.scaled_dot_product_attention(b, c, is_causal=True)), (q, k, v)


def _conv(dt) -> Callable:
    def make(device: str, s: W.Sizes) -> tuple:
        return (lambda x, w: x.conv2d(w, padding=1)), (_rand(s.conv, device, dt),
                                                        _rand((s.conv[1], s.conv[1], 3, 3), device, dt))
    return make


def _matvec(device: str, s: W.Sizes) -> tuple:
    f16 = dtypes.float16
    return (lambda x, w: x @ w.T), (_rand((1, s.matvec), device, f16), _rand((s.matvec, s.matvec), device, f16))


def chain(x: Tensor) -> Tensor:
    """CHAIN small dependent kernels on `x`: what the JIT replay rows capture."""
    for _ in range(CHAIN):
        x = (x * 1.0001 + 0.5).contiguous()
    return x


def jit_replay(device: str, s: W.Sizes) -> float:
    """Microseconds per kernel of replaying a captured chain of CHAIN small dependent kernels."""
    small = _rand((1024,), device)
    jc = TinyJit(chain)
    for _ in range(3):
        jc(small)
    return wall(lambda: jc(small), _sync(device), reps=20) / CHAIN * 1e6


def compile_ms(device: str, s: W.Sizes) -> float:
    """Milliseconds to compile one elementwise kernel, its source made unique so that no cache answers."""
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule_with_vars
    dev = Device[device]
    x = _rand((4096,), device)
    si = create_schedule_with_vars([(x * 2 + x.exp2()).lazydata])[0][-1]
    lin = Linearizer(si.ast, dev.linearizer_opts).linearize()
    src = dev.renderer(lin.name, lin.uops).src
    times = []
    for i in range(3):
        unique = src.replace(lin.name, f"{lin.name}_bench{time.monotonic_ns()}_{i}")
        st = time.perf_counter()
        dev.compiler.compile(unique)
        times.append(time.perf_counter() - st)
    return min(times) * 1e3


f16, bf16, f32 = dtypes.float16, dtypes.bfloat16, dtypes.float32
# (row, unit, measure): the rows in the order the table shows them
ROWS: list[tuple[str, str, Callable[[str, W.Sizes], float]]] = [
    ("launch latency, host", "us", launch_host),
    ("launch latency, device", "us", launch_device),
    ("host->device pageable", "GB/s", h2d),
    ("device->host pageable", "GB/s", d2h),
    ("Tensor(ndarray) to device", "GB/s", numpy_in),
    ("Tensor.numpy() from device", "GB/s", numpy_out),
    ("host->device pinned", "GB/s", h2d_pinned),
    ("device->host pinned", "GB/s", d2h_pinned),
    ("device->device copy", "GB/s", d2d),
    ("add fp32", "GB/s", _kernel(lambda d, s: ((lambda x, y: x + y), (_rand((s.elements,), d),
                                                                      _rand((s.elements,), d))), W.add_bytes)),
    ("sum fp32", "GB/s", _kernel(lambda d, s: ((lambda x: x.sum()), (_rand((s.elements,), d),)), W.sum_bytes)),
    ("matmul fp32 small", "GFLOP/s", _kernel(_matmul(lambda s: s.mm_small, f32), W.mm_small_flops)),
    ("matmul fp32 large", "GFLOP/s", _kernel(_matmul(lambda s: s.mm_large, f32), W.mm_large_flops)),
    ("matmul fp16 large", "GFLOP/s", _kernel(_matmul(lambda s: s.mm_large, f16), W.mm_large_flops)),
    ("matmul bf16 large", "GFLOP/s", _kernel(_matmul(lambda s: s.mm_large, bf16), W.mm_large_flops)),
    ("matvec fp16 x@W.T", "GB/s", _kernel(_matvec, W.matvec_bytes)),
    ("conv2d fp32 3x3", "GFLOP/s", _kernel(_conv(f32), W.conv_flops)),
    ("conv2d fp16 3x3", "GFLOP/s", _kernel(_conv(f16), W.conv_flops)),
    ("softmax fp32", "GB/s", _kernel(_rows2d(lambda x: x.softmax(-1)), W.rowwise_bytes)),
    ("layernorm fp32", "GB/s", _kernel(_rows2d(lambda x: x.layernorm()), W.rowwise_bytes)),
    ("attention fp16 causal", "GFLOP/s", _kernel(_attention, W.attn_flops)),
    ("jit replay per kernel", "us", jit_replay),
    ("compile one kernel", "ms", compile_ms),
]
