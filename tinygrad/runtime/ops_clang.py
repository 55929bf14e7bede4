"""The CLANG device: kernels rendered as C, compiled by the host C compiler, loaded and called from C++.

The compiler is clang when it is on PATH, else the system `cc` (gcc), with the same flags; `CC=...` overrides.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

from tinygrad.codegen.kernel import LinearizerOptions
from tinygrad.device import Compiled, Compiler, MallocAllocator
from tinygrad.helpers import getenv
from tinygrad.renderer.cstyle import ClangRenderer
from tinygrad.runtime import _cpu

# the csrc/runtime.h version this Python layer was written against
RUNTIME_ABI_VERSION = 1
if _cpu.abi_version() != RUNTIME_ABI_VERSION:
    raise ImportError(f"tinygrad.runtime._cpu was built for runtime ABI {_cpu.abi_version()}, this package expects "
                      f"{RUNTIME_ABI_VERSION}: rebuild it (pip install . or cmake --build)")

# -ffp-contract=off: no fused multiply-add; -fexcess-precision=standard: every half result is rounded to half, as
# PyTorch rounds each op: results match the reference bit for bit where C allows
CFLAGS = ("-shared", "-fPIC", "-O2", "-march=native", "-ffp-contract=off", "-fexcess-precision=standard",
          "-fno-math-errno", "-fno-strict-aliasing",
          "-x", "c")


@functools.lru_cache(None)
def find_cc() -> str:
    """The C compiler to use: $CC, else clang, else cc."""
    cc = getenv("CC") or shutil.which("clang") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("no C compiler found for the CLANG device: install clang or gcc, or set CC")
    return cc


class ClangCompiler(Compiler):
    """C source -> shared object bytes."""
    linearizer_opts = LinearizerOptions("CLANG", supports_float4=False, has_local=False, has_shared=False)

    def __init__(self, cachekey: str | None = None):
        # the disk cache key names the compiler, its flags and the host CPU (-march=native binaries are per CPU)
        super().__init__(cachekey or f"compile_clang_{_host_fingerprint()}")

    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="tinygrad-cc-") as tmp:
            out = os.path.join(tmp, "kernel.so")
            proc = subprocess.run([find_cc(), *CFLAGS, "-", "-o", out, "-lm"], input=src.encode(),
                                  capture_output=True)
            if proc.returncode != 0:
                raise CompileError(f"{find_cc()} failed to compile a kernel:\n{proc.stderr.decode(errors='replace')}"
                                   f"\n--- source ---\n{src}")
            with open(out, "rb") as f:
                return f.read()


@functools.lru_cache(None)
def _host_fingerprint() -> str:
    import hashlib
    import platform
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pass
    parts = [find_cc(), *CFLAGS, platform.machine(), platform.processor(), cpu]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


class CompileError(RuntimeError):
    """The device compiler rejected a kernel; the message carries its log and the source."""


class ClangProgram:
    """A compiled function `name` in the shared object `lib`, called as `prg(*bufs, *vals)` from C++."""

    def __init__(self, name: str, lib: bytes):
        self.name, self.lib = name, lib
        self._library = _cpu.Library(lib)
        self._prg = _cpu.Program(self._library, name)
        # the C++ launch itself, for callers that pass raw buffers only (engine/plan.pyx)
        self.direct = self._prg

    def __call__(self, *args, global_size=None, local_size=None, vals=(), wait: bool = False):
        self._prg(*args, *vals)


class ClangDevice(Compiled):
    def __init__(self, device: str):
        super().__init__(device, MallocAllocator, ClangCompiler(), ClangProgram, ClangRenderer)
