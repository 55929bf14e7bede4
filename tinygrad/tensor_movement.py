"""Movement ops: reshapes, permutes, pads, shrinks, flips, indexing and concatenation (zero-copy views).

A mixin of Tensor (tinygrad/tensor.py); new tensors are made with `type(self)` so subclasses stay subclasses.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

import tinygrad.mlops as F
from tinygrad.dtype import dtypes
from tinygrad.helpers import argfix, prod
from tinygrad.shape.symbolic import sint, sym_infer

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor


def same_size(a: sint, b: sint) -> bool:
    """Whether two element counts agree (symbolic ones by their bound values)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return sym_infer(a, {}) == sym_infer(b, {})


class MovementMixin:
    __slots__ = ()

    def reshape(self, shape, *args) -> Tensor:
        new_shape = argfix(shape, *args)
        if new_shape.count(-1) > 1:
            raise ValueError(f"only one dimension can be inferred in reshape {new_shape}")
        known = prod(s for s in new_shape if not (isinstance(s, int) and s == -1))
        if -1 in [s for s in new_shape if isinstance(s, int)]:
            if known == 0 or self.numel() % known != 0:
                raise ValueError(f"can't reshape {self.shape} to {new_shape}")
            new_shape = tuple(self.numel() // known if isinstance(s, int) and s == -1 else s for s in new_shape)
        if not same_size(prod(new_shape), self.numel()):
            raise ValueError(f"can't reshape {self.shape} ({self.numel()} elements) to {new_shape}")
        return self if new_shape == self.shape else F.Reshape.apply(self, shape=new_shape)

    def view(self, *shape) -> Tensor:
        return self.reshape(*shape)

    def expand(self, shape, *args) -> Tensor:
        new_shape = argfix(shape, *args)
        if len(new_shape) < self.ndim:
            raise ValueError(f"can't expand {self.shape} to fewer dims {new_shape}")
        new_shape = tuple(s if s != -1 else o for s, o in zip(new_shape, (1,) * (len(new_shape) - self.ndim) +
                                                               self.shape))
        x = self.reshape((1,) * (len(new_shape) - self.ndim) + self.shape) if len(new_shape) > self.ndim else self
        for s, o in zip(x.shape, new_shape):
            if s != o and s != 1:
                raise ValueError(f"can't expand {self.shape} to {new_shape}")
        return x if x.shape == new_shape else F.Expand.apply(x, shape=new_shape)

    def permute(self, order, *args) -> Tensor:
        order = tuple(self._resolve_dim(d) for d in argfix(order, *args))
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"permute order {order} is not a permutation of {self.ndim} dims")
        return F.Permute.apply(self, order=order)

    def flip(self, axis, *args) -> Tensor:
        return F.Flip.apply(self, axis=tuple(self._resolve_dim(a) for a in argfix(axis, *args)))

    def shrink(self, arg: tuple[tuple[sint, sint] | None, ...]) -> Tensor:
        full = tuple(a if a is not None else (0, s) for a, s in zip(arg, self.shape))
        if all(a == (0, s) for a, s in zip(full, self.shape)):
            return self
        return F.Shrink.apply(self, arg=full)

    def pad(self, arg: tuple[tuple[int, int] | None, ...], value: float = 0.0) -> Tensor:
        full = tuple(a if a is not None else (0, 0) for a in arg)
        if all(a == (0, 0) for a in full):
            return self
        ret = F.Pad.apply(self, arg=full)
        if value == 0:
            return ret
        # padded positions get `value`: pad a ones-mask the same way to know where they are
        mask = F.Pad.apply(type(self).ones_like(self, dtype=dtypes.bool, requires_grad=False), arg=full)
        return mask.where(ret, value)

    def transpose(self, ax1: int = 1, ax2: int = 0) -> Tensor:
        order = list(range(self.ndim))
        a, b = self._resolve_dim(ax1), self._resolve_dim(ax2)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802
        return self.transpose()

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        s, e = self._resolve_dim(start_dim), self._resolve_dim(end_dim)
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def unsqueeze(self, dim: int) -> Tensor:
        dim = self._resolve_dim(dim, outer=True)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def squeeze(self, dim: int | None = None) -> Tensor:
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dim = self._resolve_dim(dim)
        return self if self.shape[dim] != 1 else self.reshape(self.shape[:dim] + self.shape[dim + 1:])

    def contiguous(self) -> Tensor:
        return F.Contiguous.apply(self)

    def contiguous_backward(self) -> Tensor:
        return F.ContiguousBackward.apply(self)

    def _resolve_dim(self, dim: int, outer: bool = False) -> int:
        n = self.ndim + int(outer)
        if not -max(n, 1) <= dim < max(n, 1):
            raise IndexError(f"dimension {dim} out of range for a tensor of {self.ndim} dims")
        return dim + n if dim < 0 else dim

    def __getitem__(self, idx) -> Tensor:
        """Basic indexing: ints, slices (any step), None and Ellipsis."""
        idx = idx if isinstance(idx, tuple) else (idx,)
        if sum(i is Ellipsis for i in idx) > 1:
            raise IndexError("an index can only have a single ellipsis")
        n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
        if n_real > self.ndim:
            raise IndexError(f"too many indices for a tensor of {self.ndim} dims")
        if Ellipsis in idx:
            at = idx.index(Ellipsis)
            idx = idx[:at] + (slice(None),) * (self.ndim - n_real) + idx[at + 1:]
        else:
            idx = idx + (slice(None),) * (self.ndim - n_real)
        x, dim, out_shape = self, 0, []
        shrink, strides = [], []
        for i in idx:
            if i is None:
                out_shape.append(None)
                continue
            size = self.shape[dim]
            if isinstance(i, (int, np.integer)) and not isinstance(i, bool):
                j = int(i) + size if i < 0 else int(i)
                if not 0 <= j < size:
                    raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
                shrink.append((j, j + 1))
                strides.append(1)
            elif isinstance(i, slice):
                start, stop, step = i.indices(size)
                if step > 0:
                    n = max(0, (stop - start + step - 1) // step)
                    shrink.append((start, start + (n - 1) * step + 1) if n else (0, 0))
                else:
                    n = max(0, (start - stop - step - 1) // -step)
                    shrink.append((start - (n - 1) * -step, start + 1) if n else (0, 0))
                strides.append(step)
                out_shape.append(dim)
            else:
                raise TypeError(f"indexing with {type(i).__name__} is not supported yet")
            dim += 1
        x = x.shrink(tuple(shrink))
        # take every |step|-th element: pad to a multiple, reshape and keep the first of each group
        for d, st in enumerate(strides):
            if abs(st) != 1 and x.shape[d] > 0:
                x = x._every_nth(d, abs(st))
        if any(s < 0 for s in strides):
            x = x.flip(tuple(d for d, s in enumerate(strides) if s < 0))
        final = [x.shape[d] if d is not None else 1 for d in out_shape]
        return x.reshape(tuple(final))

    def _every_nth(self, dim: int, n: int) -> Tensor:
        size = self.shape[dim]
        padded = math.ceil(size / n) * n
        x = self.pad(tuple((0, padded - size) if d == dim else None for d in range(self.ndim)))
        x = x.reshape(x.shape[:dim] + (padded // n, n) + x.shape[dim + 1:])
        x = x.shrink(tuple((0, 1) if d == dim + 1 else None for d in range(x.ndim)))
        return x.reshape(x.shape[:dim + 1] + x.shape[dim + 2:])

    def cat(self, *args: Tensor, dim: int = 0) -> Tensor:
        dim = self._resolve_dim(dim)
        tensors = [self, *args]
        for t in tensors:
            if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != dim):
                raise ValueError(f"cat needs equal shapes except in dim {dim}, got {[x.shape for x in tensors]}")
        total = sum(t.shape[dim] for t in tensors)
        out, start = None, 0
        for t in tensors:
            p = t.pad(tuple((start, total - start - t.shape[dim]) if d == dim else None for d in range(t.ndim)))
            out = p if out is None else out + p
            start += t.shape[dim]
        return out

    @classmethod
    def stack(cls, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
        first = tensors[0].unsqueeze(dim)
        return first.cat(*[t.unsqueeze(dim) for t in tensors[1:]], dim=dim)
