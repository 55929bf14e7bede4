"""Autograd in the core: accumulation, requires_grad propagation, detach, no_grad and the train context."""
import numpy as np
import pytest
import torch

from tinygrad import Tensor


def test_grad_accumulates_across_backward_calls_like_torch():
    x, tx = Tensor([1.0, -2.0, 3.0], requires_grad=True), torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    for f in (lambda a: (a * a).sum(), lambda a: a.relu().sum(), lambda a: (a * 3).sum()):
        f(x).backward()
        f(tx).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_shared_subexpression_gets_both_gradients():
    x = Tensor([2.0], requires_grad=True)
    y = x * x
    (y + y * x).sum().backward()  # d/dx (x^2 + x^3) = 2x + 3x^2
    np.testing.assert_allclose(x.grad.numpy(), [2 * 2 + 3 * 4])


def test_requires_grad_propagation_and_detach():
    a, b, c = Tensor([1.0], requires_grad=True), Tensor([1.0]), Tensor([1.0], requires_grad=False)
    assert (a + b).requires_grad is True
    assert (b + b).requires_grad is None, "unknown stays unknown, as tinygrad"
    assert (c + c).requires_grad is False
    d = (a * 2).detach()
    assert d.requires_grad is False and d._ctx is None


def test_no_grad_and_inference_mode_record_nothing():
    a = Tensor([1.0], requires_grad=True)
    with Tensor.inference_mode():
        assert (a * 2)._ctx is None
    Tensor.no_grad = True
    try:
        assert (a * 2)._ctx is None
    finally:
        Tensor.no_grad = False
    assert (a * 2)._ctx is not None


def test_train_context_and_decorator():
    assert Tensor.training is False
    with Tensor.train():
        assert Tensor.training is True
        with Tensor.train(False):
            assert Tensor.training is False
        assert Tensor.training is True

    @Tensor.train()
    def f():
        return Tensor.training
    assert f() is True and Tensor.training is False


def test_backward_needs_a_scalar_or_a_gradient():
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="scalar"):
        (x * 2).backward()
    (x * 2).backward(Tensor([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 20.0])


def test_broadcast_gradients_reduce_to_the_input_shape():
    a = Tensor(np.ones((3, 1), np.float32), requires_grad=True)
    b = Tensor(np.ones((1, 4), np.float32), requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.shape == (3, 1) and b.grad.shape == (1, 4)
    np.testing.assert_allclose(a.grad.numpy(), np.full((3, 1), 4.0))
