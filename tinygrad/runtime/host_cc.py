"""Choosing the host C compiler for the CLANG and CPU devices, by probing what each candidate supports.

Candidates: `CC` alone when it is set; else `clang`, `cc` and `gcc` from PATH, in that order. Each is probed once
(per compiler binary, remembered in the disk cache) for three things: does it build a shared object from C with the
kernels' flags at all, does it know `_Float16` (clang 14 on x86 does not; gcc 12 does), and does `-fopenmp` build
and link (clang without libomp installed does not). The first candidate with `_Float16` wins, so half kernels are
native wherever any compiler on the machine can build them; without one, the first that works at all is used and
half kernels are rendered with half in software (16-bit storage, float arithmetic: renderer/cstyle.py's
SoftHalfClangLanguage). OpenMP is used only where the probe found it, so a threaded kernel is compiled once, not
tried twice.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from typing import NamedTuple

from tinygrad.device import CompileError
from tinygrad.diskcache import diskcache_get, diskcache_put
from tinygrad.helpers import getenv

# -ffp-contract=off: no fused multiply-add; -fexcess-precision=standard: every half result is rounded to half, as
# PyTorch rounds each op: results match the reference bit for bit where C allows
# NOTE: -fno-tree-slp-vectorize: gcc 12 with -march=native (AVX-512) and -fno-math-errno miscompiled a masked softmax
# over a symbolic length (every row but the first took one value; test_symbolic_tensor.py has it), with the SLP and
# the loop vectorizer both on. The kernels' own vector types are not SLP's work, so little speed goes with it
CFLAGS = ("-shared", "-fPIC", "-O2", "-march=native", "-ffp-contract=off", "-fexcess-precision=standard",
          "-fno-math-errno", "-fno-strict-aliasing", "-fno-tree-slp-vectorize",
          "-x", "c")

_PLAIN = "float tg_probe(float x) { return x * 2.0f; }\n"
_HALF = "_Float16 tg_probe(_Float16 x) { return (_Float16)(x * x); }\n"
_OPENMP = ("void tg_probe(float *a, int n) {\n#pragma omp parallel for\n"
           "  for (int i = 0; i < n; i++) a[i] = a[i] * 2.0f;\n}\n")


class HostCC(NamedTuple):
    """The chosen compiler: its path, and what the probe found it supports."""
    path: str
    float16: bool
    openmp: bool


def run_cc(cc: str, flags: list[str], src: str, out: str) -> subprocess.CompletedProcess:
    """`cc` on `src` (from stdin) into `out`, within COMPILE_TIMEOUT seconds; CompileError naming the compiler and
    the knobs when it can't be run or does not finish."""
    limit = getenv("COMPILE_TIMEOUT")
    try:
        return subprocess.run([cc, *CFLAGS, *flags, "-", "-o", out, "-lm"], input=src.encode(), capture_output=True,
                              timeout=limit if limit > 0 else None)
    except subprocess.TimeoutExpired:
        raise CompileError(f"the C compiler {cc} did not finish within {limit} s (COMPILE_TIMEOUT); set CC to "
                           "another compiler or raise COMPILE_TIMEOUT") from None
    except OSError as e:
        raise CompileError(f"the C compiler {cc} can't be run ({e.strerror or e}); set CC to a working compiler "
                           "(gcc or clang)") from None


def _builds(cc: str, src: str, flags: tuple[str, ...] = ()) -> bool:
    """Whether `cc` builds `src`; CompileError if it can't be run at all or does not finish."""
    with tempfile.TemporaryDirectory(prefix="tinygrad-probe-") as tmp:
        return run_cc(cc, list(flags), src, os.path.join(tmp, "probe.so")).returncode == 0


def _probe(cc: str) -> tuple[bool, bool] | None:
    """(knows _Float16, builds -fopenmp) for compiler `cc`, or None if it can't build a plain kernel (CompileError
    if it can't be run or hangs). Remembered in the disk cache by the compiler binary's path, size and modification
    time (and the flags)."""
    try:
        st = os.stat(cc)
    except OSError as e:
        raise CompileError(f"the C compiler {cc} can't be run ({e.strerror}); set CC to a working compiler") from None
    key = f"{os.path.realpath(cc)}\0{st.st_size}\0{st.st_mtime_ns}\0{' '.join(CFLAGS)}"
    hit = diskcache_get("cc_probe", key)
    if hit is not None and len(hit) == 3:
        return None if hit[0] == 0 else (hit[1] == 1, hit[2] == 1)
    works = _builds(cc, _PLAIN)
    found = (_builds(cc, _HALF), _builds(cc, _OPENMP, ("-fopenmp",))) if works else None
    diskcache_put("cc_probe", key, bytes([1, *found]) if found else bytes(3))
    return found


def candidates() -> list[str]:
    """Compilers to consider, in order of preference (resolved paths, no repeats)."""
    explicit = getenv("CC")
    if explicit:
        path = shutil.which(explicit)
        if path is None:
            raise CompileError(f"CC={explicit!r} is not a program that can be run: set CC to a C compiler (gcc or "
                               "clang) or unset it to let tinygrad find one")
        return [path]
    found = [shutil.which(name) for name in ("clang", "cc", "gcc")]
    return list(dict.fromkeys(os.path.realpath(p) for p in found if p))


@functools.lru_cache(None)
def host_cc() -> HostCC:
    """The compiler the CLANG and CPU devices use (see the module docstring)."""
    cands = candidates()
    if not cands:
        raise CompileError("no C compiler found for the CLANG device: install gcc or clang, or set CC")
    working, problems = [], []
    for cc in cands:
        try:
            found = _probe(cc)
        except CompileError as e:
            problems.append(str(e))
            continue
        if found is None:
            problems.append(f"{cc} could not build a shared object with the flags {' '.join(CFLAGS)}")
            continue
        if found[0]:
            return HostCC(cc, *found)
        working.append(HostCC(cc, *found))
    if working:
        return working[0]
    raise CompileError("no working C compiler for the CLANG device: " + "; ".join(problems))
