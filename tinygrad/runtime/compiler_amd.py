"""HIP C++ -> AMDGPU code object, with a clang that compiles for the GPU's target and lld (Debian 12's
clang-19/lld-19; no ROCm package is needed: the renderer's kernels use only clang builtins, see renderer/hip.py).

A compiled kernel is the bare code object: how to launch it is the kernel's ProgramSpec, which AMDProgram is given.
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

# the clangs tried in order when AMD_CLANG is not set: the first LLVM releases that know gfx11 and gfx12
CLANG_CANDIDATES = ("clang-19", "clang-20", "clang-18", "clang-17", "clang")


def clang_options(arch: str) -> list[str]:
    """clang's arguments that turn one HIP file into a bare code object for `arch`, linked by lld."""
    return ["-x", "hip", f"--offload-arch={arch}", "-nogpulib", "-nogpuinc", "--cuda-device-only",
            "--no-gpu-bundle-output", "-O3", "-std=c++17", "-ffp-contract=off"]


# the probe's kernel: the smallest that still needs the whole path a real kernel takes (front end, the arch's code
# generator, lld), since a clang may list the amdgcn target yet reject the arch (clang 14 and gfx1100) or lack lld
_PROBE_SRC = 'extern "C" __attribute__((global)) void tg_probe(float* p) { p[0] = 1.0f; }\n'
_EM_AMDGPU = 224
PROBE_TIMEOUT = 60  # seconds: a clang that takes longer for the probe's kernel is counted as not working


@functools.cache
def probe_amd_clang(path: str, arch: str) -> tuple[str | None, str]:
    """(version line, "") when the clang at `path` compiles and links a kernel for `arch` into an AMDGPU code object,
    else (None, why not). Run once per clang and arch in a process."""
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"--version failed: {e}"
    if version.returncode != 0 or not version.stdout.strip():
        return None, f"--version exited with {version.returncode}"
    with tempfile.TemporaryDirectory(prefix="tinygrad-amd-probe-") as tmp:
        src, out = os.path.join(tmp, "probe.hip"), os.path.join(tmp, "probe.co")
        with open(src, "w") as f:
            f.write(_PROBE_SRC)
        try:
            proc = subprocess.run([path, *clang_options(arch), src, "-o", out], capture_output=True, text=True,
                                  timeout=PROBE_TIMEOUT)
        except subprocess.TimeoutExpired:
            return None, f"compiling a test kernel took over {PROBE_TIMEOUT} s"
        except OSError as e:
            return None, str(e)
        if proc.returncode != 0:
            # the first error line says why (an unknown arch, no lld); the rest is clang's usage advice
            errors = [ln.strip() for ln in proc.stderr.splitlines() if "error" in ln] or [proc.stderr.strip()]
            return None, errors[0][:300]
        try:
            with open(out, "rb") as f:
                head = f.read(20)
        except OSError:
            return None, "it wrote no code object"
    if len(head) < 20 or head[:4] != b"\x7fELF" or struct.unpack_from("<H", head, 18)[0] != _EM_AMDGPU:
        return None, "its output is not an AMDGPU ELF"
    return version.stdout.splitlines()[0], ""


@functools.cache
def find_amd_clang(arch: str = "gfx1100") -> tuple[str, str]:
    """(path, version line) of the clang that compiles AMD kernels for `arch`: AMD_CLANG, else the first of
    CLANG_CANDIDATES on PATH that builds a test kernel for it (probe_amd_clang). CompileError naming what each one
    lacks and the packages to install when none does."""
    names = [getenv("AMD_CLANG")] if getenv("AMD_CLANG") else list(CLANG_CANDIDATES)
    tried = []
    for name in names:
        path = shutil.which(name)
        if path is None:
            tried.append(f"{name}: not found")
            continue
        version, why = probe_amd_clang(path, arch)
        if version is not None:
            return path, version
        tried.append(f"{name} ({path}): {why}")
    raise CompileError(f"the AMD device needs a clang that compiles HIP for {arch} and lld to link it; none works:\n  "
                       + "\n  ".join(tried) + "\ninstall clang-19 and lld-19 (Debian 12: apt-get install clang-19 "
                       "lld-19) or set AMD_CLANG to such a clang")


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
        return clang_options(self.arch)

    def compile_cached(self, src: str) -> bytes:
        if self.cachekey is None:
            path, version = find_amd_clang(self.arch)
            self.cachekey = f"compile_amd_{self.arch}_{re.sub(r'[^0-9a-zA-Z.]+', '_', version)}"
        return super().compile_cached(src)

    def compile(self, src: str) -> bytes:
        return self.code_object(src)

    def code_object(self, src: str) -> bytes:
        """The bare code object of `src` (CompileError with clang's log if it does not compile)."""
        path, _ = find_amd_clang(self.arch)
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
