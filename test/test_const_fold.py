"""Constant folding (tinygrad/const_fold.py, LazyBuffer): an op on constants needs no kernel, and its folded value is
the value the kernel computes for the same op on buffers holding those constants (the oracle: the same expression
with realized inputs). Only exact rewrites of non-constant operands: x*0 and x+0 of floats stay kernels (nan, inf
and -0.0 make them differ), which tinygrad 0.9 folded."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinygrad import Tensor, dtypes
from tinygrad.engine.schedule import create_schedule
from tinygrad.ops import BufferOps


def kernels(t: Tensor) -> int:
    return sum(1 for s in create_schedule(t.lazydata.lbs) if s.ast[0].op is BufferOps.STORE)


def folded(t: Tensor):
    v = t.lazydata.constant_value()
    assert v is not None, t.lazydata
    return v


# values the renderers compile in (constants stay CONST for these), and a few more through full()
FLOATS = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, -0.5, 3.0, 16.0, -7.0, math.inf, -math.inf, math.nan]
INTS = [0, 1, -1, 2, 7, -8, 127, -128, 100]


def buffered(v, dtype, n=3):
    """The same values as a realized buffer: what a kernel reads."""
    return Tensor([v] * n, dtype=dtype).realize()


def same(a, b, dtype):
    a, b = np.asarray(a), np.asarray(b)
    if dtypes.is_float(dtype):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        ok = ~np.isnan(a)
        np.testing.assert_array_equal(a[ok], b[ok])
        np.testing.assert_array_equal(np.signbit(a[ok]), np.signbit(b[ok]))
    else:
        np.testing.assert_array_equal(a, b)


BINOPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "max": lambda a, b: a.maximum(b), "lt": lambda a, b: a < b, "eq": lambda a, b: a == b,
          "ne": lambda a, b: a != b}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(BINOPS)), st.sampled_from(FLOATS), st.sampled_from(FLOATS),
       st.sampled_from([dtypes.float32, dtypes.float16]))
def test_float_binops_fold_to_the_kernels_value(op, a, b, dtype):
    fn = BINOPS[op]
    want = fn(buffered(a, dtype), buffered(b, dtype)).numpy()
    got = fn(Tensor.full((3,), a, dtype=dtype), Tensor.full((3,), b, dtype=dtype))
    # the max of a nan, or of the two zeros, is each device's own (not folded)
    ambiguous = op == "max" and (math.isnan(a) or math.isnan(b) or (a == b == 0 and str(a) != str(b)))
    assert kernels(got) == (1 if ambiguous else 0)
    same(got.numpy(), want, dtype if op not in ("lt", "eq", "ne") else dtypes.bool)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(BINOPS) + ["div", "mod", "and", "or", "xor"]), st.sampled_from(INTS),
       st.sampled_from(INTS), st.sampled_from([dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int64]))
def test_int_binops_fold_to_the_kernels_value(op, a, b, dtype):
    if dtypes.is_unsigned(dtype):
        a, b = a % 256, b % 256
    if dtype == dtypes.int8:
        a, b = (a + 128) % 256 - 128, (b + 128) % 256 - 128
    fn = {**BINOPS, "div": lambda x, y: x // y, "mod": lambda x, y: x % y, "and": lambda x, y: x & y,
          "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y}[op]
    if op in ("div", "mod") and b == 0:
        return
    want = fn(buffered(a, dtype), buffered(b, dtype)).numpy()
    got = fn(Tensor.full((3,), a, dtype=dtype), Tensor.full((3,), b, dtype=dtype))
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("fn", ["exp", "log", "sqrt", "sin", "neg", "reciprocal", "exp2", "log2", "relu"])
@pytest.mark.parametrize("v", [0.0, 1.0, 2.0, -1.0, 0.5, 16.0, math.inf, -math.inf, math.nan])
def test_float_unary_folds_within_an_ulp_of_the_kernel(fn, v):
    want = getattr(buffered(v, dtypes.float32), fn)().numpy()
    t = getattr(Tensor.full((3,), v), fn)()
    assert kernels(t) == (1 if fn == "relu" and math.isnan(v) else 0)  # relu is a max: a nan's is the device's
    got = t.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    # transcendental ops: the kernel's approximation and the host's libm may differ in the last place
    np.testing.assert_array_max_ulp(got[ok], want[ok], maxulp=1)


@pytest.mark.parametrize("src,dst,v", [
    (dtypes.float32, dtypes.int16, 1.0), (dtypes.float32, dtypes.int32, -7.0), (dtypes.int32, dtypes.uint16, -1),
    (dtypes.int32, dtypes.int8, 200), (dtypes.int32, dtypes.float16, 7), (dtypes.float32, dtypes.bool, 0.5),
    (dtypes.float32, dtypes.float16, 16.0), (dtypes.bool, dtypes.float32, True), (dtypes.int64, dtypes.uint8, 300)])
def test_casts_fold_to_the_kernels_value(src, dst, v):
    want = buffered(v, src).cast(dst).numpy()
    t = Tensor.full((3,), v, dtype=src).cast(dst)
    assert kernels(t) == 0
    np.testing.assert_array_equal(t.numpy(), want)


def test_a_float_out_of_an_ints_range_is_not_folded():
    # C leaves it undefined: the kernel decides, not the host
    assert Tensor.full((3,), math.inf).cast(dtypes.int32).lazydata.constant_value() is None
    assert Tensor.full((3,), math.nan).cast(dtypes.int32).lazydata.constant_value() is None


def test_padded_constant_cast_folds_when_no_wider():
    t = Tensor.ones(4).pad(((1, 1),)).cast(dtypes.int16)
    assert kernels(t) == 0
    np.testing.assert_array_equal(t.numpy(), [0, 1, 1, 1, 1, 0])
    t = Tensor.full(4, fill_value=-1).pad(((1, 1),)).cast(dtypes.uint16)
    np.testing.assert_array_equal(t.numpy(), [0, 65535, 65535, 65535, 65535, 0])
    t = Tensor.ones(4).pad(((1, 1),)).cast(dtypes.int64)
    assert kernels(t) == 1
    np.testing.assert_array_equal(t.numpy(), [0, 1, 1, 1, 1, 0])


@pytest.mark.parametrize("shape,axis", [((4, 5, 6), None), ((4, 5, 6), 0), ((4, 5, 6), (1, 2)), ((), None)])
def test_sum_and_max_of_a_constant_fold(shape, axis):
    # (values code may vary, like 2.5, read a shared scalar buffer instead of being compiled in: not constants)
    for v, dtype in ((1.0, dtypes.float32), (3, dtypes.int32), (-0.5, dtypes.float32)):
        t = Tensor.full(shape, v, dtype=dtype)
        for red in ("sum", "max"):
            got = getattr(t, red)(axis=axis)
            want = getattr(np.full(shape, v, dtype=np.float32 if dtype == dtypes.float32 else np.int32), red)(
                axis=axis)
            assert kernels(got) == 0, (red, shape, axis)
            np.testing.assert_array_equal(got.numpy(), want)


def test_padded_constant_sum_is_a_kernel():
    # only the unpadded area is constant, and exp(0) != 0: no fold
    assert kernels(Tensor.ones(4).pad(((1, 1),)).exp().sum()) == 1
    np.testing.assert_allclose(Tensor.ones(4).pad(((1, 1),)).exp().sum().numpy(), 4 * math.e + 2, rtol=1e-6)


def test_double_negation_folds():
    x = Tensor([1, 2, 3]).realize()
    for t in (x.mul(-1).neg(), x.neg().mul(-1), x.neg().neg(), x * -1 * -1):
        assert t.lazydata is x.lazydata or t.lazydata.base is x.lazydata.base
        np.testing.assert_array_equal(t.numpy(), [1, 2, 3])
    y = Tensor([1.0, -0.0, math.inf, math.nan]).realize()
    same(y.neg().neg().numpy(), y.numpy(), dtypes.float32)


def test_pow_folds_only_exact_identities():
    x = Tensor([1.0, 2, math.nan, math.inf, -0.0]).realize()
    for t, want in ((x ** 0, [1.0] * 5), (x ** Tensor.zeros(5), [1.0] * 5), (x ** Tensor.ones(5), x.numpy()),
                    (1 ** x, [1.0] * 5), (Tensor.ones(5) ** x, [1.0] * 5)):
        assert kernels(t) == 0
        same(t.numpy(), np.array(want, np.float32), dtypes.float32)


def test_pow_folds_keep_gradients():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x ** Tensor.zeros(3)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0])
    x.grad = None
    (x ** Tensor.ones(3)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1, 1])
    e = Tensor([0.5, 2.0], requires_grad=True)
    (Tensor.ones(2) ** e).sum().backward()
    np.testing.assert_array_equal(e.grad.numpy(), [0, 0])


def test_float_plus_zero_and_times_zero_stay_kernels():
    x = Tensor([-0.0, math.inf, math.nan, 2.0]).realize()
    same((x + 0).numpy(), np.array([0.0, math.inf, math.nan, 2.0], np.float32), dtypes.float32)
    same((x * 0).numpy(), np.array([-0.0, math.nan, math.nan, 0.0], np.float32), dtypes.float32)
    assert kernels(x * Tensor.zeros(4)) == 1


def test_a_constant_scalar_index_is_a_view():
    t = Tensor.arange(16).float().reshape(1, 1, 4, 4).realize()
    for idx, want in (((slice(None), slice(None), Tensor(1), slice(None)), [[[4, 5, 6, 7]]]),
                      ((slice(None), slice(None), Tensor(1) + 2, slice(None)), [[[12, 13, 14, 15]]]),
                      ((slice(None), slice(None), Tensor(1), Tensor(0)), [[4]])):
        assert kernels(t[idx]) == 0
        np.testing.assert_array_equal(t[idx].numpy(), want)
    with pytest.raises(IndexError):
        t[:, :, Tensor(9)]


def test_realized_constants_stay_operands():
    # the seed walkthrough: 2 + 3 of realized constants compiles to one kernel holding 2.0 and 3.0
    result = Tensor(2.0).realize() + Tensor(3.0).realize()
    assert kernels(result) == 1
    assert (Tensor(2.0) + Tensor(3.0)).lazydata.constant_value() == 5.0
