"""The AMD runtime (runtimes/amd, tinygrad/runtime/ops_amd.py) against the fake KFD of test/native: discovery of
several GPU models, memory, the AQL queue, code-object loading, dispatches run by host twins and checked against
numpy, TinyJit through the prebuilt packet stream, and every injected fault raising a Python exception after which
the process keeps working, with no leaked mapping."""
import errno
import gc
import os
import shutil
import subprocess

import native_doubles
import numpy as np
import pytest
from amd_twin import _SIGNATURE

GPUS = ("gfx1100", "gfx90a", "gfx942")
ROOT = native_doubles.ROOT


@pytest.fixture(scope="module")
def kfd():
    if os.environ.get("AMD", "") not in ("", "0"):
        pytest.skip("AMD=1 runs the session on its own fake machine")
    if shutil.which("g++") is None:
        pytest.skip("host twins need g++")
    native_doubles.install_fake_kfd(GPUS)
    yield native_doubles.fake_kfd()
    native_doubles.uninstall_fake_kfd()


def _program(dev, src_fn, arch, grid=True):
    """(program, default dims) of the last kernel rendered for `src_fn()`, compiled as a host twin for `arch`
    (`grid=False`: the renderer's loop form, with the launch it was written for)."""
    from amd_twin import TwinCompiler
    from test_amd_render import _render_hip_specs
    spec = _render_hip_specs(src_fn(), grid=grid, wave=64 if arch.startswith("gfx9") else 32)[-1]
    image = TwinCompiler(arch).compile(spec.src)
    return dev.load_program(_SIGNATURE.search(spec.src).group(1), image), spec.launch


def test_module_imports_without_kfd_and_opening_names_it():
    from tinygrad.runtime import _amd
    if os.path.exists("/dev/kfd"):
        pytest.skip("this machine has a KFD")
    with native_doubles.real_amd_os():
        with pytest.raises(RuntimeError, match=r"open\(/dev/kfd\).*KFD.*ENOENT"):
            _amd.Device(0)
        with pytest.raises(RuntimeError, match="KFD"):
            _amd.discover()


def test_discovery_reads_every_gpu_model(kfd):
    from tinygrad.runtime import _amd
    gpus = _amd.discover()
    assert [g["gfx"] for g in gpus] == list(GPUS)
    assert [g["wave_size"] for g in gpus] == [32, 64, 64]
    assert [g["cu_count"] for g in gpus] == [96, 110, 304]
    assert [g["node"] for g in gpus] == [1, 2, 3]  # node 0 is the CPU
    assert all(g["lds_size_kb"] == 64 for g in gpus)
    assert _amd.gfx_name(90010) == "gfx90a" and _amd.gfx_name(110000) == "gfx1100"


def test_device_properties_and_shared_gpu(kfd):
    from tinygrad.runtime import _amd
    a, b = _amd.Device(1), _amd.Device(1)  # one GPU, one VM: the second shares it
    assert a.arch == "gfx90a" and a.wave_size == 64 and a.kfd_version == (1, 11)
    assert a.gpu_id == b.gpu_id and a.render_minor == 129
    with pytest.raises(RuntimeError, match="no AMD GPU 7"):
        _amd.Device(7)


@pytest.mark.parametrize("device", ["AMD", "AMD:1"])
def test_kernels_match_numpy_on_wave32_and_wave64(kfd, device):
    from tinygrad import Tensor
    r = np.random.default_rng(0)
    x = r.standard_normal((40, 300)).astype(np.float32)
    t = Tensor(x, device=device)
    np.testing.assert_allclose((t * 2 + 1).numpy(), x * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(t.max(axis=1).numpy(), x.max(axis=1))
    np.testing.assert_allclose(t.sum().numpy(), x.sum(), rtol=1e-4)
    big = r.standard_normal(1 << 17).astype(np.float32)
    np.testing.assert_allclose(Tensor(big, device=device).sum().numpy(), big.sum(), rtol=1e-4)  # grid reduction
    m1, m2 = r.standard_normal((64, 48)).astype(np.float32), r.standard_normal((48, 32)).astype(np.float32)
    np.testing.assert_allclose((Tensor(m1, device=device) @ Tensor(m2, device=device)).numpy(), m1 @ m2, rtol=1e-4,
                               atol=1e-4)
    h = r.standard_normal(1000).astype(np.float16)
    np.testing.assert_allclose((Tensor(h, device=device) * 3).numpy(), h * np.float16(3))


def test_ioctl_failures_name_the_ioctl_and_errno_and_leave_nothing(kfd):
    from tinygrad.runtime import _amd
    dev = _amd.Device(1)
    before = kfd.stats()
    kfd.fail_next(0x16, errno.ENOMEM)  # ALLOC_MEMORY_OF_GPU
    with pytest.raises(MemoryError, match="AMDKFD_IOC_ALLOC_MEMORY_OF_GPU.*ENOMEM"):
        _amd.DeviceBuffer(dev, 4096)
    kfd.fail_next(0x18, errno.EFAULT)  # MAP_MEMORY_TO_GPU
    with pytest.raises(RuntimeError, match="AMDKFD_IOC_MAP_MEMORY_TO_GPU.*EFAULT"):
        _amd.DeviceBuffer(dev, 4096)
    after = kfd.stats()
    for key in ("allocations", "gpu_mappings", "cpu_mappings"):
        assert after[key] == before[key], key  # the failed allocations were undone
    buf = _amd.DeviceBuffer(dev, 4096)  # and the next one works
    _amd.copyin(buf, np.arange(1024, dtype=np.float32))
    out = np.zeros(1024, np.float32)
    _amd.copyout(out, buf)
    np.testing.assert_array_equal(out, np.arange(1024, dtype=np.float32))


def test_out_of_vram_is_a_memoryerror(kfd):
    from tinygrad.runtime import _amd
    dev = _amd.Device(1)
    with pytest.raises(MemoryError, match="ALLOC_MEMORY_OF_GPU"):
        _amd.DeviceBuffer(dev, 1 << 40)


def test_queue_creation_failure_is_clean(kfd):
    from tinygrad.runtime import _amd
    gc.collect()
    before = kfd.stats()
    kfd.fail_next(0x02, errno.ENOSPC)  # CREATE_QUEUE
    with pytest.raises(RuntimeError, match="AMDKFD_IOC_CREATE_QUEUE.*ENOSPC"):
        _amd.Device(2)
    after = kfd.stats()
    for key in ("allocations", "gpu_mappings", "cpu_mappings", "queues", "events", "open_fds"):
        assert after[key] == before[key], key
    dev = _amd.Device(2)
    assert dev.arch == "gfx942"


def test_hung_queue_times_out_and_the_process_recovers(kfd):
    from tinygrad import Device, Tensor
    x = np.arange(4096, dtype=np.float32)
    t = Tensor(x, device="AMD:1").realize()
    Device["AMD:1"]._dev.timeout_ms = 200
    kfd.hang(True)
    try:
        y = (t * 3).realize()  # its doorbell is ignored: the packet stays in the ring
        with pytest.raises(RuntimeError, match="hung.*not done after 200 ms"):
            y.numpy()
    finally:
        kfd.hang(False)
        Device["AMD:1"]._dev.timeout_ms = 30000
    np.testing.assert_array_equal((t + 1).numpy(), x + 1)  # the next doorbell runs everything queued
    np.testing.assert_array_equal(y.numpy(), x * 3)


def test_dispatch_of_real_machine_code_is_reported(kfd):
    """A code object of real AMDGPU machine code (not a twin) loads, but the fake GPU cannot run it: the queue
    stops there, the wait times out, and the fake says why. The GPU is closed after, as a faulted queue would be."""
    from test_amd_render import _clang, _render_hip

    from tinygrad import Tensor
    from tinygrad.runtime import _amd
    from tinygrad.runtime.compiler_amd import AMDCompiler
    _clang("gfx942")
    src = _render_hip(Tensor.empty(64).realize() * 2, wave=64)[-1]
    dev = _amd.Device(2)
    prg = dev.load_program(_SIGNATURE.search(src).group(1), AMDCompiler("gfx942").code_object(src))
    bufs = [_amd.DeviceBuffer(dev, 256) for _ in range(2)]
    dev.timeout_ms = 100
    prg.launch((1, 1, 1), (64, 1, 1), False, *bufs)
    with pytest.raises(RuntimeError, match="hung"):
        dev.synchronize()
    assert "not a host twin" in kfd.stats()["last_error"]
    del prg, bufs, dev
    gc.collect()


def test_code_object_errors(kfd):
    from tinygrad.runtime import _amd
    dev = _amd.Device(0)
    with pytest.raises(RuntimeError, match="invalid AMDGPU code object: not an ELF"):
        dev.load_program("k", b"\0" * 128)

    def prg_src():
        from tinygrad import Tensor
        return Tensor.empty(64).realize() * 2
    with pytest.raises(RuntimeError, match="no kernel 'nope'.*E_"):
        from amd_twin import TwinCompiler
        from test_amd_render import _render_hip
        dev.load_program("nope", TwinCompiler("gfx1100").compile(_render_hip(prg_src())[-1]))
    other = _render_hip_lib("gfx90a", prg_src)
    with pytest.raises(RuntimeError, match="code object is for gfx90a, the GPU is gfx1100"):
        dev.load_program(other[1], other[0])


def _render_hip_lib(arch, fn):
    from amd_twin import TwinCompiler
    from test_amd_render import _render_hip
    src = _render_hip(fn())[-1]
    name = _SIGNATURE.search(src).group(1)
    return TwinCompiler(arch).compile(src), name


def test_launch_errors(kfd):
    from tinygrad import Tensor
    from tinygrad.runtime import _amd
    dev = _amd.Device(0)
    prg, dims = _program(dev, lambda: Tensor.empty(64).realize() * 2, "gfx1100")
    buf = _amd.DeviceBuffer(dev, 256)
    with pytest.raises(ValueError, match="workgroup"):
        prg.launch((1, 1, 1), (2048, 1, 1), False, buf, buf)
    with pytest.raises(ValueError, match="arguments"):
        prg.launch((1, 1, 1), (64, 1, 1), False, buf, buf, buf, buf)
    with pytest.raises(TypeError):
        prg.launch((1, 1, 1), (64, 1, 1), False, buf, np.zeros(4))


def test_tinyjit_replays_through_the_prebuilt_packet_stream(kfd):
    from tinygrad import Tensor, TinyJit
    from tinygrad.runtime import _amd
    from tinygrad.runtime.graph import NativeGraph

    @TinyJit
    def step(a, b):
        return ((a * b).relu() + a).sum(axis=1)

    r = np.random.default_rng(3)
    for i in range(5):
        x, y = r.standard_normal((16, 50)).astype(np.float32), r.standard_normal((16, 50)).astype(np.float32)
        doorbells, copies = kfd.stats()["doorbells"], kfd.stats()["sdma_doorbells"]
        out = step(Tensor(x, device="AMD"), Tensor(y, device="AMD")).numpy()
        np.testing.assert_allclose(out, (np.maximum(x * y, 0) + x).sum(axis=1), rtol=1e-5, atol=1e-5)
        if i >= 2:
            # a replay: one doorbell for the whole packet stream (the copies' waits ring nothing new); the copies
            # in and out are the SDMA queue's
            assert kfd.stats()["doorbells"] - doorbells == 1
            assert kfd.stats()["sdma_doorbells"] - copies == 3
    assert isinstance(step.graph, NativeGraph)
    native = [g for v in vars(step.graph).values() if isinstance(v, list) for g in v if isinstance(g, _amd.Graph)]
    assert native and all(g.replays >= 2 for g in native)


def test_no_mapping_is_leaked(kfd):
    from tinygrad import Tensor
    from tinygrad.runtime import _amd
    gc.collect()
    before = kfd.stats()
    dev = _amd.Device(2)
    prg, dims = _program(dev, lambda: Tensor.empty(1000).realize() + 1, "gfx942", grid=False)
    a, out = _amd.DeviceBuffer(dev, 4000), _amd.DeviceBuffer(dev, 4000)
    _amd.copyin(a, np.arange(1000, dtype=np.float32))
    g = _amd.Graph(dev)
    g.add(prg, [out, a], *dims)
    g()
    g()
    dev.synchronize()
    res = np.zeros(1000, np.float32)
    _amd.copyout(res, out)
    np.testing.assert_array_equal(res, np.arange(1000, dtype=np.float32) + 1)
    assert g.replays == 2 and dev.live_allocations == 2
    del prg, a, out, g, dev
    gc.collect()
    after = kfd.stats()
    for key in ("allocations", "gpu_mappings", "cpu_mappings", "queues", "events", "open_fds", "doorbell_pages"):
        assert after[key] == before[key], key


def test_kfd_abi_matches_the_kernel_header(tmp_path):
    """runtimes/amd/kfd_abi.h's layouts and request numbers against Linux's uapi header, where the machine has it
    (Debian: linux-libc-dev; its drm/drm.h include is stubbed, as libdrm-dev is not needed)."""
    if not os.path.exists("/usr/include/linux/kfd_ioctl.h") or shutil.which("g++") is None:
        pytest.skip("needs g++ and linux/kfd_ioctl.h")
    (tmp_path / "drm").mkdir()
    (tmp_path / "drm" / "drm.h").write_text("#include <linux/types.h>\n")
    checks = [("GetVersionArgs", "kfd_ioctl_get_version_args"), ("CreateQueueArgs", "kfd_ioctl_create_queue_args"),
              ("CreateEventArgs", "kfd_ioctl_create_event_args"), ("EventData", "kfd_event_data"),
              ("WaitEventsArgs", "kfd_ioctl_wait_events_args"),
              ("AllocMemoryArgs", "kfd_ioctl_alloc_memory_of_gpu_args"),
              ("MapMemoryArgs", "kfd_ioctl_map_memory_to_gpu_args"), ("AcquireVmArgs", "kfd_ioctl_acquire_vm_args")]
    requests = [("kGetVersion", "AMDKFD_IOC_GET_VERSION"), ("kCreateQueue", "AMDKFD_IOC_CREATE_QUEUE"),
                ("kDestroyQueue", "AMDKFD_IOC_DESTROY_QUEUE"), ("kCreateEvent", "AMDKFD_IOC_CREATE_EVENT"),
                ("kDestroyEvent", "AMDKFD_IOC_DESTROY_EVENT"), ("kWaitEvents", "AMDKFD_IOC_WAIT_EVENTS"),
                ("kAcquireVm", "AMDKFD_IOC_ACQUIRE_VM"), ("kAllocMemory", "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"),
                ("kFreeMemory", "AMDKFD_IOC_FREE_MEMORY_OF_GPU"), ("kMapMemory", "AMDKFD_IOC_MAP_MEMORY_TO_GPU"),
                ("kUnmapMemory", "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU")]
    src = ["#include <cstddef>", "#include <linux/kfd_ioctl.h>", '#include "kfd_abi.h"', "using namespace tg::amd;"]
    src += [f"static_assert(sizeof(kfd::{a}) == sizeof({b}), \"{a}\");" for a, b in checks]
    src += [f"static_assert(kfd::{a} == {b}, \"{a}\");" for a, b in requests]
    src += ["static_assert(offsetof(kfd::CreateQueueArgs, ctl_stack_size) == "
            "offsetof(kfd_ioctl_create_queue_args, ctl_stack_size), \"ctl\");",
            "static_assert(kfd::kMemUncached == KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED && "
            "kfd::kMemPublic == KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC, \"flags\");"]
    (tmp_path / "check.cpp").write_text("\n".join(src) + "\n")
    out = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", f"-I{tmp_path}", f"-I{ROOT / 'runtimes' / 'amd'}",
                          str(tmp_path / "check.cpp")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]


def test_memory_kinds(kfd):
    from tinygrad.runtime import _amd
    dev = _amd.Device(0)
    before = kfd.stats()
    vram, hidden = _amd.GpuMemory(dev, 10000), _amd.GpuMemory(dev, 4096, cpu_visible=False)
    gtt, user = _amd.GpuMemory(dev, 4096, "gtt", uncached=True), _amd.GpuMemory(dev, 8192, "userptr")
    assert vram.size == 12288 and vram.cpu == vram.va and vram.va % 4096 == 0  # GPU VA = CPU VA, whole pages
    assert hidden.cpu is None and gtt.cpu == gtt.va and user.cpu == user.va
    assert kfd.stats()["gpu_mappings"] == before["gpu_mappings"] + 4
    assert kfd.stats()["cpu_mappings"] == before["cpu_mappings"] + 2  # render-node views: VRAM (public) and GTT
    for m in (vram, gtt, user):
        import ctypes
        ctypes.memset(m.cpu, 7, m.size)
        assert ctypes.string_at(m.cpu + m.size - 1, 1) == b"\x07"
    with pytest.raises(ValueError, match="kind"):
        _amd.GpuMemory(dev, 4096, "sram")
    for m in (vram, hidden, gtt, user):
        m.free()
    with pytest.raises(ValueError, match="freed"):
        vram.va  # noqa: B018
    after = kfd.stats()
    assert (after["allocations"], after["gpu_mappings"], after["cpu_mappings"]) == \
        (before["allocations"], before["gpu_mappings"], before["cpu_mappings"])


def test_transfer_between_gpus(kfd):
    from tinygrad import Tensor
    x = np.arange(5000, dtype=np.float32)
    a = (Tensor(x, device="AMD") * 2).realize()
    b = a.to("AMD:1").realize()
    np.testing.assert_array_equal((b + 1).numpy(), x * 2 + 1)


def _fake_os(kfd):
    """The fake's OS table as callables (ctypes), to hand it arguments the runtime never would."""
    import ctypes

    def fn(*types):
        return ctypes.CFUNCTYPE(*types, use_errno=True)

    class Table(ctypes.Structure):
        _fields_ = [("self", ctypes.c_void_p),
                    ("open", fn(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int)),
                    ("close", fn(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)),
                    ("read", fn(ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)),
                    ("ioctl", fn(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p))]
    return Table.from_address(kfd.table())


def test_fake_checks_arguments_as_the_kernel_does(kfd):
    import ctypes
    t = _fake_os(kfd)
    fd = t.open(t.self, b"/dev/kfd", 2)
    assert fd >= 0
    try:
        def ioctl(nr, size, args, direction=3):
            request = (direction << 30) | (size << 16) | (ord("K") << 8) | nr
            ctypes.set_errno(0)
            return t.ioctl(t.self, fd, request, ctypes.byref(args)), ctypes.get_errno()

        class Alloc(ctypes.Structure):
            _fields_ = [("va", ctypes.c_uint64), ("size", ctypes.c_uint64), ("handle", ctypes.c_uint64),
                        ("mmap_offset", ctypes.c_uint64), ("gpu_id", ctypes.c_uint32), ("flags", ctypes.c_uint32)]
        version = (ctypes.c_uint32 * 2)()
        assert ioctl(0x01, 8, version, direction=2)[0] == 0 and list(version) == [1, 11]
        # the size encoded in the request must be the struct's
        assert ioctl(0x01, 16, version, direction=2) == (-1, errno.ENOTTY)
        gpu = native_doubles_gpu_id(kfd)
        vram, gtt = 1, 2
        bad = [Alloc(0x10000000, 4096, 0, 0, 0xdead, vram),         # no such GPU
               Alloc(0x10000000, 4096, 0, 0, gpu, vram | gtt),      # two memory kinds
               Alloc(0x10000000, 1000, 0, 0, gpu, vram),            # not whole pages
               Alloc(0x10000010, 4096, 0, 0, gpu, vram),            # unaligned address
               Alloc(0x10000000, 4096, 0, 0, gpu, gtt | (1 << 29))]  # PUBLIC is for VRAM only
        for args in bad:
            assert ioctl(0x16, 40, args) == (-1, errno.EINVAL), args.flags
        assert ioctl(0x17, 8, ctypes.c_uint64(12345), direction=1) == (-1, errno.EINVAL)  # FREE of no handle
        assert ioctl(0x40, 8, version) == (-1, errno.ENOTTY)  # an ioctl KFD 1.11 does not have
    finally:
        t.close(t.self, fd)
    assert t.open(t.self, b"/dev/nothing", 0) == -1 and ctypes.get_errno() == errno.ENOENT


def test_a_device_of_an_earlier_fake_machine_cannot_reach_the_next(kfd):
    """Each install is a new machine with its own OS table: a device some test kept alive across an install is not
    handed out again, and its calls fail cleanly (naming the ioctl and EBADF) without touching the new machine, even
    where its file, memory and queue numbers would match the new machine's."""
    from tinygrad.runtime import _amd
    old = _amd.Device(0)
    old_buf = _amd.DeviceBuffer(old, 4096)
    native_doubles.install_fake_kfd(GPUS)
    new = _amd.Device(0)
    buf = _amd.DeviceBuffer(new, 4096)
    before = kfd.stats()
    with pytest.raises(RuntimeError, match="AMDKFD_IOC_ALLOC_MEMORY_OF_GPU.*EBADF"):
        _amd.DeviceBuffer(old, 4096)
    del old_buf, old
    gc.collect()  # the old device frees its memory, destroys its queues and closes its files: none of them here
    after = kfd.stats()
    assert (after["allocations"], after["queues"], after["open_fds"], after["dispatches"]) == \
        (before["allocations"], before["queues"], before["open_fds"], before["dispatches"])
    x = np.arange(1024, dtype=np.float32)
    _amd.copyin(buf, x)
    y = np.empty_like(x)
    _amd.copyout(y, buf)
    np.testing.assert_array_equal(y, x)
    del buf, new
    gc.collect()


def native_doubles_gpu_id(kfd):
    from tinygrad.runtime import _amd
    return _amd.discover()[0]["gpu_id"]


def test_copies_go_through_sdma_in_staged_chunks(kfd):
    from tinygrad.runtime import _amd
    dev = _amd.Device(0)
    n = (9 << 20) // 4 + 3  # more than two 4 MiB staging chunks, not a whole number of them
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    a, b = _amd.DeviceBuffer(dev, x.nbytes), _amd.DeviceBuffer(dev, x.nbytes)
    with pytest.raises(ValueError, match="not host-visible"):
        memoryview(a)  # VRAM the CPU does not map: every copy is the DMA engine's
    copies = kfd.stats()["sdma_doorbells"]
    _amd.copyin(a, x)
    _amd.transfer(b, a, x.nbytes)
    out = np.empty_like(x)
    _amd.copyout(out, b)
    np.testing.assert_array_equal(out, x)
    assert kfd.stats()["sdma_doorbells"] - copies == 3 + 1 + 3
    assert kfd.stats()["last_error"] == "" or "host twin" in kfd.stats()["last_error"]


# every ioctl of opening a GPU, failed in turn (skip: how many of its calls succeed first); GET_VERSION is asked once
# per process's KFD, which the other devices of this module keep open
_OPEN_FAULTS = [(0x15, 0, "ACQUIRE_VM"), (0x16, 0, "ALLOC_MEMORY_OF_GPU"),
                (0x16, 5, "ALLOC_MEMORY_OF_GPU"), (0x18, 3, "MAP_MEMORY_TO_GPU"), (0x08, 0, "CREATE_EVENT"),
                (0x02, 0, "CREATE_QUEUE"), (0x02, 1, "CREATE_QUEUE")]


@pytest.mark.parametrize("nr,skip,name", _OPEN_FAULTS, ids=[f"{n}+{s}" for _, s, n in _OPEN_FAULTS])
def test_every_fault_while_opening_is_an_exception_and_leaves_nothing(kfd, nr, skip, name):
    from tinygrad.runtime import _amd
    gc.collect()
    before = kfd.stats()
    kfd.fail_next(nr, errno.EIO, 1, skip)
    with pytest.raises(RuntimeError, match=f"AMDKFD_IOC_{name}.*EIO"):
        _amd.Device(2)
    gc.collect()
    after = kfd.stats()
    for key in ("allocations", "gpu_mappings", "cpu_mappings", "queues", "events", "open_fds", "doorbell_pages"):
        assert after[key] == before[key], key
    dev = _amd.Device(2)  # the process keeps working
    assert dev.arch == "gfx942"
    del dev


def test_failed_wait_names_wait_events(kfd):
    from tinygrad import Device, Tensor
    t = Tensor(np.ones(64, np.float32), device="AMD:1").realize()
    kfd.hang(True)
    try:
        y = (t * 5).realize()
        kfd.fail_next(0x0C, errno.EINVAL)
        with pytest.raises(RuntimeError, match="AMDKFD_IOC_WAIT_EVENTS.*EINVAL"):
            Device["AMD:1"].synchronize()
    finally:
        kfd.hang(False)
    np.testing.assert_array_equal((t + 1).numpy(), np.full(64, 2, np.float32))
    np.testing.assert_array_equal(y.numpy(), np.full(64, 5, np.float32))


def test_ring_wraps_and_a_full_ring_waits(kfd):
    from tinygrad import Tensor
    from tinygrad.runtime import _amd
    dev = _amd.Device(0)
    prg, dims = _program(dev, lambda: Tensor.empty(64).realize() + 1, "gfx1100", grid=False)
    buf = _amd.DeviceBuffer(dev, 256)
    _amd.copyin(buf, np.zeros(64, np.float32))
    g = _amd.Graph(dev)
    g.add(prg, [buf, buf], *dims)  # in place: every replay adds one
    for _ in range(1500):  # past the 1024 slots of the ring
        g()
    out = np.zeros(64, np.float32)
    _amd.copyout(out, buf)
    np.testing.assert_array_equal(out, np.full(64, 1500, np.float32))
    dev.timeout_ms = 100
    kfd.hang(True)
    try:
        for _ in range(1024):  # fills the ring
            g()
        with pytest.raises(RuntimeError, match="hung"):
            g()  # no free slot, and nothing frees one
    finally:
        kfd.hang(False)
        dev.timeout_ms = 30000
    g()  # the doorbell runs the whole ring, then this one
    _amd.copyout(out, buf)
    np.testing.assert_array_equal(out, np.full(64, 1500 + 1024 + 1, np.float32))


def test_code_object_parser_refuses_malformed_files():
    import struct

    from amd_twin import code_object

    from tinygrad.runtime import _amd
    good = code_object("k", 16, "gfx1100", b"TGTWIN01" + bytes(16), True)
    co = _amd.parse_code_object(good)
    assert co["gfx"] == "gfx1100" and [k["name"] for k in co["kernels"]] == ["k"]
    assert co["kernels"][0]["entry_offset"] == 0x200 and co["kernels"][0]["wave32"]

    def patched(offset, fmt, value):
        b = bytearray(good)
        struct.pack_into(fmt, b, offset, value)
        return bytes(b)
    cases = {
        "e_machine is 62, not EM_AMDGPU": patched(18, "<H", 62),         # an x86-64 ELF
        "OS/ABI is 0, not AMDGPU_HSA": patched(7, "<B", 0),
        "not a little-endian ELF64": patched(4, "<B", 1),                # ELF32
        "section header": patched(40, "<Q", len(good) * 4),              # e_shoff past the end
        "lies outside the file": good[:len(good) - 100],                 # truncated section headers
        "not an ELF": b"MZ" + good[2:],
    }
    for message, image in cases.items():
        with pytest.raises(RuntimeError, match=message):
            _amd.parse_code_object(image)
    # a descriptor symbol that is not 64-byte aligned, or not 64 bytes
    sym = good.index(struct.pack("<IBBHQQ", 1, (1 << 4) | 1, 0, 1, 0x100, 64))
    with pytest.raises(RuntimeError, match="not 64-byte aligned"):
        _amd.parse_code_object(patched(sym + 8, "<Q", 0x108))
    with pytest.raises(RuntimeError, match="is not 64 bytes"):
        _amd.parse_code_object(patched(sym + 16, "<Q", 32))
    with pytest.raises(RuntimeError, match="no kernel descriptor"):
        _amd.parse_code_object(patched(sym + 4, "<B", 0))  # STT_NOTYPE: no .kd object left
