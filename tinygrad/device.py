"""Devices, the memory they hold, and the contract a compiled device fulfils.

A compiled device is four parts: an Allocator (device memory), a Compiler (source -> binary), a renderer
(uops -> a ProgramSpec: the source and its launch facts, see codegen/program.py) and a program class (binary and
ProgramSpec -> something you can call with buffers), plus an optional graph class that replays a TinyJit capture in
one call. Devices are found by name: `Device["CLANG"]` imports `tinygrad.runtime.ops_clang` and builds its
`ClangDevice`. Every `ops_<name>.py` on `tinygrad.runtime`'s search path is a device; docs/adding_a_device.md says
how to add one.
"""
from __future__ import annotations

import importlib
import os
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

import tinygrad.profile as _profile
from tinygrad.diskcache import diskcache_get, diskcache_put
from tinygrad.dtype import DType, dtypes
from tinygrad.helpers import DEBUG, GlobalCounters, defer_interrupt, getenv, guard_finalizers, trim_heap
from tinygrad.locks import ENGINE_LOCK

if TYPE_CHECKING:
    from tinygrad.codegen.program import ProgramSpec


class CompileError(RuntimeError):
    """A device compiler rejected a kernel; the message carries the compiler's log and the source."""


class _Device:
    """The registry of devices: `Device[name]` gives the (lazily built, cached) device; `Device.DEFAULT` is settable.

    The devices are the `ops_<name>.py` modules found on `tinygrad.runtime.__path__` (`Device.KNOWN`), so a new
    runtime is a new module, not an edit here. `<NAME>=1` in the environment makes that device the default."""

    # the order a default is looked for among the environment's device knobs; other devices follow alphabetically
    PREFERRED = ("CUDA", "CLANG", "CPU")

    def __init__(self) -> None:
        self._opened: dict[str, Any] = {}
        self._default: str | None = None

    @property
    def KNOWN(self) -> tuple[str, ...]:  # noqa: N802 - a constant in spirit: the device modules present
        import tinygrad.runtime as rt
        names: set[str] = set()
        for folder in rt.__path__:
            try:
                entries = os.listdir(folder)
            except OSError:
                continue
            names |= {f[4:-3].upper() for f in entries if f.startswith("ops_") and f.endswith(".py")}
        return tuple(sorted(names, key=lambda n: (n not in self.PREFERRED, self.PREFERRED.index(n)
                                                  if n in self.PREFERRED else 0, n)))

    @staticmethod
    def canonicalize(device: str | None) -> str:
        """'clang' -> 'CLANG', 'cuda:1' -> 'CUDA:1', 'CLANG:0' -> 'CLANG'; None -> the default device."""
        if device is None:
            return Device.DEFAULT
        if not isinstance(device, str):
            raise TypeError(f"device must be a str, not {type(device).__name__}")
        name, _, num = device.partition(":")
        name = name.upper()
        if name == "DISK":
            # the part after DISK: is a file path, kept verbatim
            return f"DISK:{num}" if num else "DISK"
        if num not in ("", "0") and not num.isdigit():
            raise ValueError(f"bad device {device!r}: expected NAME or NAME:index")
        return name if num in ("", "0") else f"{name}:{num}"

    def storage(self, device: str | None) -> str:
        """Where a new tensor asked for on `device` is made: that device, except a DISK device (a file the user
        handed to tinygrad, mapped read-only), whose new tensors go to the default device, so that a constant,
        a computed tensor or an optimizer's state never takes the file's bytes.

        >>> Device.storage("DISK:/tmp/model.safetensors") == Device.DEFAULT
        True
        """
        dev = self.canonicalize(device)
        return self.DEFAULT if dev.startswith("DISK") else dev

    def __getitem__(self, device: str):
        dev = self.canonicalize(device)
        opened = self._opened.get(dev)
        if opened is None:
            # NOTE: opened once even when threads ask at once: two device objects would be two allocators (and on a
            # GPU two contexts) for one device
            with ENGINE_LOCK:
                opened = self._opened.get(dev)
                if opened is None:
                    opened = self._opened[dev] = self._open(dev)
        return opened

    def _open(self, dev: str):
        base = dev.split(":")[0]
        try:
            mod = importlib.import_module(f"tinygrad.runtime.ops_{base.lower()}")
        except ModuleNotFoundError as e:
            if e.name != f"tinygrad.runtime.ops_{base.lower()}":
                raise
            raise RuntimeError(f"unknown device {dev}: known devices are {', '.join(self.KNOWN)}") from None
        cls = next((v for k, v in vars(mod).items() if k.lower() == f"{base.lower()}device"), None)
        if cls is None:
            raise RuntimeError(f"tinygrad.runtime.ops_{base.lower()} defines no {base}Device")
        return cls(dev)

    @property
    def DEFAULT(self) -> str:  # noqa: N802 - tinygrad's public spelling
        if self._default is None:
            chosen = [d for d in self.KNOWN if getenv(d, 0)]
            if len(chosen) > 1:
                raise RuntimeError(f"more than one default device selected in the environment: {chosen}")
            self._default = chosen[0] if chosen else "CLANG"
        return self._default

    @DEFAULT.setter
    def DEFAULT(self, device: str) -> None:  # noqa: N802
        self._default = self.canonicalize(device)


Device = _Device()


class BufferOptions:
    """How a buffer's memory is placed: host-visible, uncached, ... (devices may ignore options)."""
    __slots__ = ("host", "uncached", "cpu_access")

    def __init__(self, host: bool = False, uncached: bool = False, cpu_access: bool = False):
        self.host, self.uncached, self.cpu_access = host, uncached, cpu_access

    def __eq__(self, o) -> bool:
        return isinstance(o, BufferOptions) and (self.host, self.uncached, self.cpu_access) == \
            (o.host, o.uncached, o.cpu_access)

    def __hash__(self) -> int:
        return hash((self.host, self.uncached, self.cpu_access))


def _unpickle_buffer(device: str, size: int, dtype: DType, options: BufferOptions | None, data: bytes) -> Buffer:
    return Buffer(device, size, dtype, options=options).copyin(memoryview(data))


class Buffer:
    """`size` elements of `dtype` on `device`. Memory is allocated on first use (or given as `opaque`)."""
    # every eager op makes, allocates and frees one: slots and no property calls on those paths
    __slots__ = ("device", "size", "dtype", "options", "_buf", "_nbytes", "allocator", "__weakref__")

    def __init__(self, device: str, size: int, dtype: DType, opaque: Any = None, options: BufferOptions | None = None):
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"buffer size must be a non-negative int, got {size!r}")
        self.device, self.size, self.dtype, self.options = device, size, dtype, options
        self._nbytes = size * dtype.itemsize
        if self._nbytes >= 1 << 63:
            raise MemoryError(f"a buffer of {size} {dtype} elements ({self._nbytes} bytes) on {device} is beyond what "
                              "a 64-bit address space holds")
        self._buf: Any = None
        if opaque is not None:
            self.allocate(opaque)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def base(self) -> Buffer:
        """The buffer whose memory this one is: itself (0.9 code reads `buf.base`, which for 0.9's sub-buffer views
        was the buffer viewed; every Buffer here owns its memory)."""
        return self

    def is_allocated(self) -> bool:
        return self._buf is not None

    def allocate(self, opaque: Any = None) -> Buffer:
        # the allocator's cache and the memory counters are shared by every thread
        return ENGINE_LOCK.run(self._allocate, opaque)

    def _allocate(self, opaque: Any = None) -> Buffer:
        """`allocate` for a caller that holds ENGINE_LOCK (the engine's eager path, which allocates every op)."""
        if self._buf is not None:
            raise RuntimeError(f"{self} is already allocated")
        # Device's own table first: Device[...] canonicalizes the name, and Buffers are made with canonical names
        dev = Device._opened.get(self.device)
        self.allocator = (dev if dev is not None else Device[self.device]).allocator
        self._buf = opaque if opaque is not None else self.allocator.alloc(self._nbytes, self.options)
        if self.allocator.counts_memory:
            GlobalCounters.mem_used += self._nbytes
        return self

    def adopt(self, opaque: Any, allocator: Allocator) -> Buffer:
        """Make memory another owner allocated this buffer's: `allocator` (not the device's) copies in and out of
        it and is handed it back when the buffer is freed (tinygrad/dlpack.py wraps a producer's memory so)."""
        if self._buf is not None:
            raise RuntimeError(f"{self} is already allocated")
        self.allocator, self._buf = allocator, opaque
        if allocator.counts_memory:
            GlobalCounters.mem_used += self._nbytes
        return self

    def ensure_allocated(self) -> Buffer:
        return self if self._buf is not None else self.allocate()

    def deallocate(self) -> None:
        """Give the memory back to the allocator (ENGINE_LOCK held); the Buffer stays, to be allocated again on its
        next use. For a holder that keeps Buffer objects past their use (a TinyJit capture)."""
        if self._buf is None:
            raise RuntimeError(f"{self} is not allocated")
        opaque, self._buf = self._buf, None
        _free(self.allocator, opaque, self._nbytes, self.options)

    def __del__(self):
        try:
            # NOTE: __init__ may have raised before _buf was set
            if getattr(self, "_buf", None) is not None:
                # a finalizer runs in whichever thread dropped the last reference and must not wait for the lock
                # (its holder may be waiting for this thread): freed now, or by the holder when it is done
                ENGINE_LOCK.run_or_defer(_free, self.allocator, self._buf, self._nbytes, self.options)
        except KeyboardInterrupt:
            defer_interrupt()

    def __repr__(self) -> str:
        return f"<buf device:{self.device} size:{self.size} dtype:{self.dtype}>"

    def __reduce__(self):
        # pickled by value: an allocated buffer's bytes travel and are copied into a new buffer on the same device
        # (device memory and allocators don't pickle); an unallocated one stays unallocated
        if self._buf is None:
            return Buffer, (self.device, self.size, self.dtype, None, self.options)
        return _unpickle_buffer, (self.device, self.size, self.dtype, self.options, bytes(self.as_buffer()))

    def as_buffer(self, allow_zero_copy: bool = False) -> memoryview:
        """The bytes of this buffer on the host; zero-copy where the device's memory is host memory."""
        with ENGINE_LOCK:  # a device's copies go through its queue, shared by every thread
            self.ensure_allocated()
            if hasattr(self.allocator, "as_buffer"):
                return self.allocator.as_buffer(self._buf, self.nbytes)
            return self.copyout(memoryview(bytearray(self.nbytes)))

    def copyin(self, mv: memoryview) -> Buffer:
        mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyin of {mv.nbytes} bytes into {self} of {self.nbytes} bytes")
        with ENGINE_LOCK:
            self.ensure_allocated()
            if self.nbytes:
                self.allocator.copyin(self._buf, mv)
        return self

    def copyout(self, mv: memoryview) -> memoryview:
        mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyout of {self} ({self.nbytes} bytes) into {mv.nbytes} bytes")
        with ENGINE_LOCK:
            self.ensure_allocated()
            if self.nbytes:
                self.allocator.copyout(mv, self._buf)
        return mv

    def numpy(self):
        import numpy as np
        if self.dtype.np is None:
            raise TypeError(f"{self.dtype} has no numpy equivalent")
        return np.frombuffer(self.as_buffer(), dtype=self.dtype.np).copy()


guard_finalizers(Buffer.__del__)


def _free(allocator: Allocator, opaque: Any, nbytes: int, options: BufferOptions | None) -> None:
    """A dropped Buffer's memory back to its allocator (with ENGINE_LOCK held)."""
    if allocator.counts_memory:
        GlobalCounters.mem_used -= nbytes
    allocator.free(opaque, nbytes, options)


class Allocator:
    """Device memory. Subclasses implement `_alloc`/`_free`/`copyin`/`copyout`. Optional capabilities: `as_buffer`
    (a zero-copy host view), and `transfer` with `can_transfer` (device-to-device copies, which the engine uses instead
    of a round trip through host memory whenever `dest_allocator.can_transfer(src_allocator)`)."""
    # whether allocations count as device memory in GlobalCounters.mem_used (a mapped file does not)
    counts_memory = True

    def can_transfer(self, src: Allocator) -> bool:
        """Whether `transfer` can copy from memory of allocator `src` (maybe another device's) into this one's."""
        return False

    def transfer(self, dest, src, nbytes: int, src_dev: Any = None, dest_dev: Any = None) -> None:
        """Device-to-device copy of `nbytes` from `src` (an allocation of an allocator `can_transfer` accepted)."""
        raise NotImplementedError(f"{type(self).__name__} has no device-to-device copy")

    def alloc(self, size: int, options: BufferOptions | None = None):
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"allocation size must be a non-negative int, got {size!r}")
        return self._alloc(size, options)

    def free(self, opaque, size: int, options: BufferOptions | None = None) -> None:
        self._free(opaque, options)

    def _alloc(self, size: int, options: BufferOptions | None):
        raise NotImplementedError(f"{type(self).__name__} can't allocate")

    def _free(self, opaque, options: BufferOptions | None) -> None:
        pass

    def copyin(self, dest, src: memoryview) -> None:
        raise NotImplementedError

    def copyout(self, dest: memoryview, src) -> None:
        raise NotImplementedError


class LRUAllocator(Allocator):
    """An Allocator that keeps freed memory for reuse, so a training loop does not call the system allocator for
    its intermediates every step.

    Sizes are rounded up to buckets (64-byte steps up to 4 KiB, then 8 steps per power of two, so at most 1/8 is
    wasted) and freed memory waits in per-(bucket, options) lists, the least recently used size class evicted first
    once more than `max_cached` bytes wait. An allocation that fails empties the cache and tries again (memory
    pressure), so cached memory never causes an out-of-memory error.

    The cache is shared by every thread: `alloc` and `free` run with ENGINE_LOCK held (Buffer takes it), and
    `free_cache` takes it itself."""

    def __init__(self, max_cached: int = 1 << 30):
        self.max_cached = max_cached
        self.cached_bytes = 0
        self._cache: OrderedDict[tuple[int, BufferOptions | None], list] = OrderedDict()
        # size -> bucket, for the sizes this process allocates (few distinct ones)
        self._bucket_of: dict[int, int] = {}

    @staticmethod
    def bucket(size: int) -> int:
        if size <= 4096:
            return max(64, (size + 63) & ~63)
        step = 1 << (size.bit_length() - 4)
        return (size + step - 1) & ~(step - 1)

    def alloc(self, size: int, options: BufferOptions | None = None):
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"allocation size must be a non-negative int, got {size!r}")
        b = self._bucket_of.get(size)
        if b is None:
            if len(self._bucket_of) > 4096:
                self._bucket_of.clear()
            b = self._bucket_of[size] = self.bucket(size)
        key = (b, options)
        waiting = self._cache.get(key)
        if waiting:
            self.cached_bytes -= b
            opaque = waiting.pop()
            if not waiting:
                del self._cache[key]
            return opaque
        try:
            return self._alloc(b, options)
        except MemoryError:
            if not self.cached_bytes:
                raise
            self.free_cache()
            return self._alloc(b, options)

    def free(self, opaque, size: int, options: BufferOptions | None = None) -> None:
        b = self._bucket_of.get(size)
        if b is None:
            b = self.bucket(size)
        if b > self.max_cached or not self._reusable(opaque):
            self._free(opaque, options)
            return
        key = (b, options)
        waiting = self._cache.get(key)
        if waiting is None:
            waiting = self._cache[key] = []
        else:
            self._cache.move_to_end(key)
        waiting.append(opaque)
        self.cached_bytes += b
        while self.cached_bytes > self.max_cached:
            (ob, oopts), oldest = next(iter(self._cache.items()))
            self._free(oldest.pop(0), oopts)
            self.cached_bytes -= ob
            if not oldest:
                del self._cache[(ob, oopts)]

    def free_cache(self) -> None:
        """Give every cached allocation back to the device."""
        with ENGINE_LOCK:
            for (_, opts), waiting in self._cache.items():
                for opaque in waiting:
                    self._free(opaque, opts)
            self._cache.clear()
            self.cached_bytes = 0

    def _reusable(self, opaque) -> bool:
        """Whether freed memory may be handed out again (not while something still reads it)."""
        return True


class _MallocAllocator(LRUAllocator):
    """Host memory from the C++ CPU runtime (64-byte aligned), cached for reuse. Used by the CLANG device."""

    def _reusable(self, opaque) -> bool:
        # a memoryview or numpy array made by as_buffer still reads it
        return not opaque.pinned

    def _alloc(self, size: int, options: BufferOptions | None):
        from tinygrad.runtime import _cpu
        return _cpu.HostBuffer(size)

    def _free(self, opaque, options: BufferOptions | None) -> None:
        try:
            opaque.free()
        except BufferError:
            # a zero-copy view (as_buffer) still uses it: the memory goes when the last view does
            pass

    def free_cache(self) -> None:
        """Give every cached allocation back, and the C heap's free pages to the OS (host memory freed to malloc
        stays resident otherwise)."""
        super().free_cache()
        trim_heap()

    def as_buffer(self, src, size: int | None = None) -> memoryview:
        # cached allocations may be larger than the Buffer they serve
        return memoryview(src) if size is None else memoryview(src)[:size]

    def copyin(self, dest, src: memoryview) -> None:
        from tinygrad.runtime import _cpu
        _cpu.copyin(dest, src)

    def copyout(self, dest: memoryview, src) -> None:
        from tinygrad.runtime import _cpu
        _cpu.copyout(dest, src)


MallocAllocator = _MallocAllocator()


class Compiler:
    """Source -> binary. `compile_cached` memoizes by source in this process (the disk cache keys on `cachekey`)."""
    linearizer_opts: Any = None

    def __init__(self, cachekey: str | None = None):
        self.cachekey = cachekey
        self._mem: dict[str, bytes] = {}

    def compile(self, src: str) -> bytes:
        raise NotImplementedError

    def compile_cached(self, src: str) -> bytes:
        """The binary for `src`: from this process's memory, else the disk cache (keyed by `cachekey`, which names the
        compiler and its options), else compiled now and stored in both."""
        lib = self._mem.get(src)
        if lib is not None:
            return lib
        lib = diskcache_get(self.cachekey, src) if self.cachekey else None
        if lib is None:
            st = time.perf_counter()
            lib = self.compile(src)
            et = time.perf_counter()
            # a cold start's progress line (DEBUG>=1, or a CLI's after 2 s) and the profiler's compile span
            _profile.compiled(et - st)
            if _profile.current is not None:
                _profile.current.host("compile", st, et, {"compiler": type(self).__name__, "source_bytes": len(src)})
            if self.cachekey:
                diskcache_put(self.cachekey, src, lib)
        self._mem[src] = lib
        return lib


class Compiled:
    """A device that runs compiled kernels: allocator + compiler + renderer + program class (+ optional graph).

    `graph`, when set, is a class that replays a TinyJit capture of this device's kernels in one call, with
    `graph.supports(jit_cache)` and `graph(jit_cache, input_replace)` (see `tinygrad.runtime.graph.NativeGraph`);
    None makes TinyJit replay item by item. `multi_graph`, when set, is the same for a capture whose items span
    several devices (kernels, copies, collectives): TinyJit uses it when every device of the capture offers that
    one class (see `tinygrad.runtime.graph_cuda.CUDAMultiGraph`). `native` is the C++ runtime's device object,
    where there is one."""
    native: Any = None
    multi_graph: Any = None

    def __init__(self, device: str, allocator: Allocator, compiler: Compiler, runtime: Callable,
                 renderer: Callable[[str, list], ProgramSpec], graph: Any = None):
        self.dname, self.allocator, self.compiler, self.runtime = device, allocator, compiler, runtime
        self.renderer, self.graph = renderer, graph
        self.linearizer_opts = compiler.linearizer_opts
        if DEBUG >= 3:
            print(f"opened device {device} from pid:{os.getpid()}")

    def synchronize(self) -> None:
        """Wait for all queued work (host devices run synchronously, so this is a no-op for them)."""

    def create_graph(self) -> Any:
        """A new, empty graph of the C++ runtime (Graph.add / set_arg / set_dims / __call__), for NativeGraph."""
        return self.native.create_graph()


# Re-exported for old import paths (`from tinygrad.device import dtypes` was common in 0.8 code).
__all__ = ["Device", "Buffer", "BufferOptions", "Allocator", "LRUAllocator", "MallocAllocator", "Compiler", "Compiled",
           "CompileError", "dtypes"]
