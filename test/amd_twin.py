"""Host twins of AMD kernels, for the fake KFD (test/native/fake_kfd.cpp): the renderer's HIP source compiled by
the host's g++ (after test/native/hip_twin.h defines the amdgcn builtins it uses), wrapped in an AMDGPU code
object whose kernel descriptor is real and whose code is a token naming that shared library. The AMD runtime loads
and dispatches it like any code object; the fake GPU, finding the token at the kernel's entry, runs the twin.

    AMDDevice.compiler_class = TwinCompiler      (native_doubles.install_fake_kfd does this)
"""
from __future__ import annotations

import hashlib
import os
import re
import struct
import subprocess
import tempfile
from pathlib import Path

from tinygrad.device import CompileError, Compiler

ROOT = Path(__file__).resolve().parents[1]
SHIM = ROOT / "test" / "native" / "hip_twin.h"
TWINS = ROOT / "build" / "test-native" / "twins"
TWIN_MAGIC = b"TGTWIN01"
# EF_AMDGPU_MACH (+ xnack/sramecc "any" on CDNA), as clang-19 writes them
E_FLAGS = {"gfx1100": 0x41, "gfx90a": 0x53F, "gfx942": 0x54C}
_SIGNATURE = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\((.*)\) \{')


def kernarg_layout(params: list[str]) -> tuple[list[int], int]:
    """Offsets of the kernel's parameters and the segment's size: pointers 8 bytes, ints 4, naturally aligned (the
    AMD runtime's AmdProgram::arg_offsets, and clang's layout of such a kernarg segment)."""
    offsets, at = [], 0
    for p in params:
        size = 8 if "*" in p else 4
        at = -(-at // size) * size
        offsets.append(at)
        at += size
    return offsets, -(-at // 8) * 8


def _twin_source(src: str, wave: int) -> str:
    m = _SIGNATURE.search(src)
    if m is None:
        raise CompileError("no kernel signature in the HIP source")
    name, params = m.group(1), [p.strip() for p in m.group(2).split(", ") if p.strip()]
    offsets, _ = kernarg_layout(params)
    args = []
    for p, off in zip(params, offsets):
        ctype = p.replace("__restrict__", "").rsplit(" ", 1)[0].strip()
        if "*" not in ctype:
            ctype = ctype.replace("const ", "")
        args.append(f"tg_twin::arg<{ctype}>(ka, {off})")
    body = src[m.start():]
    fibers = "tg_barrier()" in body or "tg_shfl_down(" in body or "tg_wmma_" in body
    return (src + "\nstatic void tg_twin_body(void* ka) {\n"
            f"  {name}({', '.join(args)});\n}}\n"
            'extern "C" void tg_twin_launch(const void* packet, void* kernargs) {\n'
            f"  tg_twin::launch(packet, tg_twin_body, kernargs, {'true' if fibers else 'false'}, {wave});\n}}\n")


def build_twin(src: str, wave: int) -> Path:
    """The host twin of `src` as a shared library, compiled once per source (kept in build/test-native/twins)."""
    twin = _twin_source(src, wave)
    digest = hashlib.sha256(SHIM.read_bytes() + twin.encode()).hexdigest()[:32]
    path = TWINS / f"{digest}.so"
    if path.exists():
        return path
    TWINS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tinygrad-twin-") as tmp:
        cpp, so = os.path.join(tmp, "twin.cpp"), os.path.join(tmp, "twin.so")
        Path(cpp).write_text(twin)
        out = subprocess.run(["g++", "-std=c++17", "-O1", "-w", "-shared", "-fPIC", "-include", str(SHIM), cpp,
                              "-o", so], capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise CompileError(f"g++ failed to build a host twin:\n{out.stderr[:6000]}\n--- source ---\n{src}")
        os.replace(so, path)  # atomic: parallel test processes never load half a file
    return path


def code_object(name: str, kernarg_size: int, arch: str, code: bytes, wave32: bool) -> bytes:
    """A minimal AMDGPU code object: ELF64 ET_DYN for EM_AMDGPU with one kernel, its 64-byte descriptor in .rodata
    under "<name>.kd" and `code` at the descriptor's entry in .text."""
    kd_addr, text_addr = 0x100, 0x200
    props = (1 << 3) | ((1 << 10) if wave32 else 0)  # kernarg segment pointer; wave32
    kd = struct.pack("<IIII q 20x III HH 4x", 0, 0, kernarg_size, 0, text_addr - kd_addr, 0, 0, 0, props, 0)
    assert len(kd) == 64
    dynstr = b"\0" + name.encode() + b".kd\0"
    dynsym = bytes(24) + struct.pack("<IBBHQQ", 1, (1 << 4) | 1, 0, 1, kd_addr, 64)  # GLOBAL OBJECT in .rodata
    shstr = b"\0.rodata\0.text\0.dynsym\0.dynstr\0.shstrtab\0"
    body = bytearray(text_addr + len(code))
    body[kd_addr:kd_addr + 64] = kd
    body[text_addr:] = code
    sym_off = -(-len(body) // 8) * 8
    str_off = sym_off + len(dynsym)
    shstr_off = str_off + len(dynstr)
    sh_off = -(-(shstr_off + len(shstr)) // 8) * 8

    def sh(name_off, typ, flags, addr, off, size, link=0, entsize=0, align=1):
        return struct.pack("<IIQQQQIIQQ", name_off, typ, flags, addr, off, size, link, 0, align, entsize)
    sections = [bytes(64),
                sh(1, 1, 2, kd_addr, kd_addr, 64, align=64),                     # .rodata: PROGBITS, ALLOC
                sh(9, 1, 6, text_addr, text_addr, len(code), align=256),         # .text: PROGBITS, ALLOC|EXEC
                sh(15, 11, 0, 0, sym_off, len(dynsym), link=4, entsize=24, align=8),  # .dynsym
                sh(23, 3, 0, 0, str_off, len(dynstr)),                           # .dynstr
                sh(31, 3, 0, 0, shstr_off, len(shstr))]                          # .shstrtab
    ident = b"\x7fELF" + bytes([2, 1, 1, 64, 3]) + bytes(7)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 224, 1, 0, 0, sh_off, E_FLAGS.get(arch, 0), 64, 56, 0, 64,
                                 len(sections), 5)
    out = bytearray(header) + body[64:]
    out += bytes(sym_off - len(out)) + dynsym + dynstr + shstr
    out += bytes(sh_off - len(out)) + b"".join(sections)
    return bytes(out)


class TwinCompiler(Compiler):
    """The AMD compiler's stand-in under the fake KFD: HIP source -> a code object whose kernel is a host twin."""

    def __init__(self, arch: str, linearizer_opts=None):
        from tinygrad.runtime.compiler_amd import AMDCompiler
        self.arch = arch
        self.wave = 64 if arch.startswith("gfx9") else 32  # CDNA (gfx9) runs wave64; RDNA compiles for wave32
        self.linearizer_opts = linearizer_opts or AMDCompiler(arch).linearizer_opts
        super().__init__(None)  # no disk cache: the twins folder is the cache, and the tokens name its files

    def compile(self, src: str) -> bytes:
        m = _SIGNATURE.search(src)
        if m is None:
            raise CompileError("no kernel signature in the HIP source")
        path = str(build_twin(src, self.wave)).encode()
        token = TWIN_MAGIC + struct.pack("<I", len(path)) + path + b"\0"
        _, size = kernarg_layout([p for p in m.group(2).split(", ") if p.strip()])
        return code_object(m.group(1), size, self.arch, token, self.wave == 32)
