"""The CUDA runtime without a GPU: tinygrad.runtime._cuda against the fake driver and NVRTC of test/native (loaded by
path through the same dlopen code as libcuda.so.1, see native_doubles.py), the CUDA device's Python layer (ops_cuda,
graph_cuda) on top of it, and the ABI of the hand-written driver declarations against NVIDIA's headers where a
toolkit is installed.

The fake runs copies and launches only when something waits for them, so code that reads a staging buffer before
its copy has completed reads stale bytes here too. Kernels compute nothing: launches are checked by the bytes of
their packed arguments. Also here: the CUDA renderer (rendered kernels compile with NVRTC or nvcc where either is
installed) and the grid planning of tinygrad/codegen/gpu_dims.py. test/test_cuda_device.py runs the numbers on a GPU.
"""
import dataclasses
import gc
import hashlib
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import native_doubles
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from native_doubles import install_fake_cuda, uninstall_fake_cuda

from tinygrad.runtime import _cuda


class _FakeCuda:
    """The fake driver's API (native_doubles.fake_cuda()), built on first use rather than at import: the renderer
    tests below, and test_cuda_render_host importing them, need no fake."""

    def __getattr__(self, name):
        return getattr(native_doubles.fake_cuda(), name)


T = _FakeCuda()
ROOT = Path(__file__).resolve().parents[2]
KERNEL = 'extern "C" __global__ void __launch_bounds__(64) k(float* a, const float* b, int n, int m) { }\n'


@pytest.fixture
def fake():
    install_fake_cuda()
    yield T
    uninstall_fake_cuda()  # devices made in the test go first, while their driver still answers


@pytest.fixture
def dev(fake):
    return _cuda.Device(0)


def calls(prefix: str = "") -> list:
    return T.calls(prefix)


def names(prefix: str = "") -> list[str]:
    return [c[0] for c in T.calls(prefix)]


def program(dev, src: str = KERNEL, name: str = "k"):
    image, _ = _cuda.nvrtc_compile(src, name, ["--gpu-architecture=sm_90"])
    return _cuda.Program(dev, name, image)


# --- loading the driver -------------------------------------------------------------------------------------------


def test_module_imports_and_device_module_imports_without_gpu():
    code = "import tinygrad.runtime.ops_cuda as m; print(m.CUDADevice.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "CUDADevice", out.stderr


def test_missing_driver_library_is_named_with_dlerror():
    _cuda.use_driver_library("libtg-no-such-driver.so.1")
    try:
        with pytest.raises(RuntimeError, match="libtg-no-such-driver.so.1") as e:
            _cuda.driver_version()
        assert e.value.call == "dlopen" and "cannot open shared object file" in e.value.driver_error
    finally:
        _cuda.use_driver_library(None)


def test_a_library_without_the_bootstrap_entry_points_is_not_a_driver():
    _cuda.use_driver_library(_cuda.__file__)  # loads, but exports no cuGetProcAddress_v2
    try:
        with pytest.raises(RuntimeError, match="is not a CUDA 12\\+ driver") as e:
            _cuda.Device(0)
        assert e.value.call == "dlsym"
    finally:
        _cuda.use_driver_library(None)


def _have_driver() -> bool:
    try:
        _cuda.driver_version()
        return True
    except RuntimeError:
        return False


@pytest.mark.skipif(_have_driver(), reason="this machine has a CUDA driver")
def test_cuda_default_device_without_driver_names_libcuda():
    code = "from tinygrad import Tensor; Tensor([1.0, 2.0]).numpy()"
    env = {k: v for k, v in os.environ.items() if k not in ("CLANG", "CPU")}
    out = subprocess.run([sys.executable, "-c", code], env={**env, "CUDA": "1"}, capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode != 0
    assert "RuntimeError" in out.stderr and "libcuda.so.1" in out.stderr and "cannot open shared object" in out.stderr


def test_entry_points_resolved_at_pinned_version_with_legacy_stream(fake):
    _cuda.driver_version()  # the driver is loaded and resolved on first use
    lookups = {c[2]: c[1] for c in calls("cuGetProcAddress")}
    assert {"cuMemAlloc", "cuLaunchKernel", "cuGraphInstantiateWithFlags", "cuGraphExecKernelNodeSetParams",
            "cuEventElapsedTime", "cuStreamCreate"} <= set(lookups)
    assert not [s for s in lookups if s.endswith(("_v2", "_ptsz", "_ptds"))], "base names: the version picks the ABI"
    assert "cuGraphInstantiate" not in lookups  # that name resolves to a different signature
    for symbol, (version, flags) in lookups.items():
        assert flags == 1, f"{symbol}: CU_GET_PROC_ADDRESS_LEGACY_STREAM"
        # the optional ones at the version whose signature the table declares
        assert version == {"cuFuncGetParamInfo": 12040, "cuGraphAddDependencies": 12030}.get(symbol, 12000), symbol


def test_driver_older_than_12_is_refused_clearly():
    install_fake_cuda(driver_version=11080)
    try:
        with pytest.raises(RuntimeError, match=r"supports CUDA 11\.8; tinygrad needs CUDA 12\.0"):
            _cuda.Device(0)
    finally:
        uninstall_fake_cuda()


@pytest.mark.skipif(not Path("/usr/local/cuda/include/cudaTypedefs.h").exists() or shutil.which("c++") is None,
                    reason="needs the CUDA toolkit's headers and a C++ compiler")
def test_driver_declarations_match_cuda_headers():
    # signatures of every slot at the pinned version, constants, and the kernel-node struct layout
    out = subprocess.run(["c++", "-std=c++17", "-fsyntax-only", "-I/usr/local/cuda/include",
                          f"-I{ROOT / 'runtimes/cuda'}", str(ROOT / "test/native/abi_check.cpp")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]


# --- devices and errors ---------------------------------------------------------------------------------------------


def test_device_opens_primary_context_and_nonblocking_stream(fake):
    d = _cuda.Device(0)
    assert (d.name, d.arch, d.product_name, d.ordinal) == ("CUDA", "sm_90", "Fake GPU 0", 0)
    assert d.attribute(1) == 1024 and d.driver_version == 12080 and d.driver_source == str(native_doubles.build())
    assert "cuDevicePrimaryCtxRetain" in names() and "cuCtxCreate" not in names()
    assert [c[1] for c in calls("cuStreamCreate")] == [(1,)]  # CU_STREAM_NON_BLOCKING
    del d
    gc.collect()
    assert {"cuStreamDestroy", "cuDevicePrimaryCtxRelease"} <= set(names())


def test_device_arch_and_ordinals():
    install_fake_cuda(device_count=2, compute_capability=(8, 6))
    try:
        assert _cuda.Device(1).arch == "sm_86" and _cuda.Device(1).name == "CUDA:1"
        with pytest.raises(ValueError, match="no GPU CUDA:2: .* reports 2 GPU"):
            _cuda.Device(2)
    finally:
        uninstall_fake_cuda()


def test_driver_errors_carry_their_name_and_call(dev):
    T.fail_next("cuMemAlloc", "CUDA_ERROR_INVALID_VALUE")
    with pytest.raises(RuntimeError) as e:
        _cuda.DeviceBuffer(dev, 16)
    assert (e.value.device, e.value.call, e.value.driver_error) == ("CUDA", "cuMemAlloc_v2", "CUDA_ERROR_INVALID_VALUE")
    assert str(e.value).startswith("[CUDA] cuMemAlloc_v2:") and "(CUDA_ERROR_INVALID_VALUE)" in str(e.value)
    T.fail_next("cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(RuntimeError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        dev.synchronize()


# --- memory -------------------------------------------------------------------------------------------------------


def test_out_of_memory_is_memoryerror_and_the_process_keeps_working():
    install_fake_cuda(memory_bytes=1 << 20)
    try:
        d = _cuda.Device(0)
        with pytest.raises(MemoryError, match=r"allocating 2097152 bytes .*CUDA_ERROR_OUT_OF_MEMORY") as e:
            _cuda.DeviceBuffer(d, 2 << 20)
        assert (e.value.call, e.value.driver_error) == ("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY")
        assert _cuda.DeviceBuffer(d, 1000).ptr != 0
    finally:
        uninstall_fake_cuda()


def test_out_of_memory_frees_the_cache_and_retries():
    install_fake_cuda(memory_bytes=1 << 20)
    try:
        d = _cuda.Device(0)
        bufs = [_cuda.DeviceBuffer(d, 300_000) for _ in range(3)]
        for b in bufs:
            b.free()
        assert d.cached_bytes == 900_000 and not calls("cuMemFree")
        big = _cuda.DeviceBuffer(d, 500_000)  # only fits once the cached 900 kB go back to the driver
        assert big.ptr != 0 and len(calls("cuMemFree")) == 3 and d.cached_bytes == 0
    finally:
        uninstall_fake_cuda()


def test_freed_memory_is_reused_by_size(dev):
    a = _cuda.DeviceBuffer(dev, 1000)
    ptr = a.ptr
    a.free()
    assert _cuda.DeviceBuffer(dev, 1000).ptr == ptr and len(calls("cuMemAlloc")) == 1
    assert _cuda.DeviceBuffer(dev, 0).ptr not in (0, ptr)  # zero bytes still get an address of their own
    assert dev.free_cache() == 1000 + 1  # both temporaries went back to the cache; 0 bytes are held as 1


def test_freed_buffer_refuses_use(dev):
    b = _cuda.DeviceBuffer(dev, 8)
    b.free()
    with pytest.raises(ValueError, match="was freed"):
        _ = b.ptr
    with pytest.raises(ValueError, match="was freed"):
        _cuda.copyin(b, bytearray(8))


def _staged(slots: int, slot_bytes: int):
    return _cuda.Device(0, staging_slots=slots, staging_slot_bytes=slot_bytes)


def test_copyin_goes_through_pinned_slots_in_chunks(fake):
    d = _staged(3, 100)
    buf = _cuda.DeviceBuffer(d, 250)
    data = bytes(range(250))
    fake.clear_records()
    _cuda.copyin(buf, data)
    copies = calls("cuMemcpyHtoDAsync")
    assert [(c[1][0] - buf.ptr, c[1][2], c[1][4]) for c in copies] == [(0, 100, 1), (100, 100, 1), (200, 50, 1)]
    assert names("cuEventRecord") == ["cuEventRecord"] * 3 and d.pinned_staging_slots == 3
    assert fake.pending_ops() > 0, "copyin returns once the host bytes are staged, not when the DMA is done"
    d.synchronize()
    assert fake.read(buf.ptr, 250) == data


def test_a_slot_is_reused_only_after_its_copy_completed(fake):
    d = _staged(2, 100)
    buf = _cuda.DeviceBuffer(d, 450)
    data = np.random.default_rng(0).integers(0, 256, 450, dtype=np.uint8)
    fake.clear_records()
    _cuda.copyin(buf, data)
    order = [n for n in names() if n in ("cuMemcpyHtoDAsync", "cuEventSynchronize")]
    assert order == ["cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync"] + ["cuEventSynchronize", "cuMemcpyHtoDAsync"] * 3
    out = np.zeros_like(data)
    _cuda.copyout(out, buf)  # ordered after the copyin on the stream, through the same two slots
    np.testing.assert_array_equal(out, data)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(slots=st.integers(1, 4), slot_bytes=st.integers(1, 64), sizes=st.lists(st.integers(0, 300), min_size=1,
                                                                              max_size=4))
def test_staging_ring_roundtrips(slots, slot_bytes, sizes):
    install_fake_cuda()
    try:
        d = _staged(slots, slot_bytes)
        rng = np.random.default_rng(sum(sizes))
        bufs = [(_cuda.DeviceBuffer(d, n), rng.integers(0, 256, n, dtype=np.uint8)) for n in sizes]
        for buf, data in bufs:
            _cuda.copyin(buf, data)
        for buf, data in reversed(bufs):
            out = np.zeros_like(data)
            _cuda.copyout(out, buf)
            np.testing.assert_array_equal(out, data)
        assert all(c[1][-1] == 1 for c in calls("cuMemcpy") if c[0] != "cuMemcpyDtoDAsync"), "pinned host side"
    finally:
        uninstall_fake_cuda()


def test_large_chunks_are_copied_whole_by_the_copy_threads(fake):
    # chunks of 1 MiB and more are memcpy'd by a few threads, each a part: every byte lands once, in order, with
    # a length no thread count divides and a last chunk smaller than the rest
    d = _staged(2, 3 << 20)
    n = (7 << 20) + 13
    buf = _cuda.DeviceBuffer(d, n)
    data = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
    _cuda.copyin(buf, data)
    out = np.zeros_like(data)
    _cuda.copyout(out, buf)
    np.testing.assert_array_equal(out, data)


def test_transfer_on_one_gpu(dev):
    a, b = _cuda.DeviceBuffer(dev, 64), _cuda.DeviceBuffer(dev, 64)
    _cuda.copyin(a, bytes(range(64)))
    _cuda.transfer(b, a, 64)
    assert names("cuMemcpyDtoDAsync") == ["cuMemcpyDtoDAsync"]
    dev.synchronize()
    assert T.read(b.ptr, 64) == bytes(range(64))
    with pytest.raises(ValueError, match="does not fit"):
        _cuda.transfer(b, a, 65)


def test_transfer_between_gpus_orders_both_streams():
    install_fake_cuda(device_count=2)
    try:
        d0, d1 = _cuda.Device(0), _cuda.Device(1)
        a, b = _cuda.DeviceBuffer(d0, 32), _cuda.DeviceBuffer(d1, 32)
        _cuda.copyin(a, bytes(range(32)))
        T.clear_records()
        _cuda.transfer(b, a, 32)
        seq = [n for n in names() if n in ("cuStreamWaitEvent", "cuMemcpyPeerAsync", "cuCtxEnablePeerAccess")]
        assert seq == ["cuStreamWaitEvent", "cuCtxEnablePeerAccess", "cuMemcpyPeerAsync", "cuStreamWaitEvent"]
        d1.synchronize()  # runs the copy, which first waits for d0's queued copyin
        assert T.read(b.ptr, 32) == bytes(range(32))
    finally:
        uninstall_fake_cuda()


# --- programs and launches ------------------------------------------------------------------------------------------


def test_arguments_packed_at_the_kernels_parameter_offsets(dev):
    prg = program(dev)
    assert prg.params == [(0, 8), (8, 8), (16, 4), (20, 4)] and prg.max_threads_per_block == 64
    a, b = _cuda.DeviceBuffer(dev, 16), _cuda.DeviceBuffer(dev, 16)
    prg.launch((3, 2, 1), (32, 1, 1), False, a, b, 7, -3)
    kernel, grid, block, args, from_graph = T.launches()[-1]
    assert (kernel, grid, block, from_graph) == ("k", (3, 2, 1), (32, 1, 1), False)
    assert args == struct.pack("<QQii", a.ptr, b.ptr, 7, -3)  # 24 bytes, no trailing padding


def test_padding_between_an_int_and_a_pointer(dev):
    prg = program(dev, 'extern "C" __global__ void k(int n, float* a) { }', "k")
    a = _cuda.DeviceBuffer(dev, 4)
    prg.launch(None, None, False, 5, a)
    assert prg.params == [(0, 4), (8, 8)] and T.launches()[-1][3] == struct.pack("<iiQ", 5, 0, a.ptr)


def test_packing_without_param_info_uses_natural_alignment():
    install_fake_cuda(driver_version=12020)  # before cuFuncGetParamInfo
    try:
        d = _cuda.Device(0)
        assert "cuFuncGetParamInfo" not in [c[2] for c in calls("cuGetProcAddress")]
        prg = program(d)
        assert prg.params is None
        a = _cuda.DeviceBuffer(d, 4)
        prg.launch(None, None, False, a, a, 1, 2)
        assert T.launches()[-1][3] == struct.pack("<QQii", a.ptr, a.ptr, 1, 2)
    finally:
        uninstall_fake_cuda()


def test_bad_arguments_and_dimensions_are_refused(dev):
    prg = program(dev)
    a = _cuda.DeviceBuffer(dev, 4)
    with pytest.raises(ValueError, match="takes 4 argument"):
        prg.launch(None, None, False, a, a, 1)
    with pytest.raises(ValueError, match="32-bit int; 4294967296 does not fit"):
        prg.launch(None, None, False, a, a, 1, 2**32)
    with pytest.raises(ValueError, match="not a pointer"):
        prg.launch(None, None, False, a, a, a, 1)
    with pytest.raises(TypeError, match="DeviceBuffers and ints"):
        prg.launch(None, None, False, np.zeros(4), a, 1, 1)
    with pytest.raises(ValueError, match="allows at most 64"):
        prg.launch((1, 1, 1), (128, 1, 1), False, a, a, 1, 1)
    with pytest.raises(ValueError, match="between 1 and"):
        prg.launch((0, 1, 1), None, False, a, a, 1, 1)
    with pytest.raises(ValueError, match="more than 3"):
        prg.launch((1, 1, 1, 1), None, False, a, a, 1, 1)
    a.free()
    with pytest.raises(ValueError, match="was freed"):
        prg.launch(None, None, False, a, a, 1, 1)
    assert not T.launches()


def test_launch_errors_name_the_kernel_and_the_driver_error(dev):
    prg = program(dev)
    a = _cuda.DeviceBuffer(dev, 4)
    T.fail_next("cuLaunchKernel", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    with pytest.raises(RuntimeError, match=r"launching k with grid \(1, 1, 1\).*CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        prg.launch(None, None, False, a, a, 1, 1)
    with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_IMAGE") as e:
        _cuda.Program(dev, "k", b"not a cubin")
    assert e.value.call == "cuModuleLoadData"
    image, _ = _cuda.nvrtc_compile(KERNEL, "k", ["--gpu-architecture=sm_90"])
    with pytest.raises(RuntimeError, match="no kernel named 'nope'.*CUDA_ERROR_NOT_FOUND"):
        _cuda.Program(dev, "nope", image)


def test_timed_launch_returns_gpu_seconds_from_events(dev):
    prg = program(dev)
    a = _cuda.DeviceBuffer(dev, 4)
    assert prg.launch(None, None, False, a, a, 1, 1) is None
    secs = prg.launch(None, None, True, a, a, 1, 1)
    assert secs == pytest.approx(2e-6, rel=0.1)  # the fake's clock: 2 us per kernel
    assert {"cuEventRecord", "cuEventSynchronize", "cuEventElapsedTime"} <= set(names())


# --- graphs -------------------------------------------------------------------------------------------------------


def test_graph_is_built_once_then_patched_node_by_node(dev):
    prg = program(dev)
    a, b, c = (_cuda.DeviceBuffer(dev, 4) for _ in range(3))
    g = _cuda.Graph(dev)
    for i in range(3):
        assert g.add(prg, [a, b, i, 0], (1, 1, 1), (32, 1, 1)) == i
    g()
    assert names("cuGraph") == ["cuGraphCreate"] + ["cuGraphAddKernelNode"] * 3 + ["cuGraphInstantiateWithFlags",
                                                                                   "cuGraphLaunch"]
    nodes = calls("cuGraphAddKernelNode")
    assert [n[1][1] for n in nodes] == [0, 1, 1]  # a chain: each kernel after the one before
    T.clear_records()
    g()
    assert names("cuGraph") == ["cuGraphLaunch"], "nothing changed: no node updates"
    g.set_arg(1, 0, c)
    g.set_arg(2, 2, 2)  # the value it already has
    g()
    updates = calls("cuGraphExecKernelNodeSetParams")
    assert len(updates) == 1 and updates[0][3] == struct.pack("<QQii", c.ptr, b.ptr, 1, 0)
    assert g.instantiations == 1 and g.node_updates == 1
    g.set_dims(0, (4, 1, 1), (64, 1, 1))
    g()
    assert T.launches()[-3][1:3] == ((4, 1, 1), (64, 1, 1))


def test_graph_chains_kernels_that_wait_for_the_grid_programmatically(dev):
    # a kernel whose program starts with griddepcontrol.wait follows the one before it through a programmatic edge
    # (from that kernel's programmatic port), added on its own; the others keep plain edges
    waits, plain = program(dev), program(dev)
    waits.waits_for_grid = True
    a, b = _cuda.DeviceBuffer(dev, 4), _cuda.DeviceBuffer(dev, 4)
    g = _cuda.Graph(dev)
    assert not g.programmatic
    for prg in (waits, waits, plain, waits):
        g.add(prg, [a, b, 1, 0], (1, 1, 1), (32, 1, 1))
    g()
    assert g.programmatic_edges == 0 and not calls("cuGraphAddDependencies")  # off by default
    g.programmatic = True
    T.clear_records()
    g()
    nodes = [c[1] for c in calls("cuGraphAddKernelNode")]
    assert g.instantiations == 2 and [n[1] for n in nodes] == [0, 0, 1, 0]  # plain edges: the third kernel's only
    edges = [c[1] for c in calls("cuGraphAddDependencies")]
    assert len(edges) == 2 and g.programmatic_edges == 2
    assert all(e[1] == 1 and e[4:] == (1, 1) for e in edges)  # one edge each, type and port programmatic
    assert len(T.launches()) == 4
    T.clear_records()
    g.programmatic = True  # unchanged: no rebuild
    g()
    assert names("cuGraph") == ["cuGraphLaunch"]


def test_cuda_kernels_wait_for_the_grid_first_and_the_spec_says_so(cuda):
    from tinygrad import Tensor
    from tinygrad.renderer.cuda import GRID_WAIT
    from tinygrad.runtime.ops_cuda import CUDAProgram
    spec = _render_specs(Tensor.empty(4, 4).realize().exp2())[0]
    body = spec.src[spec.src.index("{", spec.src.index("__global__")) + 1:].lstrip()
    assert body.startswith("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900") and GRID_WAIT in body.split("\n")[1]
    lib = cuda.compiler.compile(spec.src)
    assert spec.waits_for_grid and CUDAProgram(cuda, "E_4_4", lib, spec).native.waits_for_grid
    assert not CUDAProgram(cuda, "E_4_4", lib).native.waits_for_grid  # no spec: nothing is assumed of the kernel


def test_graph_replay_launches_what_eager_launches(dev):
    prg = program(dev)
    bufs = [_cuda.DeviceBuffer(dev, 4) for _ in range(4)]
    plan = [((2, 1, 1), (16, 1, 1), [bufs[0], bufs[1], 3, 4]), ((1, 1, 1), (64, 1, 1), [bufs[2], bufs[3], -1, 9])]
    for grid, block, args in plan:
        prg.launch(grid, block, False, *args)
    eager = [launch[:4] for launch in T.launches()]
    T.clear_records()
    g = _cuda.Graph(dev)
    for grid, block, args in plan:
        g.add(prg, args, grid, block)
    g()
    assert [launch[:4] for launch in T.launches()] == eager and all(launch[4] for launch in T.launches())


def test_graph_refuses_misuse(fake):
    d0 = _cuda.Device(0)
    other = _cuda.Device(0)  # another device object: another context owner and stream
    prg, a = program(d0), _cuda.DeviceBuffer(d0, 4)
    g = _cuda.Graph(other)
    with pytest.raises(ValueError, match="is for device"):
        g.add(prg, [a, a, 1, 1])
    g = _cuda.Graph(d0)
    with pytest.raises(ValueError, match="takes 4 argument"):
        g.add(prg, [a, a, 1])
    g.add(prg, [a, a, 1, 1])
    with pytest.raises(ValueError, match="cannot change its kind"):
        g.set_arg(0, 2, a)
    with pytest.raises(ValueError, match="out of range"):
        g.set_arg(1, 0, a)
    with pytest.raises(TypeError, match="DeviceBuffers and ints"):
        g.set_arg(0, 0, bytearray(4))
    a.free()
    with pytest.raises(ValueError, match="was freed"):
        g()
    assert not calls("cuGraphLaunch")


def test_device_surface_shared_with_every_runtime(dev):
    image, _ = _cuda.nvrtc_compile(KERNEL, "k", ["--gpu-architecture=sm_90"])
    prg = dev.load_program("k", image)
    assert isinstance(prg, _cuda.Program) and (prg.name, prg.device, prg.num_regs) == ("k", "CUDA", 16)
    a = _cuda.DeviceBuffer(dev, 4)
    prg(a, a, np.int32(3), 4)  # the default dimensions (one thread), no wait; numpy integer scalars are ints
    assert T.launches()[-1][1:4] == ((1, 1, 1), (1, 1, 1), struct.pack("<QQii", a.ptr, a.ptr, 3, 4))
    graph = dev.create_graph()
    assert isinstance(graph, _cuda.Graph)
    graph.add(prg, [a, a, 1, 1])
    graph.run()
    dev.synchronize()
    assert len(calls("cuGraphLaunch")) == 1 and T.pending_ops() == 0


def test_integers_beyond_64_bits_are_value_errors_naming_the_argument(dev):
    prg, a = program(dev), _cuda.DeviceBuffer(dev, 4)
    with pytest.raises(ValueError, match=r"args\[3\]: integer does not fit in 64 bits"):
        prg.launch(None, None, False, a, a, 1, 2**64)
    g = _cuda.Graph(dev)
    with pytest.raises(ValueError, match=r"args\[2\].*64 bits"):
        g.add(prg, [a, a, -(2**64), 1])
    g.add(prg, [a, a, 1, 1])
    with pytest.raises(ValueError, match=r"args\[3\].*64 bits"):
        g.set_arg(0, 3, 2**100)
    with pytest.raises(ValueError, match=r"local_size\[0\].*64 bits"):
        g.set_dims(0, None, (2**64,))


# --- TMA tensor maps -----------------------------------------------------------------------------------------------

# a kernel as the code generator writes one for TMA: its ordinary parameters, then two CUtensorMaps (128 bytes,
# 64-byte aligned: the fake lays them out at 64 and 192)
TMAP_KERNEL = ('struct __align__(64) tg_tmap { unsigned long long v[16]; };\n'
               'extern "C" __global__ void __launch_bounds__(128) t(float* out, const float* a, int n, '
               'const __grid_constant__ tg_tmap m0, const __grid_constant__ tg_tmap m1) { }\n')
# map 0: a 2-D view of `a` (argument 1) starting 16 bytes in, 16-bit elements, 64-wide rows 256 bytes apart, a
# 64x16 box with the 128-byte swizzle; map 1: `out` (argument 0) as 1024 32-bit elements in boxes of 32
TMAPS = [(1, 16, 2, (64, 32), (256,), (64, 16), 128), (0, 0, 4, (1024,), (), (32,), 0)]
# the fake's CUtensorMap (fake_driver.h, FakeTensorMap): address, rank, data type, dims[5], strides[4], box[5],
# elementStrides[5], interleave, swizzle, L2 promotion, OOB fill
_FAKE_TMAP = struct.Struct("<QII5Q4Q5I5B4B11x")


def decoded_map(blob: bytes) -> dict:
    f = _FAKE_TMAP.unpack(blob)
    rank = f[1]
    return {"address": f[0], "rank": rank, "type": f[2], "dims": f[3:3 + rank], "strides": f[8:8 + rank - 1],
            "box": f[12:12 + rank], "elem_strides": f[17:17 + rank], "modes": f[22:26]}


def tma_program(dev):
    prg = program(dev, TMAP_KERNEL, "t")
    prg.set_tensor_maps(TMAPS)
    return prg


def encodes() -> list:
    return calls("cuTensorMapEncodeTiled")


def test_tensor_maps_are_encoded_from_the_buffers_into_their_parameters(dev):
    prg = program(dev, TMAP_KERNEL, "t")
    assert prg.params == [(0, 8), (8, 8), (16, 4), (64, 128), (192, 128)] and prg.tensor_maps == []
    prg.set_tensor_maps(TMAPS)
    assert prg.tensor_maps == TMAPS
    out, a = _cuda.DeviceBuffer(dev, 4096), _cuda.DeviceBuffer(dev, 16384)
    prg.launch((1, 1, 1), (128, 1, 1), False, out, a, 7)  # the ordinary arguments only
    packed = T.launches()[-1][3]
    assert len(packed) == 320 and packed[:20] == struct.pack("<QQi", out.ptr, a.ptr, 7) and packed[20:64] == bytes(44)
    m0, m1 = decoded_map(packed[64:192]), decoded_map(packed[192:320])
    # UINT16, the 128-byte swizzle (3), no interleave, L2 256B promotion (3), zeros out of bounds; element strides 1
    assert m0 == {"address": a.ptr + 16, "rank": 2, "type": 1, "dims": (64, 32), "strides": (256,), "box": (64, 16),
                  "elem_strides": (1, 1), "modes": (0, 3, 3, 0)}
    assert m1 == {"address": out.ptr, "rank": 1, "type": 2, "dims": (1024,), "strides": (), "box": (32,),
                  "elem_strides": (1,), "modes": (0, 0, 3, 0)}
    assert [c[1] for c in encodes()] == [(a.ptr + 16, 2, 1, 3), (out.ptr, 1, 2, 0)]
    # the same buffers again: nothing re-encoded; a new buffer for argument 1: its map only
    prg.launch((1, 1, 1), (128, 1, 1), False, out, a, 8)
    assert len(encodes()) == 2 and T.launches()[-1][3][64:] == packed[64:]
    b = _cuda.DeviceBuffer(dev, 16384)
    prg.launch((1, 1, 1), (128, 1, 1), False, out, b, 8)
    assert len(encodes()) == 3 and decoded_map(T.launches()[-1][3][64:192])["address"] == b.ptr + 16
    with pytest.raises(ValueError, match=r"takes 3 argument\(s\), got 5 \(its 2 tensor map\(s\) are encoded"):
        prg.launch(None, None, False, out, a, 7, 0, 0)


def test_graph_replays_re_encode_only_the_maps_of_replaced_buffers(dev):
    prg = tma_program(dev)
    out, a, b = _cuda.DeviceBuffer(dev, 4096), _cuda.DeviceBuffer(dev, 16384), _cuda.DeviceBuffer(dev, 16384)
    g = _cuda.Graph(dev)
    g.add(prg, [out, a, 7], (2, 1, 1), (128, 1, 1))
    g()
    node = calls("cuGraphAddKernelNode")[0][3]
    assert decoded_map(node[64:192])["address"] == a.ptr + 16 and decoded_map(node[192:])["address"] == out.ptr
    assert len(encodes()) == 2
    T.clear_records()
    g()
    assert not encodes() and names("cuGraph") == ["cuGraphLaunch"]
    g.set_arg(0, 1, b)  # the buffer map 0 describes
    g()
    assert [c[1][0] for c in encodes()] == [b.ptr + 16]
    update = calls("cuGraphExecKernelNodeSetParams")[0][3]
    assert update[:16] == struct.pack("<QQ", out.ptr, b.ptr) and decoded_map(update[64:192])["address"] == b.ptr + 16
    assert decoded_map(T.launches()[-1][3][64:192])["address"] == b.ptr + 16 and T.launches()[-1][4]
    T.clear_records()
    g.set_arg(0, 2, 9)  # an int: the maps stay as they were
    g()
    assert not encodes() and calls("cuGraphExecKernelNodeSetParams")[0][3][16:20] == struct.pack("<i", 9)
    # a multi-GPU graph packs its kernels the same way
    mg = _cuda.MultiGraph([dev])
    mg.add(prg, [out, a, 7], (1, 1, 1), (128, 1, 1))
    mg()
    assert decoded_map(T.launches()[-1][3][64:192])["address"] == a.ptr + 16


def test_a_misaligned_tensor_map_names_the_encoder_and_the_driver_error(dev):
    prg = program(dev, TMAP_KERNEL, "t")
    prg.set_tensor_maps([(1, 8, 2, (64, 32), (256,), (64, 16), 128), TMAPS[1]])  # 8 bytes into `a`
    out, a = _cuda.DeviceBuffer(dev, 4096), _cuda.DeviceBuffer(dev, 16384)
    with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_VALUE") as e:
        prg.launch(None, None, False, out, a, 7)
    assert e.value.call == "cuTensorMapEncodeTiled" and e.value.driver_error == "CUDA_ERROR_INVALID_VALUE"
    assert f"tensor map 0 of kernel t for address {hex(a.ptr + 8)}" in str(e.value)
    assert "arg=1 offset=8 elem=2 dims=64,32 strides=256 box=64,16 swizzle=128" in str(e.value)
    assert "16-byte-aligned" in str(e.value)
    with pytest.raises(RuntimeError, match="cuTensorMapEncodeTiled.*CUDA_ERROR_INVALID_VALUE"):
        _cuda.Graph(dev).add(prg, [out, a, 7])
    # strides must be multiples of 16 bytes; a swizzled box row must fit the swizzle
    for spec in [(1, 0, 2, (64, 32), (136,), (64, 16), 128), (1, 0, 2, (64, 32), (256,), (64, 16), 64)]:
        prg.set_tensor_maps([spec, TMAPS[1]])
        with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_VALUE"):
            prg.launch(None, None, False, out, a, 7)
    assert not T.launches()
    prg.set_tensor_maps(TMAPS)  # a failed encode is not cached as a good one
    prg.launch(None, None, False, out, a, 7)
    assert len(T.launches()) == 1


def test_tensor_map_specs_must_fit_the_kernel(dev):
    prg = program(dev, TMAP_KERNEL, "t")
    bad = {(1, 0, 2, (1,) * 6, (16,) * 5, (1,) * 6, 0): "1 to 5 dimensions",
           (1, 0, 2, (64, 32), (), (64, 16), 0): "rank 2 needs 1 stride",
           (1, 0, 2, (64, 32), (256,), (64,), 0): "rank 2 needs 2 box size",
           (1, 0, 2, (64, 32), (256,), (257, 1), 0): "box size must be 1 to 256",
           (1, 0, 2, (64, 0), (256,), (64, 1), 0): "each size must be 1",
           (1, 0, 3, (64, 32), (256,), (64, 16), 0): "element size must be 1, 2, 4 or 8",
           (1, 0, 2, (64, 32), (256,), (64, 16), 16): "swizzle must be 0, 32, 64 or 128",
           (2, 0, 2, (64, 32), (256,), (64, 16), 0): "argument 2 is a 4-byte value, not a pointer",
           (3, 0, 2, (64, 32), (256,), (64, 16), 0): "argument 3 is not one of the kernel's 3 ordinary"}
    for spec, why in bad.items():
        with pytest.raises(ValueError, match=f"kernel t: tensor map 0 .*{why}"):
            prg.set_tensor_maps([spec, TMAPS[1]])
    with pytest.raises(ValueError, match="parameter 2 is 4 bytes at offset 16, not a 128-byte CUtensorMap"):
        prg.set_tensor_maps(TMAPS + [TMAPS[1]])
    with pytest.raises(ValueError, match="parameter 3 is 4 bytes"):
        program(dev).set_tensor_maps([TMAPS[1]])  # KERNEL has no tensor-map parameter
    assert prg.tensor_maps == []  # nothing half set
    prg.set_tensor_maps(TMAPS)
    prg.set_tensor_maps([])  # none again: the kernel takes 5 ordinary arguments, which it cannot be given
    with pytest.raises(ValueError, match="takes 5 argument"):
        prg.launch(None, None, False, _cuda.DeviceBuffer(dev, 64), 0, 0)


def test_tensor_maps_need_the_drivers_parameter_layout():
    # a 64-byte aligned parameter's offset depends on where the driver's parameter space starts (the H100 put one
    # at offset 48 after three pointers): without cuFuncGetParamInfo the maps have no known place
    install_fake_cuda(driver_version=12020)  # before cuFuncGetParamInfo
    try:
        prg = program(_cuda.Device(0), TMAP_KERNEL, "t")
        assert prg.params is None
        with pytest.raises(ValueError, match=r"takes TMA tensor maps, but the CUDA driver .*12.2.* does not report "
                                             r"kernel parameter layouts \(cuFuncGetParamInfo, CUDA 12.4\+\)"):
            prg.set_tensor_maps(TMAPS)
    finally:
        uninstall_fake_cuda()


def test_a_tensor_maps_argument_must_be_a_buffer(dev):
    prg = program(dev, TMAP_KERNEL, "t")
    prg.set_tensor_maps(TMAPS)
    with pytest.raises(ValueError, match="tensor map 0 describes argument 1, which is not a buffer"):
        prg.launch(None, None, False, _cuda.DeviceBuffer(dev, 4096), 5, 7)


def test_a_driver_without_the_tensor_map_encoder_refuses_tma_kernels_clearly():
    install_fake_cuda(tensor_map=False)
    try:
        d = _cuda.Device(0)
        prg = program(d, TMAP_KERNEL, "t")
        why = r"kernel t takes TMA tensor maps, but the CUDA driver \(.*, CUDA 12\.8\) has no cuTensorMapEncodeTiled"
        with pytest.raises(RuntimeError, match=why + r": TMA kernels need CUDA 12\.0\+") as e:
            prg.set_tensor_maps(TMAPS)
        assert e.value.driver_error == "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND"
        prg.set_tensor_maps([])  # nothing to encode: fine
        k, a = program(d), _cuda.DeviceBuffer(d, 4)
        k.launch(None, None, False, a, a, 1, 2)  # other kernels launch as ever
        assert len(T.launches()) == 1
    finally:
        uninstall_fake_cuda()


# --- the CUDA device's Python layer on the fake ----------------------------------------------------------------------


@pytest.fixture
def cuda(fake, monkeypatch):
    """A CUDADevice on the fake driver, registered as "CUDA" for the test only (no disk cache, no leftovers)."""
    from tinygrad.device import Device
    from tinygrad.engine import realize
    from tinygrad.engine.plan import clear_plans
    from tinygrad.helpers import Context
    from tinygrad.runtime.ops_cuda import CUDADevice
    d = CUDADevice("CUDA")
    monkeypatch.setitem(Device._opened, "CUDA", d)
    with Context(CACHELEVEL=0):
        yield d
    for key in [k for k in realize.method_cache if k[0].startswith("CUDA")]:
        del realize.method_cache[key]
    clear_plans()


def test_tensors_copy_through_the_device_and_kernels_launch(cuda):
    from tinygrad import Tensor
    data = np.arange(6, dtype=np.float32)
    t = Tensor(data, device="CUDA").realize()
    np.testing.assert_array_equal(t.numpy(), data)
    T.clear_records()
    out = (t * 2).realize()
    kernel, grid, block, args, _ = T.launches()[-1]
    assert (kernel, grid, block) == ("E_6", (1, 1, 1), (6, 1, 1))  # the launch the linearizer planned
    assert args == struct.pack("<QQ", out.lazydata.base.realized._buf.ptr, t.lazydata.base.realized._buf.ptr)


def test_device_describes_the_gpu_to_the_code_generator(cuda):
    opts = cuda.linearizer_opts
    assert (opts.device, opts.has_local, opts.has_shared) == ("CUDA", True, True)
    assert opts.global_max == (2**31 - 1, 65535, 65535) and opts.local_max == (1024, 1024, 64)
    assert cuda.arch == "sm_90"


def test_allocator_caches_in_python_and_frees_after_queued_work(cuda):
    from tinygrad import dtypes
    from tinygrad.device import Buffer, LRUAllocator
    assert isinstance(cuda.allocator, LRUAllocator)
    buf = Buffer("CUDA", 1000, dtypes.float32).ensure_allocated()
    ptr = buf._buf.ptr
    del buf
    assert cuda.allocator.cached_bytes >= 4000
    assert Buffer("CUDA", 1000, dtypes.float32).ensure_allocated()._buf.ptr == ptr
    T.clear_records()
    cuda.allocator.free_cache()  # the C++ allocator does not cache for it: memory goes back to the driver
    assert names()[-2:] == ["cuStreamSynchronize", "cuMemFree"]


def test_buffers_and_transfer_through_the_allocator_interface(cuda):
    from tinygrad import dtypes
    from tinygrad.device import Buffer
    a, b = Buffer("CUDA", 10, dtypes.float32), Buffer("CUDA", 10, dtypes.float32)
    a.copyin(memoryview(np.arange(10, dtype=np.float32)))
    cuda.allocator.transfer(b.ensure_allocated()._buf, a._buf, 40)
    np.testing.assert_array_equal(np.frombuffer(b.as_buffer(), np.float32), np.arange(10, dtype=np.float32))


def test_compiler_options_cachekey_and_fallbacks(fake):
    from tinygrad.helpers import Context
    from tinygrad.runtime.ops_cuda import CUDACompiler
    c = CUDACompiler("sm_90")
    with Context(CACHELEVEL=0):
        c.compile_cached(KERNEL)
    assert calls("nvrtcCompileProgram")[-1][2] == "--gpu-architecture=sm_90 --minimal"
    assert c.cachekey.startswith("compile_cuda_sm_90_nvrtc13.0_") and c.cachekey.endswith("--minimal")
    newer = CUDACompiler("sm_95")  # unknown to this NVRTC: PTX for the newest it knows below, JIT-compiled at load
    newer.compile(KERNEL)
    assert newer.options[0] == "--gpu-architecture=compute_90" and newer.ptx
    with pytest.raises(RuntimeError, match="cannot compile for sm_70"):
        CUDACompiler("sm_70").compile(KERNEL)
    with pytest.raises(ValueError, match="look like 'sm_90'"):
        CUDACompiler("ampere")
    # the NVRTC library is in the key: the fake's "CUBINs" (source text) are never served to a real GPU
    library = hashlib.sha256(str(native_doubles.build()).encode()).hexdigest()[:16]
    assert library in c.cachekey


def test_compile_errors_carry_nvrtcs_log_and_the_source(fake):
    from tinygrad.device import CompileError
    from tinygrad.runtime.ops_cuda import CUDACompiler
    with pytest.raises(CompileError, match="NVRTC_ERROR_COMPILATION") as e:
        CUDACompiler("sm_90").compile(KERNEL + "#error something is off\n")
    assert "k.cu(2): error: something is off" in str(e.value) and "--- source ---" in str(e.value)


def test_compiled_lib_is_nvrtcs_image_and_the_launch_is_the_specs(cuda):
    from tinygrad.codegen.program import ProgramSpec
    lib = cuda.compiler.compile(KERNEL)
    assert lib == _cuda.nvrtc_compile(KERNEL, "k", cuda.compiler.options)[0]  # no header of tinygrad's
    spec = ProgramSpec("k", KERNEL, launch=[[5, 1, 1], (256, 1, 1)])  # any int sequences, kept as tuples
    assert spec.launch == ((5, 1, 1), (256, 1, 1)) and not spec.persistent and spec.dynamic_shared == 0
    assert str(spec) == KERNEL and hash(spec) == hash(ProgramSpec("k", KERNEL, launch=spec.launch))
    for bad in [((5, 1), (256, 1, 1)), ((0, 1, 1), (256, 1, 1))]:
        with pytest.raises(ValueError, match="a launch is a grid and a block of 3 sizes"):
            ProgramSpec("k", KERNEL, launch=bad)
    with pytest.raises(ValueError, match="at least 0 bytes"):
        ProgramSpec("k", KERNEL, dynamic_shared=-1)


def test_tensor_map_specs_validate_and_round_trip_through_the_cache_records():
    from tinygrad.codegen.program import ProgramSpec, TensorMapSpec
    from tinygrad.engine import records
    a = TensorMapSpec(1, 16, 2, [64, 32], [256], (64, 16), 128)  # any int sequences, kept as tuples
    b = TensorMapSpec(0, 0, 4, (1024,), (), (32,), 0)
    assert a.dims == (64, 32) and a.strides == (256,) and hash(a) == hash(TensorMapSpec(*dataclasses.astuple(a)))
    spec = ProgramSpec("t", TMAP_KERNEL, launch=((4, 1, 1), (128, 1, 1)), persistent=True, dynamic_shared=73728,
                       tensor_maps=(a, b), waits_for_grid=True)
    assert records.loads(records.dumps(spec)) == spec
    for args, why in [((0, 0, 3, (8,), (), (8,), 0), "element size"), ((0, 0, 4, (8, 8), (), (8, 8), 0), "1 stride"),
                      ((0, 0, 4, (8,), (), (512,), 0), "1 to 256"), ((0, 0, 4, (8,), (), (8,), 16), "swizzle must"),
                      ((0, 0, 4, (), (), (), 0), "rank must be 1 to 5")]:
        with pytest.raises(ValueError, match=why):
            TensorMapSpec(*args)
    # a record whose tensor map is malformed is not a kernel: the cache treats it as missing
    bad = records.dumps(spec).replace(b'"tmap",1,16,2', b'"tmap",1,16,3')
    with pytest.raises(records.RecordError):
        records.loads(bad)


def test_tma_kernels_compile_with_their_maps_and_launch_with_ordinary_arguments(cuda, fake):
    from tinygrad.codegen.program import ProgramSpec, TensorMapSpec
    from tinygrad.runtime.ops_cuda import CUDAProgram
    maps = tuple(TensorMapSpec(*m) for m in TMAPS)
    spec = ProgramSpec("t", TMAP_KERNEL, tensor_maps=maps)
    lib = cuda.compiler.compile(spec.src)
    prg = CUDAProgram(cuda, "t", lib, spec)
    assert prg.native.tensor_maps == [dataclasses.astuple(m) for m in maps] == TMAPS
    out, a = _cuda.DeviceBuffer(cuda._dev, 4096), _cuda.DeviceBuffer(cuda._dev, 16384)
    prg(out, a, global_size=(1, 1, 1), local_size=(128, 1, 1), vals=(7,))
    packed = fake.launches()[-1][3]
    assert packed[:20] == struct.pack("<QQi", out.ptr, a.ptr, 7)
    assert decoded_map(packed[64:192])["address"] == a.ptr + 16


def test_kernels_past_48kb_of_shared_memory_opt_in_and_launch_with_it(cuda, fake):
    from tinygrad.codegen.program import ProgramSpec
    from tinygrad.runtime.ops_cuda import CUDAProgram
    image, _ = _cuda.nvrtc_compile(KERNEL, "k", ["--gpu-architecture=sm_90"])
    dims = ((4, 1, 1), (64, 1, 1))
    prg = CUDAProgram(cuda, "k", image, ProgramSpec("k", KERNEL, launch=dims, dynamic_shared=96 * 1024))
    assert prg.native.dynamic_shared == 96 * 1024
    buf = _cuda.DeviceBuffer(cuda._dev, 64)
    prg(buf, buf, 3, 4)
    cuda.synchronize()
    assert calls("cuFuncSetAttribute")[-1][1][1:] == (8, 96 * 1024)  # MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert calls("cuLaunchKernel")[-1][1][7] == 96 * 1024  # sharedMemBytes
    # more than the device gives a block: the driver's own error, named
    with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_VALUE"):
        CUDAProgram(cuda, "k", image, ProgramSpec("k", KERNEL, launch=dims, dynamic_shared=300 * 1024))


def test_reductions_launch_what_the_gpu_holds_and_elementwise_kernels_their_whole_grid(cuda):
    from tinygrad.codegen.program import ProgramSpec
    from tinygrad.runtime.ops_cuda import CUDAProgram, resident_blocks
    # the fake GPU: sm_90, 132 multiprocessors, 16 registers a thread
    assert resident_blocks("sm_90", 132, 256, 16) == 132 * 8 and resident_blocks("sm_90", 132, 256, 40) == 132 * 6
    assert resident_blocks("sm_86", 84, 512, 64) == 84 * 2 and resident_blocks("sm_86", 84, 512, 32) == 84 * 3
    assert resident_blocks("sm_90", 132, 1024, 255) == 132  # at least one a multiprocessor
    image, _ = _cuda.nvrtc_compile(KERNEL, "k", ["--gpu-architecture=sm_90"])
    def spec(dims, persistent=False):
        return ProgramSpec("k", KERNEL, launch=dims, persistent=persistent)
    dims = ((2048, 1, 1), (256, 1, 1))
    assert CUDAProgram(cuda, "k", image, spec(dims, True)).default_dims == ((1056, 1, 1), (256, 1, 1))
    assert CUDAProgram(cuda, "k", image, spec(dims)).default_dims == dims
    small = ((40, 1, 1), (1024, 1, 1))
    assert CUDAProgram(cuda, "k", image, spec(small, True)).default_dims == small


def test_nvrtc_is_looked_for_by_soname_then_env(monkeypatch):
    from tinygrad.runtime.ops_cuda import nvrtc_candidates
    monkeypatch.delenv("NVRTC_PATH", raising=False)
    assert nvrtc_candidates()[:2] == ["libnvrtc.so.13", "libnvrtc.so.12"]
    monkeypatch.setenv("NVRTC_PATH", "/opt/nvrtc/libnvrtc.so.13")
    assert nvrtc_candidates() == ["/opt/nvrtc/libnvrtc.so.13"]


def test_debug2_times_each_kernel_with_events(cuda):
    from tinygrad import Tensor
    from tinygrad.helpers import Context
    t = Tensor(np.ones(4, np.float32), device="CUDA").realize()
    with Context(DEBUG=2):
        T.clear_records()
        (t + 1).realize()
    assert "cuEventElapsedTime" in names()


def test_cuda_graph_splits_captures_and_patches_inputs_and_variables(cuda, monkeypatch):
    from tinygrad import Tensor, TinyJit, Variable
    from tinygrad.runtime import graph_cuda
    monkeypatch.setattr(graph_cuda, "MAX_NODES", 4)

    def f(a, n):
        for _ in range(10):
            a = (a * 2 + n).contiguous()
        return a

    jf = TinyJit(f)
    for v in (1, 2):
        jf(Tensor(np.ones(8, np.float32), device="CUDA"), Variable("n", 0, 9).bind(v))
    assert graph_cuda.CUDAGraph.supports(jf.jit_cache) and not graph_cuda.CUDAGraph.supports([])
    graph = graph_cuda.CUDAGraph(jf.jit_cache, jf.input_replace)
    assert [len(g) for g in graph.graphs] == [4, 4, 2]
    x = Tensor(np.ones(8, np.float32), device="CUDA").realize()
    T.clear_records()
    graph([x.lazydata.base.realized], {Variable("n", 0, 9): 7})
    launched = T.launches()
    assert len(launched) == 10 and all(launch[4] for launch in launched)
    assert struct.unpack_from("<Q", launched[0][3], 8)[0] == x.lazydata.base.realized._buf.ptr  # the new input
    assert all(struct.unpack_from("<i", launch[3], 16)[0] == 7 for launch in launched)  # n, after 2 pointers
    T.clear_records()
    graph([x.lazydata.base.realized], {Variable("n", 0, 9): 7})
    assert not calls("cuGraphExecKernelNodeSetParams") and len(calls("cuGraphLaunch")) == 3
    # the fake GPU is sm_90: every kernel after a piece's first follows it programmatically
    assert all(g.programmatic for g in graph.graphs) and [g.programmatic_edges for g in graph.graphs] == [3, 3, 1]
    monkeypatch.setenv("CUDA_PDL", "0")
    assert not any(g.programmatic for g in graph_cuda.CUDAGraph(jf.jit_cache, jf.input_replace).graphs)



def test_cuda_graph_patches_symbolic_launch_sizes_only_when_they_change(cuda):
    # (the fake driver runs no kernels: what is checked is what each replay launches)
    from tinygrad import Tensor, TinyJit, Variable
    a = Tensor(np.arange(4096, dtype=np.float32), device="CUDA").realize()
    w = Variable("w", 1, 4096)
    jf = TinyJit(lambda a, w: (a.shrink(((0, w),)) * 2 + 1).realize())
    for n in (100, 200, 300):
        jf(a, w.bind(n))
    grids, patches = {}, {}
    for n in (1000, 3000, 3001):
        T.clear_records()
        jf(a, w.bind(n))
        (_, grid, block, _, from_graph), = T.launches()
        assert from_graph and grid[0] * block[0] * 4 >= n  # enough threads for n outputs (4 a thread at most)
        grids[n], patches[n] = grid, len(T.calls("cuGraphExecKernelNodeSetParams"))
    assert grids[3000] != grids[1000] and grids[3001] == grids[3000]
    assert patches[3001] == 1  # the variable's new value; the sizes, unchanged, are not resolved into a patch again


# --- the renderer ---------------------------------------------------------------------------------------------------


def _render_all(*tensors, grid: bool = True) -> list[str]:
    """The CUDA source of every kernel computing `tensors` (see _render_specs)."""
    return [spec.src for spec in _render_specs(*tensors, grid=grid)]


def _render_specs(*tensors, grid: bool = True) -> list:
    """The ProgramSpec of every kernel computing `tensors`, rendered for CUDA; `grid=False` leaves every kernel as
    loops for the renderer to spread over the GPU (its path for memory-bound reductions), so that path is tested on
    any kernel."""
    from tinygrad.codegen.kernel import LinearizerOptions
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule_with_vars
    from tinygrad.ops import BufferOps
    from tinygrad.renderer.cuda import CUDARenderer
    opts = LinearizerOptions("CUDA", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16)
    out = []
    for si in create_schedule_with_vars([t.lazydata for t in tensors])[0]:
        if si.ast[0].op is BufferOps.STORE:
            lin = Linearizer(si.ast, opts)
            lin.gpu = lin.gpu and grid
            lin.linearize()
            out.append(CUDARenderer(lin.name, lin.uops))
    return out


def _kernels() -> dict:
    from tinygrad import Tensor, Variable, dtypes
    a = Tensor.empty(40, 300).realize()
    v = Variable("width", 1, 300).bind(100)
    specs = {
        "elementwise": _render_specs(a * 2 + a.exp2()),
        "elementwise_loops": _render_specs(a * 2 + a.exp2(), grid=False),
        "reduce_rows": _render_specs(a.max(axis=1)),
        "reduce_all_big": _render_specs(Tensor.empty(1 << 17).realize().sum() / 2),
        "reduce_all_small": _render_specs(Tensor.empty(10).realize().sum()),
        "half": _render_specs((a.cast(dtypes.float16) * 3).sqrt(), grid=False),
        "bfloat16": _render_specs((a.cast(dtypes.bfloat16) + 1).cast(dtypes.float32)),
        "int_where": _render_specs(((a * 10).cast(dtypes.int32) % 7 < 3).where(a, -a)),
        "symbolic": _render_specs((Tensor.empty(40, 300).realize().shrink(((0, 40), (0, v))) * 2).sum(axis=1)),
        "bitcast": _render_specs(a.bitcast(dtypes.int32) + 1),
    }
    return {k: v[-1] for k, v in specs.items()}


@pytest.fixture(scope="module")
def kernel_specs():
    return _kernels()


@pytest.fixture(scope="module")
def kernels(kernel_specs):
    return {k: v.src for k, v in kernel_specs.items()}


def test_rendered_kernels_look_like_cuda(kernels, kernel_specs):
    g = kernels["elementwise"]  # the linearizer's grid: a thread per output, its launch given as data
    assert kernel_specs["elementwise"].launch is None
    assert 'extern "C" __global__ void __launch_bounds__(' in g and "exp2f(" in g
    # 4 floats a thread, moved 16 bytes at a time: 75 threads along a row of 300, 40 rows
    assert "if (idx0 >= 75) return;" in g and "int idx1 = blockIdx.y*blockDim.y+threadIdx.y;" in g
    assert "tg_vload<float, 4>(data1+" in g and "tg_vstore<float, 4>(data0+" in g
    e = kernels["elementwise_loops"]
    # the renderer's own plan for a loop-only kernel: 12000 outputs, 4 a vector: 12 blocks of 256 threads
    assert kernel_specs["elementwise_loops"].launch == ((12, 1, 1), (256, 1, 1))
    assert 'extern "C" __global__ void __launch_bounds__(256) E_40_300(float* __restrict__ data0, ' \
           'const float* __restrict__ data1)' in e
    assert "blockIdx.x*blockDim.x+threadIdx.x" in e and "gridDim.x*blockDim.x" in e and "exp2f(" in e
    # the contiguous load and store move 16 bytes at a time where both pointers are aligned, one element otherwise
    assert "*(const tg_vec<float, 4>*)(data1+" in e and "*(tg_vec<float, 4>*)(data0+" in e
    assert "((unsigned long long)(data1) & 15ull) == 0" in e and "data0[flat0] = tg_st0;" in e
    r = kernels["reduce_rows"]  # few outputs, rows of 75 vectors: a warp per row, combined by shuffles alone
    assert "tg_red" not in r and "__shfl_down_sync(0xffffffffu, acc0, tg_s)" in r
    assert "__syncthreads();" not in r and "if ((threadIdx.x&31) == 0) {" in r
    assert "blockIdx.x*(blockDim.x>>5)+(threadIdx.x>>5)" in r  # the warp's row
    assert "(data1+(ridx0*300))" in r  # each row's own offset, its alignment checked at run time
    assert "__uint_as_float(0xff800000u)" in r  # max starts at -inf
    assert "tg_max(" in r and r.count("!=") == 1  # in tg_max alone: each operand named once
    g = kernels["reduce_all_big"]  # one output: the whole grid, then the last block to finish
    assert "atomicAdd(&tg_done, 1u)" in g and "__threadfence();" in g and "tg_done = 0;" in g
    # 4 vectors a thread loaded before they are summed, each a constant of its own (the last ones clamped to the
    # thread's last vector, not branched around)
    assert all(f"const tg_vec<float, 4> tg_vl0_{k} = *(const tg_vec<float, 4>*)" in g for k in range(4))
    assert "const int tg_v0_3 = tg_v0+3*(" in g
    assert kernel_specs["reduce_all_small"].launch == ((1, 1, 1), (1, 1, 1))
    # reductions loop over their work in as many blocks as the GPU holds; elementwise kernels take their whole grid
    assert kernel_specs["reduce_all_big"].persistent and kernel_specs["reduce_rows"].persistent
    assert not kernel_specs["elementwise_loops"].persistent and not kernel_specs["reduce_all_small"].persistent
    h = kernels["half"]
    assert "unsigned short* __restrict__ data0" in h and "tg_f16_to_f32(" in h and "cvt.rn.f16.f32" in h
    assert "sqrtf(" in h and "tg_f16_round(" in h
    assert "tg_vec<unsigned short, 4>" in h  # 4 lanes: the float input is the widest buffer
    assert "tg_bf16_to_f32" in kernels["bfloat16"] or "tg_f32_to_bf16" in kernels["bfloat16"]
    assert "const int width" in kernels["symbolic"]
    assert "tg_bitcast<int>" in kernels["bitcast"]


def test_vectorising_needs_contiguous_ungated_access():
    from functools import partial

    from tinygrad import Tensor, dtypes
    _render_all = partial(globals()["_render_all"], grid=False)  # the renderer's plan, for every kernel here
    a = Tensor.empty(1000).realize()
    # a strided read, a transpose or an inner loop: a thread per element keeps neighbouring threads' reads together
    assert "tg_vec" not in _render_all(a[::2] + 1)[-1]
    assert "tg_vec" not in _render_all(Tensor.empty(64, 64).realize().permute(1, 0) + 1)[-1]
    assert "tg_vec" not in _render_all(Tensor.empty(64, 32).realize() @ Tensor.empty(32, 64).realize())[-1]
    flipped = _render_all(a.flip(0) * 2)[-1]  # read backwards, written forwards: the store moves whole vectors
    assert "*(const tg_vec" not in flipped and "*(tg_vec<float, 4>*)(data0" in flipped
    padded = _render_all(a.pad(((3, 5),)) + 1)[-1]  # gated loads stay in the body, one element at a time
    assert "*(const tg_vec" not in padded and "*(tg_vec<float, 4>*)(data0" in padded
    offset = _render_all(a[3:].sum())[-1]
    assert "((unsigned long long)(data1+3) & 15ull) == 0" in offset and "data1[flat0+3]" in offset
    # a buffer of 8-byte elements: 2 a vector, and the grid written for it
    wide = _render_specs(Tensor.empty(5000, dtype=dtypes.float64).realize() * 2, grid=False)[-1]
    assert "tg_vec<double, 2>" in wide.src and wide.launch[0] == (10, 1, 1)


def _compile_with():
    """A real CUDA compiler on this machine: ("nvrtc", None), ("nvcc", path) or None."""
    from tinygrad.runtime.ops_cuda import nvrtc_candidates
    try:
        _cuda.nvrtc_load(nvrtc_candidates())
        return ("nvrtc", None)
    except RuntimeError:
        nvcc = shutil.which("nvcc")
        return ("nvcc", nvcc) if nvcc else None


def test_rendered_kernels_compile(kernels, tmp_path):
    how = _compile_with()
    if how is None:
        pytest.skip("no NVRTC and no nvcc on this machine: the text checks above stand in")
    for name, src in kernels.items():
        if how[0] == "nvrtc":
            binary, _ = _cuda.nvrtc_compile(src, name, ["--gpu-architecture=sm_90"])
            assert binary[:4] == b"\x7fELF", name
        else:
            path = tmp_path / f"{name}.cu"
            path.write_text(src)
            out = subprocess.run([how[1], "-cubin", "-arch=sm_90", str(path), "-o", str(tmp_path / f"{name}.cubin")],
                                 capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, f"{name}:\n{out.stderr}\n{src}"


def test_specials_shared_memory_and_barriers_render():
    from tinygrad import Variable, dtypes
    from tinygrad.codegen.uops import UOp, UOps
    from tinygrad.dtype import PtrDType
    from tinygrad.ops import BinaryOps
    from tinygrad.renderer.cuda import CUDARenderer
    f32 = dtypes.float32
    out = UOp(UOps.DEFINE_GLOBAL, PtrDType(f32), (), (0, "data0", True))
    n = UOp(UOps.DEFINE_VAR, dtypes.int32, (), Variable("n", 1, 64))
    gidx = UOp(UOps.SPECIAL, dtypes.int32, (), (0, "gidx0", 4))
    lidx = UOp(UOps.SPECIAL, dtypes.int32, (), (1, "lidx1", 16))
    tmp = UOp(UOps.DEFINE_LOCAL, PtrDType(f32), (), ("temp", 16))
    alu = UOp(UOps.ALU, dtypes.int32, (gidx, n), BinaryOps.ADD)
    val = UOp(UOps.CAST, f32, (alu,))
    load = UOp(UOps.LOAD, f32, (tmp, lidx))
    uops = [out, n, gidx, lidx, tmp, alu, val, UOp(UOps.STORE, None, (tmp, lidx, val)), UOp(UOps.BARRIER), load,
            UOp(UOps.STORE, None, (out, gidx, load))]
    spec = CUDARenderer("k", uops)
    src = spec.src
    assert spec.launch is None  # the linearizer gives the launch sizes of SPECIAL kernels
    assert "__launch_bounds__(16)" in src and "int gidx0 = blockIdx.x;" in src and "int lidx1 = threadIdx.y;" in src
    assert "__shared__ __align__(16) float temp[16];" in src and "__syncthreads();" in src and "const int n" in src
    idx = UOp(UOps.SPECIAL, dtypes.int32, (), (0, "idx0", 1000, 256))
    one = UOp(UOps.CONST, f32, (), 1.0)
    guarded = CUDARenderer("g", [out, idx, one, UOp(UOps.STORE, None, (out, idx, one))]).src
    assert "int idx0 = blockIdx.x*blockDim.x+threadIdx.x;" in guarded and "if (idx0 >= 1000) return;" in guarded
    assert "__launch_bounds__(256)" in guarded
    extent = UOp(UOps.ALU, dtypes.int32, (n, UOp(UOps.CONST, dtypes.int32, (), 4)), BinaryOps.MUL)
    sym_idx = UOp(UOps.SPECIAL, dtypes.int32, (), (0, "idx0", extent, 128))
    sym = CUDARenderer("s", [out, n, extent.vin[1], extent, sym_idx, one,
                             UOp(UOps.STORE, None, (out, sym_idx, one))]).src
    assert "if (idx0 >= (n*4)) return;" in sym  # a symbolic extent: guarded by its value at run time
    with pytest.raises(NotImplementedError, match="barriers"):
        CUDARenderer("b", [out, idx, UOp(UOps.BARRIER)])


def test_constants_render_exactly():
    from tinygrad import dtypes
    from tinygrad.renderer.cuda import CUDALanguage
    lang = CUDALanguage()
    assert lang.render_const(float("inf"), dtypes.float32) == "__uint_as_float(0x7f800000u)"
    assert lang.render_const(float("-inf"), dtypes.float32) == "__uint_as_float(0xff800000u)"
    assert lang.render_const(float("nan"), dtypes.float16) == "__uint_as_float(0x7fc00000u)"
    assert lang.render_const(float("inf"), dtypes.float64) == "__longlong_as_double((long long)0x7ff0000000000000ull)"
    assert lang.render_const(0.1, dtypes.float16) == "0.0999755859375f"  # rounded to half before it is written
    assert lang.render_const(0.1, dtypes.bfloat16) == "0.10009765625f"
    assert lang.render_const(70000.0, dtypes.float16) == "__uint_as_float(0x7f800000u)"
    assert lang.render_const(-2.5, dtypes.float64) == "(-2.5)" and lang.render_const(True, dtypes.bool) == "1"


# --- grid planning (tinygrad/codegen/gpu_dims.py) --------------------------------------------------------------------


def _check_limits(plan, shape):
    from tinygrad.codegen.gpu_dims import CUDA_GLOBAL_MAX, CUDA_LOCAL_MAX
    from tinygrad.helpers import prod
    assert plan.threads <= 1024
    assert all(1 <= lc <= m for lc, m in zip(plan.local_size, CUDA_LOCAL_MAX))
    assert all(1 <= g <= m for g, m in zip(plan.global_size, CUDA_GLOBAL_MAX))
    assert prod(plan.extents) == prod(s for s in shape if s != 1)
    assert all(g * lc >= e for g, lc, e in zip(plan.global_size, plan.local_size, plan.extents))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 40), min_size=0, max_size=5).filter(lambda s: np.prod(s) <= 4000))
def test_grid_plan_covers_every_element_once(shape):
    from itertools import product

    from tinygrad.codegen.gpu_dims import plan_grid
    plan = plan_grid(shape)
    _check_limits(plan, shape)
    seen = []
    for block in product(*[range(g) for g in plan.global_size]):
        for thread in product(*[range(lc) for lc in plan.local_size]):
            idx = plan.index(block, thread)
            if idx is not None:
                seen.append(idx + (0,) * (len(shape) - len(idx)))
    assert sorted(seen) == sorted(product(*[range(s) for s in shape]))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 1 << 20), min_size=1, max_size=6))
def test_grid_plan_fits_the_limits_for_large_shapes(shape):
    from tinygrad.codegen.gpu_dims import plan_grid
    try:
        plan = plan_grid(shape)
    except ValueError as e:  # only when even x with 2**31-1 blocks cannot hold it
        assert "more than the limit" in str(e) and np.prod(shape, dtype=object) > (2**31 - 1) * 1024
        return
    _check_limits(plan, shape)


def test_grid_plan_details():
    from tinygrad import Variable
    from tinygrad.codegen.gpu_dims import plan_grid
    p = plan_grid((4, 1000, 3))
    assert p.global_size == (1, 20, 4) and p.local_size == (3, 50, 1) and p.guarded == (False, False, False)
    assert plan_grid((1000003,)).guarded == (True, False, False)  # a prime: no divisor, so a guard
    assert plan_grid((Variable("n", 1, 512), 8)).extents == (8, 512, 1)  # symbolic sizes plan at their maximum
    assert plan_grid((7, 70000, 9)).global_size[1] == 1, "y over 65535 blocks moves into x"
    with pytest.raises(ValueError, match="non-negative"):
        plan_grid((-1,))
    with pytest.raises(ValueError, match="more than the limit"):
        plan_grid((1000,), global_max=(2, 1, 1), local_max=(4, 1, 1))


# --- rendered kernels run on the host: a CUDA shim with a std::thread per GPU thread --------------------------------


def test_eager_grid_kernels_launch_from_the_plan_at_the_runners_sizes(cuda):
    # a kernel with fixed sizes and no variables is launched by the plan straight through the native launch bound to
    # its sizes (the runner binds the native Program's launch): same grid, block and arguments as the runner's own call
    from tinygrad import Tensor
    from tinygrad.engine.realize import lower_schedule_item
    from tinygrad.engine.schedule import create_schedule
    a = Tensor(np.ones(64, np.float32), device="CUDA").realize()
    ei = lower_schedule_item(create_schedule([(a * 1.0001 + 0.5).lazydata])[-1])
    assert ei.prg.fast_launch is not None and ei.prg.fast_launch.args[:2] == (tuple(ei.prg.global_size),
                                                                            tuple(ei.prg.local_size))
    for _ in range(3):  # the first schedules, the later ones run the cached plan
        T.clear_records()
        a = (a * 1.0001 + 0.5).realize()
        (kernel, grid, block, args, graph), = T.launches()
        assert grid == tuple(ei.prg.global_size) and block == tuple(ei.prg.local_size) and not graph
        assert struct.unpack_from("<Q", args, 0)[0] == a.lazydata.base.realized._buf.ptr
