"""The CLANG device: kernels rendered as C, compiled by the host C compiler, loaded and called from C++.

The compiler is chosen by probing (tinygrad/runtime/host_cc.py): `CC` if set, else the first of clang, cc and gcc
that builds half-precision kernels; every compile has a time limit (COMPILE_TIMEOUT). Half kernels use the compiler's
`_Float16` where the probe found it, else half is stored as 16-bit patterns and computed in float
(renderer/cstyle.py's SoftHalfClangLanguage), so half kernels build with any C compiler.
"""
from __future__ import annotations

import functools
import os
import platform
import tempfile

from tinygrad.codegen.kernel import LinearizerOptions
from tinygrad.codegen.program import ProgramSpec
from tinygrad.device import Compiled, CompileError, Compiler, MallocAllocator
from tinygrad.helpers import getenv
from tinygrad.renderer.cstyle import ClangRenderer, soft_half_clang_renderer
from tinygrad.runtime import _cpu
from tinygrad.runtime.graph import NativeGraph
from tinygrad.runtime.host_cc import CFLAGS, host_cc, run_cc
from tinygrad.runtime.host_pool import load_pool

# the csrc/runtime.h version this Python layer was written against
RUNTIME_ABI_VERSION = 1
if _cpu.abi_version() != RUNTIME_ABI_VERSION:
    raise ImportError(f"tinygrad.runtime._cpu was built for runtime ABI {_cpu.abi_version()}, this package expects "
                      f"{RUNTIME_ABI_VERSION}: rebuild it (pip install . or cmake --build)")

def find_cc() -> str:
    """The path of the C compiler kernels are compiled with (see tinygrad.runtime.host_cc)."""
    return host_cc().path


def host_renderer():
    """The C renderer for the host compiler: native `_Float16` where it has it, else half in software."""
    return ClangRenderer if host_cc().float16 else soft_half_clang_renderer


def _host_threads() -> int:
    """The cores this process may run on (at most 8: kernels here are too small to feed more), or fewer where
    OpenMP's own OMP_NUM_THREADS says so (the kernels name their thread count, which would override it)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    cap = getenv("OMP_NUM_THREADS").split(",")[0].strip()
    if cap.isdigit() and int(cap) > 0:
        n = min(n, int(cap))
    return max(1, min(n, 8))


def _host_vector_isa() -> tuple[int, int]:
    """(widest vector in bytes, vector registers) of the host CPU, which -march=native compiles for."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            line = next((ln for ln in f if ln.startswith(("flags", "Features"))), "")
        flags = set(line.split(":", 1)[-1].split())
    except OSError:
        pass
    if "avx512f" in flags:
        return 64, 32
    if "avx" in flags:
        return 32, 16
    # SSE2 on any x86_64, NEON on aarch64: 16-byte vectors
    return 16, 32 if platform.machine() in ("aarch64", "arm64") else 16


_VECTOR_BYTES, _VECTOR_REGISTERS = _host_vector_isa()


class ClangCompiler(Compiler):
    """C source -> shared object bytes."""
    linearizer_opts = LinearizerOptions("CLANG", has_local=False, has_shared=False,
                                        supports_upcast=True, max_vector_bytes=_VECTOR_BYTES,
                                        vector_registers=_VECTOR_REGISTERS, threads=_host_threads(),
                                        narrow_vectors=True, vector_math=True, int_vectors=True)

    def __init__(self, cachekey: str | None = None):
        # the disk cache key names the compiler, its flags and the host CPU (-march=native binaries are per CPU)
        super().__init__(cachekey or f"compile_clang_{_host_fingerprint()}")

    def compile(self, src: str) -> bytes:
        cc = host_cc()
        if not cc.float16 and "_Float16" in src:
            raise CompileError(f"the C compiler {cc.path} has no _Float16 on this machine, which float16 kernels "
                               "need: install gcc (or a clang that has it) and set CC to it")
        # without OpenMP a threaded kernel's pragma is simply ignored: it runs on one thread
        flags = ["-fopenmp"] if cc.openmp and "#pragma omp" in src else []
        with tempfile.TemporaryDirectory(prefix="tinygrad-cc-") as tmp:
            out = os.path.join(tmp, "kernel.so")
            proc = run_cc(cc.path, flags, src, out)
            if proc.returncode != 0:
                raise CompileError(f"the C compiler {cc.path} failed to compile a kernel (set CC to use another):\n"
                                   f"{proc.stderr.decode(errors='replace')}\n--- source ---\n{src}")
            with open(out, "rb") as f:
                return f.read()


@functools.lru_cache(None)
def _host_fingerprint() -> str:
    import hashlib
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pass
    cc = host_cc()
    parts = [cc.path, f"float16={cc.float16}", f"openmp={cc.openmp}", *CFLAGS, platform.machine(),
             platform.processor(), cpu]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


@functools.lru_cache(None)
def _pin_openmp_runtime(gnu: bool) -> object:
    """Load the OpenMP runtime for good before a kernel that uses it: its worker threads outlive every parallel loop,
    so the runtime must never be unloaded with the last kernel library that needed it (a crash at exit). A forked
    child has none of those threads and GNU's runtime would wait for them forever: the child is told to use one
    thread, which the kernels' parallel loops check. Kernels built by gcc run on tinygrad's own pool instead where it
    builds (runtime/host_pool.py), which does the same for a child itself."""
    import ctypes
    import ctypes.util
    # gcc's kernels bind to tinygrad's own pool where it builds (loaded first, its symbols win over libgomp's)
    pool = load_pool(host_cc().path, _host_threads(), _host_fingerprint()) if gnu else None
    if pool is not None:
        return pool
    name = ctypes.util.find_library("gomp" if gnu else "omp") or ("libgomp.so.1" if gnu else "libomp.so")
    try:
        rt = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        # the kernel library names it, so loading the kernel finds it or fails with a clear error
        return None
    os.register_at_fork(after_in_child=lambda: rt.omp_set_num_threads(1))
    return rt


class ClangProgram:
    """A compiled function `name` in the shared object `lib`, called as `prg(*bufs, *vals)` from C++. (`spec`, the
    kernel's ProgramSpec, says nothing a host kernel needs: it loops over its whole iteration space.)"""

    def __init__(self, name: str, lib: bytes, spec: ProgramSpec | None = None):
        self.name, self.lib = name, lib
        if b"libgomp.so" in lib or b"libomp.so" in lib:
            _pin_openmp_runtime(b"libgomp.so" in lib)
        self._prg = _cpu.Device().load_program(name, lib)
        # the C++ program: NativeGraph adds it to graphs, and its call is the launch itself, for callers that pass
        # raw buffers only (engine/plan.pyx)
        self.native = self.direct = self._prg
    # host kernels loop over their whole iteration space: no launch sizes
    default_dims = None

    def __call__(self, *args, global_size=None, local_size=None, vals=(), wait: bool = False):
        self._prg(*args, *vals)


class ClangDevice(Compiled):
    def __init__(self, device: str):
        super().__init__(device, MallocAllocator, ClangCompiler(), ClangProgram, host_renderer(), graph=NativeGraph)
        self.native = _cpu.Device()


__all__ = ["ClangDevice", "ClangCompiler", "ClangProgram", "CompileError", "CFLAGS", "find_cc", "host_renderer"]
