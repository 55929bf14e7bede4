"""Less central Tensor methods tinygrad 0.9 and PyTorch users reach for, against PyTorch."""
import numpy as np
import pytest
import torch
from op_helper import helper_test_op

from tinygrad import Tensor, dtypes


@pytest.mark.parametrize("k", [-1, 0, 2])
def test_tril_triu(k):
    helper_test_op([(4, 5)], lambda x: x.tril(k))
    helper_test_op([(2, 3, 3)], lambda x: x.triu(k))


@pytest.mark.parametrize("shifts,dims", [(1, 0), (-2, 1), ((1, 3), (0, 1)), (7, -1)])
def test_roll(shifts, dims):
    helper_test_op([(3, 4)], lambda x: torch.roll(x, shifts, dims) if isinstance(x, torch.Tensor)
                   else x.roll(shifts, dims))


def test_masked_fill_expand_as_clone_size():
    helper_test_op([(3, 4)], lambda x: x.masked_fill(x > 0.5, -1.0) if isinstance(x, torch.Tensor)
                   else x.masked_fill(x > 0.5, -1.0))
    helper_test_op([(3, 1), (3, 4)], lambda a, b: a.expand_as(b) * b)
    helper_test_op([(3, 4)], lambda x: x.clone() * 2)
    t = Tensor.ones(2, 3)
    assert t.size() == (2, 3) and t.size(-1) == 3 and t.is_floating_point() and not Tensor([1]).is_floating_point()


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_indices_and_probabilities(smoothing):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    y = rng.integers(0, 5, 6).astype(np.int32)
    p = rng.random((6, 5)).astype(np.float32)
    p /= p.sum(1, keepdims=True)
    for target_np, target_t in ((y, torch.tensor(y, dtype=torch.long)), (p, torch.tensor(p))):
        tx = torch.tensor(x, requires_grad=True)
        want = torch.nn.functional.cross_entropy(tx, target_t, label_smoothing=smoothing)
        want.backward()
        gx = Tensor(x, requires_grad=True)
        got = gx.cross_entropy(Tensor(target_np), label_smoothing=smoothing)
        got.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), atol=1e-6)


def test_multinomial_frequencies():
    Tensor.manual_seed(0)
    w = Tensor([1.0, 0.0, 3.0])
    s = w.multinomial(4000, replacement=True).numpy()
    assert s.dtype == np.int32 and set(np.unique(s)) <= {0, 2}
    assert abs((s == 2).mean() - 0.75) < 0.03
    assert Tensor([[0.0, 1.0], [1.0, 0.0]]).multinomial().numpy().tolist() == [[1], [0]]


def test_to_in_place():
    t = Tensor([1.0, 2.0])
    assert t.to_("CPU") is t and t.device == "CPU" and t.dtype == dtypes.float


def test_clone_owns_its_memory():
    x = Tensor([1.0, 2.0]).realize()
    c = x.clone().realize()
    x.assign(x * 10).realize()
    assert c.numpy().tolist() == [1.0, 2.0] and x.numpy().tolist() == [10.0, 20.0]
    g = Tensor([3.0], requires_grad=True)
    (g.clone() * 2).sum().backward()
    assert g.grad.numpy().tolist() == [2.0]
