"""Tensors with symbolic shapes and values (issue: symbolic shapes end to end): one kernel serves every binding."""
import numpy as np
import pytest

from tinygrad import Tensor, Variable
from tinygrad.engine.realize import method_cache


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_bind_checks_bounds_and_unbind_returns_the_value():
    v = Variable("n", 2, 8)
    with pytest.raises(ValueError, match="n"):
        v.bind(9)
    bv = v.bind(5)
    assert bv.unbind() == (v, 5) and bv.val == 5


def test_reshape_to_symbolic_and_back():
    for n in (2, 5):
        v = Variable("n", 1, 8).bind(n)
        x = Tensor(data(3, n))
        xs = x.reshape(3, v)
        assert xs.shape[1] is not n and xs.reshape(3, n).shape == (3, n)
        np.testing.assert_allclose((xs * 2).reshape(3, n).numpy(), data(3, n) * 2)
    with pytest.raises(ValueError):
        Tensor(data(3, 4)).reshape(3, Variable("n", 1, 8).bind(5))


def test_one_compiled_kernel_serves_every_binding():
    def run(n):
        v = Variable("m", 1, 16).bind(n)
        return (Tensor(data(n)).reshape(v) * 3).sum().item()
    run(3)
    before = len(method_cache)
    for n in (4, 9, 16):
        np.testing.assert_allclose(run(n), data(n).sum() * 3, rtol=1e-5)
    assert len(method_cache) == before


def test_shrink_and_cat_along_symbolic_dims():
    for n in (1, 3, 6):
        v = Variable("k", 1, 8).bind(n)
        x = Tensor(data(8, 2))
        np.testing.assert_allclose(x.shrink(((0, v), None)).sum(0).numpy(), data(8, 2)[:n].sum(0), rtol=1e-5)
        a = Tensor(data(2, n)).reshape(2, v)
        np.testing.assert_allclose(a.cat(a, dim=1).reshape(2, 2 * n).numpy(),
                                   np.concatenate([data(2, n)] * 2, 1))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_mean_var_std_over_symbolic_dims_any_axis(axis):
    for n in (2, 5):
        v = Variable("n", 1, 8).bind(n)
        ref = data(n, 3).astype(np.float64)
        xs = Tensor(data(n, 3)).reshape(v, 3)
        np.testing.assert_allclose(xs.mean(axis=axis).numpy(), ref.mean(axis=axis), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(xs.var(axis=axis).numpy(), ref.var(axis=axis, ddof=1), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(xs.std(axis=axis).numpy(), ref.std(axis=axis, ddof=1), rtol=1e-4, atol=1e-6)


def test_tensors_from_symbolic_values():
    vv = Variable("a", 0, 10).bind(3)
    assert (Tensor(vv) + 3).item() == 6 and (Tensor(2) * vv).item() == 6
    assert (Tensor(3) * (vv * 4)).item() == 36
    assert (Tensor([1.0, 2.0]) / vv).numpy().tolist() == pytest.approx([1 / 3, 2 / 3])
    with pytest.raises(ValueError, match="bound"):
        Tensor(Variable("u", 0, 4))


def test_symbolic_matmul():
    for n in (1, 4, 7):
        v = Variable("s", 1, 8).bind(n)
        a, b = Tensor(data(2, n, seed=n)).reshape(2, v), Tensor(data(n, 3, seed=n + 1)).reshape(v, 3)
        np.testing.assert_allclose((a @ b).numpy(), data(2, n, seed=n) @ data(n, 3, seed=n + 1), rtol=1e-5)


def test_arange_with_a_symbolic_stop():
    for n in (1, 4, 9):
        v = Variable("stop", 1, 10).bind(n)
        np.testing.assert_array_equal(Tensor.arange(v).numpy(), np.arange(n))
        assert Tensor.arange(v).sum().item() == n * (n - 1) // 2
    with pytest.raises(ValueError, match="step"):
        Tensor.arange(Variable("stop", 1, 10).bind(3), step=0.5)


def test_sdpa_over_a_symbolic_sequence_length():
    torch = pytest.importorskip("torch")
    for n in (1, 5, 9):
        v = Variable("s", 1, 16).bind(n)
        q, k, vv = data(1, 2, 1, 8, seed=n), data(1, 2, n, 8, seed=n + 1), data(1, 2, n, 8, seed=n + 2)
        out = Tensor(q).scaled_dot_product_attention(Tensor(k).reshape(1, 2, v, 8), Tensor(vv).reshape(1, 2, v, 8))
        ref = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(vv))
        np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_masked_softmax_over_a_symbolic_length_matches_numpy():
    # a scaled, masked softmax over a symbolic key length, as a decode step attends: gcc 12 with AVX-512 once
    # miscompiled its fused kernels (every head but the first took one value), see runtime/host_cc.py's CFLAGS
    rng = np.random.default_rng(0)
    ctx, n = 256, 7
    keys = rng.standard_normal((ctx, 1, 64)).astype(np.float32)
    q = rng.standard_normal((4, 1, 64)).astype(np.float32)
    s = np.einsum("hd,kd->hk", q[:, 0], keys[:n, 0]) * 0.5
    e = np.exp(s - s.max(-1, keepdims=True))
    sp = Variable("sp", 1, ctx - 1).bind(n - 1)
    end = sp + 1
    k = Tensor(keys)[:end].reshape(end, 1, 1, 64).expand(end, 1, 4, 64).reshape(end, 4, 64).permute(1, 2, 0)
    qpos = (Tensor.arange(1) + Tensor(sp)).reshape(1, 1)
    kpos = Tensor.arange(end).reshape(1, end)
    mask = (kpos <= qpos) & (kpos > qpos - 512)
    out = mask.reshape(1, 1, end).where((Tensor(q) @ k) * 0.5, float("-inf")).softmax(-1).realize()
    np.testing.assert_allclose(out.numpy()[:, 0], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_bind_binds_an_unbound_variable_in_place_as_0_9_did():
    # 0.9 code binds a Variable and goes on using the same object: `v.bind(2)` then `Tensor(v)`
    v = Variable("w", 0, 10)
    assert v.bind(2) is v and v.val == 2
    assert (Tensor(v) + 3).item() == 5 and (Tensor(3) * (v * 4)).item() == 24
    # binding a bound one leaves it as it is and gives a bound copy (a template Variable bound once per step)
    other = v.bind(7)
    assert other is not v and other == v and (other.val, v.val) == (7, 2)
    # with_value never touches the Variable it is called on
    u = Variable("u", 0, 4)
    assert u.with_value(3).val == 3 and u._val is None
    with pytest.raises(ValueError, match="outside"):
        u.with_value(5)


def test_mean_over_dims_bound_in_place():
    a, b = Variable("a", 1, 10), Variable("b", 1, 10)
    a.bind(2)
    b.bind(3)
    t = Tensor(data(3, 2)).reshape(b, a)
    np.testing.assert_allclose(t.mean().item(), data(3, 2).mean(), rtol=1e-5)
    np.testing.assert_allclose(t.mean(axis=1).reshape(3).numpy(), data(3, 2).mean(axis=1), rtol=1e-5)


def test_shapetracker_shrink_in_range_at_the_bound_value():
    from tinygrad.shape.shapetracker import ShapeTracker
    x = Variable("x", 1, 100).bind(3)
    # x + 3 can pass 10 for other values of x: allowed, as 0.9 did, because it fits at the value bound now
    st = ShapeTracker.from_shape((10, 10)).shrink(((x, x + 3), (2, 5)))
    assert st.shape == (3, 3) and st.var_vals == {Variable("x", 1, 100): 3}
    with pytest.raises(ValueError, match="out of range"):
        ShapeTracker.from_shape((10, 10)).shrink(((x, x + 8), (2, 5)))
    with pytest.raises(ValueError, match="out of range"):
        ShapeTracker.from_shape((10, 10)).shrink(((Variable("y", 1, 100), 12), (2, 5)))


def test_jitted_function_of_a_symbolic_shrink_of_its_input():
    from tinygrad import TinyJit
    jf = TinyJit(lambda a: (a + 1).realize())
    for i in range(1, 5):
        vi = Variable("i", 1, 10).bind(i)
        a = Tensor(data(7, 11, seed=i))
        # vi + 2 reaches past 11 for some i in [1, 10]: each call's value fits
        np.testing.assert_allclose(jf(a.shrink(((3, 5), (vi, vi + 2)))).numpy(), data(7, 11, seed=i)[3:5, i:i + 2] + 1,
                                   rtol=1e-6)
    assert sum(1 for ei in jf.jit_cache if ei.prg.graph_kind == "kernel") == 1


def test_kv_cache_padded_to_its_length_inside_a_jit():
    # a decoder's cache: the keys so far plus the new one, padded back to the cache's length. The pad,
    # cache_len - pos - 1, is negative for the variable's last value but not for the values it is bound to (as
    # tinygrad 0.9 allowed); every step goes through one jitted function
    from tinygrad import TinyJit

    cache_len, rows = 8, 2
    cache = Tensor.zeros(rows, cache_len).contiguous().realize()

    @TinyJit
    def step(new: Tensor, pos):
        keys = cache.shrink((None, (0, pos))).cat(new, dim=1)
        cache.assign(keys.pad((None, (0, cache_len - pos - 1))).contiguous()).realize()

    want = np.zeros((rows, cache_len), np.float32)
    for i in range(1, 6):
        pos = Variable("pos", 1, cache_len).bind(i)
        step(Tensor.full((rows, 1), float(i)).contiguous(), pos)
        want[:, i] = i
        np.testing.assert_array_equal(cache.numpy(), want)
    # a pad that is negative at the value bound is a crop, as for ints
    t = Tensor.arange(6).reshape(1, 6)
    p = Variable("p", 0, 6).bind(4)
    np.testing.assert_array_equal(t.pad((None, (0, 3 - p))).numpy(), np.arange(5).reshape(1, 5))
