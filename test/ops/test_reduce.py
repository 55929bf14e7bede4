"""Reductions against PyTorch on the CPU, forward and backward: sums, products, extremes, statistics, the softmax
family, any/all, arg-extremes and cumulative scans, over any axes, with zero-size and size-1 dims."""
import math

import numpy as np
import pytest
import torch
from op_helper import helper_test_op

from tinygrad import Tensor, dtypes
from tinygrad.helpers import GlobalCounters

AXES = [None, 0, 1, -1, (0, 2), (-1, -3), (0, 1, 2)]


def is_torch(x) -> bool:
    return isinstance(x, torch.Tensor)


def tdim(x, axis):
    """tinygrad's axis argument as PyTorch's dim: None means every dim."""
    return tuple(range(x.ndim)) if axis is None else axis


def torch_prod(x, axis, keepdim=False):
    """PyTorch's prod takes one dim: reduce them one at a time."""
    dims = sorted((d % x.ndim for d in tdim(x, axis if isinstance(axis, tuple) or axis is None else (axis,))),
                  reverse=True)
    for d in dims:
        x = x.prod(d, keepdim=True)
    return x if keepdim else x.reshape([s for i, s in enumerate(x.shape) if i not in dims])


def reduce_op(name, axis, keepdim, **kw):
    """The same reduction written for both libraries."""
    def f(x):
        if is_torch(x):
            if name == "prod":
                return torch_prod(x, axis, keepdim)
            tname = {"max": "amax", "min": "amin"}.get(name, name)
            return getattr(x, tname)(dim=tdim(x, axis), keepdim=keepdim, **kw)
        return getattr(x, name)(axis=axis, keepdim=keepdim, **kw)
    return f


# ---- forward and backward over axes ----

@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("name", ["sum", "mean", "prod", "max", "min"])
def test_reduce_axes(name, axis, keepdim):
    helper_test_op([(3, 4, 5)], reduce_op(name, axis, keepdim), atol=1e-5)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", [None, 1, (0, -1)])
@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std(name, correction, axis, keepdim):
    helper_test_op([(3, 4, 5)], reduce_op(name, axis, keepdim, correction=correction), atol=1e-5)


@pytest.mark.filterwarnings("ignore:var.*degrees of freedom:UserWarning")
def test_var_correction_past_n():
    # PyTorch divides by max(0, n - correction): inf for a nonzero spread, nan for a single element
    helper_test_op([(3, 4)], reduce_op("var", 1, False, correction=5), forward_only=True)
    helper_test_op([(3, 1)], reduce_op("var", 1, False), forward_only=True)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(name, axis):
    helper_test_op([(3, 4, 5)], lambda x: getattr(x, name)(axis))


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", [None, 1, -1, (0, 2)])
def test_logsumexp(axis, keepdim):
    helper_test_op([(3, 4, 5)], lambda x: x.logsumexp(tdim(x, axis), keepdim=keepdim) if is_torch(x)
                   else x.logsumexp(axis, keepdim=keepdim))


def test_softmax_family_large_magnitudes_are_stable():
    vals = [np.array([[1000.0, -1000.0, 0.0, 999.0], [-1000.0, -1001.0, -999.0, -1000.0],
                      [88.0, 89.0, 90.0, 91.0]], np.float32)]
    helper_test_op(None, lambda x: x.softmax(-1), vals=vals)
    helper_test_op(None, lambda x: x.log_softmax(-1), vals=vals, atol=1e-4)
    helper_test_op(None, lambda x: x.logsumexp(1) if is_torch(x) else x.logsumexp(1), vals=vals, atol=1e-4)
    got = Tensor([[math.inf, 1.0], [-math.inf, -math.inf]]).logsumexp(1).numpy()
    want = torch.tensor([[math.inf, 1.0], [-math.inf, -math.inf]]).logsumexp(1).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin"])
def test_cumulative(name, axis):
    def f(x):
        if is_torch(x):
            r = getattr(x, name)(axis)
            return r.values if name in ("cummax", "cummin") else r
        return getattr(x, name)(axis)
    helper_test_op([(3, 4, 5)], f, atol=1e-5)


def test_cumulative_long_axis_uses_blocks():
    # longer than one window: the scan goes through blocks and a scan of their totals
    helper_test_op([(2, 1300)], lambda x: x.cumsum(1), atol=1e-4, grad_atol=1e-3)
    helper_test_op([(1300,)], lambda x: x.cummax(0).values if is_torch(x) else x.cummax(0))
    vals = [np.random.default_rng(1).uniform(0.99, 1.01, size=(700,)).astype(np.float32)]
    helper_test_op(None, lambda x: x.cumprod(0), vals=vals, atol=1e-5, grad_atol=1e-3)


def test_cumsum_arange_and_ones():
    np.testing.assert_array_equal(Tensor.ones(3000).cumsum().numpy(), np.arange(1, 3001))
    np.testing.assert_array_equal(Tensor.arange(3000).numpy(), np.arange(3000))


# ---- gradients at ties and zeros ----

def test_max_min_ties_share_the_gradient():
    vals = [np.array([[[1.0, 3.0, 3.0], [3.0, 0.0, 2.0]], [[2.0, 2.0, 2.0], [-1.0, -1.0, 5.0]]], np.float32)]
    for axis in [None, 1, 2, (0, 2)]:
        helper_test_op(None, reduce_op("max", axis, False), vals=vals)
        helper_test_op(None, reduce_op("min", axis, True), vals=vals)


def test_prod_gradient_with_zeros_is_exact():
    vals = [np.array([[[2.0, 0.0, 3.0], [0.0, 0.0, 5.0]], [[1.5, -2.0, 4.0], [0.0, 7.0, 0.0]]], np.float32)]
    for axis in [None, 0, 1, 2, (0, 2)]:
        helper_test_op(None, reduce_op("prod", axis, False), vals=vals)
    helper_test_op(None, lambda x: x.cumprod(2), vals=vals)
    helper_test_op(None, lambda x: x.cumprod(0), vals=vals)


# ---- arg-extremes and boolean reductions ----

@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin(name, axis, keepdim):
    helper_test_op([(3, 4, 5)], lambda x: getattr(x, name)(axis, keepdim=keepdim), forward_only=True)
    # ties: the first index wins
    ties = [np.random.default_rng(2).integers(0, 3, size=(3, 4, 5)).astype(np.int32)]
    helper_test_op(None, lambda x: getattr(x, name)(axis, keepdim=keepdim), vals=ties, forward_only=True)


def test_argmax_nan_and_unsigned_and_bool():
    a = np.array([[1.0, np.nan, 3.0, np.nan], [4.0, 2.0, 4.0, 0.0]], np.float32)
    for name in ("argmax", "argmin"):
        np.testing.assert_array_equal(getattr(Tensor(a), name)(1).numpy(), getattr(torch.tensor(a), name)(1).numpy())
    u = np.array([[3, 0, 200, 0], [255, 9, 255, 1]], np.uint8)
    b = np.array([[False, True, True], [False, False, False]])
    for arr in (u, b):
        for name in ("argmax", "argmin"):
            # PyTorch refuses bool input; numpy also picks the first index
            got, want = getattr(Tensor(arr), name)(-1).numpy(), getattr(arr, name)(-1)
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
@pytest.mark.parametrize("name", ["any", "all"])
def test_any_all(name, axis):
    rng = np.random.default_rng(3)
    vals = [rng.integers(0, 2, size=(3, 4, 5)).astype(bool)]
    vals_f = [(rng.integers(0, 2, size=(3, 4, 5)) * rng.uniform(-2, 2, size=(3, 4, 5))).astype(np.float32)]
    vals_full = [np.ones((3, 4, 5), bool)]
    for v in (vals, vals_f, vals_full):
        for keepdim in (False, True):
            helper_test_op(None, lambda x, k=keepdim: getattr(x, name)(dim=tdim(x, axis), keepdim=k) if is_torch(x)
                           else getattr(x, name)(axis, keepdim=k), vals=v, forward_only=True)


# ---- dtypes ----

@pytest.mark.parametrize("npdt", [np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64])
def test_int_bool_inputs(npdt):
    rng = np.random.default_rng(4)
    arr = rng.integers(0, 2, size=(3, 4, 5)).astype(npdt) if npdt == np.bool_ else \
        rng.integers(-100 if np.issubdtype(npdt, np.signedinteger) else 0, 100, size=(3, 4, 5)).astype(npdt)
    t, tt = Tensor(arr), torch.tensor(arr)
    for axis in (None, 1, (0, 2)):
        for name in ("sum", "max", "min"):
            got = reduce_op(name, axis, False)(t)
            want = reduce_op(name, axis, False)(tt)
            assert got.dtype.np == want.numpy().dtype, f"{name} of {npdt}: {got.dtype} vs torch {want.dtype}"
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    for name in ("cumsum", "prod"):
        got, want = getattr(t, name)(1), getattr(tt, name)(1)
        assert got.dtype.np == want.numpy().dtype
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    if npdt != np.bool_:
        np.testing.assert_array_equal(t.cummax(2).numpy(), tt.cummax(2).values.numpy())
        np.testing.assert_allclose(t.mean(1).numpy(), tt.double().mean(1).numpy(), rtol=1e-6)


def test_sum_does_not_overflow_small_ints():
    arr = np.full((300,), 100, np.int8)
    assert Tensor(arr).sum().item() == 30000 and Tensor(arr).sum().dtype == dtypes.int64
    assert Tensor(np.ones(70000, bool)).sum().item() == 70000
    assert Tensor(arr).cumsum().numpy()[-1] == 30000


def test_acc_dtype_and_half():
    h = np.random.default_rng(5).uniform(-2, 2, size=(4, 300)).astype(np.float16)
    got = Tensor(h).sum(1)
    assert got.dtype == dtypes.float16
    np.testing.assert_allclose(got.numpy(), torch.tensor(h).sum(1).numpy(), rtol=2e-3, atol=2e-2)
    got32 = Tensor(h).sum(1, acc_dtype=dtypes.float32)
    assert got32.dtype == dtypes.float32
    np.testing.assert_allclose(got32.numpy(), h.astype(np.float32).sum(1), rtol=1e-5, atol=1e-4)
    assert Tensor(h).mean().dtype == dtypes.float16
    i = Tensor(np.array([[1, 2], [3, 4]], np.int32))
    assert i.sum(acc_dtype=dtypes.float32).dtype == dtypes.float32 and i.sum(acc_dtype=dtypes.float32).item() == 10


# ---- zero-size and size-1 dims, 0-d tensors ----

@pytest.mark.filterwarnings("ignore:var.*degrees of freedom:UserWarning")
@pytest.mark.parametrize("shape,axis", [((0,), None), ((0,), 0), ((3, 0), 1), ((3, 0), 0), ((3, 0), None),
                                        ((0, 4), 1), ((2, 0, 3), (0, 2))])
def test_zero_size(shape, axis):
    for name in ("sum", "prod", "mean", "any", "all"):
        helper_test_op([shape], reduce_op(name, axis, False) if name not in ("any", "all") else
                       lambda x, n=name: getattr(x, n)(dim=tdim(x, axis)) if is_torch(x) else getattr(x, n)(axis),
                       forward_only=name in ("any", "all"))
    helper_test_op([shape], reduce_op("sum", axis, True))
    reduces_empty = 0 in [shape[a] for a in np.atleast_1d(tdim(np.zeros(shape), axis))]
    for name in ("max", "min"):
        if reduces_empty:
            with pytest.raises((IndexError, RuntimeError)):
                reduce_op(name, axis, False)(torch.zeros(shape))
            with pytest.raises(IndexError, match="size 0"):
                reduce_op(name, axis, False)(Tensor.zeros(*shape))
        else:
            helper_test_op([shape], reduce_op(name, axis, False))
    if isinstance(axis, int):
        helper_test_op([shape], lambda x: x.cumsum(axis))
        helper_test_op([shape], lambda x: x.softmax(axis))
        helper_test_op([shape], lambda x: x.logsumexp(axis))
        helper_test_op([shape], reduce_op("var", axis, False), forward_only=True)


@pytest.mark.parametrize("axis", [1, (1, 2), -2])
def test_size_one_dims(axis):
    for name in ("sum", "mean", "prod", "max", "min"):
        helper_test_op([(3, 1, 5)], reduce_op(name, axis, False))
    helper_test_op([(3, 1, 5)], lambda x: x.softmax(1))
    helper_test_op([(3, 1, 5)], lambda x: x.cumsum(1))


def test_zero_dim_tensors():
    for name in ("sum", "max", "min", "mean", "prod"):
        helper_test_op(None, reduce_op(name, None, False), vals=[np.array(2.5, np.float32)])
    x = Tensor(2.5)
    assert x.sum(0).shape == () and x.max(-1).item() == 2.5 and x.argmax().item() == 0
    assert x.cumsum(0).item() == 2.5 and x.argmax(0).shape == ()


# ---- magnitudes ----

@pytest.mark.parametrize("scale", [1e15, 1e-15])
def test_large_and_tiny_magnitudes(scale):
    rng = np.random.default_rng(6)
    vals = [(rng.uniform(-2, 2, size=(3, 4, 5)) * scale).astype(np.float32)]
    for name in ("sum", "mean", "max", "min", "var", "std"):
        helper_test_op(None, reduce_op(name, 1, False), vals=vals, atol=1e-6 * scale, grad_atol=1e-4)
    helper_test_op(None, lambda x: x.cumsum(1), vals=vals, atol=1e-6 * scale)
    helper_test_op(None, lambda x: x.softmax(1), vals=vals, forward_only=True)
    small = [(rng.uniform(0.5, 2, size=(3, 4, 5)) * (1e-7 if scale < 1 else 1e7)).astype(np.float32)]
    helper_test_op(None, reduce_op("prod", 2, False), vals=small, atol=0, rtol=1e-4, forward_only=True)


# ---- errors ----

def test_errors_name_the_problem():
    x = Tensor.ones(3, 4)
    with pytest.raises(IndexError):
        x.sum(2)
    with pytest.raises(IndexError):
        x.max(-3)
    with pytest.raises(ValueError, match="more than once"):
        x.sum((1, -1))
    with pytest.raises(TypeError):
        x.sum(1.5)
    with pytest.raises(IndexError, match="size 0"):
        Tensor.ones(0).argmax()


# ---- kernel counts ----

def _kernels(fxn) -> int:
    x = Tensor(np.random.default_rng(7).uniform(-1, 1, size=(3, 4, 5)).astype(np.float32)).realize()
    GlobalCounters.reset()
    fxn(x).realize()
    return GlobalCounters.kernel_count


def test_kernel_counts():
    assert _kernels(lambda x: x.sum(axis=1)) == 1
    assert _kernels(lambda x: x.max(axis=(0, 2))) == 1
    assert _kernels(lambda x: x.cumsum(1)) == 1
    # a chain of reduces over the same rows is one kernel (engine/fuse_rows.py)
    assert _kernels(lambda x: x.softmax()) == 1
    assert _kernels(lambda x: x.log_softmax()) == 1
    assert _kernels(lambda x: x.var(1)) == 1
    assert _kernels(lambda x: x.logsumexp(1)) == 1
