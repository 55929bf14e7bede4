"""The CUDA device: kernels rendered as CUDA C, compiled by NVRTC to CUBIN for the GPU's own architecture, loaded
and launched through the CUDA driver API from C++ (tinygrad.runtime._cuda).

Importing this module needs no GPU: the driver (libcuda.so.1) is loaded when a device is opened, and NVRTC
(libnvrtc.so.13, then .12, or NVRTC_PATH) when the first kernel is compiled. Without a driver, opening `CUDA`
raises a RuntimeError naming libcuda.so.1 and the loader's error.

    >>> from tinygrad import Tensor                                      # doctest: +SKIP
    >>> (Tensor([1.0, 2.0], device="CUDA") * 2).numpy()                   # doctest: +SKIP
    array([2., 4.], dtype=float32)
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import math
import os
import re
import sys

from tinygrad.codegen.kernel import LinearizerOptions
from tinygrad.codegen.program import ProgramSpec
from tinygrad.device import Allocator, BufferOptions, Compiled, CompileError, Compiler, LRUAllocator
from tinygrad.helpers import DEBUG, getenv
from tinygrad.renderer.cuda import CUDALanguage, CUDARenderer
from tinygrad.runtime import _cuda
from tinygrad.runtime.graph_cuda import CUDAGraph, CUDAMultiGraph

# the csrc/runtime.h version this Python layer was written against
RUNTIME_ABI_VERSION = 1
if _cuda.abi_version() != RUNTIME_ABI_VERSION:
    raise ImportError(f"tinygrad.runtime._cuda was built for runtime ABI {_cuda.abi_version()}, this package expects "
                      f"{RUNTIME_ABI_VERSION}: rebuild it (pip install . or cmake --build)")

_KERNEL_NAME = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?'
                          r'(?:__cluster_dims__\([\d, ]+\) )?(\w+)\(')
# resident threads per multiprocessor by compute capability (the CUDA programming guide's table of compute
# capabilities); every one of them has 64K registers per multiprocessor, in four banks
THREADS_PER_SM = {75: 1024, 80: 2048, 86: 1536, 87: 2048, 89: 1536, 90: 2048, 100: 2048, 103: 2048, 120: 1536,
                  121: 1536}
# the renderer's persistent reductions are launched with at most this many waves of resident blocks
GRID_WAVES = 1


def resident_blocks(arch: str, sms: int, block: int, regs: int) -> int:
    """How many blocks of `block` threads, each thread using `regs` registers, the GPU holds at once (at least one
    per multiprocessor). Shared memory is not counted: the renderer's kernels use at most a few hundred bytes."""
    threads = THREADS_PER_SM.get(int(re.sub(r"\D", "", arch)), 1536)
    warps = -(-block // 32)
    per_warp = -(-max(regs, 1) * 32 // 256) * 256  # registers are given to a warp 256 at a time
    by_regs = 4 * (16384 // per_warp) // warps
    return sms * max(1, min(threads // (warps * 32), by_regs, 32))


def nvrtc_candidates() -> list[str]:
    """Where NVRTC is looked for: NVRTC_PATH alone if set; else the sonames (the loader's search path), then the CUDA
    toolkit's usual folders and the nvidia-cuda-nvrtc wheel's."""
    path = getenv("NVRTC_PATH")
    if path:
        return [path]
    names = ["libnvrtc.so.13", "libnvrtc.so.12"]
    dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
            *sorted(glob.glob("/usr/local/cuda-1[23]*/targets/*/lib"), reverse=True)]
    for site in sys.path:
        dirs += [os.path.join(site, "nvidia", sub, "lib") for sub in ("cu13", "cuda_nvrtc")]
    return names + [os.path.join(d, n) for n in names for d in dirs if os.path.exists(os.path.join(d, n))]


class CUDACompiler(Compiler):
    """CUDA C -> CUBIN for one architecture ("sm_90"), with NVRTC. Architectures this NVRTC cannot build machine
    code for get PTX for the newest one it knows, which the driver compiles at load. The binary is NVRTC's output
    alone: how to launch it is the kernel's ProgramSpec, which CUDAProgram is given."""

    def __init__(self, arch: str, linearizer_opts: LinearizerOptions | None = None):
        super().__init__(None)  # the disk-cache key needs NVRTC's version: set when NVRTC is first loaded
        if not re.fullmatch(r"sm_\d+[a-z]?", arch):
            raise ValueError(f"arch must look like 'sm_90', got {arch!r}")
        self.arch = arch
        self.linearizer_opts = linearizer_opts or LinearizerOptions("CUDA", has_local=True, has_shared=True,
                                                                    supports_upcast=True, max_vector_bytes=16,
                                                                    half_vectors=True)
        self.options: list[str] | None = None
        self._source: str | None = None
        self.ptx = False

    def _setup(self) -> None:
        # NOTE: asked at every compile, not once: NVRTC can be unloaded and another loaded (tests put a fake in its
        # place), and options and cache key belong to the library that compiles
        source = _cuda.nvrtc_load(nvrtc_candidates())
        if self.options is not None and source == self._source:
            return
        self._source = source
        version = tuple(_cuda.nvrtc_version())
        target, self.ptx = self.arch, False
        supported = _cuda.nvrtc_supported_archs()
        cc = int(re.sub(r"\D", "", self.arch))
        if supported and cc not in supported:
            older = [a for a in supported if a <= cc]
            if not older:
                raise RuntimeError(f"NVRTC {version[0]}.{version[1]} cannot compile for {self.arch} (it supports "
                                   f"sm_{min(supported)} and newer): use an NVRTC that matches the GPU (NVRTC_PATH)")
            target, self.ptx = f"compute_{max(older)}", True
        # --minimal (NVRTC 12.4+) leaves out language features these kernels never use: compiles ~40% faster
        self.options = [f"--gpu-architecture={target}"] + (["--minimal"] if version >= (12, 4) else [])
        # the NVRTC library is part of the key: CUBINs are only served to the library that made them (a test's fake
        # NVRTC makes "CUBINs" that are source text and must never reach a real GPU)
        library = hashlib.sha256(source.encode()).hexdigest()[:16]
        self.cachekey = f"compile_cuda_{self.arch}_nvrtc{version[0]}.{version[1]}_{library}_{'_'.join(self.options)}"

    def compile_cached(self, src: str) -> bytes:
        self._setup()
        return super().compile_cached(src)

    def compile(self, src: str) -> bytes:
        self._setup()
        m = _KERNEL_NAME.search(src)
        try:
            options = self.options
            if "wgmma.mma_async" in src and not self.ptx:
                # Hopper's arch-specific instructions need the "a" target (sm_90a), which only sm_90 runs
                options = [o + "a" if o.startswith("--gpu-architecture=sm_90") else o for o in options]
            image, log = _cuda.nvrtc_compile(src, m.group(1) if m else "kernel", options, self.ptx)
        except RuntimeError as e:
            raise CompileError(f"NVRTC failed to compile a kernel for {self.arch}:\n{e}\n--- source ---\n{src}") \
                from None
        if log and DEBUG >= 3:
            print(f"NVRTC: {log}")
        return image


class CUDAProgram:
    """A compiled kernel on a CUDA device, called as `prg(*bufs, global_size=, local_size=, vals=, wait=)`.

    `lib` is the CUBIN (or PTX) image; `spec`, the kernel's ProgramSpec, says how to launch it (None: a kernel with
    no launch facts, given its sizes at each call). Launch sizes default to the ones the renderer wrote the kernel
    for; a persistent reduction gets no more blocks than GRID_WAVES times what the GPU holds at once (its blocks loop
    over the work with a grid stride, so blocks that would wait for a free multiprocessor only add a second, partial
    wave). With `wait` (or DEBUG >= 2, so that the per-kernel time printed covers the kernel itself) it waits and
    returns the kernel's GPU seconds."""

    def __init__(self, device: CUDADevice, name: str, lib: bytes, spec: ProgramSpec | None = None):
        self.device, self.name, self.lib = device, name, lib
        spec = spec or ProgramSpec(name, "")
        self.default_dims = spec.launch
        self._prg = self.native = device._dev.load_program(name, lib)
        self._prg.waits_for_grid = spec.waits_for_grid
        if spec.tensor_maps:
            # the kernel's trailing CUtensorMap parameters: the runtime encodes them from the buffers at each launch
            # (callers pass the ordinary arguments only)
            self._prg.set_tensor_maps([dataclasses.astuple(m) for m in spec.tensor_maps])
        if spec.dynamic_shared:
            self._prg.dynamic_shared = spec.dynamic_shared
        if self.default_dims is not None:
            if spec.persistent:
                (gx, gy, gz), block = self.default_dims
                cap = GRID_WAVES * resident_blocks(device.arch, device.sms, math.prod(block), self._prg.num_regs)
                self.default_dims = ((max(1, min(gx, cap)), gy, gz), block)
            # `direct(*buffers)`: the eager path's launch with no Python layer in between, for kernels that need
            # neither sizes from the caller nor variables (the runner only uses it then)
            self.direct = functools.partial(self._prg.launch, *self.default_dims, False)

    def __call__(self, *bufs, global_size=None, local_size=None, vals=(), wait: bool = False) -> float | None:
        if global_size is None and local_size is None and self.default_dims is not None:
            global_size, local_size = self.default_dims
        return self._prg.launch(global_size, local_size, wait or DEBUG >= 2, *bufs, *vals)


class CUDAAllocator(LRUAllocator):
    """Device memory (`_cuda.DeviceBuffer`), cached for reuse by LRUAllocator. Freed memory is reused right away:
    every copy and kernel of the device is queued on one stream, in order, so a later user of the memory runs after
    every earlier one. Memory the cache gives back is freed once the queued work is done (the C++ allocator waits)."""

    def __init__(self, device: CUDADevice):
        super().__init__()
        self.device = device

    def _alloc(self, size: int, options: BufferOptions | None):
        return _cuda.DeviceBuffer(self.device._dev, size)

    def _free(self, opaque, options: BufferOptions | None) -> None:
        opaque.free()

    def copyin(self, dest, src: memoryview) -> None:
        _cuda.copyin(dest, src)

    def copyout(self, dest: memoryview, src) -> None:
        _cuda.copyout(dest, src)

    def can_transfer(self, src: Allocator) -> bool:
        # any two CUDA devices: the C++ runtime copies peer to peer, or stages through the host where it must
        return isinstance(src, CUDAAllocator)

    def transfer(self, dest, src, sz: int, src_dev=None, dest_dev=None) -> None:
        """Device-to-device copy of `sz` bytes, on one GPU or between two, ordered with the work of both."""
        _cuda.transfer(dest, src, sz)


class CUDADevice(Compiled):
    """`CUDA` (GPU 0) or `CUDA:n`."""
    # captures over several GPUs (collectives, copies between them) replay as one CUDA graph
    multi_graph = CUDAMultiGraph

    def __init__(self, device: str):
        ordinal = int(device.split(":")[1]) if ":" in device else 0
        self._dev = self.native = _cuda.Device(ordinal, cache_freed=False)  # CUDAAllocator caches
        self.arch = self._dev.arch
        a = self._dev.attribute
        self.sms = a(16)  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        # CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X..Z are 5..7, MAX_BLOCK_DIM_X..Z 2..4
        # the renderer takes the linearizer's tiles and 16-byte vectors (codegen/heuristic_gpu.py picks them)
        # the renderer's matrix instructions and asynchronous copies came with sm_80
        # the compute capability as a number (sm_90: 90): which instructions and launch modes the GPU has
        self.cc = cc = int(re.sub(r"\D", "", self.arch))
        tcs = CUDALanguage.tensor_cores if cc >= 80 else ()
        # wgmma: Hopper only (sm_90a code runs on sm_90 and nothing else)
        # (TMA's tensor maps go where the driver's parameter layout says: cuFuncGetParamInfo, CUDA 12.4)
        tcs += tuple(k for k in CUDALanguage.hopper_tensor_cores if k != "tma" or _cuda.driver_version() >= 12040) \
            if cc == 90 else ()
        # TF32 rounds float32 operands to 10-bit mantissas: only where asked for, as PyTorch's allow_tf32 flags
        tcs += CUDALanguage.tf32_tensor_cores if cc >= 80 and getenv("ALLOW_TF32") else ()
        opts = LinearizerOptions("CUDA", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                                 global_max=(a(5), a(6), a(7)), local_max=(a(2), a(3), a(4)), tensor_cores=tcs,
                                 shared_max=a(97),  # CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
                                 half_vectors=True)
        super().__init__(device, CUDAAllocator(self), CUDACompiler(self.arch, opts),
                         functools.partial(CUDAProgram, self), CUDARenderer, graph=CUDAGraph)
        # all-reduce, all-gather and reduce-scatter between CUDA devices through NCCL: tinygrad.collectives finds the
        # backend by this name (tinygrad/collectives_nccl.py, which builds lazy graph nodes above the runtimes)
        self.collectives = "nccl"
        if DEBUG >= 1:
            print(f"{device}: {self._dev.product_name} ({self.arch}), driver {self._dev.driver_version}")

    def synchronize(self) -> None:
        self._dev.synchronize()

