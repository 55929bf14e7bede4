"""HIP C++ -> AMDGPU code object, with a clang that has the amdgcn target and lld (Debian 12's clang-19/lld-19;
no ROCm package is needed: the renderer's kernels use only clang builtins, see renderer/hip.py).

A compiled kernel is kept as a small header (the launch the renderer wrote it for, as for CUDA) and the code object.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import subprocess
import tempfile

from tinygrad.codegen.kernel import LinearizerOptions
from tinygrad.device import CompileError, Compiler
from tinygrad.helpers import getenv
from tinygrad.renderer.gpu import launch_dims, launch_persistent

# the clangs tried in order when AMD_CLANG is not set: the first LLVM releases that know gfx11 and gfx12
CLANG_CANDIDATES = ("clang-19", "clang-20", "clang-18", "clang-17", "clang")
LIB_MAGIC = b"TGAMD01\0"
_HEADER = struct.Struct("<8s7I")  # magic, grid[3], block[3], persistent


def pack_lib(image: bytes, dims, persistent: bool = False) -> bytes:
    grid, block = dims if dims is not None else ((0, 0, 0), (0, 0, 0))
    return _HEADER.pack(LIB_MAGIC, *grid, *block, int(persistent)) + image


def unpack_lib(lib: bytes) -> tuple[bytes, tuple[tuple[int, ...], tuple[int, ...]] | None, bool]:
    """(code object, (grid, block) or None, persistent). A bare code object is accepted as is."""
    if not lib.startswith(LIB_MAGIC):
        return lib, None, False
    _, *f = _HEADER.unpack_from(lib)
    return lib[_HEADER.size:], ((tuple(f[:3]), tuple(f[3:6])) if f[0] else None), bool(f[6])


@functools.cache
def find_amd_clang() -> tuple[str, str]:
    """(path, version line) of the clang that compiles AMD kernels: AMD_CLANG, else the first of CLANG_CANDIDATES on
    PATH that lists the amdgcn target. CompileError naming the packages to install when there is none."""
    names = [getenv("AMD_CLANG")] if getenv("AMD_CLANG") else list(CLANG_CANDIDATES)
    for name in names:
        path = shutil.which(name)
        if path is None:
            continue
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
            targets = subprocess.run([path, "-print-targets"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and "amdgcn" in targets.stdout:
            return path, out.stdout.splitlines()[0]
    raise CompileError(f"no clang with the amdgcn target among {', '.join(names)}: install clang-19 and lld-19 "
                       "(Debian 12: apt-get install clang-19 lld-19) or set AMD_CLANG")


class AMDCompiler(Compiler):
    """HIP source -> code object for one gfx target ("gfx1100"), wave32 on gfx10+ and wave64 before."""

    def __init__(self, arch: str, linearizer_opts: LinearizerOptions | None = None):
        if not re.fullmatch(r"gfx[0-9]+[0-9a-f]*", arch):
            raise ValueError(f"arch must look like 'gfx1100', got {arch!r}")
        self.arch = arch
        self.linearizer_opts = linearizer_opts or LinearizerOptions("AMD", has_local=True, has_shared=True,
                                                                    supports_upcast=True, max_vector_bytes=16,
                                                                    shared_max=64 * 1024)
        super().__init__(None)  # the key names the clang: set at the first compile

    @property
    def options(self) -> list[str]:
        return ["-x", "hip", f"--offload-arch={self.arch}", "-nogpulib", "-nogpuinc", "--cuda-device-only",
                "--no-gpu-bundle-output", "-O3", "-std=c++17", "-ffp-contract=off"]

    def compile_cached(self, src: str) -> bytes:
        if self.cachekey is None:
            path, version = find_amd_clang()
            self.cachekey = f"compile_amd_{self.arch}_{re.sub(r'[^0-9a-zA-Z.]+', '_', version)}"
        return super().compile_cached(src)

    def compile(self, src: str) -> bytes:
        return pack_lib(self.code_object(src), launch_dims(src), launch_persistent(src))

    def code_object(self, src: str) -> bytes:
        """The bare code object of `src` (CompileError with clang's log if it does not compile)."""
        path, _ = find_amd_clang()
        limit = getenv("COMPILE_TIMEOUT")
        with tempfile.TemporaryDirectory(prefix="tinygrad-amd-") as tmp:
            src_path, out = os.path.join(tmp, "kernel.hip"), os.path.join(tmp, "kernel.co")
            with open(src_path, "w") as f:
                f.write(src)
            try:
                proc = subprocess.run([path, *self.options, src_path, "-o", out], capture_output=True, text=True,
                                      timeout=limit if limit > 0 else None)
            except subprocess.TimeoutExpired:
                raise CompileError(f"{path} did not finish within {limit} s (COMPILE_TIMEOUT)") from None
            if proc.returncode != 0:
                raise CompileError(f"{path} failed to compile a kernel for {self.arch}:\n{proc.stderr}\n"
                                   f"--- source ---\n{src}")
            with open(out, "rb") as f:
                return f.read()
