"""The Metal runtime end to end against the fake Objective-C runtime and Metal framework of test/native: every message
the runtime sends is checked (receiver, argument classes, reference counts, autorelease pools), kernels rendered as MSL
run on the host (built by g++ against test/native/msl_host.h, threadgroups as fibers), results match numpy, nothing
leaks, and each injected Metal failure becomes a Python exception naming Metal's error while the process keeps
working."""
import gc

import native_doubles
import numpy as np
import pytest

from tinygrad.runtime import _metal


@pytest.fixture(scope="module")
def fake():
    if not native_doubles.install_fake_metal():
        pytest.skip("the fake Objective-C runtime needs x86-64 Linux and g++")
    yield native_doubles.fake_metal()
    native_doubles.uninstall_fake_metal()


@pytest.fixture
def F(fake):
    fake.clear_records()
    yield fake
    assert fake.violations() == []


ADD = """#include <metal_stdlib>
using namespace metal;
kernel void add(device float* out [[buffer(0)]], const device float* a [[buffer(1)]], constant int& n [[buffer(2)]],
uint3 tg_gid [[threadgroup_position_in_grid]], uint3 tg_lid [[thread_position_in_threadgroup]],
uint3 tg_bdim [[threads_per_threadgroup]], uint3 tg_gdim [[threadgroups_per_grid]]) {
  int i = tg_gid.x * tg_bdim.x + tg_lid.x;
  if (i < n) out[i] = a[i] + 1.0f;
}
"""


def _live(F) -> dict:
    gc.collect()
    return F.live_objects()


def test_runtime_launches_and_releases_everything_it_made(F):
    before = _live(F)
    dev = _metal.Device()
    assert dev.gpu_name == "Fake Apple GPU (host)" and dev.max_threadgroup_memory == 32768
    prg = dev.load_program("add", ADD.encode())
    assert prg.max_threads == 1024 and prg.simd_width == 32
    a, out = _metal.DeviceBuffer(dev, 400), _metal.DeviceBuffer(dev, 400)
    _metal.copyin(a, np.arange(100, dtype=np.float32))
    prg.launch((4, 1, 1), (32, 1, 1), False, out, a, 100)
    seconds = prg.launch((4, 1, 1), (32, 1, 1), True, out, a, 100)
    assert isinstance(seconds, float) and seconds > 0  # GPUEndTime - GPUStartTime
    res = np.zeros(100, np.float32)
    _metal.copyout(res, out)
    np.testing.assert_array_equal(res, np.arange(100) + 1)
    assert np.frombuffer(memoryview(out), np.float32)[:3].tolist() == [1.0, 2.0, 3.0]  # shared storage, in place
    assert [d[:3] for d in F.dispatches()] == [("add", (4, 1, 1), (32, 1, 1))] * 2
    # per launch objects (command buffers, encoders, strings) went with their autorelease pools
    live = _live(F)
    assert not {k for k in live if k in ("MTLCommandBuffer", "MTLComputeCommandEncoder", "NSError")}
    del prg, a, out, dev
    assert _live(F) == before  # the device, queue, buffers, library, function and pipeline were all released


def test_metallib_images_load_through_dispatch_data(F):
    dev = _metal.Device()
    prg = dev.load_program("add", b"MTLB" + ADD.encode())
    a, out = _metal.DeviceBuffer(dev, 16), _metal.DeviceBuffer(dev, 16)
    prg.launch((1, 1, 1), (4, 1, 1), True, out, a, 4)
    assert np.frombuffer(memoryview(out), np.float32).tolist() == [1.0] * 4
    del prg, a, out, dev
    assert "OS_dispatch_data" not in _live(F)


def test_bad_launches_are_python_errors(F):
    dev = _metal.Device()
    prg = dev.load_program("add", ADD.encode())
    out = _metal.DeviceBuffer(dev, 16)
    with pytest.raises(ValueError, match="2048 threads per threadgroup, but its pipeline allows 1024"):
        prg.launch((1, 1, 1), (2048, 1, 1), False, out, out, 4)
    with pytest.raises(ValueError, match="needs its grid and threadgroup sizes"):
        prg(out, out, 4)
    with pytest.raises(RuntimeError, match="MTLLibraryErrorFunctionNotFound"):
        dev.load_program("nope", ADD.encode())
    out.free()
    with pytest.raises(ValueError, match="freed"):
        prg.launch((1, 1, 1), (4, 1, 1), False, out, out, 4)


def test_injected_failures_name_metals_errors_and_the_process_goes_on(F):
    before = _live(F)
    dev = _metal.Device()
    with pytest.raises(RuntimeError, match=r"(?s)Compilation failed.*error: .*MTLLibraryErrorCompileFailure"):
        dev.check_source("kernel void broken( {")  # a real compile error, with the compiler's log
    F.fail_next("library")
    with pytest.raises(RuntimeError, match=r"(?s)injected compile failure.*MTLLibraryErrorCompileFailure"):
        dev.load_program("add", ADD.encode())
    F.fail_next("buffer")
    with pytest.raises(MemoryError, match="newBufferWithLength:options:"):
        _metal.DeviceBuffer(dev, 1 << 20)
    prg = dev.load_program("add", ADD.encode())
    a, out = _metal.DeviceBuffer(dev, 16), _metal.DeviceBuffer(dev, 16)
    F.fail_next("command_buffer", 3)
    with pytest.raises(RuntimeError, match=r"waitUntilCompleted: the GPU failed .*\(MTLCommandBufferErrorPageFault\)"):
        prg.launch((1, 1, 1), (4, 1, 1), True, out, a, 4)
    F.fail_next("command_buffer", 8)
    prg.launch((1, 1, 1), (4, 1, 1), False, out, a, 4)
    with pytest.raises(MemoryError, match="MTLCommandBufferErrorOutOfMemory"):
        dev.synchronize()
    # and everything still works
    prg.launch((1, 1, 1), (4, 1, 1), True, out, a, 4)
    assert np.frombuffer(memoryview(out), np.float32).tolist() == [1.0] * 4
    del prg, a, out, dev
    assert _live(F) == before  # the failed builds, buffers and command buffers left nothing behind


@pytest.mark.parametrize("icb", [True, False])
def test_graph_replays_as_one_command_buffer(F, icb):
    native_doubles.install_fake_metal(icb=icb)  # whether the GPU has compute ICBs is read when a device opens
    try:
        before = _live(F)
        dev = _metal.Device()
        assert dev.supports_icb == icb
        prg = dev.load_program("add", ADD.encode())
        bufs = [_metal.DeviceBuffer(dev, 16) for _ in range(4)]
        g = dev.create_graph()
        assert g.uses_icb == icb
        for i in range(3):
            g.add(prg, [bufs[i + 1], bufs[i], 4], (1, 1, 1), (4, 1, 1))
        committed = F.committed()
        g()
        dev.synchronize()
        assert F.committed() == committed + 1 and len({d[3] for d in F.dispatches()}) == 1
        assert np.frombuffer(memoryview(bufs[3]), np.float32).tolist() == [3.0] * 4
        g.set_arg(0, 1, bufs[3])  # the chain now starts from the last result: one command re-encoded
        g.set_arg(2, 2, 2)        # and its last launch covers two elements (an integer of the ICB's own buffer)
        g()
        dev.synchronize()
        assert np.frombuffer(memoryview(bufs[3]), np.float32).tolist() == [6.0, 6.0, 3.0, 3.0]
        assert F.committed() == committed + 2 and len(F.dispatches()) == 6
        del g, prg, bufs, dev
        assert _live(F) == before
    finally:
        native_doubles.install_fake_metal()


# ---- the METAL device: rendered MSL run on the host, against numpy ----
@pytest.fixture(scope="module")
def metal(fake):
    from tinygrad import Device
    return Device["METAL"]


def T(x):
    from tinygrad import Tensor
    return Tensor(x, device="METAL")


def test_ops_match_numpy(F, metal):
    r = np.random.default_rng(0)
    x, y = r.standard_normal((33, 65)).astype(np.float32), r.standard_normal((65, 17)).astype(np.float32)
    np.testing.assert_allclose((T(x) @ T(y)).numpy(), x @ y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose((T(x).exp() * 2 - T(x).abs().sqrt().relu()).numpy(),
                               np.exp(x) * 2 - np.sqrt(np.abs(x)), rtol=1e-5, atol=1e-6)
    big = r.random(70001).astype(np.float32)
    np.testing.assert_allclose(T(big).sum().numpy(), big.astype(np.float64).sum(), rtol=1e-5)
    m = r.standard_normal((40, 1001)).astype(np.float32)
    np.testing.assert_array_equal(T(m).max(axis=1).numpy(), m.max(axis=1))
    i = r.integers(-1000, 1000, 70001).astype(np.int64)
    assert T(i).sum().numpy() == i.sum()
    h = r.standard_normal(999).astype(np.float16)
    np.testing.assert_allclose((T(h) * 3 + 1).numpy(), h * np.float16(3) + np.float16(1), rtol=1e-3)
    names = {d[0] for d in F.dispatches()}
    assert any(n.startswith("r_") for n in names) and any(n.startswith("E_") for n in names)


def test_bfloat16_and_symbolic_sizes(F, metal):
    from tinygrad import Tensor, Variable, dtypes
    x = np.arange(64, dtype=np.float32) / 8
    out = (Tensor(x, device="METAL").cast(dtypes.bfloat16) * 3).cast(dtypes.float32).numpy()
    np.testing.assert_allclose(out, x * 3, rtol=1e-2)
    base = Tensor(np.arange(300, dtype=np.float32), device="METAL").realize()
    for n in (1, 7, 300):
        v = Variable("n", 1, 300).bind(n)
        np.testing.assert_array_equal((base.shrink(((0, v),)) * 2).numpy()[:n], np.arange(n) * 2)


def test_tinyjit_replays_through_the_graph(F, metal):
    from tinygrad import Tensor, TinyJit

    @TinyJit
    def step(a, b):
        return ((a + b) * 2).sum(axis=1).realize()
    r = np.random.default_rng(1)
    for k in range(4):
        a, b = r.random((8, 300)).astype(np.float32), r.random((8, 300)).astype(np.float32)
        ta, tb = Tensor(a, device="METAL").realize(), Tensor(b, device="METAL").realize()
        committed = F.committed()
        out = step(ta, tb)
        if k >= 2:  # captured at the second call: each replay is one command buffer
            assert F.committed() - committed == 1
        np.testing.assert_allclose(out.numpy(), ((a + b) * 2).sum(axis=1), rtol=1e-5)


def test_compile_errors_are_compile_errors(F, metal):
    from tinygrad.device import CompileError
    with pytest.raises(CompileError, match="MTLLibraryErrorCompileFailure"):
        metal.compiler.compile("kernel void x( {")


def test_repeated_work_holds_no_more_objects(F, metal):
    from tinygrad import Tensor, TinyJit
    x = np.arange(1000, dtype=np.float32)

    @TinyJit
    def step(a):
        return (a * 2 + 1).sum().realize()

    def work():
        t = Tensor(x, device="METAL")
        assert (t * 3).numpy()[5] == 15.0
        step(Tensor(x, device="METAL").realize()).numpy()
        metal.synchronize()
    for _ in range(3):
        work()  # warm up: kernels compiled, the JIT captured, the allocator's cache filled
    counts = _live(F)
    for _ in range(20):
        work()
    assert _live(F) == counts  # every command buffer, encoder, string and error of 20 rounds was released
    assert not {k for k in counts if k in ("MTLCommandBuffer", "MTLComputeCommandEncoder", "NSError")}


def test_page_aligned_host_memory_is_used_in_place(F):
    import mmap
    dev = _metal.Device()
    prg = dev.load_program("add", ADD.encode())
    page = mmap.PAGESIZE
    mem = mmap.mmap(-1, 2 * page)  # page-aligned, whole pages
    host = np.frombuffer(mem, np.float32)
    host[:] = np.arange(host.size)
    a = _metal.wrap_host(dev, mem)
    out = _metal.DeviceBuffer(dev, a.nbytes)
    prg.launch((host.size // 32, 1, 1), (32, 1, 1), True, out, a, host.size)
    np.testing.assert_array_equal(np.frombuffer(memoryview(out), np.float32), np.arange(host.size) + 1)
    prg.launch((host.size // 32, 1, 1), (32, 1, 1), True, a, out, host.size)  # and written in place
    np.testing.assert_array_equal(host, np.arange(host.size) + 2)
    with pytest.raises(ValueError, match="page boundary"):
        _metal.wrap_host(dev, bytearray(100))
    del a, out, prg, dev, host
    gc.collect()
    mem.close()  # the buffer's view of the memory was released with it


def test_the_fake_catches_broken_rules(F):
    """The checker itself: messages sent through the fake's own objc_msgSend with typed prototypes, as the runtime
    sends them, breaking one rule each."""
    import ctypes
    lib = ctypes.CDLL(str(native_doubles.build()))
    vp = ctypes.c_void_p
    get_class, sel = lib.objc_getClass, lib.sel_registerName
    get_class.restype, sel.restype = vp, vp
    get_class.argtypes, sel.argtypes = [ctypes.c_char_p], [ctypes.c_char_p]
    push, pop = lib.objc_autoreleasePoolPush, lib.objc_autoreleasePoolPop
    push.restype, pop.argtypes = vp, [vp]
    msg_addr = ctypes.cast(lib.objc_msgSend, vp).value
    send0 = ctypes.CFUNCTYPE(vp, vp, vp)(msg_addr)
    send1 = ctypes.CFUNCTYPE(vp, vp, vp, vp)(msg_addr)
    send_str = ctypes.CFUNCTYPE(vp, vp, vp, ctypes.c_char_p)(msg_addr)
    dev_fn = lib.MTLCreateSystemDefaultDevice
    dev_fn.restype = vp
    dev = dev_fn()
    q = send1(dev, sel(b"newCommandQueueWithMaxCommandBufferCount:"), 4)
    token = push()
    s = send_str(get_class(b"NSString"), sel(b"stringWithUTF8String:"), b"x")
    send1(dev, sel(b"newFunctionWithName:"), s)          # a device does not respond to it
    cb = send0(q, sel(b"commandBuffer"))
    enc = send0(cb, sel(b"computeCommandEncoder"))
    send1(enc, sel(b"setComputePipelineState:"), s)      # a string where a pipeline goes
    send0(cb, sel(b"commit"))                             # with the encoder still open
    pop(token)
    leaked = send_str(get_class(b"NSString"), sel(b"stringWithUTF8String:"), b"y")  # autoreleased with no pool
    send0(q, sel(b"release"))
    send0(q, sel(b"release"))                             # over-release: the queue is gone
    send0(dev, sel(b"release"))
    send0(leaked, sel(b"release"))
    broken = F.violations()
    F.clear_records()
    assert broken == [
        "MTLDevice does not respond to newFunctionWithName:",
        "setComputePipelineState: pipeline is a NSString, not the class expected",
        "commit with an encoder still open (no endEncoding)",
        "NSString autoreleased with no autorelease pool in place (it leaks)",
        "message release to a freed or unknown object",
    ]


def test_no_gpu_is_a_clear_error(F):
    F.uninstall()  # the libraries load, but MTLCreateSystemDefaultDevice finds no GPU
    try:
        with pytest.raises(RuntimeError, match=r"MTLCreateSystemDefaultDevice: Metal found no GPU"):
            _metal.Device()
    finally:
        native_doubles.install_fake_metal()


def test_kernel_timing_through_the_device_program(F, metal):
    from tinygrad import Tensor
    t = Tensor(np.ones(64, np.float32), device="METAL").realize()
    out = Tensor.empty(64, device="METAL").realize()
    src = ADD.replace("kernel void add", "kernel void add2")
    prg = metal.runtime("add2", metal.compiler.compile(src))
    seconds = prg(out.lazydata.buffer._buf, t.lazydata.buffer._buf, global_size=(2, 1, 1), local_size=(32, 1, 1),
                  vals=(64,), wait=True)
    assert isinstance(seconds, float) and seconds > 0
    assert out.numpy().tolist() == [2.0] * 64


def test_loop_kernels_fit_the_pipelines_thread_limit(F):
    """A pipeline may allow fewer threads per threadgroup than a kernel was written for (register-heavy kernels on
    a real GPU): the renderer's loop kernels are correct for any threadgroup of whole SIMD groups, so their launch
    is lowered to the pipeline's limit."""
    from tinygrad import Tensor
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule_with_vars
    from tinygrad.runtime.ops_metal import MetalDevice
    native_doubles.install_fake_metal(max_threads=256)
    try:
        dev = MetalDevice("METAL")  # a device of its own, on the fake with the lower limit
        x = np.arange(70001, dtype=np.float32)
        t = Tensor(x, device="METAL").sum()
        (si,) = [s for s in create_schedule_with_vars([t.lazydata])[0] if s.ast[0].op.name == "STORE"]
        lin = Linearizer(si.ast, dev.linearizer_opts)
        lin.linearize()
        spec = dev.renderer(lin.name, lin.uops)
        assert spec.launch[1] == (1024, 1, 1) and spec.persistent
        prg = dev.runtime(lin.name, dev.compiler.compile(spec.src), spec)
        assert prg.default_dims[1] == (256, 1, 1)
        out, inp = _metal.DeviceBuffer(dev.native, 4), _metal.DeviceBuffer(dev.native, x.nbytes)
        _metal.copyin(inp, x)
        prg(out, inp, wait=True)
        assert F.dispatches()[-1][2] == (256, 1, 1)
        np.testing.assert_allclose(np.frombuffer(memoryview(out), np.float32)[0], x.astype(np.float64).sum(),
                                   rtol=1e-6)
        del prg, out, inp, dev
    finally:
        native_doubles.install_fake_metal()


def test_kernels_compile_on_several_threads_at_once(F):
    """tinygrad compiles a schedule's new kernels in parallel: each thread's autorelease pool is its own."""
    from concurrent.futures import ThreadPoolExecutor
    dev = _metal.Device()
    before = _live(F)
    srcs = [ADD.replace("a[i] + 1.0f", f"a[i] + {k}.0f") for k in range(8)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(dev.check_source, srcs))
    assert _live(F) == before
