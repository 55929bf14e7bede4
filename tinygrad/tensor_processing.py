"""Processing ops: matrix products, layers, losses and other composite ops built on the others.

A mixin of Tensor (tinygrad/tensor.py); new tensors are made with `type(self)` so subclasses stay subclasses.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from tinygrad.dtype import dtypes, least_upper_dtype
from tinygrad.helpers import make_pair

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor


class ProcessingMixin:
    __slots__ = ()

    def dot(self, w: Tensor) -> Tensor:
        """Matrix product with numpy/PyTorch broadcasting of batch dims, as a broadcast multiply and a sum."""
        if self.ndim == 0 or w.ndim == 0:
            raise ValueError(f"both tensors need at least 1 dim, got {self.shape} and {w.shape}")
        if self.shape[-1] != w.shape[-min(w.ndim, 2)]:
            raise ValueError(f"matmul shape mismatch: {self.shape} @ {w.shape}")
        x = self.reshape(*self.shape[:-1], *[1] * min(self.ndim - 1, w.ndim - 1, 1), self.shape[-1])
        w = w.reshape(*w.shape[:-2], *[1] * min(self.ndim - 1, w.ndim - 1, 1),
                      *w.shape[-min(w.ndim, 2):]).transpose(-1, -min(w.ndim, 2))
        return (x * w).sum(-1, acc_dtype=None).cast(least_upper_dtype(x.dtype, w.dtype))

    def matmul(self, x: Tensor, reverse: bool = False) -> Tensor:
        return x.dot(self) if reverse else self.dot(x)

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        x = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
        return x.add(bias) if bias is not None else x

    def sequential(self, ll: list) -> Tensor:
        x = self
        for f in ll:
            x = f(x)
        return x

    def one_hot(self, num_classes: int) -> Tensor:
        return (self.unsqueeze(-1) == type(self).arange(num_classes, device=self.device)).cast(dtypes.default_float)

    def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1) -> Tensor:  # noqa: N803
        """Mean negative log-likelihood of integer labels `Y` under logits `self` (last axis = classes)."""
        log_probs = self.log_softmax()
        mask = Y != ignore_index
        y = Y.one_hot(self.shape[-1]) * mask.unsqueeze(-1)
        return -(log_probs * y).sum() / mask.sum()

    def layernorm(self, axis: int = -1, eps: float = 1e-5) -> Tensor:
        y = self - self.mean(axis, keepdim=True)
        return y.mul((y * y).mean(axis, keepdim=True).add(eps).rsqrt())

    def dropout(self, p: float = 0.5) -> Tensor:
        if not type(self).training or p == 0:
            return self
        mask = (type(self).rand(*self.shape, device=self.device, requires_grad=False) >= p)
        return self * mask * (1 / (1.0 - p))

    def pad2d(self, padding: Sequence[int], value: float = 0.0) -> Tensor:
        lr = make_pair(padding, 4) if isinstance(padding, int) else tuple(padding)
        arg = [None] * (self.ndim - len(lr) // 2) + [(lr[i], lr[i + 1]) for i in range(len(lr) - 2, -1, -2)]
        return self.pad(tuple(arg), value)
