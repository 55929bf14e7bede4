"""tinygrad.nn layers against torch.nn with copied weights: forward values, and the gradients of the input and of
every parameter, across options; then initialisations, BatchNorm's running statistics and bad input."""
import math

import numpy as np
import pytest
import torch

from tinygrad import Tensor, dtypes
from tinygrad.nn import (
    BatchNorm,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    ConvTranspose1d,
    ConvTranspose2d,
    Embedding,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    LayerNorm2d,
    Linear,
    RMSNorm,
)

RTOL, ATOL = 1e-5, 1e-5


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def copy_params(tiny, ref, names):
    """Give the tinygrad layer the torch layer's values (the two initialise from different random streams)."""
    for n in names:
        src = getattr(ref, n)
        setattr(tiny, n, None if src is None else Tensor(src.detach().numpy().copy(), requires_grad=True))


def check_layer(tiny, ref, x, names=("weight", "bias"), rtol=RTOL, atol=ATOL, train=False):
    """Forward and backward (with a random upstream gradient) of both layers on input `x`; compares the output, the
    input's gradient and every named parameter's gradient."""
    copy_params(tiny, ref, names)
    ref.train(train)
    xt, xg = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    with Tensor.train(train):
        out = tiny(xg)
    want = ref(xt)
    assert out.shape == tuple(want.shape)
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=rtol, atol=atol, err_msg="forward")
    upstream = rand(*want.shape, seed=99)
    (want * torch.tensor(upstream)).sum().backward()
    (out * Tensor(upstream)).sum().backward()
    np.testing.assert_allclose(xg.grad.numpy(), xt.grad.numpy(), rtol=rtol, atol=atol, err_msg="input grad")
    for n in names:
        if getattr(ref, n) is None:
            assert getattr(tiny, n) is None
            continue
        np.testing.assert_allclose(getattr(tiny, n).grad.numpy(), getattr(ref, n).grad.numpy(), rtol=rtol,
                                   atol=atol, err_msg=f"{n} grad")


# ---- dense and convolution layers ----
@pytest.mark.parametrize("shape,bias", [((4, 3), True), ((2, 4, 3), False)])
def test_linear(shape, bias):
    torch.manual_seed(0)
    check_layer(Linear(3, 5, bias=bias), torch.nn.Linear(3, 5, bias=bias), rand(*shape))


CONV2D = [  # (in, out, kernel), options
    ((4, 6, 3), dict()),
    ((4, 6, 3), dict(stride=2, padding=1)),
    ((4, 6, 3), dict(padding=(1, 2), dilation=2, groups=2)),
    ((4, 6, 3), dict(stride=(2, 1), padding=1, dilation=(1, 2), bias=False)),
    ((4, 8, (3, 2)), dict(padding="same", groups=4)),
]


@pytest.mark.parametrize("args,kw", CONV2D)
def test_conv2d(args, kw):
    torch.manual_seed(1)
    check_layer(Conv2d(*args, **kw), torch.nn.Conv2d(*args, **kw), rand(2, 4, 7, 6))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=2, dilation=2, groups=2, bias=False)])
def test_conv1d(kw):
    torch.manual_seed(2)
    check_layer(Conv1d(4, 6, 3, **kw), torch.nn.Conv1d(4, 6, 3, **kw), rand(2, 4, 9))


CONVT2D = [
    dict(),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(2, 3), padding=(0, 1), output_padding=(1, 2), groups=2, bias=False),
    dict(dilation=2, padding=1, groups=2),
]


@pytest.mark.parametrize("kw", CONVT2D)
def test_conv_transpose2d(kw):
    torch.manual_seed(3)
    check_layer(ConvTranspose2d(4, 6, 3, **kw), torch.nn.ConvTranspose2d(4, 6, 3, **kw), rand(2, 4, 4, 5))


@pytest.mark.parametrize("kw", [dict(), dict(stride=3, padding=1, output_padding=2, dilation=1, groups=2)])
def test_conv_transpose1d(kw):
    torch.manual_seed(4)
    check_layer(ConvTranspose1d(4, 6, 3, **kw), torch.nn.ConvTranspose1d(4, 6, 3, **kw), rand(2, 4, 5))


# ---- normalisation layers ----
BN_NAMES = ("weight", "bias")


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("affine,track", [(True, True), (False, True), (True, False)])
def test_batchnorm2d(train, affine, track):
    torch.manual_seed(5)
    ref = torch.nn.BatchNorm2d(3, affine=affine, track_running_stats=track)
    tiny = BatchNorm2d(3, affine=affine, track_running_stats=track)
    if track:
        # non-trivial running statistics, so eval mode is tested against something other than 0 and 1
        ref.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
        ref.running_var.copy_(torch.tensor([0.5, 2.0, 1.5]))
        tiny.running_mean = Tensor(ref.running_mean.numpy().copy(), requires_grad=False)
        tiny.running_var = Tensor(ref.running_var.numpy().copy(), requires_grad=False)
    if affine:
        with torch.no_grad():
            ref.weight.copy_(torch.tensor([1.5, -0.5, 2.0]))
            ref.bias.copy_(torch.tensor([0.1, 0.2, -0.3]))
    check_layer(tiny, ref, rand(4, 3, 3, 2, scale=2.0) + 1, names=BN_NAMES, train=train)


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5)])
def test_batchnorm1d_train(shape):
    torch.manual_seed(6)
    check_layer(BatchNorm1d(3), torch.nn.BatchNorm1d(3), rand(*shape), names=BN_NAMES, train=True)


@pytest.mark.parametrize("momentum", [0.1, 0.3, None])
def test_batchnorm_running_stats_follow_torch(momentum):
    ref, tiny = torch.nn.BatchNorm2d(3, momentum=momentum), BatchNorm(3, momentum=momentum)
    ref.train()
    for step in range(4):
        x = rand(5, 3, 2, 2, seed=step, scale=1 + step) + step
        with torch.no_grad():
            ref(torch.tensor(x))
        with Tensor.train():
            tiny(Tensor(x))
    Tensor.corealize([tiny.running_mean, tiny.running_var, tiny.num_batches_tracked])
    np.testing.assert_allclose(tiny.running_mean.numpy(), ref.running_mean.numpy(), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(tiny.running_var.numpy(), ref.running_var.numpy(), rtol=RTOL, atol=1e-6)
    assert tiny.num_batches_tracked.tolist() == [4.0]
    # eval mode then uses them
    x = rand(2, 3, 2, 2, seed=9)
    ref.eval()
    np.testing.assert_allclose(tiny(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=RTOL, atol=ATOL)


def test_batchnorm_eval_and_untracked_leave_running_stats_alone():
    bn, untracked = BatchNorm(2), BatchNorm(2, track_running_stats=False)
    x = Tensor(rand(3, 2, 4) + 3)
    bn(x).realize()  # eval mode
    with Tensor.train():
        untracked(x).realize()
    for layer in (bn, untracked):
        assert layer.running_mean.tolist() == [0.0, 0.0] and layer.running_var.tolist() == [1.0, 1.0]
        assert layer.num_batches_tracked.tolist() == [0.0]


@pytest.mark.parametrize("shape,affine", [(5, True), ((3, 5), True), ((3, 5), False)])
def test_layernorm(shape, affine):
    torch.manual_seed(7)
    ref = torch.nn.LayerNorm(shape, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.add_(torch.randn(ref.weight.shape))
            ref.bias.add_(torch.randn(ref.bias.shape))
    names = ("weight", "bias") if affine else ()
    check_layer(LayerNorm(shape, elementwise_affine=affine), ref, rand(2, 3, 5, scale=3.0), names=names)


class _TorchLayerNorm2d(torch.nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def test_layernorm2d():
    torch.manual_seed(8)
    ref = _TorchLayerNorm2d(4)
    with torch.no_grad():
        ref.weight.add_(torch.randn(4))
    check_layer(LayerNorm2d(4), ref, rand(2, 4, 3, 2))


@pytest.mark.parametrize("groups,affine", [(2, True), (4, False), (1, True)])
def test_groupnorm(groups, affine):
    torch.manual_seed(9)
    ref = torch.nn.GroupNorm(groups, 4, affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.add_(torch.randn(4))
            ref.bias.add_(torch.randn(4))
    names = ("weight", "bias") if affine else ()
    check_layer(GroupNorm(groups, 4, affine=affine), ref, rand(2, 4, 3, 2, scale=2.0), names=names)


@pytest.mark.parametrize("shape,affine", [((2, 4, 3, 2), True), ((2, 4, 5), False)])
def test_instancenorm(shape, affine):
    torch.manual_seed(10)
    cls = torch.nn.InstanceNorm2d if len(shape) == 4 else torch.nn.InstanceNorm1d
    ref = cls(4, affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.add_(torch.randn(4))
    names = ("weight", "bias") if affine else ()
    check_layer(InstanceNorm(4, affine=affine), ref, rand(*shape), names=names)


def test_rmsnorm():
    torch.manual_seed(11)
    ref = torch.nn.RMSNorm(5, eps=1e-6)
    with torch.no_grad():
        ref.weight.add_(torch.randn(5))
    check_layer(RMSNorm(5), ref, rand(2, 3, 5), names=("weight",))


def test_rmsnorm_normalises_half_input_in_float32():
    x = rand(2, 4, scale=100.0).astype(np.float16)
    out = RMSNorm(4)(Tensor(x))
    # as tinygrad: the normalised value is cast back to half, then the float32 weight promotes the product
    assert out.dtype == dtypes.float32
    xf = x.astype(np.float32)
    want = (xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + 1e-6)).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-3)


# ---- embedding ----
def test_embedding_forward_and_weight_grad():
    torch.manual_seed(12)
    ref, tiny = torch.nn.Embedding(7, 3), Embedding(7, 3)
    copy_params(tiny, ref, ("weight",))
    idx = np.array([[0, 3, 3], [6, 1, 3]], dtype=np.int32)  # repeats: their gradients add up
    out, want = tiny(Tensor(idx)), ref(torch.tensor(idx, dtype=torch.long))
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=RTOL, atol=ATOL)
    upstream = rand(2, 3, 3, seed=5)
    (want * torch.tensor(upstream)).sum().backward()
    (out * Tensor(upstream)).sum().backward()
    np.testing.assert_allclose(tiny.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=RTOL, atol=ATOL)


def test_embedding_empty_and_bad_indices():
    emb = Embedding(5, 2)
    assert emb(Tensor(np.zeros((0, 3), np.int32))).shape == (0, 3, 2)
    with pytest.raises(TypeError, match="ints"):
        emb(Tensor([1.0, 2.0]))


# ---- initialisation ----
def _bound_used(t: Tensor, bound: float) -> None:
    """All values within +-bound and the extremes near it (a uniform sample of a few hundred values)."""
    a = np.abs(t.numpy())
    assert a.max() <= bound * (1 + 1e-6) and a.max() > 0.9 * bound, (a.max(), bound)


def test_initialisations():
    Tensor.manual_seed(0)
    lin = Linear(20, 30)
    assert lin.weight.shape == (30, 20) and lin.bias.shape == (30,)
    _bound_used(lin.weight, 1 / math.sqrt(20))
    _bound_used(lin.bias, 1 / math.sqrt(20))
    conv = Conv2d(4, 30, 3, groups=2)
    assert conv.weight.shape == (30, 2, 3, 3)
    _bound_used(conv.weight, 1 / math.sqrt(2 * 9))
    _bound_used(conv.bias, 1 / math.sqrt(2 * 9))
    convt = ConvTranspose2d(6, 40, (2, 3), groups=2)
    assert convt.weight.shape == (6, 20, 2, 3) and convt.bias.shape == (40,)
    _bound_used(convt.weight, 1 / math.sqrt(20 * 6))
    assert Conv1d(2, 3, 5).weight.shape == (3, 2, 5) and ConvTranspose1d(2, 3, 5).weight.shape == (2, 3, 5)
    emb = Embedding(30, 20)
    _bound_used(emb.weight, math.sqrt(6 / 50))
    bn = BatchNorm(3)
    assert bn.weight.tolist() == [1, 1, 1] and bn.bias.tolist() == [0, 0, 0]
    assert bn.running_mean.requires_grad is False and bn.running_var.tolist() == [1, 1, 1]
    assert BatchNorm(3, affine=False).weight is None
    for norm in (LayerNorm((2, 3)), GroupNorm(2, 4), InstanceNorm(4), RMSNorm(4)):
        assert np.all(norm.weight.numpy() == 1)
    assert Linear(3, 2, bias=False).bias is None and Conv2d(1, 1, 1, bias=False).bias is None
    assert BatchNorm2d is BatchNorm and BatchNorm1d is BatchNorm


# ---- bad input ----
@pytest.mark.parametrize("make,match", [
    (lambda: Conv2d(3, 4, 3, groups=2), "divisible"),
    (lambda: Conv2d(3, 4, 0), "kernel_size"),
    (lambda: Linear(-1, 2), "in_features"),
    (lambda: GroupNorm(3, 4), "divisible"),
    (lambda: BatchNorm(0), "num_features"),
    (lambda: BatchNorm(2, momentum=2.0), "momentum"),
    (lambda: LayerNorm(()), "normalized_shape"),
])
def test_bad_construction_raises(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("layer,shape", [
    (Linear(3, 2), (4, 5)),
    (Conv2d(3, 2, 1), (1, 4, 5, 5)),
    (BatchNorm(3), (2, 4)),
    (LayerNorm(3), (2, 4)),
    (GroupNorm(2, 4), (2, 6, 3)),
    (InstanceNorm(4), (2, 3, 3)),
    (RMSNorm(3), (2, 4)),
    (LayerNorm2d(3), (3,)),
])
def test_bad_input_shape_raises(layer, shape):
    with pytest.raises(ValueError):
        layer(Tensor.zeros(*shape))


def test_batchnorm_needs_more_than_one_value_per_channel_in_training():
    with Tensor.train(), pytest.raises(ValueError, match="more than 1 value"):
        BatchNorm(3)(Tensor.zeros(1, 3))
