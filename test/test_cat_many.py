"""cat and stack of many tensors: a few kernels and fewer compiles, whatever the count, with the right result and
gradients."""
import numpy as np

from tinygrad import GlobalCounters, Tensor, dtypes
from tinygrad.engine import realize


def test_cat_of_a_thousand_tensors_compiles_a_few_kernels():
    arrays = [np.random.default_rng(i).standard_normal(3).astype(np.float32) for i in range(1000)]
    ts = [Tensor(a).realize() for a in arrays]
    compiled = len(realize.method_cache)
    GlobalCounters.reset()
    out = Tensor.cat(*ts).numpy()
    np.testing.assert_array_equal(out, np.concatenate(arrays))
    assert GlobalCounters.kernel_count <= 80
    assert len(realize.method_cache) - compiled <= 8, "equal groups must share their compiled kernel"


def test_stack_and_uneven_cat_of_many():
    arrays = [np.full((i % 5 + 1, 2), i, np.int32) for i in range(100)]
    np.testing.assert_array_equal(Tensor.cat(*[Tensor(a) for a in arrays]).numpy(), np.concatenate(arrays))
    same = [np.full((2, 3), i, np.float32) for i in range(40)]
    np.testing.assert_array_equal(Tensor.stack(*[Tensor(a) for a in same], dim=1).numpy(), np.stack(same, axis=1))
    bools = [np.array([i % 2 == 0, i % 3 == 0]) for i in range(50)]
    np.testing.assert_array_equal(Tensor.cat(*[Tensor(b) for b in bools]).numpy(), np.concatenate(bools))
    assert Tensor.cat(*[Tensor(b) for b in bools]).dtype == dtypes.bool


def test_gradients_reach_every_piece():
    ts = [Tensor(np.full(2, float(i), np.float32), requires_grad=True) for i in range(40)]
    (Tensor.cat(*ts) * Tensor.arange(80).float()).sum().backward()
    for i, t in enumerate(ts):
        np.testing.assert_array_equal(t.grad.numpy(), [2 * i, 2 * i + 1])
