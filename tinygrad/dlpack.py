"""DLPack: tensors cross to and from PyTorch, numpy, JAX, CuPy... without a copy.

The protocol (https://dmlc.github.io/dlpack/latest/python_spec.html) hands over a PyCapsule named "dltensor" (or
"dltensor_versioned" for a consumer that asked for `max_version >= (1, 0)`) holding a DLManagedTensor: the data
pointer, device, dtype, shape and strides, plus a deleter the consumer calls when it is done. The consumer renames the
capsule "used_dltensor" (so the capsule's destructor knows not to call the deleter), and the producer's memory stays
alive until the deleter runs.

Here the C structs are ctypes Structures and the capsule is made and read through the Python C API (ctypes.pythonapi),
so nothing is compiled. Exported (`to_dlpack`): the record of every capsule handed out (the struct, its shape and
strides arrays and the tinygrad Buffer) waits in `_exports` until the consumer's deleter call, so the memory outlives
the Tensor. Imported (`from_dlpack`): the producer's pointer becomes a tinygrad Buffer whose allocator calls the
producer's deleter when the Buffer is freed.

Devices: the host (CLANG and CPU buffers: kDLCPU) and CUDA (kDLCUDA, the device pointer of the C++ runtime's
DeviceBuffer). The CUDA stream handshake: a consumer names its stream; tinygrad queues everything on one stream of
its own, so as a producer it waits for that stream's work (synchronize) before handing out a pointer; as a consumer it
names its own stream (the runtime's `Device.stream`) so the producer makes that stream wait for its work.
"""
from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from tinygrad.device import Allocator, Buffer, Device
from tinygrad.dtype import DType, dtypes
from tinygrad.helpers import prod
from tinygrad.lazy import LazyBuffer
from tinygrad.ops import LoadOps

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor

# DLDeviceType values (dlpack.h)
kDLCPU, kDLCUDA, kDLCUDAHost = 1, 2, 3
# DLDataTypeCode values
kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLBool = 0, 1, 2, 4, 6
# DLManagedTensorVersioned.flags bits
DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_IS_COPIED = 1, 2
# the DLPack version this module speaks
DLPACK_VERSION = (1, 0)


class DLDevice(ctypes.Structure):
    """Where the data lives: a DLDeviceType and the device's ordinal."""
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """An element type: a DLDataTypeCode, its width in bits, and lanes (1: a scalar type)."""
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """The array: `data + byte_offset` is element 0; strides in elements, NULL for a compact row-major layout."""
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    """The pre-1.0 capsule payload: the tensor, the producer's context and the deleter the consumer calls."""
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    """The 1.x capsule payload: as DLManagedTensor, with the version first and flags (read-only, is-copied)."""
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# both deleters take a pointer to their struct; a capsule destructor takes the capsule (a PyObject*)
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# the destructor runs while the capsule is being deallocated: the raw pointer, never a new reference to it
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

# NOTE: capsule names must outlive every capsule: module constants
_NAME, _USED = b"dltensor", b"used_dltensor"
_NAME_V, _USED_V = b"dltensor_versioned", b"used_dltensor_versioned"

_DL_CODES: dict[str, int] = {"bool": kDLBool, "float": kDLFloat, "bfloat": kDLBfloat, "int": kDLInt, "uint": kDLUInt}


def dl_dtype(dt: DType) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of a tinygrad dtype."""
    if dt == dtypes.bool:
        return kDLBool, 8
    if dt == dtypes.bfloat16:
        return kDLBfloat, 16
    if dtypes.is_float(dt):
        return kDLFloat, dt.itemsize * 8
    if dtypes.is_int(dt):
        return (kDLUInt if dtypes.is_unsigned(dt) else kDLInt), dt.itemsize * 8
    raise BufferError(f"{dt} has no DLPack data type")


def from_dl_dtype(code: int, bits: int, lanes: int) -> DType:
    """The tinygrad dtype of a DLDataType (BufferError for vector lanes, complex numbers and other types)."""
    if lanes != 1:
        raise BufferError(f"DLPack vector types (lanes={lanes}) are not supported")
    table: dict[tuple[int, int], DType] = {
        (kDLBool, 8): dtypes.bool, (kDLBfloat, 16): dtypes.bfloat16, (kDLFloat, 16): dtypes.float16,
        (kDLFloat, 32): dtypes.float32, (kDLFloat, 64): dtypes.float64,
        (kDLInt, 8): dtypes.int8, (kDLInt, 16): dtypes.int16, (kDLInt, 32): dtypes.int32, (kDLInt, 64): dtypes.int64,
        (kDLUInt, 8): dtypes.uint8, (kDLUInt, 16): dtypes.uint16, (kDLUInt, 32): dtypes.uint32,
        (kDLUInt, 64): dtypes.uint64}
    dt = table.get((code, bits))
    if dt is None:
        raise BufferError(f"DLPack data type (code {code}, {bits} bits) has no tinygrad dtype")
    return dt


# ---- the producer side ----

# address of a handed-out DLManagedTensor(Versioned) -> what must stay alive until its deleter runs
_exports: dict[int, tuple] = {}
_exports_lock = threading.Lock()


def _delete_export(addr: int) -> None:
    # the consumer's deleter call (from any thread; ctypes takes the GIL): forget the record, freeing the Buffer
    # if nothing else holds it
    with _exports_lock:
        _exports.pop(addr, None)


_deleter = _DELETER(_delete_export)


def _capsule_destructor(cap: int) -> None:
    # a capsule nobody consumed still owns its tensor: release it (a consumed one was renamed "used_...")
    for name in (_NAME, _NAME_V):
        if _capsule_is_valid(cap, name):
            _delete_export(_capsule_pointer(cap, name))
            return


_destructor = _CAPSULE_DESTRUCTOR(_capsule_destructor)


def live_exports() -> int:
    """How many handed-out tensors wait for their consumer's deleter (tests check that none leak)."""
    return len(_exports)


def dlpack_device(t: Tensor) -> tuple[int, int]:
    """`Tensor.__dlpack_device__`: (DLDeviceType, ordinal) of the tensor's device."""
    dev = t.device
    if not isinstance(dev, str):
        raise BufferError("a tensor sharded over several devices has no single DLPack device: gather it first")
    base, _, num = dev.partition(":")
    if base in ("CLANG", "CPU"):
        return kDLCPU, 0
    if base == "CUDA":
        return kDLCUDA, int(num or 0)
    raise BufferError(f"tensors on {dev} can't be exported through DLPack (host and CUDA only)")


def _strided_view(t: Tensor) -> tuple[Buffer, tuple[int, ...], tuple[int, ...], int]:
    """(realized Buffer, shape, strides in elements, offset in elements) of a realized tensor: its base's memory as
    one strided window, or BufferError for a view no strides can describe (a pad, or a reshape of a permute)."""
    lb = t.lazydata
    buf = lb.base.realized
    if buf is None:
        raise BufferError("the tensor has no buffer after realize()")
    views = lb.st.views
    v = views[0] if len(views) == 1 else None
    if v is None or v.mask is not None or not all(isinstance(x, int) for x in (*v.shape, *v.strides, v.offset)):
        raise BufferError("this view of a tensor (padded, or reshaped after a permute) can't be described by strides: "
                          "call .contiguous() first (a copy, which is then shared)")
    return buf, tuple(v.shape), tuple(v.strides), v.offset


def _pointer(buf: Buffer) -> int:
    """The address of a realized Buffer's memory: a C++ runtime buffer's `ptr`, or a numpy array's data."""
    opaque = buf._buf
    if isinstance(opaque, np.ndarray):
        return opaque.ctypes.data
    if isinstance(opaque, int):
        return opaque  # a CUDA buffer imported through DLPack
    return opaque.ptr


def to_dlpack(t: Tensor, stream: Any = None, max_version: tuple[int, int] | None = None,
              dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """`Tensor.__dlpack__`: a capsule over the tensor's memory (see the module docstring).

    The tensor is realized first. A view that strides describe (a permute, a slice, an expand) is exported as one,
    zero-copy; one they can't (a pad) raises BufferError asking for .contiguous(). `copy=True` exports a copy;
    `dl_device` other than the tensor's own is only honoured with a copy to the host."""
    dev = dlpack_device(t)
    copied = False
    if dl_device is not None and tuple(dl_device) != dev:
        if copy is False or tuple(dl_device) != (kDLCPU, 0):
            raise BufferError(f"can't export a tensor of DLPack device {dev} to {tuple(dl_device)} without a copy "
                              "to the host (copy=True)")
        t, dev, copied = t.to("CLANG").contiguous(), (kDLCPU, 0), True
    elif copy:
        # a buffer of its own, which the consumer may write without touching this tensor
        t, copied = t.detach().clone(), True
    if dev[0] == kDLCPU and stream is not None:
        raise BufferError(f"stream must be None for a host tensor, got {stream!r}")
    if dev[0] == kDLCUDA and stream == 0:
        raise BufferError("stream 0 is ambiguous in the DLPack protocol: pass 1 (legacy default) or 2 (per-thread)")
    t.realize()
    if t.lazydata.base.realized is None:
        # a constant broadcast has no memory: it gets a buffer of its own, in place, so writes through the consumer
        # are this tensor's from now on (as realize() does for a folded constant)
        t.lazydata = t.lazydata.contiguous()
        t.realize()
    buf, shape, strides, offset = _strided_view(t)
    if dev[0] == kDLCUDA and stream != -1:
        # the consumer's stream must see our queued kernels' writes: wait for them here (everything of this device is
        # on its one stream, so once it is idle any consumer stream reads finished data)
        Device[buf.device].synchronize()
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    managed: DLManagedTensorVersioned | DLManagedTensor
    if versioned:
        managed = DLManagedTensorVersioned()
        managed.version = DLPackVersion(*DLPACK_VERSION)
        managed.flags = DLPACK_FLAG_BITMASK_IS_COPIED if copied else 0
    else:
        managed = DLManagedTensor()
    nd = len(shape)
    shape_arr = (ctypes.c_int64 * max(nd, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(nd, 1))(*strides)
    dlt = managed.dl_tensor
    dlt.data = _pointer(buf) if buf.nbytes else None
    dlt.device = DLDevice(*dev)
    dlt.ndim = nd
    code, bits = dl_dtype(t.dtype)
    dlt.dtype = DLDataType(code, bits, 1)
    dlt.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    dlt.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    dlt.byte_offset = offset * t.dtype.itemsize
    managed.deleter = ctypes.cast(_deleter, ctypes.c_void_p).value
    addr = ctypes.addressof(managed)
    with _exports_lock:
        # the Buffer keeps the memory (and its allocator's reuse away from it) until the consumer's deleter call
        _exports[addr] = (managed, shape_arr, strides_arr, buf)
    return _api.PyCapsule_New(addr, _NAME_V if versioned else _NAME, ctypes.cast(_destructor, ctypes.c_void_p).value)


# ---- the consumer side ----

class _Borrowed(Allocator):
    """The allocator of one Buffer over memory another library owns: freeing the Buffer calls the producer's deleter
    (never an allocator's cache, which would hand the memory out again), and it doesn't count as tinygrad's memory.

    Host memory is a numpy array over the producer's pointer (the CPU runtime's kernels take any buffer-protocol
    object); CUDA memory is the bare device address (CUDA kernels take ints as pointers), copied in and out through the
    driver (`_cuda_copy`)."""
    counts_memory = False

    def __init__(self, release: Callable[[], None], device: str):
        self.release, self.device = release, device

    def free(self, opaque, size: int, options=None) -> None:
        release, self.release = self.release, None
        if release is not None:
            release()

    def as_buffer(self, src, size: int | None = None) -> memoryview:
        if isinstance(src, np.ndarray):
            return memoryview(src)
        out = memoryview(bytearray(size or 0))
        self.copyout(out, src)
        return out

    def copyin(self, dest, src: memoryview) -> None:
        if isinstance(dest, np.ndarray):
            dest[:] = np.frombuffer(src, dtype=np.uint8)
        else:
            _cuda_copy(self.device, dest, src, to_device=True)

    def copyout(self, dest: memoryview, src) -> None:
        if isinstance(src, np.ndarray):
            np.frombuffer(dest, dtype=np.uint8)[:] = src
        else:
            _cuda_copy(self.device, src, dest, to_device=False)


_libcuda: Any = None


@contextlib.contextmanager
def _primary_context(device: str):
    """The driver (libcuda through ctypes) with the CUDA device's primary context current, after this device's
    queued kernels are done: for the few calls on memory the C++ runtime doesn't own (it copies its own
    DeviceBuffers only)."""
    global _libcuda
    if _libcuda is None:
        _libcuda = ctypes.CDLL("libcuda.so.1")
    Device[device].synchronize()
    lib, cu_dev, ctx = _libcuda, ctypes.c_int(), ctypes.c_void_p()
    _check(lib.cuDeviceGet(ctypes.byref(cu_dev), int(device.partition(":")[2] or 0)), "cuDeviceGet")
    _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), cu_dev), "cuDevicePrimaryCtxRetain")
    try:
        _check(lib.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
        try:
            yield lib
        finally:
            lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        lib.cuDevicePrimaryCtxRelease_v2(cu_dev)


def _check(err: int, what: str) -> None:
    if err:
        raise RuntimeError(f"{what} failed with CUDA error {err}")


def _cuda_copy(device: str, dptr: int, host: memoryview, to_device: bool) -> None:
    """A synchronous copy between host memory and a CUDA address tinygrad doesn't own."""
    host_ptr = ctypes.c_void_p(np.frombuffer(host, dtype=np.uint8).ctypes.data)
    n = ctypes.c_size_t(host.nbytes)
    with _primary_context(device) as lib:
        if to_device:
            _check(lib.cuMemcpyHtoD_v2(ctypes.c_uint64(dptr), host_ptr, n), "cuMemcpyHtoD")
            # a copy from pageable memory may return before its DMA ends, and kernels on tinygrad's non-blocking
            # stream don't wait for the legacy stream it ran on
            _check(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        else:
            _check(lib.cuMemcpyDtoH_v2(host_ptr, ctypes.c_uint64(dptr), n), "cuMemcpyDtoH")


def _cuda_context_sync(device: str) -> None:
    """Wait for all work of the device's context (every stream, the producer's included): the handshake for a runtime
    built without the `Device.stream` binding."""
    with _primary_context(device) as lib:
        _check(lib.cuCtxSynchronize(), "cuCtxSynchronize")


def _ask_capsule(obj: Any, device: tuple[int, int]) -> Any:
    """The capsule of a producer, asking for the versioned one and telling it the stream tinygrad will read on."""
    if not hasattr(obj, "__dlpack__"):
        return obj  # a bare capsule (older libraries' to_dlpack())
    stream = None
    if device[0] == kDLCUDA:
        native = Device[f"CUDA:{device[1]}" if device[1] else "CUDA"].native
        handle = getattr(native, "stream", None)
        # without the runtime's stream handle the producer does no ordering (-1) and _import waits for the whole
        # context instead
        stream = handle if handle else -1
    try:
        return obj.__dlpack__(stream=stream, max_version=DLPACK_VERSION)
    except TypeError:  # a producer older than DLPack 1.0's keywords
        return obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()


def _consume(capsule: Any) -> tuple[int, DLTensor, Callable[[], None], bool]:
    """(address, DLTensor, release, read_only) of a capsule, renamed "used_..." so that only we call its deleter."""
    for name, used, struct in ((_NAME_V, _USED_V, DLManagedTensorVersioned), (_NAME, _USED, DLManagedTensor)):
        if _api.PyCapsule_IsValid(capsule, name):
            addr = _api.PyCapsule_GetPointer(capsule, name)
            managed = struct.from_address(addr)
            read_only = False
            if struct is DLManagedTensorVersioned:
                if managed.version.major != DLPACK_VERSION[0]:
                    raise BufferError(f"DLPack version {managed.version.major}.{managed.version.minor} is not "
                                      f"supported (this is {DLPACK_VERSION[0]}.{DLPACK_VERSION[1]})")
                read_only = bool(managed.flags & DLPACK_FLAG_BITMASK_READ_ONLY)
            if _api.PyCapsule_SetName(capsule, used) != 0:
                raise BufferError("could not mark the DLPack capsule as consumed")
            deleter = managed.deleter

            def release(addr: int = addr, deleter: int | None = deleter) -> None:
                if deleter:
                    _DELETER(deleter)(addr)
            return addr, managed.dl_tensor, release, read_only
    raise BufferError("not a DLPack capsule, or one already consumed")


def _memory_order(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> tuple[int, ...]:
    """The dims of a DLPack tensor from the slowest-varying in memory to the fastest, where its memory is one
    compact array in some dim order (row-major, or a permute of it: a transpose, channels-last); BufferError for
    anything else (gaps, overlaps, negative strides), which only a copy could share."""
    ident = tuple(range(len(shape)))

    def compact(order: tuple[int, ...]) -> bool:
        # dims of size 1 may have any stride: they don't move through memory
        acc = 1
        for d in reversed(order):
            if shape[d] != 1 and strides[d] != acc:
                return False
            acc *= shape[d]
        return True
    if strides is None or 0 in shape or compact(ident):
        return ident
    order = tuple(sorted(ident, key=lambda d: -strides[d]))
    if not compact(order):
        raise BufferError(f"a DLPack tensor of shape {shape} and strides {strides} has no compact layout: make it "
                          "contiguous before handing it to tinygrad")
    return order


def from_dlpack(obj: Any) -> LazyBuffer:
    """`Tensor.from_dlpack`'s data: a realized LazyBuffer over the memory of any DLPack producer (a torch tensor, a
    numpy array, a capsule), without a copy: writes through either side are seen by the other. The producer's memory
    stays alive while the buffer does. Host memory lands on the CLANG device, CUDA memory on its CUDA device.

    Memory that is one compact array in some dim order is shared (row-major, or permuted: a transpose, channels-last,
    seen through a permute); BufferError otherwise (gaps, negative strides: make it contiguous on the producer's side).
    A read-only export (a numpy array that isn't writeable) is copied, since tinygrad may write into its buffers."""
    device = tuple(obj.__dlpack_device__()) if hasattr(obj, "__dlpack_device__") else None
    if device is not None and device[0] not in (kDLCPU, kDLCUDA, kDLCUDAHost):
        raise BufferError(f"DLPack device type {device[0]} is not supported (host and CUDA only)")
    capsule = _ask_capsule(obj, device or (kDLCPU, 0))
    _, dlt, release, read_only = _consume(capsule)
    try:
        dt = from_dl_dtype(dlt.dtype.code, dlt.dtype.bits, dlt.dtype.lanes)
        shape = tuple(dlt.shape[i] for i in range(dlt.ndim))
        order = _memory_order(shape, tuple(dlt.strides[i] for i in range(dlt.ndim)) if dlt.strides else None)
        ptr = (dlt.data or 0) + dlt.byte_offset
        n = prod(shape)
        kind, ordinal = dlt.device.device_type, dlt.device.device_id
        if kind == kDLCUDA:
            tdev = f"CUDA:{ordinal}" if ordinal else "CUDA"
            if ptr % 16:
                # the GPU kernels' tiled paths (tensor maps, shared-memory staging) take buffers as allocations are:
                # aligned to at least 16 bytes
                raise BufferError(f"a CUDA pointer that isn't 16-byte aligned (0x{ptr:x}: a slice of a larger tensor) "
                                  "can't be shared: clone it on the producer's side first")
            if device is not None and getattr(Device[tdev].native, "stream", None) is None:
                _cuda_context_sync(tdev)
            opaque: Any = ptr
        elif kind in (kDLCPU, kDLCUDAHost):
            tdev = "CLANG"
            raw = (ctypes.c_uint8 * (n * dt.itemsize)).from_address(ptr) if n and ptr else bytearray(0)
            opaque = np.frombuffer(raw, dtype=np.uint8)
        else:
            raise BufferError(f"DLPack device type {kind} is not supported (host and CUDA only)")
        if read_only:
            if dt.np is None or kind == kDLCUDA:
                raise BufferError("a read-only DLPack tensor of this dtype/device can't be imported without a copy")
            out = LazyBuffer.fromcpu(np.frombuffer(opaque, dtype=dt.np).reshape(shape).copy()).copy_to_device(tdev)
            release()
            return out
    except BaseException:
        release()
        raise
    # the memory as the compact array it is, in its own dim order, then viewed in the producer's order
    lb = LazyBuffer.loadop(LoadOps.EMPTY, tuple(shape[d] for d in order), dt, tdev)
    lb.buffer = Buffer(tdev, n, dt).adopt(opaque, _Borrowed(release, tdev))
    return lb if order == tuple(range(len(shape))) else lb.permute(tuple(order.index(d) for d in range(len(shape))))

