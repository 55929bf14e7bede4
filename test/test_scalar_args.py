"""A float scalar that code varies between calls (a learning rate, a full() value) is read by the kernel from a
shared 0-d buffer instead of being compiled in: one compiled kernel serves every value. The buffers are read-only:
writing to a tensor made from one gives that tensor a buffer of its own."""
import numpy as np
import pytest

from tinygrad import Tensor, TinyJit, dtypes
from tinygrad.engine import realize
from tinygrad.engine.jit import JitError
from tinygrad.engine.plan import plan_stats
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
    a = LazyBuffer.scalar(2.5, dtypes.float32, "CLANG")
    b = LazyBuffer.scalar(2.5, dtypes.float64, "CLANG")
    assert a is not None and b is not None and a is not b and a.dtype == dtypes.float32
    assert LazyBuffer.scalar(2.5, dtypes.float32, "CLANG") is a
    h = (Tensor([1.0, 2.0], dtype=dtypes.float16) * 1.1).numpy()
    np.testing.assert_array_equal(h, (np.array([1, 2], np.float16) * np.float16(1.1)))


# ---- eager constants: a float constant costs what an int one does, and gives the same answers ----
def test_eager_ops_differing_only_in_their_float_constant():
    # one structure, one cached plan, one kernel: the constants' buffers are the plan's inputs, never its key
    x = Tensor(np.arange(1, 9, dtype=np.float32)).realize()
    (x * 1.25 + 0.75).realize()
    for c, d in ((3.75, -2.125), (1.0001, 0.3), (1.25, 0.75), (-1e-20, 7e30)):
        hits, made, _ = plan_stats()
        y = (x * c + d).realize()
        assert plan_stats()[:2] == (hits + 1, made)
        # within an ulp: a GPU compiler contracts x * c + d into one fused multiply-add (one rounding, not two)
        np.testing.assert_array_max_ulp(y.numpy(), x.numpy() * np.float32(c) + np.float32(d), maxulp=1)
    # a value compiled in (a small integer) is a different kernel, with the right answer too
    np.testing.assert_array_equal((x * 2.0 + 0.75).numpy(), x.numpy() * 2 + 0.75)


def test_a_chain_of_eager_ops_with_float_constants():
    a = Tensor(np.linspace(-1, 1, 64, dtype=np.float32)).realize()
    ref = a.numpy()
    for _ in range(50):
        a = (a * 1.0001 + 0.5).realize()
        ref = ref * np.float32(1.0001) + np.float32(0.5)
    # a fused multiply-add (GPUs) rounds once a step where numpy rounds twice: a few ulp apart after 50 steps
    np.testing.assert_allclose(a.numpy(), ref, rtol=1e-5)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), -0.0, 0.0])
def test_special_float_constants(value):
    x = Tensor([-0.0, 0.0, 1.5, -2.0, float("inf")]).realize()
    xn = x.numpy()
    with np.errstate(invalid="ignore"):
        for got, want in (((x + value).numpy(), xn + np.float32(value)), ((x * value).numpy(), xn * np.float32(value)),
                          ((value - x).numpy(), np.float32(value) - xn)):
            np.testing.assert_array_equal(got, want)
            # assert_array_equal takes -0.0 for 0.0: the signs must match too (not a NaN's: x86 makes negative NaNs,
            # GPUs positive ones)
            real = ~np.isnan(want)
            np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(want[real]))


def test_signed_zero_constants_are_different_plans():
    x = Tensor([-0.0, -0.0]).realize()
    assert np.signbit((x + -0.0).numpy()).all()
    assert not np.signbit((x + 0.0).numpy()).any()
    assert np.signbit((x + -0.0).numpy()).all()


@pytest.mark.parametrize("value", [1.0001, 0.1, -3.3e38, 65504.0, 6e-8, 1e-300, 2.5])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_constants_round_to_their_dtype_once(value, dtype):
    # full() and x * c: the value rounded once to the tensor's dtype (what torch does with a 0-d tensor of it)
    torch = pytest.importorskip("torch")
    dt, tdt = getattr(dtypes, dtype), getattr(torch, dtype)
    want = torch.tensor(value, dtype=torch.float64).to(tdt)
    got = Tensor.full((3,), value, dtype=dt).numpy()
    np.testing.assert_array_equal(got, np.full(3, want.double().item(), got.dtype))
    x = Tensor([1.0, -3.0, 0.5], dtype=dt).realize()
    got = (x * value).numpy()
    np.testing.assert_array_equal(got, (torch.tensor([1.0, -3.0, 0.5], dtype=tdt) * want).double().numpy())


def test_jit_replays_new_float_values():
    # a value that changes between calls reaches the kernels as an argument Tensor: each replay reads this call's
    @TinyJit
    def step(x: Tensor, lr: Tensor, fill: Tensor) -> Tensor:
        return (x * lr + fill * 0.3 - 1.0001).realize()

    x = Tensor(np.arange(4, dtype=np.float32)).realize()
    for v in (0.1, 2.75, -1e-3, 123.456, 0.1, 7.0):
        lr, fill = Tensor(v), Tensor.full((4,), v * 3)
        want = x.numpy() * np.float32(v) + np.float32(v * 3) * np.float32(0.3) - np.float32(1.0001)
        np.testing.assert_allclose(step(x, lr, fill).numpy(), want, rtol=1e-6)
    assert step.cnt == 2  # captured once, replayed for the later values

    @TinyJit
    def scale(x: Tensor, c: float) -> Tensor:
        return (x * c).realize()

    for _ in range(3):
        scale(x, 1.5)
    # a Python float is part of the call's signature: a new value is refused, never served stale
    with pytest.raises(JitError, match="args\\[1\\]"):
        scale(x, 2.5)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_int_tensors_with_python_ints(dtype):
    # the eager fast path for +, - and * must give the general path's answers, and refuse what it refuses
    xn = np.array([0, 1, 7, 100], dtype=dtype)
    x = Tensor(xn).realize()
    assert x.dtype == getattr(dtypes, dtype)
    for got, want in (((x * 2 + 1), xn * 2 + 1), ((3 - x), np.array(3, dtype) - xn), ((1 + x * 0), xn * 0 + 1)):
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got.numpy(), want)
    assert (x / 2).dtype == dtypes.float32  # true division still makes floats
    with pytest.raises(OverflowError, match="out of bounds"):
        x * (int(np.iinfo(dtype).max) + 1)


def test_general_path_builds_the_same_constants():
    # the methods (and every op on a tensor with gradients) build a scalar at the tensor's shape directly: same
    # values, same gradients, the reverse forms and the refusals of the Tensor constructor kept
    xn = np.array([1.5, -2.0, 0.25], np.float32)
    x = Tensor(xn).realize()
    np.testing.assert_array_equal(x.mul(1.0001).add(0.5).numpy(), (x * 1.0001 + 0.5).numpy())
    np.testing.assert_array_equal(x.sub(3.5, reverse=True).numpy(), np.float32(3.5) - xn)
    w = Tensor(xn, requires_grad=True)
    (w * 1.0001 - 2.5 * w + 7).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full(3, np.float32(1.0001) - np.float32(2.5)))
    i = Tensor(np.array([1, 2], np.int8))
    np.testing.assert_array_equal(i.mul(3).sub(100, reverse=True).numpy(), [97, 94])
    with pytest.raises(OverflowError, match="out of bounds"):
        i.add(200)
    np.testing.assert_array_equal(Tensor([True, False]).mul(True).numpy(), [True, False])


def test_the_library_formulas_constants_are_compiled_in():
    # gelu's sqrt(2 / pi) and 0.044715 and tanh's polynomial are dtype.literal: compiled into the kernel (no scalar
    # buffer argument: no load a thread, and the compiler folds them), while a user's float still reads its buffer
    from tinygrad.dtype import literal
    from tinygrad.ops import BufferOps
    x = Tensor(np.linspace(-4, 4, 64, dtype=np.float32)).realize()
    for t in (x.gelu(), x.tanh(), x.erf(), x.quick_gelu()):
        (si,) = t.schedule()
        assert len(si.bufs) == 2, [b.size for b in si.bufs]
        assert si.ast[0].op is BufferOps.STORE
    (si,) = (x * 1.2345).schedule()
    assert len(si.bufs) == 3
    (si,) = (x * literal(1.2345)).schedule()
    assert len(si.bufs) == 2
    np.testing.assert_allclose((x * literal(1.2345)).numpy(), x.numpy() * np.float32(1.2345), rtol=1e-7)
