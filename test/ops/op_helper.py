"""The oracle for Tensor ops: run the same function in tinygrad and PyTorch, compare values and gradients."""
from __future__ import annotations

import numpy as np
import torch

from tinygrad import Tensor


def to_tiny(a: np.ndarray, requires_grad: bool) -> Tensor:
    """An input of the tinygrad side (`pytest test/ops --shard N` replaces this: see test/ops/conftest.py)."""
    return Tensor(a, requires_grad=requires_grad)


def helper_test_op(shapes, torch_fxn, tiny_fxn=None, atol=1e-6, rtol=1e-4, grad_atol=1e-4, grad_rtol=1e-3,
                   low=-2.0, high=2.0, forward_only=False, vals=None):
    """Check `tiny_fxn(*tensors)` against `torch_fxn(*tensors)`, forward and (unless forward_only) backward."""
    tiny_fxn = tiny_fxn or torch_fxn
    rng = np.random.default_rng(42)
    arrays = vals if vals is not None else [rng.uniform(low, high, size=s).astype(np.float32) for s in shapes]
    ts = [torch.tensor(a, requires_grad=not forward_only and a.dtype.kind == "f") for a in arrays]
    tt = [to_tiny(a, not forward_only and a.dtype.kind == "f") for a in arrays]
    out_t, out_tiny = torch_fxn(*ts), tiny_fxn(*tt)
    assert tuple(out_tiny.shape) == tuple(out_t.shape), f"shape {out_tiny.shape} != torch {tuple(out_t.shape)}"
    got = out_tiny.numpy()
    want = out_t.detach().numpy()
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, err_msg="forward")
    if forward_only or not out_t.requires_grad:
        return
    # a random upstream gradient catches more mistakes than the all-ones one of .sum()
    upstream = rng.uniform(-1, 1, size=tuple(out_t.shape)).astype(np.float32)
    (out_t * torch.tensor(upstream)).sum().backward()
    (out_tiny * Tensor(upstream).to(out_tiny.device)).sum().backward()
    for i, (a, b) in enumerate(zip(ts, tt)):
        if a.grad is None:
            continue
        assert b.grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), atol=grad_atol, rtol=grad_rtol,
                                   err_msg=f"gradient of input {i}")
