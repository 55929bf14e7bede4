"""A float scalar that code varies between calls (a learning rate, a full() value) is read by the kernel from a
shared 0-d buffer instead of being compiled in: one compiled kernel serves every value. The buffers are read-only:
writing to a tensor made from one gives that tensor a buffer of its own."""
import numpy as np
import pytest

from tinygrad import Tensor
from tinygrad.engine import realize
from tinygrad.lazy import LazyBuffer


def compiled(fn) -> int:
    before = len(realize.method_cache)
    fn()
    return len(realize.method_cache) - before


def test_one_kernel_for_every_scalar_value():
    x = Tensor(np.arange(1, 9, dtype=np.float32)).realize()
    (x * 2.75 + 0.5).realize()  # warm: the kernel for this expression
    for c in (3.25, 100.0, -7.5e-3):
        assert compiled(lambda c=c: np.testing.assert_allclose((x * c + 0.5).numpy(), x.numpy() * c + 0.5,
                                                               rtol=1e-6)) == 0
    y = Tensor(np.ones(3, np.float32), requires_grad=True)
    (y * 0.125).sum().backward()  # the autograd path too
    np.testing.assert_array_equal(y.grad.numpy(), [0.125] * 3)


def test_full_values_share_one_kernel():
    Tensor.full((4,), 1.75).contiguous().realize()
    for v in (2.25, -3.125, 1e-3):
        assert compiled(lambda v=v: np.testing.assert_array_equal(Tensor.full((4,), v).contiguous().numpy(),
                                                                  np.full(4, v, np.float32))) == 0


@pytest.mark.parametrize("value", [0.0, 1.0, 2.0, -16.0, 0.5, float("inf"), float("nan")])
def test_literal_values_stay_constants(value):
    # values code writes as literals (and those constant folding relies on) stay in the kernel
    assert LazyBuffer.scalar(value, Tensor.empty(1).dtype, "CLANG") is None


def test_writes_never_reach_the_shared_buffer():
    t = Tensor.full((3,), 2.625)
    t[1] = 9.0
    w = Tensor.full((2,), 0.375)
    w.assign(w * 2).realize()
    u = Tensor.full((2,), 0.375)
    u += 1
    np.testing.assert_array_equal(t.numpy(), [2.625, 9.0, 2.625])
    np.testing.assert_array_equal(w.numpy(), [0.75, 0.75])
    np.testing.assert_array_equal(u.numpy(), [1.375, 1.375])
    np.testing.assert_array_equal(Tensor.full((3,), 2.625).numpy(), [2.625] * 3)
    np.testing.assert_array_equal(Tensor.full((2,), 0.375).numpy(), [0.375] * 2)


def test_signed_zero_and_dtypes_are_kept_apart():
    from tinygrad import dtypes
    a = LazyBuffer.scalar(2.5, dtypes.float32, "CLANG")
    b = LazyBuffer.scalar(2.5, dtypes.float64, "CLANG")
    assert a is not None and b is not None and a is not b and a.dtype == dtypes.float32
    assert LazyBuffer.scalar(2.5, dtypes.float32, "CLANG") is a
    h = (Tensor([1.0, 2.0], dtype=dtypes.float16) * 1.1).numpy()
    np.testing.assert_array_equal(h, (np.array([1, 2], np.float16) * np.float16(1.1)))
