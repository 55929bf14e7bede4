"""Graph walks are iterative: graphs of 100,000 ops build, differentiate and run without recursion limits."""
import numpy as np

from tinygrad import Tensor


def test_backward_through_100k_ops():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.0
    y.sum().backward()
    assert x.grad.shape == (2,)


def test_realize_a_10k_op_fused_chain():
    x = Tensor(np.zeros(4, np.float32))
    y = x
    for _ in range(10_000):
        y = y + 1
    np.testing.assert_array_equal(y.numpy(), np.full(4, 10_000, np.float32))
