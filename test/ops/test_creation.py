"""Creating tensors: the constructor, constants, ranges, and the on-device random number generator.

Values are checked against numpy and PyTorch; the generator against a pure-Python Threefry-2x32 (itself checked
against the known-answer vectors of the Random123 library) and against its statistical targets.
"""
import math

import numpy as np
import pytest
import torch

import tinygrad.mlops as F
from tinygrad import Tensor, dtypes
from tinygrad.engine.realize import method_cache
from tinygrad.helpers import GlobalCounters
from tinygrad.shape.symbolic import NumNode, Variable

M32 = 0xFFFFFFFF


def threefry_ref(c0, c1, k0, k1):
    """Threefry-2x32-20 in plain Python, the oracle for mlops.Threefry."""
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = (c0 + ks[0]) & M32, (c1 + ks[1]) & M32
    for r in range(20):
        x0 = (x0 + x1) & M32
        x1 = (((x1 << rot[r % 8]) | (x1 >> (32 - rot[r % 8]))) & M32) ^ x0
        if r % 4 == 3:
            s = r // 4 + 1
            x0 = (x0 + ks[s % 3]) & M32
            x1 = (x1 + ks[(s + 1) % 3] + s) & M32
    return x0, x1


# ---- the constructor ----

@pytest.mark.parametrize("data,dtype", [
    ([[1, 2], [3, 4]], dtypes.int32), ([[1.0, 2], [3, 4]], dtypes.float32), ([True, False], dtypes.bool),
    ([True, 2], dtypes.int32), (((1, 2), (3, 4)), dtypes.int32), ([], dtypes.float32),
    ([[], []], dtypes.float32), (3, dtypes.int32), (2.5, dtypes.float32), (False, dtypes.bool),
    ([np.float32(1.5), 2], dtypes.float32), ([[[7]]], dtypes.int32),
])
def test_from_python(data, dtype):
    t = Tensor(data)
    assert t.dtype == dtype
    want = np.array(data, dtype=dtype.np)
    assert t.shape == want.shape
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("data", [[[1, 2], [3]], [1, [2]], [[1], [2, 3]], [[[1, 2]], [[3]]]])
def test_ragged_lists_raise(data):
    with pytest.raises(ValueError, match="ragged"):
        Tensor(data)


@pytest.mark.parametrize("data", [["a"], [None], [1, "2"], [[1.0], [None]], {"a": 1}, "abc", object(),
                                  [Tensor([1.0])], np.array(["a"]), np.array([1 + 2j]), np.array([None])])
def test_unsupported_data_raises(data):
    with pytest.raises(TypeError):
        Tensor(data)


@pytest.mark.parametrize("npdt", ["float16", "float32", "float64", "bool", "uint8", "uint16", "uint32", "uint64",
                                  "int8", "int16", "int32", "int64"])
def test_from_numpy_every_dtype(npdt):
    a = (np.arange(-3, 9).reshape(3, 4) * 7).astype(npdt)
    t = Tensor(a)
    assert t.dtype == dtypes.from_np(a.dtype) and t.shape == (3, 4)
    np.testing.assert_array_equal(t.numpy(), a)


def test_from_numpy_layouts():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for view in (a.transpose(2, 0, 1), a[:, ::2, ::-1], a[1]):
        np.testing.assert_array_equal(Tensor(view).numpy(), view)
    big_endian = np.arange(5, dtype=">i4")
    np.testing.assert_array_equal(Tensor(big_endian).numpy(), np.arange(5))
    assert Tensor(np.array(2.5, np.float32)).shape == ()
    assert Tensor(np.float16(1.5)).dtype == dtypes.float16 and Tensor(np.int64(3)).item() == 3


def test_from_bytes():
    t = Tensor(b"\x00\x01\xff")
    assert t.dtype == dtypes.uint8 and t.tolist() == [0, 1, 255]
    t = Tensor(b"\x02\x04", dtype=dtypes.float32)
    assert t.dtype == dtypes.float32 and t.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float64, dtypes.int8, dtypes.int64, dtypes.bool,
                                   "float16", "int32"])
def test_dtype_argument_converts(dtype):
    vals = [[0.0, 1.7, -2.2], [3.9, 0.5, -0.5]]
    for data in (vals, np.array(vals, np.float64)):
        t = Tensor(data, dtype=dtype)
        want = torch.tensor(vals, dtype=getattr(torch, np.dtype(t.dtype.np).name))
        assert t.dtype.np == t.numpy().dtype
        np.testing.assert_array_equal(t.numpy(), want.numpy())
    assert Tensor(1.9, dtype=dtype).item() == torch.tensor(1.9, dtype=getattr(torch, np.dtype(t.dtype.np).name)).item()


def test_bfloat16_through_float32():
    vals = [1.00390625, 3.14159, 1e-3, -65504.0, 1.0e30]
    for data in (vals, np.array(vals)):
        t = Tensor(data, dtype=dtypes.bfloat16)
        assert t.dtype == dtypes.bfloat16
        np.testing.assert_array_equal(t.numpy(), torch.tensor(vals, dtype=torch.bfloat16).float().numpy())


@pytest.mark.parametrize("data,dtype", [([300], dtypes.uint8), ([-1], dtypes.uint32), ([2 ** 40], None),
                                        (2 ** 40, None), (300, dtypes.int8), (-1, dtypes.uint64)])
def test_out_of_range_ints_raise(data, dtype):
    with pytest.raises(OverflowError):
        Tensor(data, dtype=dtype)
    assert Tensor(2 ** 40, dtype=dtypes.int64).item() == 2 ** 40


@pytest.mark.parametrize("dtype", ["float31", "tensor", 3, np.float32])
def test_bad_dtype_raises(dtype):
    with pytest.raises(TypeError):
        Tensor([1.0], dtype=dtype)


def test_device_grad_and_none():
    t = Tensor([1.0, 2.0], device="CPU", requires_grad=True)
    assert t.device == "CPU" and t.requires_grad is True and t.grad is None
    (t * t).sum().backward()
    assert t.grad.tolist() == [2.0, 4.0]
    assert Tensor(None).shape == (0,) and Tensor(None).dtype == dtypes.float32


def test_symbolic_values():
    v = Variable("a", 0, 10).bind(3)
    assert Tensor(v).item() == 3 and Tensor.from_node(v).requires_grad is False
    assert (Tensor.from_node(v * 2 + 1) + 1).item() == 8
    assert Tensor.from_node(NumNode(4)).item() == 4 and Tensor.from_node(5, dtype=dtypes.float32).item() == 5.0
    with pytest.raises(ValueError, match="bound"):
        Tensor(Variable("b", 0, 10))
    with pytest.raises(TypeError):
        Tensor.from_node("a")


# ---- constants ----

SHAPES = [(), (1,), (3,), (2, 3), (2, 0, 3), (0,)]


@pytest.mark.parametrize("shape", SHAPES)
def test_zeros_ones_full_empty(shape):
    np.testing.assert_array_equal(Tensor.zeros(shape).numpy(), np.zeros(shape, np.float32))
    np.testing.assert_array_equal(Tensor.ones(*shape).numpy(), np.ones(shape, np.float32))
    assert Tensor.zeros(shape).dtype == dtypes.float32
    for fill, dtype in ((7, dtypes.int32), (2.5, dtypes.float32), (True, dtypes.bool)):
        t = Tensor.full(shape, fill)
        assert t.dtype == dtype and t.shape == shape
        np.testing.assert_array_equal(t.numpy(), np.full(shape, fill, dtype.np))
    e = Tensor.empty(*shape, dtype=dtypes.int16)
    assert e.shape == shape and e.dtype == dtypes.int16 and e.numpy().shape == shape


def test_constant_dtypes_and_likes():
    assert Tensor.zeros(2, dtype=dtypes.int64).tolist() == [0, 0]
    assert Tensor.ones(2, dtype="bool").tolist() == [True, True]
    assert Tensor.full((2,), 3, dtype=dtypes.float16).dtype == dtypes.float16
    x = Tensor([[1, 2, 3]], dtype=dtypes.uint8, device="CPU")
    for t, want in ((x.zeros_like(), 0), (x.ones_like(), 1), (x.full_like(9), 9)):
        assert t.shape == (1, 3) and t.dtype == dtypes.uint8 and t.device == "CPU" and t.tolist() == [[want] * 3]
    assert x.zeros_like(dtype=dtypes.float32).dtype == dtypes.float32


@pytest.mark.parametrize("fxn", [lambda: Tensor.zeros(-1), lambda: Tensor.ones(2, -3), lambda: Tensor.empty(-2),
                                 lambda: Tensor.full((-1, 2), 1.0), lambda: Tensor.rand(3, -1),
                                 lambda: Tensor.randn(-4), lambda: Tensor.eye(-1), lambda: Tensor.linspace(0, 1, -2)])
def test_negative_sizes_raise(fxn):
    with pytest.raises(ValueError):
        fxn()


@pytest.mark.parametrize("fxn", [lambda: Tensor.zeros(2.0), lambda: Tensor.ones("3"), lambda: Tensor.rand(1.5),
                                 lambda: Tensor.eye(2.0), lambda: Tensor.linspace(0, 1, 3.0)])
def test_non_int_sizes_raise(fxn):
    with pytest.raises(TypeError):
        fxn()


def test_created_tensors_are_leaves():
    for make in (lambda: Tensor.zeros(3, requires_grad=True), lambda: Tensor.full((3,), 2.0, requires_grad=True),
                 lambda: Tensor.rand(3, requires_grad=True), lambda: Tensor.kaiming_uniform(3, requires_grad=True),
                 lambda: Tensor.arange(3.0, requires_grad=True)):
        x = make()
        (x * x).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-6)


# ---- ranges ----

@pytest.mark.parametrize("args", [(5,), (2, 9), (2, 9, 3), (9, 2, -2), (0, 1, 0.25), (-1.5, 2.5, 0.5), (3, 3),
                                  (5, 2), (0.0, 1.0, 0.3)])
def test_arange(args):
    # numpy, not torch, is the oracle: torch refuses a range that runs against its step, tinygrad returns it empty
    t, want = Tensor.arange(*args), np.arange(*args)
    assert t.dtype == (dtypes.float32 if any(isinstance(a, float) for a in args) else dtypes.int32)
    assert t.shape == want.shape
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6, atol=1e-7)
    assert Tensor.arange(4, dtype=dtypes.float16).dtype == dtypes.float16
    with pytest.raises(ValueError):
        Tensor.arange(0, 1, 0)


@pytest.mark.parametrize("args", [(0, 1, 5), (-3, 7, 11), (1, 0, 4), (2, 2, 3), (0, 1, 1), (0, 1, 0), (0.1, 0.7, 100)])
@pytest.mark.parametrize("dtype", [None, dtypes.float64, dtypes.int32])
def test_linspace(args, dtype):
    t = Tensor.linspace(*args, dtype=dtype) if dtype else Tensor.linspace(*args)
    want = torch.linspace(*args, dtype=getattr(torch, np.dtype(dtype.np).name) if dtype else None)
    assert t.shape == tuple(want.shape) and t.dtype == (dtype or dtypes.float32)
    np.testing.assert_allclose(t.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_linspace_bool_raises():
    with pytest.raises(TypeError):
        Tensor.linspace(0, 1, 3, dtype=dtypes.bool)


@pytest.mark.parametrize("nm", [(3,), (2, 4), (4, 2), (0,), (1, 0)])
def test_eye(nm):
    np.testing.assert_array_equal(Tensor.eye(*nm).numpy(), torch.eye(*nm).numpy())
    assert Tensor.eye(*nm, dtype=dtypes.int32).dtype == dtypes.int32


# ---- the random number generator ----

def test_threefry_known_answers():
    # the known-answer vectors of Random123 (Salmon et al.): counter words, key words -> output words
    kat = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
           ((M32, M32), (M32, M32), (0x1CB996FC, 0xBB002BE7)),
           ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0))]
    for (c0, c1), (k0, k1), out in kat:
        assert threefry_ref(c0, c1, k0, k1) == out
    args = [Tensor([v[i] for v in [k[0] + k[1] for k in kat]], dtype=dtypes.uint32) for i in range(4)]
    got = F.Threefry.apply(*args).numpy()
    assert got.dtype == np.uint64
    assert [(int(g) & M32, int(g) >> 32) for g in got] == [k[2] for k in kat]


def test_rand_and_randn_match_the_reference():
    seed = 0x1234_5678_9ABC
    k0, k1 = seed & M32, seed >> 32
    Tensor.manual_seed(seed)
    got_u, got_n = Tensor.rand(2, 3).numpy(), Tensor.randn(7).numpy()
    # call numbers count from 1 after a seed
    bits = [threefry_ref(i, 1, k0, k1)[0] for i in range(6)]
    np.testing.assert_array_equal(got_u, (np.array(bits, np.float64) // 256 * 2.0 ** -24).reshape(2, 3))
    words = np.array([threefry_ref(i, 2, k0, k1) for i in range(7)], np.float64)
    u1, u2 = 1 - words[:, 0] // 256 * 2.0 ** -24, words[:, 1] // 256 * 2.0 ** -24
    np.testing.assert_allclose(got_n, np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2), rtol=1e-5, atol=1e-5)


def draws():
    return [Tensor.rand(5).numpy(), Tensor.randn(2, 3).numpy(), Tensor.randint(6, low=-3, high=50).numpy(),
            Tensor.uniform(4, low=2, high=3).numpy(), Tensor.rand(5).numpy()]


def test_manual_seed_reproduces_streams():
    Tensor.manual_seed(7)
    a = draws()
    Tensor.manual_seed(7)
    b = draws()
    Tensor.manual_seed(8)
    c = draws()
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x, y)
        assert not np.array_equal(x, z)
    assert not np.array_equal(a[0], a[4]), "two calls gave the same values"
    with pytest.raises(TypeError):
        Tensor.manual_seed(1.5)


def test_values_do_not_depend_on_when_they_are_realized():
    Tensor.manual_seed(11)
    early = [Tensor.rand(4).numpy(), Tensor.rand(4).numpy()]
    Tensor.manual_seed(11)
    a, b = Tensor.rand(4), Tensor.rand(4)
    later = [b.numpy(), a.numpy()][::-1]
    np.testing.assert_array_equal(early, later)
    np.testing.assert_array_equal(a.numpy(), early[0])


def test_jit_replays_advance_the_stream():
    from tinygrad.engine.jit import TinyJit

    def f(x):
        return (Tensor.rand(4) * x + Tensor.randn(4)).realize()
    x = Tensor.ones(4).contiguous().realize()
    Tensor.manual_seed(21)
    eager = [f(x).numpy() for _ in range(4)]
    Tensor.manual_seed(21)
    jf = TinyJit(f)
    jitted = [jf(x).numpy() for _ in range(4)]
    assert jf.jit_cache, "nothing was captured"
    np.testing.assert_array_equal(jitted, eager)
    Tensor.manual_seed(21)  # reseeding reaches the captured kernels too
    np.testing.assert_array_equal(jf(x).numpy(), eager[0])


def test_uniform_and_normal_statistics():
    Tensor.manual_seed(2024)
    u = Tensor.rand(100_000).numpy().astype(np.float64)
    assert 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 9_500
    z = Tensor.randn(100_000).numpy().astype(np.float64)
    assert np.isfinite(z).all() and abs(z.mean()) < 0.02 and abs(z.var() - 1) < 0.03
    assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.01
    assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < 0.02
    n = Tensor.normal(100_000, mean=3.0, std=0.5).numpy().astype(np.float64)
    assert abs(n.mean() - 3) < 0.01 and abs(n.std() - 0.5) < 0.01


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64])
def test_random_float_dtypes(dtype):
    Tensor.manual_seed(5)
    u, z = Tensor.rand(20_000, dtype=dtype), Tensor.randn(20_000, dtype=dtype)
    assert u.dtype == dtype and z.dtype == dtype
    un, zn = u.numpy().astype(np.float64), z.numpy().astype(np.float64)
    assert 0 <= un.min() and un.max() < 1 and abs(un.mean() - 0.5) < 0.02
    assert np.isfinite(zn).all() and abs(zn.std() - 1) < 0.05


@pytest.mark.parametrize("fxn", [lambda: Tensor.rand(3, dtype=dtypes.int32), lambda: Tensor.randn(3, dtype="bool"),
                                 lambda: Tensor.randint(3, dtype=dtypes.float32),
                                 lambda: Tensor.randint(3, low=0.5, high=2), lambda: Tensor.rand(3, dtpye="float")])
def test_random_bad_arguments_raise_type_error(fxn):
    with pytest.raises(TypeError):
        fxn()


def test_randint():
    Tensor.manual_seed(3)
    t = Tensor.randint(20_000, low=-3, high=4)
    assert t.dtype == dtypes.int32 and t.shape == (20_000,)
    counts = np.bincount(t.numpy() + 3, minlength=7)
    assert len(counts) == 7 and counts.min() > 2_600
    t = Tensor.randint(-5, 5, (4, 250), dtype=dtypes.int64)  # PyTorch's spelling
    assert t.shape == (4, 250) and t.dtype == dtypes.int64 and set(t.numpy().ravel()) == set(range(-5, 5))
    assert set(Tensor.randint(3, (1000,)).tolist()) == {0, 1, 2}
    big = Tensor.randint(1000, low=0, high=2 ** 40, dtype=dtypes.int64).numpy()
    assert big.min() >= 0 and big.max() < 2 ** 40 and big.max() > 2 ** 39
    assert set(Tensor.randint((300,), low=250, high=256, dtype=dtypes.uint8).tolist()) == set(range(250, 256))
    for low, high, dtype in ((5, 5, dtypes.int32), (3, 1, dtypes.int32), (0, 300, dtypes.uint8),
                             (-1, 3, dtypes.uint32)):
        with pytest.raises(ValueError):
            Tensor.randint(3, low=low, high=high, dtype=dtype)


def test_uniform_bounds_and_int_floor():
    Tensor.manual_seed(9)
    f = Tensor.uniform(10_000, low=-2.0, high=3.0).numpy()
    assert -2 <= f.min() < -1.99 and 2.99 < f.max() < 3
    i = Tensor.uniform(10_000, low=-5, high=5, dtype=dtypes.int32)
    assert i.dtype == dtypes.int32 and set(i.numpy().tolist()) == set(range(-5, 5))


def test_one_kernel_per_shape_whatever_the_call_or_seed():
    Tensor.manual_seed(1)
    Tensor.rand(64).realize()
    Tensor.randn(64).realize()
    n = len(method_cache)
    for seed in (1, 2, 2 ** 40 + 3):
        Tensor.manual_seed(seed)
        Tensor.rand(64).realize()
        Tensor.rand(64).realize()
        Tensor.randn(64).realize()
    assert len(method_cache) == n, "a random call compiled a new kernel"


def test_random_tensors_are_lazy_and_fuse():
    x, y = Tensor.rand(64), Tensor.randn(64)
    assert x.lazydata.base.realized is None and not x.requires_grad
    # (making them ran one tiny kernel each, to advance the generator's state)
    GlobalCounters.kernel_count = 0
    (x * 2 + y).sum().realize()
    assert GlobalCounters.kernel_count == 1


def test_random_shapes_devices_and_likes():
    assert Tensor.rand(0).numpy().shape == (0,) and Tensor.randn(2, 0).shape == (2, 0)
    assert Tensor.rand().shape == () and math.isfinite(Tensor.randn().item())
    assert Tensor.rand((2, 3)).shape == (2, 3) and Tensor.randn(2, 3).shape == (2, 3)
    c = Tensor.rand(3, device="CPU")
    assert c.device == "CPU" and 0 <= c.numpy().min() and c.numpy().max() < 1
    x = Tensor.zeros(2, 5, dtype=dtypes.float16, device="CPU")
    for t in (x.rand_like(), x.randn_like()):
        assert t.shape == (2, 5) and t.dtype == dtypes.float16 and t.device == "CPU"
    assert x.rand_like(dtype=dtypes.float32).dtype == dtypes.float32


def test_rand_over_a_symbolic_length():
    v = Variable("n", 1, 8)
    Tensor.manual_seed(4)
    want = Tensor.rand(4).numpy()
    Tensor.manual_seed(4)
    s = Tensor.rand(v.bind(4))
    assert s.shape[0].unbind()[0] == v
    np.testing.assert_allclose(s.sum().numpy(), want.sum(), rtol=1e-6)
    two = Tensor.rand(2, v.bind(3)).sum().numpy()
    assert 0 <= two <= 6


def test_init_functions_follow_their_formulas():
    Tensor.manual_seed(6)
    shape = (128, 32, 3)
    bound = math.sqrt(3) * math.sqrt(2 / (1 + 0.01 ** 2)) / math.sqrt(96)
    checks = [(Tensor.kaiming_uniform(*shape), bound), (Tensor.kaiming_uniform(*shape, a=1.0), math.sqrt(3 / 96)),
              (Tensor.glorot_uniform(*shape), math.sqrt(6 / (128 + 96))),
              (Tensor.scaled_uniform(*shape), (128 * 96) ** -0.5)]
    for t, b in checks:
        w = t.numpy().astype(np.float64)
        assert w.shape == shape and np.abs(w).max() <= b and np.abs(w).max() > 0.99 * b
        assert abs(w.std() - b / math.sqrt(3)) < 0.02 * b
    w = Tensor.kaiming_normal(256, 64).numpy()
    assert abs(w.std() - math.sqrt(2 / (1 + 0.01 ** 2)) / 8) < 0.005 and abs(w.mean()) < 0.005
    for make in (Tensor.kaiming_uniform, Tensor.kaiming_normal, Tensor.glorot_uniform, Tensor.scaled_uniform):
        assert make(0, 3).shape == (0, 3) and make(3, 0).shape == (3, 0)
