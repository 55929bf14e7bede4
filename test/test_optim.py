"""tinygrad.nn.optim: parameter trajectories over 20+ steps against torch.optim (SGD, Adam, AdamW) and against numpy
references written here (LARS, LAMB, which torch lacks); learning-rate changes under TinyJit; the base class."""
import numpy as np
import pytest
import torch

from tinygrad import Tensor, TinyJit, dtypes
from tinygrad.nn import BatchNorm2d, Conv2d, Linear
from tinygrad.nn.optim import LAMB, LARS, SGD, Adam, AdamW, Optimizer, OptimizerGroup

STEPS = 20
RTOL, ATOL = 1e-5, 1e-6


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# the small problem: one tanh layer regressed onto fixed targets
X, Y = rand(8, 4, seed=1), rand(8, 3, seed=2, scale=0.5)
W0, B0 = rand(4, 3, seed=3), rand(3, seed=4, scale=0.1)


def loss_fn(w, b, x, y):
    return ((x @ w + b).tanh() - y).square().mean()


def tiny_trajectory(make_opt, steps=STEPS, lr_at=None, jit=False):
    """The parameters after each of `steps` steps; `lr_at` maps a step index to a new learning rate set in place
    before it."""
    w, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
    opt = make_opt([w, b])
    x, y = Tensor(X), Tensor(Y)

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(w, b, x, y)
        loss.backward()
        opt.step()
        return loss.realize()

    run = TinyJit(step) if jit else step
    out = []
    for i in range(steps):
        if lr_at and i in lr_at:
            opt.lr.assign(Tensor([lr_at[i]])).realize()
        run(x, y)
        out.append((w.numpy(), b.numpy()))
    return out


def torch_trajectory(make_opt, steps=STEPS, lr_at=None):
    w, b = torch.tensor(W0, requires_grad=True), torch.tensor(B0, requires_grad=True)
    opt = make_opt([w, b])
    x, y = torch.tensor(X), torch.tensor(Y)
    out = []
    for i in range(steps):
        if lr_at and i in lr_at:
            for g in opt.param_groups:
                g["lr"] = lr_at[i]
        opt.zero_grad()
        loss_fn(w, b, x, y).backward()
        opt.step()
        out.append((w.detach().numpy().copy(), b.detach().numpy().copy()))
    return out


def reference_trajectory(update, steps=STEPS):
    """Gradients from torch autograd, updates from `update(i, params, grads)` (numpy, float64, in place)."""
    params = [W0.astype(np.float64), B0.astype(np.float64)]
    out = []
    for i in range(steps):
        w, b = (torch.tensor(p, requires_grad=True) for p in params)
        loss_fn(w, b, torch.tensor(X, dtype=torch.float64), torch.tensor(Y, dtype=torch.float64)).backward()
        update(i, params, [w.grad.numpy(), b.grad.numpy()])
        out.append(tuple(p.astype(np.float32) for p in params))
    return out


def assert_same_trajectory(got, want, rtol=RTOL):
    for i, (g, w) in enumerate(zip(got, want)):
        for name, a, b in zip(("w", "b"), g, w):
            # relative to the tensor's scale: an element that crosses zero has no meaningful relative error of its own
            atol = max(ATOL, rtol * float(np.abs(b).max()))
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{name} after step {i + 1}")
    # the run went somewhere: the parameters moved
    assert not np.allclose(got[-1][0], W0, atol=1e-3)


# ---- against torch.optim ----
SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.1, momentum=0.9, nesterov=True),
    dict(lr=0.1, weight_decay=0.05),
    dict(lr=0.05, momentum=0.8, weight_decay=0.1, nesterov=True),
]


@pytest.mark.parametrize("kw", SGD_CASES)
def test_sgd_matches_torch(kw):
    want = torch_trajectory(lambda p: torch.optim.SGD(p, **kw))
    assert_same_trajectory(tiny_trajectory(lambda p: SGD(p, **kw)), want)


def test_classic_sgd_matches_torch_at_constant_lr():
    # classic momentum accumulates lr * g instead of g: the same steps while lr does not change
    got = tiny_trajectory(lambda p: SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, classic=True))
    assert_same_trajectory(got, torch_trajectory(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01)))


@pytest.mark.parametrize("kw", [dict(lr=0.01), dict(lr=0.05, b1=0.8, b2=0.99, eps=1e-6)])
def test_adam_matches_torch(kw):
    tkw = dict(lr=kw["lr"], betas=(kw.get("b1", 0.9), kw.get("b2", 0.999)), eps=kw.get("eps", 1e-8))
    want = torch_trajectory(lambda p: torch.optim.Adam(p, **tkw))
    assert_same_trajectory(tiny_trajectory(lambda p: Adam(p, **kw)), want)


@pytest.mark.parametrize("wd", [0.01, 0.5])
def test_adamw_matches_torch(wd):
    got = tiny_trajectory(lambda p: AdamW(p, lr=0.02, weight_decay=wd))
    assert_same_trajectory(got, torch_trajectory(lambda p: torch.optim.AdamW(p, lr=0.02, weight_decay=wd)))


def test_defaults_match_tinygrad():
    p = [Tensor.zeros(2)]
    sgd, lars, adam, adamw, lamb = SGD(p), LARS(p), Adam(p), AdamW(p), LAMB(p)
    assert (sgd.momentum, sgd.wd, sgd.nesterov, sgd.classic, sgd.tcoef) == (0.0, 0.0, False, False, 0.0)
    assert (lars.momentum, lars.wd, lars.nesterov, lars.classic, lars.tcoef) == (0.9, 1e-4, False, True, 0.001)
    assert (adam.b1, adam.b2, adam.eps, adam.wd, adam.adam) == (0.9, 0.999, 1e-8, 0.0, True)
    assert (adamw.eps, adamw.wd, adamw.adam) == (1e-8, 0.01, True)
    assert (lamb.eps, lamb.wd, lamb.adam) == (1e-6, 0.0, False)
    for o in (sgd, lars, adam, adamw, lamb):
        assert o.lr.shape == (1,) and o.lr.dtype == dtypes.float32 and abs(o.lr.item() - 0.001) < 1e-9
    assert isinstance(sgd, LARS) and isinstance(adam, LAMB) and isinstance(adamw, LAMB)


# ---- against numpy references ----
def _norm(a):
    return float(np.sqrt((a * a).sum()))


def lars_reference(lr, momentum, wd, nesterov, classic, tcoef):
    bufs = [np.zeros_like(W0, np.float64), np.zeros_like(B0, np.float64)]

    def update(_, params, grads):
        for p, g, buf in zip(params, grads, bufs):
            pn, gn = _norm(p), _norm(g)
            trust = tcoef * pn / (gn + wd * pn) if tcoef and pn > 0 and gn > 0 else 1.0
            d = g + wd * p
            if classic:
                d = d * lr * trust
            buf *= momentum
            buf += d
            d = d + momentum * buf if nesterov else buf.copy()
            if not classic:
                d = d * lr * trust
            p -= d
    return update


@pytest.mark.parametrize("kw", [
    dict(lr=0.5),
    dict(lr=0.5, momentum=0.5, weight_decay=0.01, nesterov=True, tcoef=0.01),
    dict(lr=1.0, momentum=0.9, weight_decay=0.0, classic=False, tcoef=0.05),
])
def test_lars_matches_reference(kw):
    full = dict(lr=0.001, momentum=0.9, weight_decay=1e-4, nesterov=False, classic=True, tcoef=0.001) | kw
    want = reference_trajectory(lars_reference(full["lr"], full["momentum"], full["weight_decay"], full["nesterov"],
                                               full["classic"], full["tcoef"]))
    assert_same_trajectory(tiny_trajectory(lambda p: LARS(p, **kw)), want)


def lamb_reference(lr, b1, b2, eps, wd, adam):
    m = [np.zeros_like(W0, np.float64), np.zeros_like(B0, np.float64)]
    v = [np.zeros_like(W0, np.float64), np.zeros_like(B0, np.float64)]

    def update(i, params, grads):
        t = i + 1
        for p, g, mi, vi in zip(params, grads, m, v):
            mi[:] = b1 * mi + (1 - b1) * g
            vi[:] = b2 * vi + (1 - b2) * g * g
            up = (mi / (1 - b1 ** t)) / (np.sqrt(vi / (1 - b2 ** t)) + eps) + wd * p
            pn, un = _norm(p), _norm(up)
            trust = pn / un if not adam and pn > 0 and un > 0 else 1.0
            p -= lr * trust * up
    return update


@pytest.mark.parametrize("kw", [dict(lr=0.01), dict(lr=0.02, b1=0.8, b2=0.99, eps=1e-8, wd=0.1)])
def test_lamb_matches_reference(kw):
    full = dict(lr=0.001, b1=0.9, b2=0.999, eps=1e-6, wd=0.0, adam=False) | kw
    want = reference_trajectory(lamb_reference(**full))
    assert_same_trajectory(tiny_trajectory(lambda p: LAMB(p, **kw)), want)


# ---- learning rate changes and TinyJit ----
LR_AT = {8: 0.02, 15: 0.002}


@pytest.mark.parametrize("jit", [False, True])
def test_lr_assign_takes_effect(jit):
    got = tiny_trajectory(lambda p: SGD(p, lr=0.1, momentum=0.9), lr_at=LR_AT, jit=jit)
    assert_same_trajectory(got, torch_trajectory(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), lr_at=LR_AT))


def test_jitted_adam_with_lr_changes_matches_torch():
    got = tiny_trajectory(lambda p: Adam(p, lr=0.05), lr_at=LR_AT, jit=True)
    assert_same_trajectory(got, torch_trajectory(lambda p: torch.optim.Adam(p, lr=0.05), lr_at=LR_AT))


def test_lr_assign_writes_in_place():
    opt = SGD([Tensor.zeros(2)], lr=0.1)
    buf = opt.lr.lazydata.base.realized
    opt.lr.assign(Tensor([0.5])).realize()
    assert opt.lr.lazydata.base.realized is buf and opt.lr.item() == 0.5


class _ConvNet:
    def __init__(self):
        Tensor.manual_seed(3)
        self.conv, self.bn, self.fc = Conv2d(2, 4, 3, padding=1), BatchNorm2d(4), Linear(4 * 4 * 4, 3)

    def __call__(self, x):
        return self.fc(self.bn(self.conv(x)).relu().reshape(x.shape[0], -1))

    def parameters(self):
        return [self.conv.weight, self.conv.bias, self.bn.weight, self.bn.bias, self.bn.running_mean,
                self.bn.running_var, self.bn.num_batches_tracked, self.fc.weight, self.fc.bias]


def test_jitted_training_step_equals_eager():
    xs = [rand(3, 2, 4, 4, seed=10 + i) for i in range(6)]
    ys = [np.array([0, 2, 1], np.int32)] * 6
    results = {}
    for jit in (False, True):
        net = _ConvNet()
        opt = SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)

        def step(x, y, net=net, opt=opt):
            opt.zero_grad()
            loss = net(x).sparse_categorical_crossentropy(y)
            loss.backward()
            opt.step()
            return loss.realize()

        run = TinyJit(step) if jit else step
        with Tensor.train():
            losses = []
            for i, (x, y) in enumerate(zip(xs, ys)):
                if i == 4:
                    opt.lr.assign(Tensor([0.01])).realize()
                losses.append(run(Tensor(x), Tensor(y)).item())
        results[jit] = (losses, [p.numpy() for p in net.parameters()])
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-6)
    for a, b in zip(results[True][1], results[False][1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert results[True][1][6].tolist() == [6.0], "the running statistics were updated by every step"


# ---- the base class and the group ----
def test_optimizer_group_matches_two_torch_optimizers():
    w, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
    group = OptimizerGroup(SGD([w], lr=0.1, momentum=0.9), Adam([b], lr=0.05))
    tw, tb = torch.tensor(W0, requires_grad=True), torch.tensor(B0, requires_grad=True)
    topts = [torch.optim.SGD([tw], lr=0.1, momentum=0.9), torch.optim.Adam([tb], lr=0.05)]
    assert group.params == [w, b] and group[1].params == [b]
    for _ in range(STEPS):
        group.zero_grad()
        loss_fn(w, b, Tensor(X), Tensor(Y)).backward()
        group.step()
        for o in topts:
            o.zero_grad()
        loss_fn(tw, tb, torch.tensor(X), torch.tensor(Y)).backward()
        for o in topts:
            o.step()
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(b.numpy(), tb.detach().numpy(), rtol=RTOL, atol=ATOL)


def test_params_buffers_and_zero_grad():
    unset, trainable, frozen = Tensor([1.0, 2.0]), Tensor([3.0], requires_grad=True), Tensor([0.0], requires_grad=False)
    opt = SGD([unset, trainable, frozen, unset], lr=0.5)
    assert unset.requires_grad is True
    assert opt.params == [unset, trainable] and opt.buffers == [frozen]
    frozen.assign(frozen + 7)  # a pending update of a buffer is realized by the step
    (unset.sum() * 2 + trainable.sum()).backward()
    opt.step()
    assert unset.tolist() == [0.0, 1.0] and trainable.tolist() == [2.5] and frozen.lazydata.base.realized is not None
    assert frozen.tolist() == [7.0]
    opt.zero_grad()
    assert unset.grad is None and trainable.grad is None


def test_schedule_step_returns_what_to_realize():
    w = Tensor([1.0, -1.0], requires_grad=True)
    opt = Adam([w], lr=0.1)
    (w * w).sum().backward()
    todo = opt.schedule_step()
    ids = {id(t) for t in todo}  # Tensor == is elementwise, so compare identities
    assert {id(w), id(opt.m[0]), id(opt.v[0]), id(opt.b1_t), id(opt.b2_t)} <= ids
    Tensor.corealize(todo)
    np.testing.assert_allclose(w.numpy(), [0.9, -0.9], rtol=1e-6)  # Adam's first step is lr * sign(g)
    np.testing.assert_allclose(opt.b1_t.numpy(), [0.9], rtol=1e-7)


def test_zero_dim_and_half_params():
    s = Tensor(2.0, requires_grad=True)
    h = Tensor(np.array([1.0, -2.0], np.float16), requires_grad=True)
    for make in (lambda p: SGD(p, lr=0.25, momentum=0.5), lambda p: Adam(p, lr=0.25), lambda p: LAMB(p, lr=0.25)):
        s.assign(Tensor(2.0)).realize()
        h.assign(Tensor(np.array([1.0, -2.0], np.float16))).realize()
        opt = make([s, h])
        opt.zero_grad()
        ((s * s) + (h.float() * h.float()).sum()).backward()
        opt.step()
        assert s.shape == () and h.dtype == dtypes.half
    # LAMB's first step: the Adam direction sign(g), scaled to lr times the parameter's norm
    np.testing.assert_allclose(s.item(), 2.0 - 0.25 * 2.0, rtol=1e-6)
    d = 0.25 * np.sqrt(5.0) / np.sqrt(2.0)
    np.testing.assert_allclose(h.numpy().astype(np.float32), [1.0 - d, -2.0 + d], rtol=1e-3)


def test_missing_grad_raises():
    opt = Adam([Tensor([1.0], requires_grad=True)])
    with pytest.raises(RuntimeError, match="no gradient"):
        opt.step()


@pytest.mark.parametrize("make,err,match", [
    (lambda p: SGD(p, lr=-0.1), ValueError, "lr"),
    (lambda p: SGD(p, momentum=-1), ValueError, "momentum"),
    (lambda p: SGD(p, nesterov=True), ValueError, "nesterov"),
    (lambda p: Adam(p, b1=1.0), ValueError, "b1"),
    (lambda p: AdamW(p, weight_decay=-1), ValueError, "wd"),
    (lambda p: LAMB(p, eps=-1), ValueError, "eps"),
    (lambda p: SGD([Tensor([1.0], requires_grad=False)]), ValueError, "no parameters"),
    (lambda p: SGD([np.zeros(2)]), TypeError, "Tensors"),
    (lambda p: OptimizerGroup(), TypeError, "Optimizers"),
])
def test_bad_arguments_raise(make, err, match):
    with pytest.raises(err, match=match):
        make([Tensor([1.0])])


def test_base_step_is_abstract():
    with pytest.raises(NotImplementedError):
        Optimizer([Tensor([1.0])], lr=0.1).step()
