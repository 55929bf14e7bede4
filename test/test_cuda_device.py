"""The CUDA device on a real GPU: memory, kernels against the CLANG device, errors from the driver, graphs, timing.

Skipped (cleanly, at collection) where there is no NVIDIA driver or GPU; kernel tests also need NVRTC.
test/unit/test_cuda_runtime.py covers the same runtime with a fake driver everywhere.
"""
import os
import subprocess
import sys

import numpy as np
import pytest


def _gpu() -> str | None:
    """Why the GPU tests cannot run, or None."""
    try:
        from tinygrad.runtime import _cuda
        return None if _cuda.device_count() > 0 else "no CUDA GPU"
    except Exception as e:  # no driver: RuntimeError naming libcuda.so.1
        return f"no usable CUDA driver ({e})"


_why = _gpu()
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")

if _why is None:
    from tinygrad import Device, Tensor, TinyJit, Variable, dtypes
    from tinygrad.device import CompileError
    from tinygrad.runtime import _cuda
    from tinygrad.runtime.graph_cuda import MAX_NODES, CUDAGraph
    from tinygrad.runtime.ops_cuda import CUDACompiler, nvrtc_candidates


def _nvrtc() -> bool:
    try:
        _cuda.nvrtc_load(nvrtc_candidates())
        return True
    except RuntimeError:
        return False


needs_nvrtc = pytest.mark.skipif(_why is not None or not _nvrtc(), reason="needs NVRTC (libnvrtc.so.13/.12)")


def rng(seed=0):
    return np.random.default_rng(seed)


@pytest.fixture(scope="module")
def dev():
    return Device["CUDA"]


# --- memory -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nbytes", [1, 7, 4096, (4 << 20) + 3, (37 << 20) + 11])
def test_copy_roundtrip(dev, nbytes):
    # sizes around and across the 4 MiB staging slots, odd tails included
    data = rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    buf = _cuda.DeviceBuffer(dev._dev, nbytes)
    _cuda.copyin(buf, data)
    out = np.zeros_like(data)
    _cuda.copyout(out, buf)
    np.testing.assert_array_equal(out, data)


def test_device_to_device_transfer(dev):
    data = rng().standard_normal(1 << 20).astype(np.float32)
    a, b = _cuda.DeviceBuffer(dev._dev, data.nbytes), _cuda.DeviceBuffer(dev._dev, data.nbytes)
    _cuda.copyin(a, data)
    dev.allocator.transfer(b, a, data.nbytes)
    out = np.empty_like(data)
    _cuda.copyout(out, b)
    np.testing.assert_array_equal(out, data)


@pytest.mark.parametrize("nbytes", [1, 4096, (37 << 20) + 11])
def test_pinned_host_roundtrip(dev, nbytes):
    # page-locked HostBuffers copy in one DMA each way, ordered with the staged copies queued before them
    src, dst = _cuda.HostBuffer(dev._dev, nbytes), _cuda.HostBuffer(dev._dev, nbytes)
    data = rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    np.frombuffer(src, dtype=np.uint8)[:] = data
    buf = _cuda.DeviceBuffer(dev._dev, nbytes + 16)
    _cuda.copyin(buf, np.full(nbytes + 16, 0xEE, dtype=np.uint8))
    _cuda.copyin_pinned(buf, src, nbytes)
    _cuda.copyout_pinned(dst, buf, nbytes)
    np.testing.assert_array_equal(np.frombuffer(dst, dtype=np.uint8), data)
    tail = np.zeros(nbytes + 16, dtype=np.uint8)
    _cuda.copyout(tail, buf)
    np.testing.assert_array_equal(tail[nbytes:], 0xEE)  # only the first nbytes were written
    src.free()
    dst.free()


@pytest.mark.skipif(_why is not None or _cuda.device_count() < 2, reason="needs two GPUs")
def test_peer_transfer(dev):
    other = Device["CUDA:1"]
    data = rng().standard_normal(1 << 20).astype(np.float32)
    a, b = _cuda.DeviceBuffer(dev._dev, data.nbytes), _cuda.DeviceBuffer(other._dev, data.nbytes)
    _cuda.copyin(a, data)
    other.allocator.transfer(b, a, data.nbytes)
    out = np.empty_like(data)
    _cuda.copyout(out, b)
    np.testing.assert_array_equal(out, data)
    # and through the Tensor API, computing on each GPU
    t = (Tensor(data, device="CUDA") * 2).to("CUDA:1") + 1
    np.testing.assert_allclose(t.numpy(), data * 2 + 1, rtol=1e-6)


def test_out_of_memory_is_a_memoryerror_and_recoverable(dev):
    with pytest.raises(MemoryError, match="CUDA_ERROR_OUT_OF_MEMORY") as e:
        _cuda.DeviceBuffer(dev._dev, dev._dev.total_memory * 2)
    assert e.value.call == "cuMemAlloc_v2" and e.value.driver_error == "CUDA_ERROR_OUT_OF_MEMORY"
    small = _cuda.DeviceBuffer(dev._dev, 1 << 20)  # the process keeps working
    assert small.ptr != 0


def test_freed_memory_is_cached_and_given_back_on_oom(dev):
    own = _cuda.Device(0)  # with the C++ allocator's own cache (tinygrad's device caches in Python instead)
    chunk = own.total_memory // 8
    bufs = [_cuda.DeviceBuffer(own, chunk) for _ in range(5)]
    for b in bufs:
        b.free()
    assert own.cached_bytes >= 5 * chunk
    # a different size cannot reuse the cache, so it only fits once the cache is given back
    try:
        big = _cuda.DeviceBuffer(own, 6 * chunk + 1)
    except MemoryError:
        # the cache was given back and it still did not fit: other processes hold the GPU's memory (parallel tests)
        assert own.cached_bytes < 5 * chunk
        pytest.skip("other processes hold too much of the GPU's memory for this test")
    assert big.ptr != 0 and own.cached_bytes < 5 * chunk
    big.free()
    own.free_cache()


def test_tensor_memory_is_reused_and_given_back_under_pressure(dev):
    from tinygrad.device import Buffer
    chunk = dev._dev.total_memory // 8 // 4 * 4
    bufs = [Buffer("CUDA", chunk // 4, dtypes.float32).ensure_allocated() for _ in range(5)]
    del bufs  # into the LRU cache (up to its limit), the rest back to the driver
    big = Buffer("CUDA", (6 * chunk + 64) // 4, dtypes.float32).ensure_allocated()
    assert big.is_allocated()
    del big
    dev.allocator.free_cache()


# --- kernels against CLANG --------------------------------------------------------------------------------------


def both(fn, *arrays):
    """fn on CUDA and on CLANG, as numpy."""
    outs = []
    for device in ("CUDA", "CLANG"):
        outs.append(fn(*[Tensor(a, device=device) for a in arrays]).numpy())
    return outs


KERNELS = {
    "elementwise": (lambda a, b: (a + b * 2).relu() - a.exp2(), [(33, 65), (33, 65)]),
    "broadcast": (lambda a, b: a * b, [(7, 1, 5), (1, 9, 5)]),
    "sum_axis": (lambda a: a.sum(axis=1), [(37, 1000)]),
    "sum_all": (lambda a: a.sum(), [(300, 501)]),
    "max_all_big": (lambda a: a.max() + a.mean(), [(1 << 22,)]),
    "sum_small_rows": (lambda a: a.sum(axis=0), [(20000, 3)]),
    "max_axis0": (lambda a: a.max(axis=0), [(513, 17)]),
    "mean_std": (lambda a: a.std(axis=-1) + a.mean(), [(16, 300)]),
    "softmax": (lambda a: a.softmax(-1), [(64, 1000)]),
    "matmul": (lambda a, b: a @ b, [(64, 96), (96, 80)]),
    "math": (lambda a: a.sin() + a.abs().sqrt() + (a.abs() + 1).log2(), [(1000,)]),
    "where_cmp": (lambda a, b: (a < b).where(a, b * 3), [(257,), (257,)]),
    # the linearizer's grid with register tiles, vectors, unrolled reductions and blocks (codegen/heuristic_gpu.py)
    "matmul_tiled": (lambda a, b: a @ b, [(256, 192), (192, 320)]),
    "matmul_odd": (lambda a, b: a @ b, [(129, 67), (67, 131)]),
    "batched_matmul": (lambda a, b: a @ b, [(3, 64, 40), (3, 40, 96)]),
    "conv2d": (lambda a, b: a.conv2d(b, padding=1), [(2, 16, 20, 20), (32, 16, 3, 3)]),
    "matvec_columns": (lambda a, b: a @ b, [(1, 512), (512, 2048)]),
    "elementwise_vectors": (lambda a, b: a * b + 1, [(64, 1024), (1, 1024)]),
}


@needs_nvrtc
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernels_match_clang(name):
    fn, shapes = KERNELS[name]
    arrays = [rng(i).standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)]
    cuda, clang = both(fn, *arrays)
    # a sum taken in another order differs at the scale of the values summed, not of a result that cancelled out
    atol = 2e-3 if name == "sum_small_rows" else 2e-4 if name in ("conv2d", "matvec_columns") else 2e-5
    np.testing.assert_allclose(cuda, clang, rtol=2e-5, atol=atol)


@needs_nvrtc
def test_grid_reduction_is_right_launch_after_launch():
    # the last block of each launch resets the finished-blocks count for the next one
    for seed in range(4):
        a = rng(seed).standard_normal(1 << 20).astype(np.float32)
        np.testing.assert_allclose(Tensor(a, device="CUDA").sum().item(), a.astype(np.float64).sum(), rtol=1e-4)


# --- sums and elementwise ops: sizes, views and dtypes through the vector, remainder and scalar paths ------------


@needs_nvrtc
@pytest.mark.parametrize("n", [1, 31, 1000003, 64 << 20])
def test_sum_sizes_match_numpy_and_clang(n):
    a = rng(n % 1009).random(n, dtype=np.float32)  # all positive: a wrong or missing element shows
    got = Tensor(a, device="CUDA").sum().item()
    np.testing.assert_allclose(got, a.astype(np.float64).sum(), rtol=1e-5)
    if n <= 1000003:  # a float32 sum of 64M in one sequential loop (CLANG's) is itself off by more than that
        np.testing.assert_allclose(got, Tensor(a, device="CLANG").sum().item(), rtol=1e-4)


@needs_nvrtc
@pytest.mark.parametrize("n", [1, 31, 1000003, 64 << 20])
def test_add_sizes_match_numpy(n):
    a, b = rng(n % 1009).standard_normal((2, n), dtype=np.float32)
    np.testing.assert_array_equal((Tensor(a, device="CUDA") + Tensor(b, device="CUDA")).numpy(), a + b)


VIEWS = {
    "offset_1": lambda t: t[1:],
    "offset_3_tail_5": lambda t: t[3:-5],
    "offset_4": lambda t: t[4:],  # 16 bytes in: aligned again
    "strided_2": lambda t: t[::2],
    "strided_3_offset": lambda t: t[1::3],
    "flipped": lambda t: t.flip(0),
    "rows_of_odd_length": lambda t: t[:999 * 1001].reshape(999, 1001)[:, 1:],
    "permuted": lambda t: t[:1000 * 1000].reshape(1000, 1000).permute(1, 0),
}


@needs_nvrtc
@pytest.mark.parametrize("view", list(VIEWS))
def test_sum_and_add_of_views(view):
    a = rng(7).random(1000003, dtype=np.float32)
    want = VIEWS[view](Tensor(a, device="CLANG"))
    got = VIEWS[view](Tensor(a, device="CUDA"))
    np.testing.assert_allclose(got.sum().item(), want.sum().item(), rtol=1e-4)
    np.testing.assert_allclose(got.sum(axis=-1).numpy(), want.sum(axis=-1).numpy(), rtol=1e-4)
    np.testing.assert_array_equal((got * 2 + 1).numpy(), (want * 2 + 1).numpy())


@needs_nvrtc
@pytest.mark.parametrize("n", [31, 1000003])
@pytest.mark.parametrize("dtype", ["float16", "int32", "int8", "float64"])
def test_sum_and_add_of_narrow_and_wide_dtypes(dtype, n):
    r = rng(3)
    if dtype in ("int32", "int8"):
        a = r.integers(-100, 100, n).astype(dtype)
    else:
        a = (r.random(n) * (0.01 if dtype == "float16" else 1)).astype(dtype)
    t = Tensor(a, device="CUDA")[1:]  # an offset view too: a vector a thread, then the tail
    want = a[1:].astype(np.float64 if dtype.startswith("float") else np.int64).sum()
    if dtype.startswith("int"):
        assert t.sum().item() == want and Tensor(a, device="CUDA").sum().item() == a.astype(np.int64).sum()
    else:
        np.testing.assert_allclose(t.sum().item(), want, rtol=2e-3 if dtype == "float16" else 1e-9)
    np.testing.assert_array_equal((t + t).numpy(), a[1:] + a[1:])
    np.testing.assert_array_equal(t.max().item(), a[1:].max())


@needs_nvrtc
@pytest.mark.parametrize("fn", ["sum", "rows"])
def test_kernels_are_right_for_any_launch_grid(fn):
    # the renderer's kernels (memory-bound reductions) loop over their work: any grid gives the same result (the
    # runtime picks its own); the linearizer's grid kernels are launched with the sizes they were planned for
    a = rng(5).random(1 << 22, dtype=np.float32)
    ops = {"sum": lambda x: x.sum(), "rows": lambda x: x.reshape(1024, 4096).max(axis=1)}
    jf = TinyJit(ops[fn])
    for _ in range(2):
        want = jf(Tensor(a, device="CUDA").realize()).numpy()
    (ei,) = jf.jit_cache
    block = ei.prg.clprg.default_dims[1]
    for grid in (1, 3, 131, 5000):
        out = ei.bufs[0]
        _cuda.copyin(out._buf, np.zeros(out.nbytes, np.uint8))
        ei.prg.clprg(*[b._buf for b in ei.bufs], global_size=(grid, 1, 1), local_size=block, wait=True)
        got = np.frombuffer(out.as_buffer(), dtype=want.dtype).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5)


@needs_nvrtc
def test_default_launch_is_what_the_gpu_holds(dev):
    from tinygrad.runtime.ops_cuda import GRID_WAVES, resident_blocks
    jf = TinyJit(lambda x: x.sum())
    for _ in range(2):
        jf(Tensor(rng().random(64 << 20, dtype=np.float32), device="CUDA").realize())
    prg = jf.jit_cache[0].prg.clprg
    (grid, _, _), block = prg.default_dims
    assert grid <= GRID_WAVES * resident_blocks(dev.arch, dev.sms, block[0], prg._prg.num_regs)
    assert grid >= dev.sms  # and fills every multiprocessor
    jf = TinyJit(lambda x: x + 1)  # elementwise: the linearizer's grid, a thread per vector of 4 floats
    for _ in range(2):
        jf(Tensor(rng().random(64 << 20, dtype=np.float32), device="CUDA").realize())
    runner = jf.jit_cache[0].prg
    assert (runner.global_size, runner.local_size) == ((65536, 1, 1), (256, 1, 1))
    assert runner.clprg.default_dims is None


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "int8", "float64", "bool"])
def test_dtypes_match_clang(dtype):
    dt = getattr(dtypes, dtype)
    a = rng().standard_normal((50, 40)).astype(np.float32) * 4

    def fn(x):
        y = x.cast(dt)
        y = (y * 3 + 1) if dt != dtypes.bool else (y | y)
        return y.cast(dtypes.float32).sum(axis=1) if dt != dtypes.bool else y.cast(dtypes.int32)

    cuda, clang = both(fn, a)
    np.testing.assert_allclose(cuda, clang, rtol=1e-2 if dtype in ("float16", "bfloat16") else 1e-6)


@needs_nvrtc
def test_symbolic_variable_kernel():
    for n in (3, 7, 10):
        x = np.arange(n, dtype=np.float32)
        outs = [(Tensor(x, device=d).reshape(Variable("n", 1, 10).bind(n)) * 2).sum().item() for d in ("CUDA", "CLANG")]
        assert outs[0] == outs[1] == float(x.sum() * 2)


@needs_nvrtc
def test_compile_error_names_nvrtc_log(dev):
    with pytest.raises(CompileError, match="NVRTC_ERROR_COMPILATION") as e:
        dev.compiler.compile('extern "C" __global__ void broken(float* a) { a[0] = undefined_name; }')
    assert "undefined_name" in str(e.value)


@needs_nvrtc
def test_program_layout_and_launch_errors(dev):
    src = ('extern "C" __global__ void k(float* a, const float* b, int n) '
           '{ if (threadIdx.x < n) a[threadIdx.x] = b[0]; }')
    lib = dev.compiler.compile(src)
    prg = dev.runtime("k", lib)
    if _cuda.driver_version() >= 12040:
        assert prg._prg.params == [(0, 8), (8, 8), (16, 4)]
    a, b = _cuda.DeviceBuffer(dev._dev, 64), _cuda.DeviceBuffer(dev._dev, 4)
    _cuda.copyin(b, np.array([5.0], dtype=np.float32))
    secs = prg(a, b, global_size=(1, 1, 1), local_size=(16, 1, 1), vals=(16,), wait=True)
    assert 0 < secs < 1
    out = np.zeros(16, dtype=np.float32)
    _cuda.copyout(out, a)
    assert (out == 5).all()
    with pytest.raises(ValueError, match="exceeds the limits"):
        prg(a, b, global_size=(1, 1, 1), local_size=(2048, 1, 1), vals=(1,))
    with pytest.raises(ValueError, match="takes 3 argument"):
        prg(a, b, global_size=(1, 1, 1), local_size=(1, 1, 1))
    with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_IMAGE"):
        _cuda.Program(dev._dev, "k", b"not a cubin")
    with pytest.raises(RuntimeError, match="CUDA_ERROR_NOT_FOUND"):
        _cuda.Program(dev._dev, "nope", lib)


def test_compiler_cachekey_names_arch_and_nvrtc(dev):
    if not _nvrtc():
        pytest.skip("needs NVRTC")
    c = CUDACompiler(dev.arch)
    c.compile_cached('extern "C" __global__ void noop() {}')
    assert dev.arch in c.cachekey and "nvrtc" in c.cachekey


# --- graphs -------------------------------------------------------------------------------------------------------


@needs_nvrtc
def test_graph_replay_equals_eager():
    def f(a, b):
        return ((a * b).relu() + a).sum(axis=1) * 2

    jf = TinyJit(f)
    arrays = [(rng(i).standard_normal((16, 32)).astype(np.float32), rng(9 + i).standard_normal((16, 32)).astype(
        np.float32)) for i in range(5)]
    for a, b in arrays[:2]:  # run, then capture
        jf(Tensor(a, device="CUDA"), Tensor(b, device="CUDA"))
    graph = CUDAGraph(jf.jit_cache, jf.input_replace)
    for a, b in arrays[2:]:
        ta, tb = Tensor(a, device="CUDA").realize(), Tensor(b, device="CUDA").realize()
        graph([ta.lazydata.base.realized, tb.lazydata.base.realized], {})
        out = jf.ret.numpy()
        np.testing.assert_allclose(out, f(Tensor(a), Tensor(b)).numpy(), rtol=1e-5)
    assert graph.graphs[0].instantiations == 1 and graph.graphs[0].node_updates > 0


@needs_nvrtc
def test_graph_splits_long_captures_and_patches_variables():
    n_kernels = MAX_NODES * 2 + 17

    def f(a, n):
        for _ in range(n_kernels):
            a = (a * 1.0001 + n).contiguous()
        return a

    jf = TinyJit(f)
    x = np.ones(64, dtype=np.float32)
    for val in (1, 2):
        jf(Tensor(x, device="CUDA"), Variable("n", 0, 10).bind(val))
    graph = CUDAGraph(jf.jit_cache, jf.input_replace)
    assert len(graph.graphs) == 3
    n = Variable("n", 0, 10)
    t = Tensor(x, device="CUDA").realize()
    graph([t.lazydata.base.realized], {n: 3})
    want = x.astype(np.float64)
    for _ in range(n_kernels):
        want = want * 1.0001 + 3
    np.testing.assert_allclose(jf.ret.numpy(), want, rtol=1e-3)


@needs_nvrtc
def test_tinyjit_replays_through_the_devices_graph():
    # the JIT asks Device["CUDA"].graph, which is CUDAGraph
    assert Device["CUDA"].graph is CUDAGraph

    def f(a, n):
        return ((a * n).relu() + 1).sum(axis=1)

    jf = TinyJit(f)
    for i in range(6):
        a = rng(i).standard_normal((8, 16)).astype(np.float32)
        v = Variable("n", 1, 8).bind(i % 8 + 1)
        got = jf(Tensor(a, device="CUDA"), v).numpy()
        np.testing.assert_allclose(got, f(Tensor(a), i % 8 + 1).numpy(), rtol=1e-5)
    assert isinstance(jf.graph, CUDAGraph)


# --- the device as tinygrad sees it -------------------------------------------------------------------------------


@needs_nvrtc
def test_debug2_prints_kernel_time():
    code = "from tinygrad import Tensor; (Tensor.ones(1 << 20).contiguous() * 3).realize()"
    env = {**os.environ, "CUDA": "1", "DEBUG": "2"}
    env.pop("CLANG", None)
    env.pop("CPU", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "CUDA" in line and " tm " in line]
    assert lines, out.stdout
    ms = float(lines[-1].split(" tm ")[1].split()[0])
    assert 0 < ms < 1000


def test_linearizer_options_describe_the_gpu(dev):
    opts = dev.linearizer_opts
    assert opts.has_local and opts.has_shared and opts.device == "CUDA"
    assert opts.global_max[0] >= 2**31 - 1 and opts.local_max[0] >= 1024


def test_device_names(dev):
    assert dev._dev.name == "CUDA" and dev.arch.startswith("sm_")
    with pytest.raises(ValueError, match="no GPU CUDA:99"):
        _cuda.Device(99)


# --- TMA (Hopper) -----------------------------------------------------------------------------------------------


def _tma_configs() -> list[int]:
    from tinygrad.codegen.tensor_cores import TC_CONFIGS
    return [i for i, c in enumerate(TC_CONFIGS) if c.tma]


needs_tma = pytest.mark.skipif(
    _why is not None or not _nvrtc() or "tma" not in Device["CUDA"].linearizer_opts.tensor_cores,
    reason="needs a Hopper GPU (TMA) and NVRTC")


@needs_tma
@pytest.mark.parametrize("cfg", _tma_configs() if _why is None else [])
def test_tma_matmuls_match_the_plain_kernel(cfg):
    # both layouts of B, sizes no tile divides (the boxes read zeros past the ends), more steps of K than stages; a
    # cluster of two needs an even number of row tiles (M 500: 4 of 128, 2 of 256)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "unit"))
    from opts_on_device import run_with_opts

    from tinygrad.codegen.kernel import Opt, OptOps
    r = rng(cfg)
    a, b, w = (r.standard_normal(s).astype(np.float16) for s in ((500, 1088), (1088, 200), (264, 1088)))
    af = a.astype(np.float32)
    for t, want in ((Tensor(a, device="CUDA") @ Tensor(b, device="CUDA"), af @ b.astype(np.float32)),
                    (Tensor(a, device="CUDA") @ Tensor(w, device="CUDA").T, af @ w.astype(np.float32).T)):
        (got, lin), (plain, _) = run_with_opts(t, [Opt(OptOps.TC, 0, cfg)], [])
        assert lin.tc is not None and lin.tc.config.tma
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=0.25)
        np.testing.assert_allclose(got, plain, rtol=2e-2, atol=0.25)


@needs_tma
def test_tma_kernel_replays_with_new_buffers(monkeypatch):
    # the tensor maps describe the buffers: a JIT replay with other inputs re-encodes them (else it would read the
    # first call's)
    import tinygrad.codegen.heuristic_gpu as hg
    cfg = _tma_configs()[0]
    monkeypatch.setattr(hg, "TC_PREFERENCE", (cfg,) + hg.TC_PREFERENCE)
    f = TinyJit(lambda x, y: (x @ y).realize())
    for i in range(4):
        a = rng(i).standard_normal((384, 832)).astype(np.float16)
        b = rng(i + 9).standard_normal((832, 328)).astype(np.float16)
        got = f(Tensor(a, device="CUDA").realize(), Tensor(b, device="CUDA").realize()).numpy().astype(np.float32)
        np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2, atol=0.25)
