"""Optimizers. Each step builds the update lazily; `step()` realizes parameters and state together."""
from __future__ import annotations

from tinygrad.helpers import dedup
from tinygrad.tensor import Tensor


class Optimizer:
    def __init__(self, params: list[Tensor], lr: float):
        # parameters that were never told otherwise default to needing gradients
        for p in params:
            if p.requires_grad is None:
                p.requires_grad = True
        self.params = dedup([p for p in params if p.requires_grad])
        if not self.params:
            raise ValueError("optimizer got no parameters that require grad")
        self.lr = lr
        self.state: list[Tensor] = []

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        Tensor.corealize(self._step() + self.params + self.state)

    def _step(self) -> list[Tensor]:
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (and Nesterov) and L2 weight decay, as torch.optim.SGD."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False):
        super().__init__(params, lr)
        self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
        self.b = [Tensor.zeros(*p.shape, device=p.device, requires_grad=False) for p in self.params] \
            if momentum else []
        self.state = self.b

    def _step(self) -> list[Tensor]:
        for i, p in enumerate(self.params):
            if p.grad is None:
                raise RuntimeError(f"parameter {i} of shape {p.shape} has no gradient: call backward() first")
            g = p.grad + self.wd * p.detach() if self.wd else p.grad
            if self.momentum:
                self.b[i].assign(self.momentum * self.b[i] + g)
                g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
            p.assign(p.detach() - self.lr * g)
        return []


class Adam(Optimizer):
    """Adam (Kingma & Ba), bias-corrected, as torch.optim.Adam."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        super().__init__(params, lr)
        self.b1, self.b2, self.eps = b1, b2, eps
        self.m = [Tensor.zeros(*p.shape, device=p.device, requires_grad=False) for p in self.params]
        self.v = [Tensor.zeros(*p.shape, device=p.device, requires_grad=False) for p in self.params]
        # b1^t and b2^t live on the device: as Python floats they would change every kernel every step
        dev = self.params[0].device
        self.b1_t = Tensor.ones((), device=dev, requires_grad=False).contiguous()
        self.b2_t = Tensor.ones((), device=dev, requires_grad=False).contiguous()
        self.state = self.m + self.v + [self.b1_t, self.b2_t]

    def _step(self) -> list[Tensor]:
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        c1, c2 = 1 - self.b1_t, 1 - self.b2_t
        for i, p in enumerate(self.params):
            if p.grad is None:
                raise RuntimeError(f"parameter {i} of shape {p.shape} has no gradient: call backward() first")
            g = p.grad.detach()
            self.m[i].assign(self.b1 * self.m[i] + (1 - self.b1) * g)
            self.v[i].assign(self.b2 * self.v[i] + (1 - self.b2) * g * g)
            p.assign(p.detach() - self.lr * (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + self.eps))
        return []
