"""The AMD device: kernels rendered as HIP C++, compiled by clang to code objects for the GPU's gfx target, loaded
and launched through KFD ioctls and an AQL queue from C++ (tinygrad.runtime._amd), with no ROCm runtime.

Importing this module needs no GPU: /dev/kfd is opened when a device is. Without it, opening `AMD` raises a
RuntimeError naming the KFD.

    >>> from tinygrad import Tensor                                      # doctest: +SKIP
    >>> (Tensor([1.0, 2.0], device="AMD") * 2).numpy()                    # doctest: +SKIP
    array([2., 4.], dtype=float32)
"""
from __future__ import annotations

import functools

from tinygrad.codegen.kernel import LinearizerOptions
from tinygrad.codegen.program import ProgramSpec
from tinygrad.device import Allocator, BufferOptions, Compiled, LRUAllocator
from tinygrad.helpers import DEBUG
from tinygrad.renderer.hip import HIPLanguage, hip_renderer
from tinygrad.runtime import _amd
from tinygrad.runtime.compiler_amd import AMDCompiler
from tinygrad.runtime.graph import NativeGraph

# the csrc/runtime.h version this Python layer was written against
RUNTIME_ABI_VERSION = 1
if _amd.abi_version() != RUNTIME_ABI_VERSION:
    raise ImportError(f"tinygrad.runtime._amd was built for runtime ABI {_amd.abi_version()}, this package expects "
                      f"{RUNTIME_ABI_VERSION}: rebuild it (pip install . or cmake --build)")


class AMDProgram:
    """A compiled kernel on an AMD device, called as `prg(*bufs, global_size=, local_size=, vals=, wait=)`. `lib` is
    the code object; launch sizes default to the ones its ProgramSpec `spec` says the renderer wrote the kernel for
    (its block rounded up to whole wavefronts)."""

    def __init__(self, device: AMDDevice, name: str, lib: bytes, spec: ProgramSpec | None = None):
        self.device, self.name, self.lib = device, name, lib
        self.default_dims = spec.launch if spec is not None else None
        self._prg = self.native = device._dev.load_program(name, lib)
        if self.default_dims is not None:
            grid, (bx, by, bz) = self.default_dims
            wave = device.wave_size
            self.default_dims = (grid, (-(-bx // wave) * wave, by, bz))
            self.direct = functools.partial(self._prg.launch, *self.default_dims, False)

    def __call__(self, *bufs, global_size=None, local_size=None, vals=(), wait: bool = False) -> float | None:
        if global_size is None and local_size is None and self.default_dims is not None:
            global_size, local_size = self.default_dims
        return self._prg.launch(global_size, local_size, wait or DEBUG >= 2, *bufs, *vals)


class AMDAllocator(LRUAllocator):
    """GPU memory (`_amd.DeviceBuffer`), cached for reuse by LRUAllocator."""

    def __init__(self, device: AMDDevice):
        super().__init__()
        self.device = device

    def _alloc(self, size: int, options: BufferOptions | None):
        return _amd.DeviceBuffer(self.device._dev, size)

    def _free(self, opaque, options: BufferOptions | None) -> None:
        opaque.free()

    def copyin(self, dest, src: memoryview) -> None:
        _amd.copyin(dest, src)

    def copyout(self, dest: memoryview, src) -> None:
        _amd.copyout(dest, src)

    def can_transfer(self, src: Allocator) -> bool:
        # one SDMA copy within a GPU; between GPUs the engine stages through the host (peer mapping is not written)
        return isinstance(src, AMDAllocator) and src.device._dev.gpu_id == self.device._dev.gpu_id

    def transfer(self, dest, src, sz: int, src_dev=None, dest_dev=None) -> None:
        """Copy of `sz` bytes within one AMD GPU, after the kernels queued before it."""
        _amd.transfer(dest, src, sz)


def amd_tensor_cores(arch: str) -> tuple[str, ...]:
    """The matrix instructions the linearizer may use on `arch`: RDNA3's wave32 WMMA on gfx11 (RDNA4, gfx12, has
    WMMA with another fragment layout; CDNA's gfx9 has MFMA instead: neither is planned)."""
    return HIPLanguage.rdna3_tensor_cores if arch.startswith("gfx11") else ()


class AMDDevice(Compiled):
    """`AMD` (GPU 0) or `AMD:n`. `compiler_class` makes the code objects (tests put a host-twin compiler there)."""
    compiler_class = AMDCompiler

    def __init__(self, device: str):
        ordinal = int(device.split(":")[1]) if ":" in device else 0
        self._dev = self.native = _amd.Device(ordinal)
        self.arch, self.wave_size = self._dev.arch, self._dev.wave_size
        opts = LinearizerOptions("AMD", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                                 global_max=(2**31 - 1, 65535, 65535), local_max=(1024, 1024, 1024),
                                 shared_max=self._dev.lds_size_kb * 1024, tensor_cores=amd_tensor_cores(self.arch))
        super().__init__(device, AMDAllocator(self), self.compiler_class(self.arch, opts),
                         functools.partial(AMDProgram, self), hip_renderer(self.wave_size), graph=NativeGraph)
        if DEBUG >= 1:
            print(f"{device}: {self.arch}, {self._dev.cu_count} CUs, KFD {self._dev.kfd_version}")

    def synchronize(self) -> None:
        self._dev.synchronize()
