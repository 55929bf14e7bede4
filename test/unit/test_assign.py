"""assign writes into the target's own memory (what the JIT and optimizers rely on), without read-write hazards."""
import numpy as np
import pytest

from tinygrad import Tensor


def realized(*vals):
    return Tensor(np.array(vals, dtype=np.float32)).realize()


def test_assign_is_in_place():
    p = realized(1.0, 2.0, 3.0)
    buf = p.lazydata.base.realized
    p.assign(p - 0.5).realize()
    assert p.lazydata.base.realized is buf
    np.testing.assert_allclose(p.numpy(), [0.5, 1.5, 2.5])


def test_shifted_reads_go_through_a_temporary():
    q = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()
    q.assign(q.flip(1) + 0).realize()
    np.testing.assert_array_equal(q.numpy(), [[2, 1, 0], [5, 4, 3]])
    s = realized(1.0, 2.0)
    s.assign(s.sum().reshape(1).expand(2) * 1).realize()
    np.testing.assert_array_equal(s.numpy(), [3, 3])


def test_readers_of_the_old_value_run_first():
    r = realized(1.0, 2.0)
    old = r * 10
    r.assign(r + 1)
    Tensor.corealize([r, old])
    np.testing.assert_array_equal(old.numpy(), [10, 20])
    np.testing.assert_array_equal(r.numpy(), [2, 3])


def test_unrealized_target_is_replaced():
    t = Tensor.zeros(3)
    t.assign(t + 1)
    np.testing.assert_array_equal(t.numpy(), [1, 1, 1])


def test_assign_checks_shape_dtype_device():
    t = realized(1.0, 2.0)
    with pytest.raises(ValueError, match="shape"):
        t.assign(Tensor([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="dtype"):
        t.assign(Tensor([1, 2]))
    with pytest.raises(RuntimeError, match="device"):
        t.assign(Tensor([1.0, 2.0], device="CPU"))


def test_loss_read_after_the_optimizer_step_is_the_loss_before_it():
    # the weights are overwritten in place by the step; the lazy loss must still be the one they gave before it
    from tinygrad import nn
    rng = np.random.default_rng(0)
    l1, l2 = nn.Linear(16, 32), nn.Linear(32, 4)
    x = Tensor(rng.standard_normal((8, 16), dtype=np.float32))
    y = Tensor(rng.integers(0, 4, 8).astype(np.int32))
    opt = nn.optim.SGD([l1.weight, l1.bias, l2.weight, l2.bias], lr=0.5)
    with Tensor.train():
        for _ in range(3):
            loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
            before = l2(l1(x).relu()).sparse_categorical_crossentropy(y).item()
            opt.zero_grad()
            loss.backward()
            opt.step()
            assert loss.item() == before
