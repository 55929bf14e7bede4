"""Optimizers: each step builds the parameter updates lazily, as `assign`s; `step()` realizes them all at once.

Two families, as in tinygrad 0.9: LARS (SGD is LARS without the trust ratio) and LAMB (Adam and AdamW are LAMB
without it). The learning rate and Adam's running powers of b1 and b2 are device Tensors, and every update writes
into its tensor's own buffer with `assign`, so a step captured by TinyJit replays correctly after the learning
rate is changed in place (`opt.lr.assign(Tensor([new])).realize()`, as an LR scheduler does).

>>> from tinygrad import Tensor
>>> w = Tensor([1.0, 2.0])
>>> opt = SGD([w], lr=0.5)
>>> _ = (w * w).sum().backward()
>>> opt.step()
>>> w.tolist()
[0.0, 0.0]
"""
from __future__ import annotations

from tinygrad.dtype import dtypes
from tinygrad.helpers import dedup, flatten
from tinygrad.tensor import Tensor


def _check_nonneg(name: str, value: float) -> None:
    if not value >= 0:  # also catches nan
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def _check_beta(name: str, value: float) -> None:
    if not 0 <= value < 1:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def _zeros_like(p: Tensor, dtype) -> Tensor:
    """Optimizer state for parameter `p`: zeros of its shape, placed as it is (split the same way when it is split
    over several devices, so each device updates its own piece without moving the state)."""
    z = Tensor.zeros(*p.shape, dtype=dtype, device=p.device, requires_grad=False)
    if isinstance(p.device, tuple) and p.lazydata.axis is not None:
        z = z.shard(p.device, p.lazydata.axis)
    return z.contiguous()


class Optimizer:
    """The base: holds the parameters to update (`params`), the other tensors to realize with them (`buffers`,
    e.g. BatchNorm's running statistics) and the learning rate `lr`, a (1,) float32 device Tensor.

    Parameters whose `requires_grad` is None (never set) become trainable; those set to False are buffers.
    Subclasses implement `_step()`, which assigns the updates and returns their own state tensors.
    """

    def __init__(self, params: list[Tensor], lr: float):
        params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer params must be Tensors, got {type(p).__name__}")
            if p.requires_grad is None:
                p.requires_grad = True
        self.params: list[Tensor] = dedup([p for p in params if p.requires_grad])
        if not self.params:
            raise ValueError("optimizer got no parameters that require grad")
        self.buffers: list[Tensor] = dedup([p for p in params if not p.requires_grad])
        self.device = self.params[0].device
        for p in self.params:
            if p.device != self.device:
                raise ValueError(f"optimizer params must share one device, got {self.device} and {p.device}")
        _check_nonneg("lr", lr)
        self.lr = self._state_scalar(lr)

    def _state_scalar(self, value: float) -> Tensor:
        """A realized (1,) float32 tensor of the optimizer's own: later `assign`s write into its buffer."""
        return Tensor([value], dtype=dtypes.float32, device=self.device, requires_grad=False).contiguous().realize()

    def zero_grad(self) -> None:
        """Forget every parameter's gradient (the next backward starts from zero)."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Update every parameter from its gradient, realizing parameters, buffers and state together."""
        Tensor.corealize(self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        """Build the updates without running them; returns every tensor that must be realized to apply them."""
        return self._step() + self.params + self.buffers

    def _lr(self) -> Tensor:
        """The learning rate as a 0-d view, which broadcasts to any parameter shape (0-d ones included)."""
        return self.lr.reshape(())

    def _grads(self) -> list[Tensor]:
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if missing:
            p = self.params[missing[0]]
            raise RuntimeError(f"parameter {missing[0]} (shape {p.shape}) has no gradient: call backward() on a "
                               f"loss that depends on it before step()")
        return [p.grad.detach() for p in self.params]

    def _step(self) -> list[Tensor]:
        raise NotImplementedError(f"{type(self).__name__} must implement _step()")


class OptimizerGroup(Optimizer):
    """Several optimizers stepped as one (e.g. different learning rates for different parameters); `group[i]` is
    the i-th optimizer."""

    def __init__(self, *optimizers: Optimizer):
        # no super().__init__(): the members already own their parameters, learning rates and state
        if not optimizers or not all(isinstance(o, Optimizer) for o in optimizers):
            raise TypeError("OptimizerGroup takes one or more Optimizers")
        self.optimizers = optimizers
        self.params = flatten(o.params for o in optimizers)
        self.buffers = flatten(o.buffers for o in optimizers)
        self.device = optimizers[0].device

    def __getitem__(self, i: int) -> Optimizer:
        return self.optimizers[i]

    def zero_grad(self) -> None:
        for o in self.optimizers:
            o.zero_grad()

    def _step(self) -> list[Tensor]:
        return flatten(o._step() for o in self.optimizers)


class LARS(Optimizer):
    """SGD with momentum, L2 weight decay and LARS's layer-wise trust ratio (You et al., 2017).

    Per parameter w with gradient g: g' = g + weight_decay * w, scaled by the trust ratio
    r = tcoef * |w| / (|g| + weight_decay * |w|) (1 where a norm is 0; r = 1 when tcoef is 0), then momentum
    b = momentum * b + g' (Nesterov: g' + momentum * b, else b). `classic` applies lr * r before the momentum
    (b accumulates steps), otherwise after it (b accumulates gradients, as torch.optim.SGD); the two agree while
    lr is constant.
    """

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4,
                 nesterov: bool = False, classic: bool = True, tcoef: float = 0.001):
        super().__init__(params, lr)
        _check_nonneg("momentum", momentum)
        _check_nonneg("weight_decay", weight_decay)
        _check_nonneg("tcoef", tcoef)
        if nesterov and momentum == 0:
            raise ValueError("nesterov needs a momentum > 0")
        self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
        self.classic, self.tcoef = classic, tcoef
        self.b = [_zeros_like(p, p.dtype) for p in self.params] if momentum else []

    def _step(self) -> list[Tensor]:
        for i, (p, g) in enumerate(zip(self.params, self._grads())):
            w = p.detach()
            if self.tcoef != 0:
                w_norm, g_norm = w.square().sum().sqrt(), g.square().sum().sqrt()
                r = (w_norm > 0).where((g_norm > 0).where(self.tcoef * w_norm / (g_norm + self.wd * w_norm), 1.0), 1.0)
                scale = self._lr() * r
            else:
                scale = self._lr()
            g = g + self.wd * w if self.wd else g
            if self.classic:
                g = g * scale
            if self.momentum:
                # the buffer starts at zero, so the first step needs no special case
                self.b[i].assign((self.momentum * self.b[i] + g).cast(self.b[i].dtype))
                g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
            if not self.classic:
                g = g * scale
            p.assign((w - g).cast(p.dtype))
        return self.b


class SGD(LARS):
    """Stochastic gradient descent with optional momentum, Nesterov momentum and L2 weight decay, as
    torch.optim.SGD (no dampening): LARS without the trust ratio."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False, classic: bool = False):
        super().__init__(params, lr, momentum, weight_decay, nesterov, classic, tcoef=0.0)


class LAMB(Optimizer):
    """LAMB (You et al., 2019): Adam's bias-corrected step plus decoupled weight decay, scaled per parameter by the
    trust ratio |w| / |update| (1 where a norm is 0); with `adam=True` the ratio is 1, which is AdamW.

    Per parameter: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2, up = (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
    + wd * w, w -= lr * r * up. The moments are kept in float32 whatever the parameter's dtype.
    """

    def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                 wd: float = 0.0, adam: bool = False):
        super().__init__(params, lr)
        _check_beta("b1", b1)
        _check_beta("b2", b2)
        _check_nonneg("eps", eps)
        _check_nonneg("wd", wd)
        self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, wd, adam
        # b1^t and b2^t live on the device: as Python floats they would be new constants (new kernels) every step
        self.b1_t, self.b2_t = self._state_scalar(1.0), self._state_scalar(1.0)
        self.m = [_zeros_like(p, dtypes.float32) for p in self.params]
        self.v = [_zeros_like(p, dtypes.float32) for p in self.params]

    def _step(self) -> list[Tensor]:
        grads = self._grads()
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        # the bias corrections as 0-d views, which broadcast to any parameter shape
        c1, c2 = 1.0 - self.b1_t.reshape(()), 1.0 - self.b2_t.reshape(())
        for i, (p, g) in enumerate(zip(self.params, grads)):
            w = p.detach()
            self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g)
            self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
            m_hat, v_hat = self.m[i] / c1, self.v[i] / c2
            up = m_hat / (v_hat.sqrt() + self.eps)
            if self.wd:
                up = up + self.wd * w
            if not self.adam:
                w_norm, up_norm = w.square().sum().sqrt(), up.square().sum().sqrt()
                up = up * (w_norm > 0).where((up_norm > 0).where(w_norm / up_norm, 1.0), 1.0)
            p.assign((w - self._lr() * up).cast(p.dtype))
        return [self.b1_t, self.b2_t] + self.m + self.v


class AdamW(LAMB):
    """Adam with decoupled weight decay, as torch.optim.AdamW (w -= lr * weight_decay * w each step)."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.01):
        super().__init__(params, lr, b1, b2, eps, weight_decay, adam=True)


class Adam(LAMB):
    """Adam (Kingma & Ba), bias-corrected, as torch.optim.Adam without weight decay."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        super().__init__(params, lr, b1, b2, eps, 0.0, adam=True)


__all__ = ["Optimizer", "OptimizerGroup", "LARS", "SGD", "LAMB", "AdamW", "Adam"]
