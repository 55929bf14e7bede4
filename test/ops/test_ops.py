"""Tensor ops against PyTorch on the CPU, forward and backward (see op_helper.helper_test_op)."""
import numpy as np
import pytest
import torch
from op_helper import helper_test_op

from tinygrad import Tensor, dtypes


@pytest.mark.parametrize("name,fxn", [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b), ("maximum", lambda a, b: a.maximum(b) if isinstance(a, Tensor) else
                                  torch.maximum(a, b)),
])
def test_binary(name, fxn):
    helper_test_op([(3, 4), (3, 4)], fxn, low=0.5, high=2.0)


@pytest.mark.parametrize("shapes", [[(4, 1), (1, 5)], [(3, 4), (4,)], [(2, 1, 3), (4, 1)], [(), (3,)]])
def test_broadcasting(shapes):
    helper_test_op(shapes, lambda a, b: a * b + a)


def test_scalar_arithmetic_both_sides():
    helper_test_op([(5,)], lambda a: 2 - a * 3 / (a + 4) + 1)
    helper_test_op([(5,)], lambda a: 1 / a, low=0.5, high=2)
    helper_test_op([(5,)], lambda a: a ** 2 + a ** 0.5, low=0.5, high=2)


@pytest.mark.parametrize("name", ["relu", "exp", "log", "sqrt", "sigmoid", "sin", "cos", "tanh", "neg", "abs",
                                  "square", "reciprocal"])
def test_unary(name):
    low = 0.1 if name in ("log", "sqrt", "reciprocal") else -2.0
    helper_test_op([(4, 5)], lambda x: getattr(x, name)(), low=low, grad_atol=1e-3)


def test_relu_log_as_the_seed_shows():
    helper_test_op([(6,)], lambda x: x.relu().log() if isinstance(x, Tensor) else x.relu().log(), low=0.1)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_max_mean(axis, keepdim):
    def tdims(a):
        return {"dim": tuple(range(a.ndim))} if axis is None else {"dim": axis}
    helper_test_op([(3, 4)], lambda x: x.sum(**tdims(x), keepdim=keepdim) if isinstance(x, torch.Tensor)
                   else x.sum(axis=axis, keepdim=keepdim))
    helper_test_op([(3, 4)], lambda x: x.mean(**tdims(x), keepdim=keepdim) if isinstance(x, torch.Tensor)
                   else x.mean(axis=axis, keepdim=keepdim))
    if axis is None or isinstance(axis, tuple):
        helper_test_op([(3, 4)], lambda x: x.amax(**tdims(x), keepdim=keepdim) if isinstance(x, torch.Tensor)
                       else x.max(axis=axis, keepdim=keepdim))
    else:
        helper_test_op([(3, 4)], lambda x: x.max(axis, keepdim=keepdim)[0] if isinstance(x, torch.Tensor)
                       else x.max(axis=axis, keepdim=keepdim))


def test_max_gradient_splits_ties():
    vals = [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], np.float32)]
    helper_test_op(None, lambda x: x.amax(dim=1) if isinstance(x, torch.Tensor) else x.max(axis=1), vals=vals)


def test_var_std():
    helper_test_op([(4, 6)], lambda x: x.var(1) if isinstance(x, torch.Tensor) else x.var(axis=1))
    helper_test_op([(4, 6)], lambda x: x.std() if isinstance(x, torch.Tensor) else x.std())


def test_softmax_log_softmax():
    helper_test_op([(3, 7)], lambda x: x.softmax(-1) if isinstance(x, torch.Tensor) else x.softmax(-1))
    helper_test_op([(3, 7)], lambda x: x.log_softmax(-1) if isinstance(x, torch.Tensor) else x.log_softmax(-1))


def test_movement():
    helper_test_op([(2, 3, 4)], lambda x: x.reshape(6, 4).permute(1, 0))
    helper_test_op([(2, 3, 4)], lambda x: x.transpose(0, 2))
    helper_test_op([(3, 1)], lambda x: x.expand(3, 5))
    helper_test_op([(2, 3, 4)], lambda x: x.flip(1) if isinstance(x, Tensor) else x.flip(1))
    helper_test_op([(2, 3)], lambda x: torch.nn.functional.pad(x, (1, 2, 0, 1)) if isinstance(x, torch.Tensor)
                   else x.pad(((0, 1), (1, 2))))
    helper_test_op([(2, 3)], lambda x: torch.nn.functional.pad(x, (1, 1), value=5.0) if isinstance(x, torch.Tensor)
                   else x.pad((None, (1, 1)), value=5.0))
    helper_test_op([(4, 5)], lambda x: x[1:3, ::2])
    helper_test_op([(4, 5)], lambda x: x[..., None, 2])
    helper_test_op([(6,)], lambda x: x.flip(0)[::3] if isinstance(x, torch.Tensor) else x[::-3])
    helper_test_op([(2, 3, 4)], lambda x: x.flatten(1))
    helper_test_op([(2, 1, 4)], lambda x: x.squeeze(1).unsqueeze(0))


def test_cat_stack():
    helper_test_op([(2, 3), (4, 3)], lambda a, b: torch.cat([a, b], 0) if isinstance(a, torch.Tensor)
                   else a.cat(b, dim=0))
    helper_test_op([(2, 3), (2, 3)], lambda a, b: torch.stack([a, b], 1) if isinstance(a, torch.Tensor)
                   else Tensor.stack([a, b], dim=1))


@pytest.mark.parametrize("shapes", [[(3, 4), (4, 5)], [(4,), (4, 2)], [(3, 4), (4,)], [(2, 3, 4), (4, 5)],
                                    [(2, 3, 4), (2, 4, 5)], [(1, 3, 4), (2, 4, 5)]])
def test_matmul(shapes):
    helper_test_op(shapes, lambda a, b: a @ b, atol=1e-5)


def test_crossentropy_and_argmax():
    x = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    y = np.array([0, 1, 2, 3, 4, 0, 1, 2], dtype=np.int32)
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, dtype=torch.long)
    want = torch.nn.functional.cross_entropy(tx, ty)
    want.backward()
    gx = Tensor(x, requires_grad=True)
    got = gx.sparse_categorical_crossentropy(Tensor(y))
    got.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), atol=1e-6)
    np.testing.assert_array_equal(Tensor(x).argmax(axis=1).numpy(), x.argmax(axis=1))


def test_comparisons_and_where():
    a, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([3.0, 2.0, 1.0], np.float32)
    ta, tb = Tensor(a), Tensor(b)
    for op in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
        got = getattr(ta, op)(tb)
        assert got.dtype == dtypes.bool
        np.testing.assert_array_equal(got.numpy(), getattr(a, op)(b))
    helper_test_op([(5,), (5,)], lambda x, y: (x > 0).where(x, y) if isinstance(x, Tensor) else
                   torch.where(x > 0, x, y))


def test_creation():
    np.testing.assert_array_equal(Tensor.arange(5).numpy(), np.arange(5))
    np.testing.assert_allclose(Tensor.arange(1, 2, 0.25).numpy(), np.arange(1, 2, 0.25))
    np.testing.assert_array_equal(Tensor.eye(3).numpy(), np.eye(3))
    np.testing.assert_array_equal(Tensor.full((2, 2), 7).numpy(), np.full((2, 2), 7))
    assert Tensor.zeros(2, 3).shape == (2, 3) and Tensor.ones(2).numpy().tolist() == [1.0, 1.0]
    assert Tensor([[1, 2], [3, 4]]).dtype == dtypes.int32
    assert Tensor(np.zeros(3, np.float16)).dtype == dtypes.half
    Tensor.manual_seed(3)
    a = Tensor.rand(100).numpy()
    Tensor.manual_seed(3)
    assert (Tensor.rand(100).numpy() == a).all() and 0 <= a.min() and a.max() < 1


def test_backward_accumulates_and_requires_grad_propagates():
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 + 2, 3 + 4])
    y = Tensor([1.0, 2.0])
    assert (x * y).requires_grad and not (y * 2).requires_grad
    assert x.detach().requires_grad is False


def test_casts():
    x = Tensor([1.7, -2.5, 0.0])
    assert x.int().numpy().tolist() == [1, -2, 0]
    assert x.bool().numpy().tolist() == [True, True, False]
    assert Tensor([1, 2]).float().dtype == dtypes.float
    bits = np.array([1.0], np.float32).view(np.int32)
    np.testing.assert_array_equal(Tensor([1.0]).bitcast(dtypes.int32).numpy(), bits)
    np.testing.assert_allclose(x.half().numpy(), np.array([1.7, -2.5, 0.0], np.float16))


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="broadcast"):
        Tensor.ones(3) + Tensor.ones(4)
    with pytest.raises(ValueError, match="reshape"):
        Tensor.ones(6).reshape(4, 2)
    with pytest.raises(ValueError, match="matmul"):
        Tensor.ones(2, 3) @ Tensor.ones(4, 2)
    with pytest.raises(TypeError):
        Tensor("hello")
    with pytest.raises(IndexError):
        Tensor.ones(3)[5]


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_low_precision_arithmetic_matches_torch(name):
    vals = [1.0, 2.5, 3.14159, -1e-3, 100.0, 1e4, -7.75]
    dt, tdt = getattr(dtypes, name), getattr(torch, name)
    a, ta = Tensor(vals, dtype=dt), torch.tensor(vals, dtype=tdt)
    assert a.dtype == dt
    for f in (lambda x: x, lambda x: x * 3 + 1, lambda x: x * x - x / 3, lambda x: x.sum().reshape(1)):
        np.testing.assert_array_equal(f(a).numpy().astype(np.float32), f(ta).float().numpy())


def test_negating_negative_constants_and_0d_numpy():
    np.testing.assert_array_equal((-Tensor.full((3,), -2.0)).numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal((-Tensor.full((2,), -np.inf)).numpy(), [np.inf, np.inf])
    assert Tensor(np.float32(3.0)).shape == () and Tensor(np.array(3.0)).item() == 3.0
