"""Half precision on a C compiler without `_Float16` (clang 14 on x86): buffers hold the 16-bit patterns, values are
computed in float, and the conversions are the C prelude's bit manipulation. Checked against numpy's float16 (the
conversions exhaustively or nearly), against the native `_Float16` kernels bit for bit where the compiler has them,
and end to end in a fresh process under a compiler that refuses `_Float16` (and under clang-14 where it exists)."""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

from tinygrad import Device, Tensor, dtypes
from tinygrad.engine import realize
from tinygrad.helpers import CACHELEVEL, Context
from tinygrad.renderer.cstyle import SOFT_HALF_PRELUDE, soft_half_clang_renderer
from tinygrad.runtime.host_cc import host_cc, run_cc
from tinygrad.runtime.ops_clang import ClangCompiler

REAL = shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(REAL is None or os.name != "posix", reason="needs a C compiler and a POSIX shell")

# the special values every test meets: signed zeros, the smallest subnormal and its neighbours, the largest
# subnormal, the smallest normal, 65504 and the ties around it, inf and nan
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 3 * 2.0 ** -26, 1023 * 2.0 ** -24,
                    2.0 ** -14, 65504.0, 65519.99, 65520.0, 65536.0, -65520.0, 1e9, np.inf, -np.inf, np.nan,
                    1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 2049.0, 2051.0, 0.1, -0.3, 1e-8, 6e-8], dtype=np.float32)


@pytest.fixture(scope="module")
def conv():
    """The prelude's conversions, compiled by the host compiler and callable from numpy through ctypes."""
    src = SOFT_HALF_PRELUDE + textwrap.dedent("""
        void to_f32(const unsigned short *h, float *out, int n) {
          for (int i = 0; i < n; i++) out[i] = tg_f16_to_f32(h[i]);
        }
        void to_f16(const float *f, unsigned short *out, int n) {
          for (int i = 0; i < n; i++) out[i] = tg_f32_to_f16(f[i]);
        }
        void round(const float *f, float *out, int n) {
          for (int i = 0; i < n; i++) out[i] = tg_f16_round(f[i]);
        }
        void from_f64(const double *d, float *out, int n) {
          for (int i = 0; i < n; i++) out[i] = tg_f16_cast(d[i]);
        }
    """)
    folder = tempfile.mkdtemp()
    try:
        lib_path = os.path.join(folder, "conv.so")
        proc = run_cc(host_cc().path, [], src, lib_path)
        assert proc.returncode == 0, proc.stderr.decode()
        lib = ctypes.CDLL(lib_path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    def call(name: str, x: np.ndarray, out_dtype) -> np.ndarray:
        x = np.ascontiguousarray(x)
        out = np.empty(x.shape, out_dtype)
        getattr(lib, name)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data), ctypes.c_int(x.size))
        return out
    return call


def _same_half(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit patterns, except that any nan matches any nan."""
    got_bits, want_bits = got.astype(np.float16).view(np.uint16), want.astype(np.float16).view(np.uint16)
    nan = np.isnan(want.astype(np.float16))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float16)), nan)
    np.testing.assert_array_equal(got_bits[~nan], want_bits[~nan])


def test_every_half_converts_to_float_exactly(conv):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = conv("to_f32", bits, np.float32)
    want = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    # a nan keeps its payload and its sign
    np.testing.assert_array_equal(got[nan].view(np.uint32) >> 13, want[nan].view(np.uint32) >> 13)


def test_float_to_half_rounds_to_nearest_even(conv):
    rng = np.random.default_rng(0)
    # random bit patterns (every exponent), every float in the half range near the ties, and the specials
    rand = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    halves = halves[np.isfinite(halves)]
    near = np.concatenate([halves, (halves.view(np.uint32) + 0x1000).view(np.float32),  # ties
                           (halves.view(np.uint32) + 0xfff).view(np.float32), (halves.view(np.uint32) + 0x1001)
                           .view(np.float32), (halves / 2), halves * np.float32(1.5)])
    # the ties below the smallest normal (the subnormals' halfway points) and around it
    sub = np.arange(-64, 2048 * 4, dtype=np.float32) * np.float32(2.0 ** -26)
    x = np.concatenate([rand, near.astype(np.float32), sub, SPECIAL])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    got = conv("to_f16", x, np.uint16).view(np.float16)
    _same_half(got, want)
    # the rounding after every op, which stays in float
    rounded = conv("round", x, np.float32)
    _same_half(rounded, want)
    np.testing.assert_array_equal(rounded[~np.isnan(rounded)], want[~np.isnan(want)].astype(np.float32))


def test_double_to_half_rounds_once(conv):
    # doubles just past a half tie round up, though rounding them to float first lands on the tie (and then to even)
    halves = np.arange(0x0001, 0x7c00, 7, dtype=np.uint16).view(np.float16).astype(np.float64)
    ulp = np.spacing(halves.astype(np.float16)).astype(np.float64)
    x = np.concatenate([halves + ulp / 2 + 2.0 ** -40 * halves, halves + ulp / 2,
                        halves - ulp / 2 - 2.0 ** -40 * halves, -halves - ulp / 2 - 1e-12 * halves,
                        SPECIAL.astype(np.float64), [1e300, -1e300, 1e-300]])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    _same_half(conv("from_f64", x, np.float32), want)


@pytest.fixture
def soft(monkeypatch):
    """The default device renders half in software for the test, with a fresh method cache and no rendered-kernel disk
    cache (CACHELEVEL 1: every kernel is rendered), recording every source it makes."""
    dev = Device[Device.DEFAULT]
    if not isinstance(dev.compiler, ClangCompiler):
        pytest.skip("the default device is not a host C device")
    sources: list[str] = []

    def render(name, uops):
        spec = soft_half_clang_renderer(name, uops)
        sources.append(spec.src)
        return spec
    monkeypatch.setattr(dev, "renderer", render)
    monkeypatch.setattr(realize, "method_cache", {})
    with Context(CACHELEVEL=min(CACHELEVEL.value, 1)):
        yield sources
    assert sources and not any("_Float16" in s for s in sources)


def _cases() -> dict:
    """name -> a function of nothing returning a Tensor that ends in half (or comes from it): run in both modes."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((33, 47)).astype(np.float32) * 3
    b = rng.standard_normal((47, 21)).astype(np.float32)
    with np.errstate(over="ignore"):
        sp = SPECIAL.astype(np.float16)
    # NOTE: max_where, math, sum and matmul are checked against the native kernels only: max(0, -0) is a framework
    # choice, and the others are not numpy's own order of operations
    return {
        "cast_f32_to_half": lambda: Tensor(SPECIAL).cast(dtypes.half),
        "cast_f64_to_half": lambda: Tensor(SPECIAL.astype(np.float64)).cast(dtypes.half),
        "cast_int_to_half": lambda: Tensor(np.array([0, 1, -7, 2049, 65519, 65521, 1 << 20], np.int32))
        .cast(dtypes.half),
        "cast_half_to_f32": lambda: Tensor(sp).cast(dtypes.float32),
        "cast_half_to_int": lambda: Tensor(np.array([1.5, -2.75, 2048, -65504], np.float16)).cast(dtypes.int32),
        "arith": lambda: (Tensor(a[0]).cast(dtypes.half) * 1.7 + Tensor(a[1]).cast(dtypes.half)) / 3.1 - 0.2,
        "specials_arith": lambda: Tensor(sp) * Tensor(sp[::-1].copy()) + Tensor(sp),
        "overflow": lambda: Tensor(np.array([60000, 40000, -50000, 300], np.float16)) * 2,
        "underflow": lambda: Tensor(np.array([2.0 ** -14, 3 * 2.0 ** -24, 2.0 ** -24, -1e-4], np.float16)) * 0.5,
        "math": lambda: Tensor(np.abs(a[2]).astype(np.float16)).sqrt().exp().log() + Tensor(a[3]).cast(dtypes.half)
        .sin(),
        "max_where": lambda: Tensor(sp).maximum(Tensor(sp[::-1].copy())),
        "sum": lambda: Tensor(a.astype(np.float16)).sum(axis=1),
        "matmul": lambda: Tensor(a.astype(np.float16)) @ Tensor(b.astype(np.float16)),
        "bitcast": lambda: Tensor(np.array([1.0, -2.0, 65504], np.float16)).bitcast(dtypes.int16),
        "bitcast_to_half": lambda: Tensor(np.array([0x3c00, 0x7c00, 0x0001, -1], np.int16)).bitcast(dtypes.half),
    }


def _numpy_reference() -> dict:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((33, 47)).astype(np.float32) * 3
    h = np.float16
    with np.errstate(all="ignore"):
        sp = SPECIAL.astype(h)
        return {
            "cast_f32_to_half": SPECIAL.astype(h),
            "cast_f64_to_half": SPECIAL.astype(np.float64).astype(h),
            "cast_int_to_half": np.array([0, 1, -7, 2049, 65519, 65521, 1 << 20], np.int32).astype(h),
            "cast_half_to_f32": sp.astype(np.float32),
            "cast_half_to_int": np.array([1, -2, 2048, -65504], np.int32),
            "arith": (a[0].astype(h) * h(1.7) + a[1].astype(h)) / h(3.1) - h(0.2),
            "specials_arith": sp * sp[::-1] + sp,
            "overflow": np.array([60000, 40000, -50000, 300], h) * h(2),
            "underflow": np.array([2.0 ** -14, 3 * 2.0 ** -24, 2.0 ** -24, -1e-4], h) * h(0.5),
            "bitcast": np.array([1.0, -2.0, 65504], h).view(np.int16),
            "bitcast_to_half": np.array([0x3c00, 0x7c00, 0x0001, -1], np.int16).view(h),
        }


@pytest.mark.parametrize("case", list(_cases()))
def test_soft_half_matches_numpy(soft, case):
    with np.errstate(all="ignore"):
        got = _cases()[case]().numpy()
    want = _numpy_reference().get(case)
    if want is not None:
        assert got.dtype == want.dtype
        if want.dtype == np.float16:
            _same_half(got, want)
        else:
            np.testing.assert_array_equal(got, want)


def test_soft_half_matmul_is_close_to_float(soft):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((64, 96)).astype(np.float16), rng.standard_normal((96, 40)).astype(np.float16)
    got = (Tensor(a) @ Tensor(b)).numpy()
    assert got.dtype == np.float16
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(got.astype(np.float32), want, atol=0.06, rtol=1e-2)


@pytest.mark.skipif(not host_cc().float16, reason="the host compiler has no native half to compare with")
def test_soft_half_is_bit_identical_to_native(monkeypatch):
    native = {name: fn().numpy() for name, fn in _cases().items()}
    dev = Device[Device.DEFAULT]
    if not isinstance(dev.compiler, ClangCompiler):
        pytest.skip("the default device is not a host C device")
    monkeypatch.setattr(dev, "renderer", soft_half_clang_renderer)
    monkeypatch.setattr(realize, "method_cache", {})
    for name, fn in _cases().items():
        got, want = fn().numpy(), native[name]
        assert got.dtype == want.dtype, name
        if want.dtype == np.float16:
            _same_half(got, want)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_vectors_of_half_are_refused():
    from tinygrad.renderer.cstyle import SoftHalfClangLanguage
    with pytest.raises(NotImplementedError, match="vectors of half"):
        SoftHalfClangLanguage().render_dtype(dtypes.half.vec(4))


# a fresh process, where the compiler the probe picks decides the rendering
_SCRIPT = """
import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.runtime.host_cc import host_cc
from tinygrad.runtime.ops_clang import host_renderer
assert not host_cc().float16 and host_renderer().__name__ == "soft_half_clang_renderer", host_cc()
x = np.array([1.5, 2.25, 65504, 2.0 ** -24, np.inf, np.nan, 1 + 2.0 ** -11], np.float32)
got = (Tensor(x).cast(dtypes.half) * 2).numpy()
with np.errstate(over="ignore"):
    want = x.astype(np.float16) * np.float16(2)
assert got.dtype == np.float16 and np.array_equal(got, want, equal_nan=True), (got, want)
a = np.random.default_rng(0).standard_normal((16, 24)).astype(np.float16)
m = (Tensor(a) @ Tensor(a.T.copy())).numpy()
assert np.allclose(m.astype(np.float32), a.astype(np.float32) @ a.T.astype(np.float32), atol=0.05, rtol=1e-2)
print("ok")
"""


def _run_script(cc: str, tmp_path, script: str = _SCRIPT) -> None:
    env = {**os.environ, "CC": cc, "CACHEDB": str(tmp_path / "cache.db"), "CACHELEVEL": "2"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_a_compiler_without_float16_runs_half_kernels(tmp_path):
    # the same kernels rendered first for a compiler with _Float16, into the same disk cache: the rendered-kernel cache
    # must not hand that source to the one without
    native = _SCRIPT.replace("assert not host_cc().float16 and", "assert")
    native = native.replace('host_renderer().__name__ == "soft_half_clang_renderer"', "host_cc().float16")
    _run_script(REAL, tmp_path, native)
    cc = tmp_path / "nohalfcc"
    cc.write_text("#!/bin/sh\nsrc=$(cat)\n"
                  'case "$src" in *_Float16*) echo "error: _Float16 is not supported" >&2; exit 1;; esac\n'
                  f"printf '%s' \"$src\" | exec {REAL} \"$@\"\n")
    cc.chmod(0o755)
    _run_script(str(cc), tmp_path)


@pytest.mark.skipif(shutil.which("clang-14") is None, reason="clang-14 is not installed")
def test_clang14_runs_half_kernels(tmp_path):
    _run_script("clang-14", tmp_path)
