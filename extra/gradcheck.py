"""Jacobians of a Tensor function, by backpropagation and by finite differences, and a check that they agree.

For a function `func` of one Tensor `x`, both jacobians are numpy arrays of shape (outputs, inputs): entry [j, i] is
d out_j / d x_i, both flattened. `gradcheck` says whether autograd's gradients match the numerical ones, which is how
a new op's backward is tested (tinygrad 0.9's tests import these names from extra.gradcheck).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tinygrad import Tensor


def jacobian(func: Callable[[Tensor], Tensor], x: Tensor) -> np.ndarray:
    """d func(x) / d x by backpropagation: one backward pass per output element."""
    out = func(x)
    n_out, n_in = out.numel(), x.numel()
    jac = np.zeros((n_out, n_in), dtype=np.float32)
    for j in range(n_out):
        onehot = np.zeros(n_out, dtype=np.float32)
        onehot[j] = 1.0
        x.grad = None
        # a fresh forward pass per row: a graph is consumed by its backward pass
        (func(x).flatten() * Tensor(onehot, device=x.device)).sum().backward()
        jac[j] = 0.0 if x.grad is None else x.grad.numpy().reshape(-1)
    x.grad = None
    return jac


def numerical_jacobian(func: Callable[[Tensor], Tensor], x: Tensor, eps: float = 1e-3) -> np.ndarray:
    """d func(x) / d x by central differences with step `eps`, in x's dtype (its rounding limits how small a step
    gives a useful answer)."""
    base = x.numpy()
    flat = base.reshape(-1)
    n_out = func(Tensor(base, device=x.device)).numel()
    jac = np.zeros((n_out, flat.size), dtype=np.float32)
    for i in range(flat.size):
        up, down = flat.copy(), flat.copy()
        up[i] += eps
        down[i] -= eps
        f_up = func(Tensor(up.reshape(base.shape), device=x.device)).numpy().reshape(-1)
        f_down = func(Tensor(down.reshape(base.shape), device=x.device)).numpy().reshape(-1)
        jac[:, i] = (f_up.astype(np.float64) - f_down) / (2 * eps)
    return jac


def gradcheck(func: Callable[[Tensor], Tensor], x: Tensor, eps: float = 1e-3, atol: float = 1e-3,
              rtol: float = 1e-3) -> bool:
    """Whether the backpropagated and the numerical jacobians agree within atol + rtol * |numerical|."""
    analytical = jacobian(func, x)
    numerical = numerical_jacobian(func, x, eps)
    return bool(np.all(np.abs(analytical - numerical) <= atol + rtol * np.abs(numerical)))
