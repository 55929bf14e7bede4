"""Tests of the CPU runtime module tinygrad.runtime._cpu (runtimes/cpu, csrc/runtime.h).

Kernels are small C functions built with the system C compiler, loaded from their bytes and called through the
C++ call thunks (no ctypes). Allocation and loading failures come from the fault-injecting HostOS of test/native,
plugged in through _cpu.set_host_os.
"""

import functools
import os
import shutil
import subprocess
import tempfile

import native_doubles
import numpy as np
import pytest

from tinygrad.runtime import _cpu

CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")

SOURCE = r"""
#include <stdint.h>
void add(float *a, float *b, float *c) { *a = *b + *c; }
void E_4(float* restrict data0, const float* restrict data1, const float* restrict data2, int n) {
  for (int i = 0; i < n; i++) data0[i] = data1[i] + data2[i];
}
void scale(float* restrict out, const float* restrict in, int n, int k) {
  for (int i = 0; i < n; i++) out[i] = in[i] * (float)k;
}
void ints(int64_t *out, int a, long long b, unsigned int c, int64_t d) {
  out[0] = a; out[1] = b; out[2] = c; out[3] = d;
}
void fill_bytes(unsigned char *out, int n, int v) { for (int i = 0; i < n; i++) out[i] = (unsigned char)v; }
"""


def many_args_source(nints: int) -> str:
    # out[0] = sum((i + 1) * a_i): weights make the order of the arguments observable, not just their sum.
    params = ", ".join(f"int a{i}" for i in range(nints))
    body = " + ".join(f"{i + 1}LL * a{i}" for i in range(nints))
    return f"void many_{nints}(long long *out, {params}) {{ out[0] = {body}; }}\n"


@functools.cache
def compile_c(src: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.so")
        subprocess.run([CC, "-shared", "-fPIC", "-O2", "-x", "c", "-", "-o", out], input=src.encode(), check=True)
        with open(out, "rb") as f:
            return f.read()


@pytest.fixture(scope="module")
def lib():
    return _cpu.Library(compile_c(SOURCE + many_args_source(39) + many_args_source(63) + many_args_source(64)))


@pytest.fixture
def faults():
    yield native_doubles.install_fault_host_os()
    native_doubles.uninstall_fault_host_os()


def f32(buf: _cpu.HostBuffer) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.float32)


# --- buffers ---------------------------------------------------------------------------------------------------


def test_abi_version():
    assert isinstance(_cpu.abi_version(), int) and _cpu.abi_version() >= 1


def test_hostbuffer_basics():
    buf = _cpu.HostBuffer(100)
    assert buf.nbytes == 100 and buf.ptr % 64 == 0 and not buf.freed
    mv = memoryview(buf)
    assert (mv.format, mv.readonly, mv.nbytes, mv.ndim) == ("B", False, 100, 1)
    mv[:3] = b"abc"
    out = bytearray(3)
    _cpu.copyout(out, buf)
    assert out == b"abc"


def test_zero_byte_buffers_are_distinct():
    a, b = _cpu.HostBuffer(0), _cpu.HostBuffer(0)
    assert a.nbytes == 0 and a.ptr != 0 and a.ptr != b.ptr
    assert memoryview(a).nbytes == 0


def test_numpy_view_is_zero_copy():
    buf = _cpu.HostBuffer(16)
    arr = np.frombuffer(buf, dtype=np.float32)
    arr[:] = [1, 2, 3, 4]
    assert arr.ctypes.data == buf.ptr
    out = np.empty(4, np.float32)
    _cpu.copyout(out, buf)
    np.testing.assert_array_equal(out, [1, 2, 3, 4])


def test_copyin_copyout_roundtrip():
    buf = _cpu.HostBuffer(32)
    src = np.arange(8, dtype=np.float32)
    _cpu.copyin(buf, src)
    _cpu.copyin(buf, b"\x00\x00\x80\x3f")  # a shorter source only overwrites its own length: 1.0f at index 0
    out = np.empty(8, np.float32)
    _cpu.copyout(out, buf)
    np.testing.assert_array_equal(out, [1, 1, 2, 3, 4, 5, 6, 7])


def test_copy_too_large_names_both_sizes():
    buf = _cpu.HostBuffer(8)
    with pytest.raises(ValueError, match=r"16 bytes.*8 bytes"):
        _cpu.copyin(buf, bytes(16))
    with pytest.raises(ValueError, match=r"12 bytes.*8 bytes"):
        _cpu.copyout(bytearray(12), buf)


def test_copyout_needs_writable_destination():
    with pytest.raises(BufferError):
        _cpu.copyout(b"\x00" * 4, _cpu.HostBuffer(4))


def test_use_after_free_raises(lib):
    buf = _cpu.HostBuffer(4)
    buf.free()
    buf.free()  # idempotent
    assert buf.freed and buf.nbytes == 4
    with pytest.raises(ValueError, match="freed"):
        _ = buf.ptr
    with pytest.raises(ValueError, match="freed"):
        memoryview(buf)
    with pytest.raises(ValueError, match="freed"):
        _cpu.copyin(buf, b"abcd")
    with pytest.raises(ValueError, match="freed"):
        _cpu.Program(lib, "add")(buf, np.zeros(1, np.float32), np.zeros(1, np.float32))


def test_free_while_viewed_raises_buffer_error():
    buf = _cpu.HostBuffer(4)
    arr = np.frombuffer(buf, dtype=np.uint8)
    with pytest.raises(BufferError):
        buf.free()
    del arr
    buf.free()
    assert buf.freed


# --- launches --------------------------------------------------------------------------------------------------


def test_add_hostbuffers(lib):
    a, b, c = _cpu.HostBuffer(4), _cpu.HostBuffer(4), _cpu.HostBuffer(4)
    f32(b)[0], f32(c)[0] = 2.0, 3.0
    _cpu.Program(lib, "add")(a, b, c)
    assert f32(a)[0] == 5.0


def test_rendered_kernel_with_numpy_args(lib):
    x, y = np.arange(4, dtype=np.float32), np.full(4, 10, np.float32)
    out = np.zeros(4, np.float32)
    _cpu.Program(lib, "E_4")(out, x, y, 4)
    np.testing.assert_array_equal(out, [10, 11, 12, 13])


def test_mixed_hostbuffer_and_numpy(lib):
    out = _cpu.HostBuffer(16)
    _cpu.Program(lib, "E_4")(out, np.ones(4, np.float32), np.arange(4, dtype=np.float32), 4)
    np.testing.assert_array_equal(f32(out), [1, 2, 3, 4])


def test_readonly_buffer_accepted_as_input(lib):
    src = np.arange(4, dtype=np.float32).tobytes()  # bytes: read-only
    out = np.zeros(4, np.float32)
    _cpu.Program(lib, "E_4")(out, src, src, 4)
    np.testing.assert_array_equal(out, [0, 2, 4, 6])


def test_int_args_sign_extended(lib):
    out = np.zeros(4, np.int64)
    _cpu.Program(lib, "ints")(out, -5, -(2**40), 2**32 - 1, -(2**63))
    assert out.tolist() == [-5, -(2**40), 2**32 - 1, -(2**63)]


def test_numpy_integer_scalars_are_ints(lib):
    out = np.zeros(4, np.int64)
    _cpu.Program(lib, "ints")(out, np.int32(-7), np.int64(8), True, np.uint8(9))
    assert out.tolist() == [-7, 8, 1, 9]


def test_forty_args_use_the_stack(lib):
    vals = [(-1) ** i * (i * 1000 + 7) for i in range(39)]
    out = np.zeros(1, np.int64)
    _cpu.Program(lib, "many_39")(out, *vals)
    assert out[0] == sum((i + 1) * v for i, v in enumerate(vals))


def test_sixty_four_args_is_the_limit(lib):
    out = np.zeros(1, np.int64)
    _cpu.Program(lib, "many_63")(out, *range(63))
    assert out[0] == sum((i + 1) * i for i in range(63))
    with pytest.raises(RuntimeError, match="65"):
        _cpu.Program(lib, "many_64")(out, *range(64))


def test_program_address_and_library_lifetime():
    lib = _cpu.Library(compile_c(SOURCE))
    prog = _cpu.Program(lib, "add")
    assert prog.address == lib.symbol("add") and prog.name == "add"
    del lib  # the program keeps the library loaded
    a, b = _cpu.HostBuffer(4), np.array([1.5], np.float32)
    prog(a, b, b)
    assert f32(a)[0] == 3.0


def test_bad_arguments(lib):
    prog = _cpu.Program(lib, "E_4")
    out = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"args\[3\]"):
        prog(out, out, out, "4")
    with pytest.raises(ValueError, match=r"args\[1\]"):
        prog(out, np.zeros((4, 4), np.float32)[:, 0], out, 4)  # not contiguous
    with pytest.raises(TypeError, match=r"args\[3\]"):
        prog(out, out, out, np.float32(4))
    with pytest.raises(ValueError, match="64 bits"):
        prog(out, out, out, 2**64)


# --- loading errors --------------------------------------------------------------------------------------------


def test_bad_image_raises_with_loader_text():
    with pytest.raises(RuntimeError, match="dlopen") as e:
        _cpu.Library(b"definitely not an ELF file")
    assert e.value.device == "CPU" and e.value.call == "dlopen" and e.value.driver_error


def test_missing_symbol_is_named(lib):
    with pytest.raises(RuntimeError, match="no_such_kernel"):
        lib.symbol("no_such_kernel")
    with pytest.raises(RuntimeError, match="no_such_kernel"):
        _cpu.Program(lib, "no_such_kernel")


# --- graphs ----------------------------------------------------------------------------------------------------


def test_graph_replay_and_set_arg(lib):
    x = np.arange(4, dtype=np.float32)
    tmp, out = _cpu.HostBuffer(16), np.zeros(4, np.float32)
    graph = _cpu.Graph()
    assert graph.add(_cpu.Program(lib, "E_4"), [tmp, x, x, 4]) == 0  # tmp = 2x
    assert graph.add(_cpu.Program(lib, "scale"), [out, tmp, 4, 3]) == 1  # out = 3 * tmp
    assert len(graph) == 2
    graph()
    np.testing.assert_array_equal(out, 6 * x)

    graph.set_arg(1, 3, -1)  # patch an int
    graph()
    np.testing.assert_array_equal(out, -2 * x)

    other = _cpu.HostBuffer(16)
    graph.set_arg(1, 0, other)  # patch a pointer: results now go to `other`
    out[:] = 0
    graph()
    np.testing.assert_array_equal(f32(other), -2 * x)
    assert not out.any()


def test_graph_set_arg_many_patches_every_slot(lib):
    x = np.arange(4, dtype=np.float32)
    a, b = np.zeros(4, np.float32), np.zeros(4, np.float32)
    graph = _cpu.Graph()
    graph.add(_cpu.Program(lib, "scale"), [a, x, 4, 3])
    graph.add(_cpu.Program(lib, "scale"), [b, x, 4, 5])
    graph.set_arg_many([0, 3, 1, 3], -2)  # one value for both launches' factor
    graph()
    np.testing.assert_array_equal(a, -2 * x)
    np.testing.assert_array_equal(b, -2 * x)
    with pytest.raises(ValueError, match="pairs"):
        graph.set_arg_many([0, 3, 1], 1)
    with pytest.raises(ValueError, match="out of range"):
        graph.set_arg_many([0, 3, 2, 3], 1)


def test_graph_set_arg_errors(lib):
    graph = _cpu.Graph()
    graph.add(_cpu.Program(lib, "E_4"), [np.zeros(4, np.float32)] * 3 + [4])
    with pytest.raises(ValueError, match="out of range"):
        graph.set_arg(1, 0, 4)
    with pytest.raises(ValueError, match="out of range"):
        graph.set_arg(0, 4, 4)
    with pytest.raises(ValueError, match="kind"):
        graph.set_arg(0, 3, np.zeros(4, np.float32))
    with pytest.raises(RuntimeError, match="65"):
        graph.add(_cpu.Program(lib, "many_64"), [0] * 65)


def test_graph_freed_buffer_raises_on_replay(lib):
    buf = _cpu.HostBuffer(16)
    graph = _cpu.Graph()
    graph.add(_cpu.Program(lib, "fill_bytes"), [buf, 16, 7])
    graph()
    assert bytes(memoryview(buf)) == b"\x07" * 16
    buf.free()
    with pytest.raises(ValueError, match="freed"):
        graph()
    with pytest.raises(ValueError, match="freed"):
        graph.add(_cpu.Program(lib, "fill_bytes"), [buf, 16, 7])


# --- fault injection (test/native's HostOS) ------------------------------------------------------------------


def test_injected_alloc_failure_is_memory_error(faults):
    faults.fail_next_alloc()
    with pytest.raises(MemoryError, match="1024 bytes") as e:
        _cpu.HostBuffer(1024)
    assert e.value.device == "CPU"
    assert _cpu.HostBuffer(1024).nbytes == 1024  # only the next one failed


def test_real_alloc_failure_is_memory_error():
    with pytest.raises(MemoryError):
        _cpu.HostBuffer(1 << 62)


def test_injected_load_failure_is_runtime_error(faults):
    image = compile_c(SOURCE)
    faults.fail_next_load(2)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="injected"):
            _cpu.Library(image)
    assert _cpu.Library(image).symbol("add") != 0


def test_buffers_survive_fault_hook_reset():
    buf = _cpu.HostBuffer(64)  # allocated by the real HostOS
    native_doubles.install_fault_host_os()
    other = _cpu.HostBuffer(64)  # allocated through the fault injector
    lib = _cpu.Library(compile_c(SOURCE))  # loaded through it: unloaded through it too, after the reset
    native_doubles.uninstall_fault_host_os()
    buf.free()
    other.free()
    del lib


# --- the surface every runtime shares (csrc/pybind_runtime.h) ---------------------------------------------------


def test_device_loads_programs_and_makes_graphs():
    dev = _cpu.Device()
    assert dev.name == "CPU"
    dev.synchronize()  # no queue: nothing to wait for
    prog = dev.load_program("add", compile_c(SOURCE))
    assert isinstance(prog, _cpu.Program) and prog.name == "add" and prog.device == "CPU"
    a, b = _cpu.HostBuffer(dev, 4), np.array([2.0], np.float32)
    assert prog.launch(None, None, False, a, b, b) is None
    seconds = prog.launch((1, 1, 1), None, True, a, b, b)  # dimensions accepted and ignored; wall time returned
    assert isinstance(seconds, float) and seconds >= 0 and f32(a)[0] == 4.0
    graph = dev.create_graph()
    assert isinstance(graph, _cpu.Graph)
    assert graph.add(prog, [a, b, a], (4, 1, 1), (1, 1, 1)) == 0
    graph.set_dims(0, (8,), None)  # CPU kernels loop: accepted, ignored
    graph.run()
    assert f32(a)[0] == 6.0 and len(graph) == 1
    with pytest.raises(ValueError, match="out of range"):
        graph.set_dims(1, None, None)


def test_integers_beyond_64_bits_are_value_errors_naming_the_argument(lib):
    prog, out = _cpu.Program(lib, "E_4"), np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"args\[3\]: integer does not fit in 64 bits"):
        prog(out, out, out, -(2**63) - 1)
    graph = _cpu.Graph()
    with pytest.raises(ValueError, match=r"args\[3\].*64 bits"):
        graph.add(prog, [out, out, out, 2**70])
    graph.add(prog, [out, out, out, 4])
    with pytest.raises(ValueError, match=r"args\[3\].*64 bits"):
        graph.set_arg(0, 3, 2**64)
    with pytest.raises(ValueError, match=r"global_size\[0\].*64 bits"):
        prog.launch((2**80,), None, False, out, out, out, 4)


def _kernel_fds() -> set[int]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "tinygrad-kernel" in os.readlink(f"/proc/self/fd/{fd}"):
                out.add(int(fd))
        except OSError:
            pass
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="memfd libraries need /proc")
def test_a_library_kept_loaded_past_its_unload_is_never_loaded_in_place_of_another():
    """glibc finds an already-loaded object by its path: a library loaded from /proc/self/fd/N that outlives dlclose
    (held by another dlopen of that path here; in the wild, a kernel the loader may not unload) must not be
    returned for the next library, which would then lack its own symbols."""
    import ctypes
    before = _kernel_fds()
    first = _cpu.Library(compile_c(SOURCE))
    (fd,) = _kernel_fds() - before
    held = ctypes.CDLL(f"/proc/self/fd/{fd}")  # a second reference to the same loaded object
    del first  # dlclose: the object stays loaded, held by ctypes
    other = _cpu.Library(compile_c(SOURCE.replace("add", "addtwo")))
    assert other.symbol("addtwo") != 0
    with pytest.raises(RuntimeError, match="addx|not found|undefined"):
        other.symbol("addx")
    del held
