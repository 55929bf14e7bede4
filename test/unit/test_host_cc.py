"""The host C compiler is chosen by probing: one without _Float16 (clang 14 on x86) loses to one with it, OpenMP is used
only where it builds, and a compiler that is missing, broken or hangs gives a CompileError naming it and the knob.
The compilers here are small shell scripts in front of the real one, each missing one feature."""
import os
import shutil
import stat
import textwrap

import numpy as np
import pytest

from tinygrad.device import CompileError
from tinygrad.helpers import Context
from tinygrad.runtime import host_cc as H

REAL = shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")
# the scripts' own tools (and the real compiler's assembler and linker) come from the PATH tests start with
TOOLS_PATH = os.environ.get("PATH", "/usr/bin:/bin")
pytestmark = pytest.mark.skipif(REAL is None or os.name != "posix", reason="needs a C compiler and a POSIX shell")


def script(folder, name: str, body: str) -> str:
    path = folder / name
    path.write_text(f"#!/bin/sh\nPATH='{TOOLS_PATH}'\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def wrapper(folder, name: str, refuse: str = "", log: str = "") -> str:
    """A compiler that runs the real one, but fails like a compiler that lacks `refuse` (a source word or a flag)."""
    return script(folder, name, f"""
        src=$(cat)
        {f'echo "$*" >> {log}' if log else ''}
        case "$src $*" in *"{refuse or '@@never@@'}"*) echo "error: {refuse} is not supported" >&2; exit 1;; esac
        printf '%s' "$src" | exec {REAL} "$@"
    """)


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No remembered choice, no disk cache, and a PATH of only the test's compilers."""
    monkeypatch.delenv("CC", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    H.host_cc.cache_clear()
    with Context(CACHELEVEL=0):
        yield bin_dir
    H.host_cc.cache_clear()


def test_a_compiler_without_float16_loses_to_one_with_it(fresh):
    wrapper(fresh, "clang", refuse="_Float16")
    gcc = wrapper(fresh, "cc")
    chosen = H.host_cc()
    assert chosen.path == os.path.realpath(gcc) and chosen.float16 and chosen.openmp


def test_without_any_float16_the_first_working_one_is_used(fresh):
    clang = wrapper(fresh, "clang", refuse="_Float16")
    chosen = H.host_cc()
    assert chosen.path == os.path.realpath(clang) and not chosen.float16


def test_openmp_only_where_it_builds(fresh, tmp_path):
    log = tmp_path / "calls.log"
    cc = wrapper(fresh, "cc", refuse="-fopenmp", log=str(log))
    assert H.host_cc() == H.HostCC(os.path.realpath(cc), True, False)
    from tinygrad.runtime.ops_clang import ClangCompiler
    log.write_text("")
    src = "void tg_k(float *a) {\n#pragma omp parallel for\n  for (int i = 0; i < 64; i++) a[i] = 1;\n}\n"
    assert len(ClangCompiler("test_no_disk_cache").compile(src)) > 0
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and "-fopenmp" not in calls[0], "a threaded kernel compiles once, without OpenMP"


def test_explicit_cc_without_float16_names_itself_for_half_kernels(fresh, monkeypatch):
    from tinygrad.runtime.ops_clang import ClangCompiler
    monkeypatch.setenv("CC", wrapper(fresh, "oldclang", refuse="_Float16"))
    c = ClangCompiler("test_no_disk_cache")
    assert len(c.compile("float k(float *a) { return a[0]; }\n")) > 0
    with pytest.raises(CompileError, match="oldclang has no _Float16 .*set CC"):
        c.compile("_Float16 k(_Float16 *a) { return a[0]; }\n")


def test_missing_compiler_names_cc(fresh, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(CompileError, match="CC='/nonexistent/cc' is not a program that can be run"):
        H.host_cc()


def test_no_compiler_at_all(fresh):
    with pytest.raises(CompileError, match="no C compiler found"):
        H.host_cc()


def test_a_hanging_compiler_is_stopped(fresh, monkeypatch):
    monkeypatch.setenv("CC", script(fresh, "slowcc", "sleep 30\n"))
    monkeypatch.setenv("COMPILE_TIMEOUT", "1")
    with pytest.raises(CompileError, match="did not finish within 1 s .COMPILE_TIMEOUT"):
        H.host_cc()


def test_a_compiler_that_hangs_on_one_kernel(fresh, monkeypatch):
    from tinygrad.runtime.ops_clang import ClangCompiler
    monkeypatch.setenv("CC", script(fresh, "pickycc", f"""
        src=$(cat)
        case "$src" in *tg_hang*) sleep 30;; esac
        printf '%s' "$src" | exec {REAL} "$@"
    """))
    monkeypatch.setenv("COMPILE_TIMEOUT", "1")
    c = ClangCompiler("test_no_disk_cache")
    with pytest.raises(CompileError, match="pickycc did not finish"):
        c.compile("void tg_hang(float *a) { a[0] = 1; }\n")


def test_the_chosen_compiler_runs_kernels(fresh):
    wrapper(fresh, "clang", refuse="_Float16")
    wrapper(fresh, "gcc")
    from tinygrad import Tensor, dtypes
    from tinygrad.runtime.ops_clang import ClangCompiler
    assert H.host_cc().float16
    lib = ClangCompiler("test_no_disk_cache").compile("_Float16 tg_k(_Float16 *a) { return a[0] * 2; }\n")
    assert len(lib) > 0
    np.testing.assert_array_equal((Tensor([1.0, 2.0], dtype=dtypes.float16) * 3).numpy(), [3.0, 6.0])


def test_a_changed_compiler_is_probed_again(fresh, tmp_path, monkeypatch):
    # the probe is remembered in the disk cache by the compiler binary; a replaced binary must not reuse it
    monkeypatch.setenv("CACHEDB", str(tmp_path / "cache.db"))
    with Context(CACHELEVEL=2):
        cc = wrapper(fresh, "cc")
        assert H.host_cc().float16
        H.host_cc.cache_clear()
        os.remove(cc)
        wrapper(fresh, "cc", refuse="_Float16 ")  # a different binary: other size and modification time
        assert not H.host_cc().float16
