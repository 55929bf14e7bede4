"""Processing ops against PyTorch, forward and backward: matmul, einsum, convolutions, pools, interpolate, layers,
attention and losses; plus the kernel counts of the fused ones."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812
from op_helper import helper_test_op

from tinygrad import Tensor, dtypes
from tinygrad.helpers import GlobalCounters


def is_torch(x):
    return isinstance(x, torch.Tensor)


def kernels(fxn, *shapes):
    """Kernels launched to realize fxn on already-realized random inputs."""
    rng = np.random.default_rng(0)
    xs = [Tensor(rng.standard_normal(s).astype(np.float32)).realize() for s in shapes]
    GlobalCounters.reset()
    fxn(*xs).realize()
    return GlobalCounters.kernel_count


# ---- matmul, linear, einsum ----

@pytest.mark.parametrize("shapes", [[(3,), (3,)], [(3,), (3, 4)], [(4, 3), (3,)], [(2, 1, 3, 4), (5, 4, 2)],
                                    [(2, 3, 4), (4,)], [(3,), (2, 3, 4)], [(1, 3), (3, 1)]])
def test_matmul_shapes(shapes):
    helper_test_op(shapes, lambda a, b: a @ b, atol=1e-5)
    helper_test_op(shapes, lambda a, b: torch.matmul(a, b) if is_torch(a) else a.dot(b), atol=1e-5)


def test_matmul_errors_and_ints():
    with pytest.raises(ValueError, match="matmul"):
        Tensor.ones(3) @ Tensor.ones(4)
    with pytest.raises(ValueError, match="1 dim"):
        Tensor.ones(3).dot(Tensor(2.0))
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = Tensor(a) @ Tensor(a.T.copy())
    assert got.dtype == dtypes.int32
    np.testing.assert_array_equal(got.numpy(), a @ a.T)


def test_zero_size_and_size_one():
    helper_test_op([(0, 3), (3, 4)], lambda a, b: a @ b)
    helper_test_op([(2, 0), (0, 3)], lambda a, b: a @ b)
    helper_test_op([(1, 1), (1, 1)], lambda a, b: a @ b)
    helper_test_op([(0, 2, 4, 4), (3, 2, 3, 3)], lambda x, w: TF.conv2d(x, w) if is_torch(x) else x.conv2d(w))
    helper_test_op([(1, 1, 1, 1), (1, 1, 1, 1)], lambda x, w: TF.conv2d(x, w, padding=1) if is_torch(x) else
                   x.conv2d(w, padding=1))
    helper_test_op([(1, 1, 1, 1)], lambda x: TF.interpolate(x, size=(3, 2), mode="bilinear", align_corners=True)
                   if is_torch(x) else x.interpolate((3, 2), align_corners=True))
    helper_test_op([(1, 2, 3, 3)], lambda x: TF.max_pool2d(x, 1) if is_torch(x) else x.max_pool2d(1))


def test_int_conv_and_einsum():
    rng = np.random.default_rng(6)
    x, w = rng.integers(-5, 5, (1, 2, 5, 5)).astype(np.int32), rng.integers(-5, 5, (3, 2, 3, 3)).astype(np.int32)
    got = Tensor(x).conv2d(Tensor(w), padding=1)
    assert got.dtype == dtypes.int32
    want = TF.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64), padding=1)
    np.testing.assert_array_equal(got.numpy(), want.numpy().astype(np.int32))
    a, b = x[0, 0], x[0, 1, :, :2].copy()
    got = Tensor.einsum("ij,jk->ik", Tensor(a), Tensor(b))
    assert got.dtype == dtypes.int32
    np.testing.assert_array_equal(got.numpy(), a @ b)


def test_linear():
    helper_test_op([(2, 3), (3, 4), (4,)], lambda x, w, b: TF.linear(x, w.T, b) if is_torch(x) else x.linear(w, b),
                   atol=1e-5)
    helper_test_op([(2, 3), (3,)], lambda x, w: x * w if is_torch(x) else x.linear(w))


@pytest.mark.parametrize("formula,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("i,j->ij", [(2,), (3,)]),
    ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("iji->j", [(3, 2, 3)]), ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]), ("...ij,...jk->...ik", [(2, 1, 2, 3), (4, 3, 2)]),
    ("b...,b->...", [(2, 3, 4), (2,)]), ("i...i", [(3, 2, 3)]), ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),
])
def test_einsum(formula, shapes):
    helper_test_op(shapes, lambda *xs: torch.einsum(formula, *xs) if is_torch(xs[0]) else Tensor.einsum(formula, *xs),
                   atol=1e-5)


def test_einsum_errors():
    with pytest.raises(ValueError, match="operands"):
        Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3))
    with pytest.raises(ValueError, match="doesn't match"):
        Tensor.einsum("ijk->i", Tensor.ones(2, 3))
    with pytest.raises(ValueError, match="letter"):
        Tensor.einsum("ij->iz", Tensor.ones(2, 3))
    assert Tensor.einsum("ij,jk->ik", [Tensor.ones(2, 3), Tensor.ones(3, 1)]).shape == (2, 1)


# ---- convolutions ----

@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, groups=2), dict(dilation=2, padding=2),
                                dict(stride=(2, 1), padding=(1, 0)), dict(padding="same", dilation=(1, 2)),
                                dict(padding="valid")])
def test_conv2d(kw):
    groups = kw.get("groups", 1)
    helper_test_op([(2, 4, 7, 6), (6, 4 // groups, 3, 3), (6,)],
                   lambda x, w, b: TF.conv2d(x, w, b, **kw) if is_torch(x) else x.conv2d(w, b, **kw), atol=1e-4)


def test_conv2d_asymmetric_tinygrad_padding():
    # tinygrad's (left, right, top, bottom) padding is F.pad's order
    helper_test_op([(1, 2, 5, 5), (3, 2, 2, 3)],
                   lambda x, w: TF.conv2d(TF.pad(x, (2, 0, 1, 3)), w) if is_torch(x) else
                   x.conv2d(w, padding=(2, 0, 1, 3)), atol=1e-4)
    # negative padding crops
    helper_test_op([(1, 2, 5, 5), (3, 2, 2, 2)],
                   lambda x, w: TF.conv2d(x[:, :, :, 1:], w) if is_torch(x) else x.conv2d(w, padding=(-1, 0, 0, 0)),
                   atol=1e-4)


@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, dilation=2, groups=2), dict(padding=2, stride=3)])
def test_conv1d_conv3d(kw):
    g = kw.get("groups", 1)
    helper_test_op([(2, 4, 9), (4, 4 // g, 3), (4,)],
                   lambda x, w, b: TF.conv1d(x, w, b, **kw) if is_torch(x) else x.conv2d(w, b, **kw), atol=1e-4)
    helper_test_op([(1, 2, 4, 5, 4), (4, 2 // g, 2, 3, 2)],
                   lambda x, w: TF.conv3d(x, w, **kw) if is_torch(x) else x.conv2d(w, **kw), atol=1e-4)


def test_conv_errors():
    with pytest.raises(ValueError, match="groups"):
        Tensor.ones(1, 4, 5, 5).conv2d(Tensor.ones(2, 3, 3, 3))
    with pytest.raises(ValueError, match="spatial"):
        Tensor.ones(1, 4, 5).conv2d(Tensor.ones(2, 4, 3, 3))
    with pytest.raises(ValueError, match="larger"):
        Tensor.ones(1, 4, 2, 2).conv2d(Tensor.ones(2, 4, 3, 3))
    with pytest.raises(ValueError, match="padding"):
        Tensor.ones(1, 4, 5, 5).conv2d(Tensor.ones(2, 4, 3, 3), padding=(1, 2, 3))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1), dict(groups=2, dilation=2),
                                dict(stride=(3, 2), padding=(0, 1), dilation=(1, 2), output_padding=(2, 0)),
                                dict(padding=2)])
def test_conv_transpose2d(kw):
    g = kw.get("groups", 1)
    helper_test_op([(2, 4, 4, 5), (4, 6 // g, 3, 2), (6,)],
                   lambda x, w, b: TF.conv_transpose2d(x, w, b, **kw) if is_torch(x) else
                   x.conv_transpose2d(w, b, **kw), atol=1e-4)


def test_conv_transpose1d():
    helper_test_op([(1, 2, 5), (2, 3, 3)],
                   lambda x, w: TF.conv_transpose1d(x, w, stride=2, padding=1) if is_torch(x) else
                   x.conv_transpose2d(w, stride=2, padding=1), atol=1e-4)


# ---- pools ----

@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=1), dict(kernel_size=(3, 2), padding=1),
                                dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
                                dict(kernel_size=3, stride=2, ceil_mode=True),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=2, stride=3, padding=1, ceil_mode=True, count_include_pad=False)])
def test_avg_pool2d(kw):
    helper_test_op([(2, 2, 7, 6)], lambda x: TF.avg_pool2d(x, **kw) if is_torch(x) else x.avg_pool2d(**kw))


def test_avg_pool1d():
    helper_test_op([(2, 3, 7)], lambda x: TF.avg_pool1d(x, 3, 2, 1) if is_torch(x) else
                   x.avg_pool2d((3,), 2, padding=1))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=1), dict(kernel_size=(3, 2), padding=1),
                                dict(kernel_size=2, stride=2, dilation=2, padding=1),
                                dict(kernel_size=3, stride=2, ceil_mode=True),
                                dict(kernel_size=2, stride=3, padding=1, ceil_mode=True),
                                dict(kernel_size=3, stride=(2, 1), dilation=(1, 2), padding=(1, 0), ceil_mode=True)])
def test_max_pool2d(kw):
    helper_test_op([(2, 2, 7, 6)], lambda x: TF.max_pool2d(x, **kw) if is_torch(x) else x.max_pool2d(**kw))


def test_max_pool_1d_3d_and_ints():
    helper_test_op([(2, 3, 7)], lambda x: TF.max_pool1d(x, 3, 2, 1) if is_torch(x) else
                   x.max_pool2d((3,), 2, padding=1))
    helper_test_op([(1, 2, 4, 5, 4)], lambda x: TF.max_pool3d(x, 2) if is_torch(x) else x.max_pool2d((2, 2, 2)))
    a = np.random.default_rng(1).integers(-50, 50, (1, 1, 5, 5)).astype(np.int32)
    np.testing.assert_array_equal(Tensor(a).max_pool2d(3, 2, padding=1).numpy(),
                                  TF.max_pool2d(torch.tensor(a).float(), 3, 2, 1).int().numpy())


def test_pool_view_is_windows():
    # the sliding-window view itself: (..., i) -> (..., o, k), stride and dilation
    x = Tensor.arange(10)
    np.testing.assert_array_equal(x._pool((3,), 2, 2).numpy(), [[0, 2, 4], [2, 4, 6], [4, 6, 8]])
    np.testing.assert_array_equal(x._pool((2,), 4).numpy(), [[0, 1], [4, 5], [8, 9]])
    np.testing.assert_array_equal(x._pool((1,), 4).numpy(), [[0], [4], [8]])


# ---- interpolate ----

@pytest.mark.parametrize("mode,size,align", [
    ("nearest", (8, 6), False), ("nearest", (5, 7), False), ("nearest", (2, 3), False),
    ("nearest-exact", (5, 7), False), ("nearest-exact", (2, 3), False), ("bilinear", (7, 5), False),
    ("bilinear", (7, 5), True), ("bilinear", (2, 2), False), ("bilinear", (1, 3), True), ("area", (3, 5), False),
])
def test_interpolate(mode, size, align):
    kw = dict(align_corners=align) if "linear" in mode else {}
    helper_test_op([(2, 2, 4, 6)], lambda x: TF.interpolate(x, size=size, mode=mode, **kw) if is_torch(x) else
                   x.interpolate(size, mode=mode, **kw), atol=1e-5)


def test_interpolate_linear_1d_scale_factor():
    helper_test_op([(1, 2, 5)], lambda x: TF.interpolate(x, size=9, mode="linear") if is_torch(x) else
                   x.interpolate(9, mode="linear"), atol=1e-5)
    helper_test_op([(1, 2, 5, 4)], lambda x: TF.interpolate(x, scale_factor=(1.5, 2.0), mode="bilinear")
                   if is_torch(x) else x.interpolate(scale_factor=(1.5, 2.0), mode="linear"), atol=1e-5)
    helper_test_op([(1, 2, 5, 4)], lambda x: TF.interpolate(x, scale_factor=1.7, mode="nearest")
                   if is_torch(x) else x.interpolate(scale_factor=1.7, mode="nearest"))
    with pytest.raises(ValueError, match="mode"):
        Tensor.ones(1, 1, 2, 2).interpolate((3, 3), mode="bicubic")


# ---- layers ----

def test_layernorm():
    helper_test_op([(3, 5, 6)], lambda x: TF.layer_norm(x, (6,)) if is_torch(x) else x.layernorm(), atol=1e-5)
    helper_test_op([(3, 5, 6)], lambda x: TF.layer_norm(x, (5, 6), eps=1e-3) if is_torch(x) else
                   x.layernorm(axis=(1, 2), eps=1e-3), atol=1e-5)


def test_batchnorm():
    rng = np.random.default_rng(0)
    x, w, b, m = (rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 4, 4), (3,), (3,), (3,)])
    v = rng.uniform(0.5, 2, 3).astype(np.float32)
    # running stats are buffers in PyTorch: differentiate x, weight and bias only
    helper_test_op(None, lambda x, w, b: TF.batch_norm(x, torch.tensor(m), torch.tensor(v), w, b) if is_torch(x)
                   else x.batchnorm(w, b, Tensor(m), (Tensor(v) + 1e-5).rsqrt()), vals=[x, w, b], atol=1e-5)
    helper_test_op(None, lambda x: TF.batch_norm(x, torch.tensor(m), torch.tensor(v)) if is_torch(x)
                   else x.batchnorm(None, None, Tensor(m), (Tensor(v) + 1e-5).rsqrt()), vals=[x], atol=1e-5)


def test_dropout():
    x = Tensor.ones(64, 64).contiguous()
    assert x.dropout(0.5) is x  # not training: a no-op
    with Tensor.train():
        Tensor.manual_seed(7)
        a = x.dropout(0.25).numpy()
        Tensor.manual_seed(7)
        b = x.dropout(0.25).numpy()
        np.testing.assert_array_equal(a, b)
        assert set(np.unique(a).tolist()) <= {0.0, float(np.float32(1 / 0.75))} and 0.2 < (a == 0).mean() < 0.3
        np.testing.assert_array_equal(x.dropout(1.0).numpy(), np.zeros((64, 64)))
        g = Tensor.ones(8, requires_grad=True)
        Tensor.manual_seed(3)
        out = g.dropout(0.5)
        out.sum().backward()
        np.testing.assert_array_equal(g.grad.numpy(), out.numpy())
    with pytest.raises(ValueError, match="probability"):
        x.dropout(1.5)


@pytest.mark.parametrize("case", ["plain", "causal", "bool", "float", "causal_rect"])
def test_scaled_dot_product_attention(case):
    rng = np.random.default_rng(5)
    shapes = [(2, 2, 4, 8), (2, 2, 4, 8), (2, 2, 4, 8)]
    if case == "causal_rect":
        shapes = [(1, 3, 8), (1, 5, 8), (1, 5, 8)]
    bmask = rng.random((4, 4)) > 0.4
    np.fill_diagonal(bmask, True)
    fmask = rng.standard_normal((2, 1, 4, 4)).astype(np.float32)

    def fxn(q, k, v):
        kw = {}
        if case in ("causal", "causal_rect"):
            kw["is_causal"] = True
        elif case == "bool":
            kw["attn_mask"] = torch.tensor(bmask) if is_torch(q) else Tensor(bmask)
        elif case == "float":
            kw["attn_mask"] = torch.tensor(fmask) if is_torch(q) else Tensor(fmask)
        return TF.scaled_dot_product_attention(q, k, v, **kw) if is_torch(q) else \
            q.scaled_dot_product_attention(k, v, **kw)
    helper_test_op(shapes, fxn, atol=1e-5)


def test_sdpa_dropout_in_training_is_seeded():
    q = Tensor(np.random.default_rng(0).standard_normal((1, 4, 8)).astype(np.float32))
    np.testing.assert_allclose(q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy(),
                               q.scaled_dot_product_attention(q, q).numpy())
    with Tensor.train():
        Tensor.manual_seed(1)
        a = q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy()
        Tensor.manual_seed(1)
        np.testing.assert_array_equal(q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy(), a)


# ---- encodings and losses ----

def test_one_hot():
    y = np.array([[0, 3], [2, 1]], dtype=np.int64)
    got = Tensor(y).one_hot(4)
    assert got.dtype == dtypes.int32
    np.testing.assert_array_equal(got.numpy(), TF.one_hot(torch.tensor(y), 4).numpy())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_crossentropy(reduction):
    rng = np.random.default_rng(2)
    p = rng.uniform(0.05, 0.95, (3, 4)).astype(np.float32)
    y = rng.uniform(0, 1, (3, 4)).astype(np.float32)
    helper_test_op(None, lambda p, y: TF.binary_cross_entropy(p, y, reduction=reduction) if is_torch(p) else
                   p.binary_crossentropy(y, reduction=reduction), vals=[p, y], atol=1e-5)
    x = np.array([[-1e4, -100.0, -20.0, -1.0, 0.0, 1.0, 20.0, 100.0, 1e4]], np.float32)
    yx = np.array([[0.0, 1.0, 0.3, 1.0, 0.5, 0.0, 1.0, 0.0, 1.0]], np.float32)
    helper_test_op(None, lambda x, y: TF.binary_cross_entropy_with_logits(x, y, reduction=reduction) if is_torch(x)
                   else x.binary_crossentropy_logits(y, reduction=reduction), vals=[x, yx], atol=1e-4)


def test_binary_crossentropy_clamps_logs():
    p = np.array([0.0, 1.0, 0.5], np.float32)
    y = np.array([1.0, 0.0, 1.0], np.float32)
    helper_test_op(None, lambda p, y: TF.binary_cross_entropy(p, y) if is_torch(p) else p.binary_crossentropy(y),
                   vals=[p, y], forward_only=True)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_sparse_categorical_crossentropy(reduction, smoothing):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    x[0] = [1e4, -1e4, 0, 50, -50]  # extreme logits stay finite
    y = np.array([0, 4, -1, 2, 1, -1], np.int32)

    def fxn(x, y):
        if is_torch(x):
            return TF.cross_entropy(x, y.long(), ignore_index=-1, label_smoothing=smoothing, reduction=reduction)
        return x.sparse_categorical_crossentropy(y, label_smoothing=smoothing, reduction=reduction)
    helper_test_op(None, fxn, vals=[x, y], atol=1e-4)


def test_sparse_categorical_crossentropy_batched_ignore_index():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    y = np.array([[1, 7, 3], [0, 7, 2]], np.int64)
    helper_test_op(None, lambda x, y: TF.cross_entropy(x.permute(0, 2, 1), y, ignore_index=7) if is_torch(x) else
                   x.sparse_categorical_crossentropy(y, ignore_index=7), vals=[x, y], atol=1e-5)
    with pytest.raises(ValueError, match="reduction"):
        Tensor(x).sparse_categorical_crossentropy(Tensor(y), reduction="avg")
    with pytest.raises(ValueError, match="labels"):
        Tensor(x).sparse_categorical_crossentropy(Tensor(y[0]))


# ---- kernel counts (forward, on realized inputs) ----

def test_kernel_counts():
    assert kernels(lambda a, b: a @ b, (64, 64), (64, 64)) == 1
    assert kernels(lambda x, w: x.conv2d(w, padding=1), (1, 4, 8, 8), (8, 4, 3, 3)) == 1
    assert kernels(lambda x, w: x.conv2d(w, stride=2, dilation=2), (1, 4, 8, 8), (8, 4, 3, 3)) == 1
    assert kernels(lambda x: x.max_pool2d(3, 2, padding=1), (1, 4, 8, 8)) == 1
    assert kernels(lambda x: x.avg_pool2d(2), (1, 4, 8, 8)) == 1
    assert kernels(lambda x: x.softmax(-1), (16, 64)) <= 3
    assert kernels(lambda x: x.layernorm(), (16, 64)) <= 3
