"""The METAL device: Apple GPUs. Kernels are rendered as Metal Shading Language (renderer/metal.py), built into
libraries by the Metal framework and launched as compute pipelines from C++ (tinygrad.runtime._metal), which reaches
the Objective-C runtime and Metal through dlopen.

Importing this module needs no Mac: the libraries are loaded when a device is opened, and where Metal is missing
opening `METAL` raises a RuntimeError naming the library that could not be loaded.

    >>> from tinygrad import Tensor                                      # doctest: +SKIP
    >>> (Tensor([1.0, 2.0], device="METAL") * 2).numpy()                  # doctest: +SKIP
    array([2., 4.], dtype=float32)
"""
from __future__ import annotations

import functools
import math

from tinygrad.codegen.kernel import LinearizerOptions
from tinygrad.codegen.program import ProgramSpec
from tinygrad.device import BufferOptions, Compiled, CompileError, Compiler, LRUAllocator
from tinygrad.helpers import DEBUG
from tinygrad.renderer.metal import MetalLanguage, MetalRenderer
from tinygrad.runtime import _metal
from tinygrad.runtime.graph import NativeGraph

# the csrc/runtime.h version this Python layer was written against
RUNTIME_ABI_VERSION = 1
if _metal.abi_version() != RUNTIME_ABI_VERSION:
    raise ImportError(f"tinygrad.runtime._metal was built for runtime ABI {_metal.abi_version()}, this package expects "
                      f"{RUNTIME_ABI_VERSION}: rebuild it (pip install . or cmake --build)")

# every Apple GPU: 1024 threads a threadgroup, grids of 2^32-1 threadgroups a dimension, 32 KB of threadgroup memory
GRID_MAX = (2 ** 32 - 1,) * 3
THREADGROUP_MAX = (1024, 1024, 1024)


class MetalCompiler(Compiler):
    """MSL -> the kernel image the runtime loads: the source itself (Metal builds it at load; a metallib built offline
    with `xcrun metal` loads too). Compiling checks the source with the device's compiler, so a kernel that does not
    build raises CompileError with Metal's log here, as every compiler does."""

    def __init__(self, device: MetalDevice, linearizer_opts: LinearizerOptions):
        super().__init__("compile_metal")
        self.device, self.linearizer_opts = device, linearizer_opts

    def compile(self, src: str) -> bytes:
        try:
            self.device.native.check_source(src)
        except RuntimeError as e:
            raise CompileError(f"Metal failed to compile a kernel:\n{e}\n--- source ---\n{src}") from None
        return src.encode()


class MetalProgram:
    """A compute pipeline on a METAL device, called as `prg(*bufs, global_size=, local_size=, vals=, wait=)`.

    Kernels the renderer wrote as loops carry their launch in their ProgramSpec `spec` (`default_dims`); their
    threadgroup is lowered to what the pipeline allows, in whole SIMD groups (such kernels are correct for any
    threadgroup of whole SIMD groups)."""

    def __init__(self, device: MetalDevice, name: str, lib: bytes, spec: ProgramSpec | None = None):
        self.device, self.name, self.lib = device, name, lib
        self._prg = self.native = device.native.load_program(name, lib)
        self.default_dims = spec.launch if spec is not None else None
        if self.default_dims is not None:
            grid, block = self.default_dims
            limit = max(self._prg.simd_width, self._prg.max_threads // self._prg.simd_width * self._prg.simd_width)
            if math.prod(block) > limit:
                block = (limit, 1, 1)
            self.default_dims = (grid, block)
            self.direct = functools.partial(self._prg.launch, grid, block, False)

    def __call__(self, *bufs, global_size=None, local_size=None, vals=(), wait: bool = False) -> float | None:
        if global_size is None and local_size is None and self.default_dims is not None:
            global_size, local_size = self.default_dims
        return self._prg.launch(global_size or (1, 1, 1), local_size or (1, 1, 1), wait or DEBUG >= 2, *bufs, *vals)


class MetalAllocator(LRUAllocator):
    """Shared-storage MTLBuffers (`_metal.DeviceBuffer`), cached for reuse by LRUAllocator. Apple GPUs share memory
    with the CPU: a buffer's memory is viewed in place (as_buffer), and copies wait for queued work first."""

    def __init__(self, device: MetalDevice):
        super().__init__()
        self.device = device

    def _alloc(self, size: int, options: BufferOptions | None):
        return _metal.DeviceBuffer(self.device.native, size)

    def _free(self, opaque, options: BufferOptions | None) -> None:
        try:
            opaque.free()
        except BufferError:
            pass  # a zero-copy view still uses it: the memory goes when the last view does

    def as_buffer(self, src, size: int | None = None) -> memoryview:
        self.device.synchronize()
        return memoryview(src) if size is None else memoryview(src)[:size]

    def copyin(self, dest, src: memoryview) -> None:
        _metal.copyin(dest, src)

    def copyout(self, dest: memoryview, src) -> None:
        _metal.copyout(dest, src)


class MetalDevice(Compiled):
    """`METAL`: the system's default GPU."""

    def __init__(self, device: str):
        self.native = _metal.Device()
        # simdgroup_matrix needs the Apple7 family (A14, M1) or later
        tcs = MetalLanguage.tensor_cores if self.native.supports_simdgroup_matrix else ()
        opts = LinearizerOptions("METAL", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                                 global_max=GRID_MAX, local_max=THREADGROUP_MAX,
                                 shared_max=min(32 * 1024, self.native.max_threadgroup_memory or 32 * 1024),
                                 tensor_cores=tcs)
        super().__init__(device, MetalAllocator(self), MetalCompiler(self, opts), functools.partial(MetalProgram, self),
                         MetalRenderer, graph=NativeGraph)
        if DEBUG >= 1:
            print(f"{device}: {self.native.gpu_name}")

    def synchronize(self) -> None:
        self.native.synchronize()
