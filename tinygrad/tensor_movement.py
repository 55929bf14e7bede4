"""Movement ops: reshapes, permutes, pads, shrinks, flips, indexing and concatenation (zero-copy views).

A mixin of Tensor (tinygrad/tensor.py); new tensors are made with `type(self)` so subclasses stay subclasses.

Indexing follows PyTorch: ints, slices (any step, negative ones too, as numpy), None and Ellipsis are views;
integer tensors (and lists of ints) are *advanced* indices, gathered with one-hot masks (index == arange) and a sum,
so their values are read inside the kernel at run time. Advanced indices broadcast together; their result dims go
where the first one stood when they are adjacent (ints don't count, None does), else in front. Index values given
on the host (ints, lists) are bounds-checked (IndexError); a tensor index's values are only known in the kernel, where
an out-of-range one selects nothing (zeros).

`x[idx] = v` builds the new value functionally (inverse views, one-hot masks, where), computes it and writes it
into x's own buffer, so x stays the same object and earlier views of x see the new value.
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

import tinygrad.mlops as F
from tinygrad.dtype import dtypes, least_upper_dtype
from tinygrad.errors import ArgumentError
from tinygrad.helpers import argfix, prod
from tinygrad.ops import LoadOps
from tinygrad.shape.symbolic import Node, sint, sym_infer
from tinygrad.tensor_elementwise import _constant_value, broadcast_shape

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor

_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def same_size(a: sint, b: sint) -> bool:
    """Whether two element counts agree (symbolic ones by their bound values)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return sym_infer(a, {}) == sym_infer(b, {})


def _crops(amount: sint) -> bool:
    """Is a pad amount negative (a crop)? A symbolic amount that is negative for some values of its variables and not
    for others is decided at the values they are bound to, as tinygrad 0.9 allowed for a KV cache's padding to its
    length, `max_context - start_pos - seqlen`; the view made from it checks its range at each bound value."""
    if not isinstance(amount, Node):
        return amount < 0
    if amount.min >= 0 or amount.max < 0:
        return amount.max < 0
    try:
        return sym_infer(amount, {}) < 0
    except ValueError:
        raise ArgumentError(f"pad amount {amount.render()} may be negative and its variables are not bound") from None


def _is_int(i: Any) -> bool:
    return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))


def _broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
    return broadcast_shape(*shapes) if shapes else ()


def _zero(dtype) -> Any:
    return dtypes.as_const(0, dtype)


# tensors joined by one kernel of cat
CAT_FANIN = 16


def _cat_group(tensors: list, dim: int, dt) -> Tensor:
    """`tensors` (of dtype `dt`) joined along `dim` in one kernel: each padded to the full length with zeros at the
    others' places; the padded parts don't overlap, so their sum (an or, for bools) is the concatenation."""
    if len(tensors) == 1:
        return tensors[0]
    total = sum(t.shape[dim] for t in tensors)
    parts, start = [], 0
    for t in tensors:
        parts.append(t.pad(tuple((start, total - start - t.shape[dim]) if d == dim else None for d in range(t.ndim))))
        start += t.shape[dim]
    return functools.reduce(lambda a, b: a | b if dt == dtypes.bool else a + b, parts)


class MovementMixin:
    __slots__ = ()

    # ---- reshapes ----
    def reshape(self, shape, *args) -> Tensor:
        """The same elements in row-major order under a new shape (one dim may be -1, inferred); a view.

        >>> Tensor.arange(6).reshape(2, -1).tolist()
        [[0, 1, 2], [3, 4, 5]]
        """
        if type(shape) is tuple and not args and all(type(s) is int and s >= 0 for s in shape) and \
                all(type(s) is int for s in self.shape):
            # the common case, checked cheaply: a concrete shape of the same size
            if shape == self.shape:
                return self
            if prod(shape) == prod(self.shape):
                return F.Reshape.apply(self, shape=shape)
        new_shape = tuple(int(s) if isinstance(s, np.integer) else s for s in argfix(shape, *args))
        if new_shape.count(-1) > 1:
            raise ArgumentError(f"only one dimension can be inferred in reshape {new_shape}")
        if any(isinstance(s, int) and s < -1 for s in new_shape):
            raise ArgumentError(f"invalid shape {new_shape} in reshape: sizes must be >= 0 or -1")
        known = prod(s for s in new_shape if not (isinstance(s, int) and s == -1))
        if -1 in [s for s in new_shape if isinstance(s, int)]:
            if known == 0 or self.numel() % known != 0:
                raise ArgumentError(f"can't reshape {self.shape} to {new_shape}")
            new_shape = tuple(self.numel() // known if isinstance(s, int) and s == -1 else s for s in new_shape)
        if not same_size(prod(new_shape), self.numel()):
            raise ArgumentError(f"can't reshape {self.shape} ({self.numel()} elements) to {new_shape}")
        return self if new_shape == self.shape else F.Reshape.apply(self, shape=new_shape)

    def view(self, shape, *args) -> Tensor:
        """The same as reshape (PyTorch's spelling).

        >>> Tensor.arange(4).view(2, 2).shape
        (2, 2)
        """
        return self.reshape(shape, *args)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dims start_dim..end_dim (inclusive) into one; a 0-d tensor becomes shape (1,).

        >>> Tensor.ones(2, 3, 4).flatten(1).shape
        (2, 12)
        """
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._resolve_dim(start_dim), self._resolve_dim(end_dim)
        if s > e:
            raise ArgumentError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {self.shape}")
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split dim `dim` into `sizes` (one of them may be -1), the inverse of flatten.

        >>> Tensor.ones(6, 4).unflatten(0, (2, -1)).shape
        (2, 3, 4)
        """
        dim = self._resolve_dim(dim)
        sizes = tuple(sizes)
        if sizes.count(-1) > 1:
            raise ArgumentError(f"unflatten: only one size can be -1, got {sizes}")
        if -1 in sizes:
            known = prod(s for s in sizes if s != -1)
            if known == 0 or self.shape[dim] % known:
                raise ArgumentError(f"unflatten: can't split dim {dim} of size {self.shape[dim]} into {sizes}")
            sizes = tuple(self.shape[dim] // known if s == -1 else s for s in sizes)
        if prod(sizes) != self.shape[dim]:
            raise ArgumentError(f"unflatten: sizes {sizes} don't multiply to dim {dim}'s size {self.shape[dim]}")
        return self.reshape(self.shape[:dim] + sizes + self.shape[dim + 1:])

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a dim of size 1 at `dim` (negative counts from the end of the result).

        >>> Tensor.ones(2, 3).unsqueeze(-1).shape
        (2, 3, 1)
        """
        dim = self._resolve_dim(dim, outer=True)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        """Remove dims of size 1: all of them, or those among `dim` (an int or a sequence).

        >>> Tensor.ones(1, 3, 1).squeeze().shape, Tensor.ones(1, 3, 1).squeeze(0).shape
        ((3,), (3, 1))
        """
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dims = {self._resolve_dim(d) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

    # ---- views ----
    def expand(self, shape, *args) -> Tensor:
        """Broadcast size-1 dims (and new leading dims) to `shape` without copying; -1 keeps a dim's size.

        >>> Tensor([[1], [2]]).expand(-1, 3).tolist()
        [[1, 1, 1], [2, 2, 2]]
        """
        new_shape = argfix(shape, *args)
        if len(new_shape) < self.ndim:
            raise ArgumentError(f"can't expand {self.shape} to fewer dims {new_shape}")
        lead = len(new_shape) - self.ndim
        if any(isinstance(s, int) and s == -1 for s in new_shape[:lead]):
            raise ArgumentError(f"can't expand {self.shape} to {new_shape}: -1 is not allowed for a new leading dim")
        new_shape = tuple(o if isinstance(s, int) and s == -1 else s
                          for s, o in zip(new_shape, (1,) * lead + self.shape))
        x = self.reshape((1,) * lead + self.shape) if lead else self
        for s, o in zip(x.shape, new_shape):
            if s != o and s != 1:
                raise ArgumentError(f"can't expand {self.shape} to {new_shape}")
        return x if x.shape == new_shape else F.Expand.apply(x, shape=new_shape)

    def permute(self, order, *args) -> Tensor:
        """Reorder the dims: dim i of the result is dim order[i] of this tensor (a view).

        >>> Tensor.ones(2, 3, 4).permute(2, 0, 1).shape
        (4, 2, 3)
        """
        order = tuple(self._resolve_dim(d) for d in argfix(order, *args))
        if sorted(order) != list(range(self.ndim)):
            raise ArgumentError(f"permute order {order} is not a permutation of {self.ndim} dims")
        return self if order == tuple(range(self.ndim)) else F.Permute.apply(self, order=order)

    def transpose(self, ax1: int = 1, ax2: int = 0) -> Tensor:
        """Swap dims ax1 and ax2 (by default the first two).

        >>> Tensor([[1, 2], [3, 4]]).transpose().tolist()
        [[1, 3], [2, 4]]
        """
        order = list(range(self.ndim))
        a, b = self._resolve_dim(ax1), self._resolve_dim(ax2)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802
        """All dims reversed, as PyTorch's `.T` (the usual transpose for a matrix)."""
        return self.permute(tuple(range(self.ndim))[::-1])

    def flip(self, axis, *args) -> Tensor:
        """Reverse the order of elements along the given dims (a view).

        >>> Tensor([[1, 2], [3, 4]]).flip(1).tolist()
        [[2, 1], [4, 3]]
        """
        axes = tuple(self._resolve_dim(a) for a in argfix(axis, *args))
        if len(set(axes)) != len(axes):
            raise ArgumentError(f"flip: dim appears more than once in {axes}")
        return self if not axes else F.Flip.apply(self, axis=axes)

    def shrink(self, arg: tuple[tuple[sint, sint] | None, ...]) -> Tensor:
        """Keep [start, end) of each dim, one pair (or None: the whole dim) per dim; a view.

        >>> Tensor.arange(6).reshape(2, 3).shrink((None, (1, 3))).tolist()
        [[1, 2], [4, 5]]
        """
        if len(arg) != self.ndim:
            raise ArgumentError(f"shrink needs one (start, end) or None per dim: {arg} for shape {self.shape}")
        full = tuple(tuple(a) if a is not None else (0, s) for a, s in zip(arg, self.shape))
        for d, ((lo, hi), s) in enumerate(zip(full, self.shape)):
            if all(isinstance(v, int) for v in (lo, hi, s)) and not 0 <= lo <= hi <= s:
                raise ArgumentError(f"shrink ({lo}, {hi}) out of range for dim {d} of size {s}")
        if all(a == (0, s) for a, s in zip(full, self.shape)):
            return self
        x, full = self._pad_for_symbolic_shrink(full)
        return F.Shrink.apply(x, arg=full)

    def _pad_for_symbolic_shrink(self, full: tuple) -> tuple[Tensor, tuple]:
        """A symbolic span may reach past its dim for some values of its variables (tinygrad 0.9 allowed it: a KV
        cache read at `(0, start_pos + 1)` with `start_pos` up to the cache's length). The dim is padded with zeros
        by the most it can reach past, so no value reads or writes outside the buffer: reads there give 0, writes
        there are dropped. The values bound now must lie inside the dim."""
        pads = []
        for d, ((lo, hi), s) in enumerate(zip(full, self.shape)):
            if not (isinstance(lo, Node) or isinstance(hi, Node)) or not isinstance(s, int):
                pads.append((0, 0))
                continue
            try:
                now = (sym_infer(lo, {}), sym_infer(hi, {}))
            except ValueError:
                now = None  # unbound variables: only their ranges are known
            if now is not None and not 0 <= now[0] <= now[1] <= s:
                raise ArgumentError(f"shrink {(lo, hi)} is {now} now, out of range for dim {d} of size {s}")
            lo_min = lo.min if isinstance(lo, Node) else lo
            hi_max = hi.max if isinstance(hi, Node) else hi
            pads.append((max(0, -lo_min), max(0, hi_max - s)))
        if all(p == (0, 0) for p in pads):
            return self, full
        x = self.pad(tuple(p if p != (0, 0) else None for p in pads))
        return x, tuple((lo + p[0], hi + p[0]) for (lo, hi), p in zip(full, pads))

    def pad(self, arg, value: float = 0.0, mode: str = "constant") -> Tensor:
        """Pad with `value` (or mode="reflect"/"replicate"/"circular", as torch.nn.functional.pad).

        `arg` is either tinygrad's form, one (before, after) pair or None per dim, or PyTorch's flat form
        (left, right, top, bottom, ...) starting from the last dim. Negative amounts crop.
        """
        if isinstance(value, str):
            mode, value = value, 0.0
        if mode not in _PAD_MODES:
            raise ArgumentError(f"pad mode must be one of {_PAD_MODES}, got {mode!r}")
        pairs = self._pad_pairs(arg)
        x: Tensor = self
        # negative amounts crop first
        if any(_crops(lo) or _crops(hi) for lo, hi in pairs):
            x = x.shrink(tuple((-lo if _crops(lo) else 0, s + hi if _crops(hi) else s)
                               for (lo, hi), s in zip(pairs, x.shape)))
            pairs = tuple((0 if _crops(lo) else lo, 0 if _crops(hi) else hi) for lo, hi in pairs)
        if all(p == (0, 0) for p in pairs):
            return x
        if mode == "constant":
            ret = F.Pad.apply(x, arg=pairs)
            if value == 0:
                return ret
            # padded positions get `value`: pad a ones-mask the same way to know where they are
            mask = F.Pad.apply(type(self).ones_like(x, dtype=dtypes.bool, requires_grad=False), arg=pairs)
            return mask.where(ret, dtypes.as_const(value, x.dtype))
        for d in range(x.ndim - 1, -1, -1):
            lo, hi = pairs[d]
            if lo or hi:
                x = x._pad_dim(d, lo, hi, mode)
        return x

    def _pad_pairs(self, arg) -> tuple[tuple[int, int], ...]:
        arg = tuple(arg)
        if all(_is_int(a) for a in arg):
            if len(arg) % 2 or len(arg) // 2 > self.ndim:
                raise ArgumentError(f"flat padding {arg} needs an even length of at most 2 * ndim ({2 * self.ndim})")
            pairs = [(0, 0)] * self.ndim
            for i in range(len(arg) // 2):
                pairs[self.ndim - 1 - i] = (int(arg[2 * i]), int(arg[2 * i + 1]))
            return tuple(pairs)
        if len(arg) != self.ndim:
            raise ArgumentError(f"padding {arg} needs one (before, after) pair or None per dim of shape {self.shape}")
        pairs = []
        for a in arg:
            # symbolic amounts (a cat along a symbolic dim pads by one) pass through as Nodes
            if a is not None and (len(a) != 2 or not all(_is_int(v) or isinstance(v, Node) for v in a)):
                raise ArgumentError(f"padding {arg}: each entry must be None or a (before, after) pair of ints")
            pairs.append((0, 0) if a is None else tuple(v if isinstance(v, Node) else int(v) for v in a))
        return tuple(pairs)

    def _pad_dim(self, d: int, lo: int, hi: int, mode: str) -> Tensor:
        """Pad dim `d` by `lo` before and `hi` after, in a non-constant mode (built from shrinks, flips and cat)."""
        n = self.shape[d]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise ArgumentError(f"reflect padding ({lo}, {hi}) must be less than the size {n} of dim {d}")
        if mode == "circular" and (lo > n or hi > n):
            raise ArgumentError(f"circular padding ({lo}, {hi}) must be at most the size {n} of dim {d}")
        if mode == "replicate" and n == 0:
            raise ArgumentError(f"replicate padding needs a non-empty dim {d}")

        def part(start: int, stop: int) -> Tensor:
            return self.shrink(tuple((start, stop) if i == d else None for i in range(self.ndim)))

        def rep(t: Tensor, k: int) -> Tensor:
            return t.expand(tuple(k if i == d else s for i, s in enumerate(t.shape)))
        if mode == "reflect":
            left, right = part(1, lo + 1).flip(d), part(n - 1 - hi, n - 1).flip(d)
        elif mode == "replicate":
            left, right = rep(part(0, 1), lo), rep(part(n - 1, n), hi)
        else:
            left, right = part(n - lo, n), part(0, hi)
        return left.cat(self, right, dim=d)

    # ---- repeats ----
    def repeat(self, repeats, *args) -> Tensor:
        """Tile the tensor `repeats[i]` times along each dim (PyTorch's `Tensor.repeat`)."""
        reps = tuple(argfix(repeats, *args))
        if len(reps) < self.ndim:
            raise ArgumentError(f"repeat needs at least {self.ndim} repeats for shape {self.shape}, got {reps}")
        if any(r < 0 for r in reps):
            raise ArgumentError(f"repeat counts must be >= 0, got {reps}")
        base = (1,) * (len(reps) - self.ndim) + self.shape
        x = self.reshape(tuple(v for s in base for v in (1, s)))
        x = x.expand(tuple(v for r, s in zip(reps, base) for v in (r, s)))
        return x.reshape(tuple(r * s for r, s in zip(reps, base)))

    def tile(self, dims, *args) -> Tensor:
        """numpy/PyTorch `tile`: like repeat, with missing leading repeat counts taken as 1."""
        reps = tuple(argfix(dims, *args))
        return self.repeat((1,) * (self.ndim - len(reps)) + reps)

    def repeat_interleave(self, repeats, dim: int | None = None) -> Tensor:
        """Repeat each element `repeats` times along `dim` (flattened when None); repeats may be a list per element."""
        x = self.flatten() if dim is None else self
        d = 0 if dim is None else x._resolve_dim(dim)
        if isinstance(repeats, (list, tuple)):
            if len(repeats) != x.shape[d]:
                raise ArgumentError(f"repeat_interleave: {len(repeats)} repeats for dim {d} of size {x.shape[d]}")
            positions = [i for i, r in enumerate(repeats) for _ in range(int(r))]
            return x[(slice(None),) * d + (positions,)]
        if not _is_int(repeats):
            raise TypeError(f"repeat_interleave needs an int or a list of ints, not {type(repeats).__name__}")
        if repeats < 0:
            raise ArgumentError(f"repeat_interleave: repeats must be >= 0, got {repeats}")
        y = x.unsqueeze(d + 1)
        y = y.expand(tuple(int(repeats) if i == d + 1 else s for i, s in enumerate(y.shape)))
        return y.flatten(d, d + 1)

    # ---- joining and splitting ----
    def cat(self, *args, dim: int = 0) -> Tensor:
        """Concatenate along `dim` (as torch.cat): `a.cat(b, c, dim=1)` or `Tensor.cat([a, b, c], dim=1)`."""
        tensors, dim = _tensors_and_dim(self, args, dim)
        if not tensors:
            raise ArgumentError("cat needs at least one tensor")
        first = tensors[0]
        dim = first._resolve_dim(dim)
        for t in tensors:
            if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != dim):
                raise ArgumentError(f"cat needs equal shapes except in dim {dim}, got {[x.shape for x in tensors]}")
            if t.device != first.device:
                raise RuntimeError(f"cat: tensors are on different devices {[x.device for x in tensors]}")
        dt = least_upper_dtype(*[t.dtype for t in tensors])
        tensors = [t.cast(dt) for t in tensors]
        # many tensors are joined CAT_FANIN at a time, each group in a kernel of its own (equal groups share one
        # compiled kernel), then the groups' results: a few kernels and compiles whatever the count, where one sum
        # of a thousand padded parts would be split into hundreds of distinct kernels
        while len(tensors) > CAT_FANIN:
            groups = [tensors[i:i + CAT_FANIN] for i in range(0, len(tensors), CAT_FANIN)]
            tensors = [_cat_group(g, dim, dt).contiguous() if len(g) > 1 else g[0] for g in groups]
        return _cat_group(tensors, dim, dt)

    def stack(self, *args, dim: int = 0) -> Tensor:
        """Stack equal-shaped tensors along a new dim: `a.stack(b, dim=1)` or `Tensor.stack([a, b], dim=1)`."""
        tensors, dim = _tensors_and_dim(self, args, dim)
        if not tensors:
            raise ArgumentError("stack needs at least one tensor")
        if any(t.shape != tensors[0].shape for t in tensors):
            raise ArgumentError(f"stack needs equal shapes, got {[t.shape for t in tensors]}")
        dim = tensors[0]._resolve_dim(dim, outer=True)
        return tensors[0].unsqueeze(dim).cat(*[t.unsqueeze(dim) for t in tensors[1:]], dim=dim)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Split along `dim` into pieces of `sizes` elements (an int: equal pieces, the last maybe smaller)."""
        dim = self._resolve_dim(dim)
        n = self.shape[dim]
        if _is_int(sizes):
            if sizes <= 0:
                raise ArgumentError(f"split size must be positive, got {sizes}")
            sizes = [min(int(sizes), n - i) for i in range(0, n, int(sizes))] or [0]
        sizes = list(sizes)
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ArgumentError(f"split sizes {sizes} don't add up to dim {dim}'s size {n}")
        out, start = [], 0
        for s in sizes:
            out.append(self.shrink(tuple((start, start + s) if d == dim else None for d in range(self.ndim))))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """Split into at most `chunks` equal pieces (the last maybe smaller), as torch.chunk."""
        if not _is_int(chunks) or chunks <= 0:
            raise ArgumentError(f"chunk needs a positive number of chunks, got {chunks}")
        dim = self._resolve_dim(dim)
        n = self.shape[dim]
        if n == 0:
            return self.split([0] * chunks, dim)
        return self.split(math.ceil(n / chunks), dim)

    # ---- layout ----
    def contiguous(self) -> Tensor:
        """The same values laid out in row-major order in a buffer of their own (a no-op when they already are).

        >>> Tensor.arange(4).reshape(2, 2).T.contiguous().tolist()
        [[0, 2], [1, 3]]
        """
        lb = self.lazydata
        if not self.requires_grad and not (type(lb.device) is str and lb.device.startswith("DISK") and
                                           lb is not lb.base):
            # nothing to record for autograd: straight to the LazyBuffer (eager code calls this per step); a view of
            # a file's bytes is laid out on the default device instead (through the Function, see mlops.apply)
            ret = object.__new__(type(self))
            ret.lazydata = self.lazydata.contiguous()
            ret.requires_grad, ret.grad, ret._ctx = self.requires_grad, None, None
            return ret
        return F.Contiguous.apply(self)

    def contiguous_backward(self) -> Tensor:
        """The identity forward; the gradient flowing back through it is made contiguous.

        >>> Tensor([1.0, 2.0]).contiguous_backward().tolist()
        [1.0, 2.0]
        """
        return F.ContiguousBackward.apply(self)

    def _resolve_dim(self, dim: int, outer: bool = False) -> int:
        n = self.ndim + int(outer)
        if not _is_int(dim):
            raise TypeError(f"dim must be an int, not {type(dim).__name__}")
        if not -max(n, 1) <= dim < max(n, 1):
            raise IndexError(f"dimension {dim} out of range for a tensor of {self.ndim} dims")
        return int(dim) + n if dim < 0 else int(dim)

    # ---- gather ----
    def gather(self, dim, index) -> Tensor:
        """out[i][j][k] = self[index[i][j][k]][j][k] for dim=0, as torch.gather (tinygrad's (index, dim) works too)."""
        if isinstance(dim, MovementMixin) and _is_int(index):
            dim, index = index, dim
        if not isinstance(index, MovementMixin):
            raise TypeError(f"gather needs a Tensor index, not {type(index).__name__}")
        if not dtypes.is_int(index.dtype):
            raise TypeError(f"gather index must be an int tensor, not {index.dtype}")
        dim = self._resolve_dim(dim)
        if index.ndim != self.ndim:
            raise ArgumentError(f"gather index needs {self.ndim} dims like the input, got shape {index.shape}")
        for d, (i, s) in enumerate(zip(index.shape, self.shape)):
            if d != dim and i > s:
                raise ArgumentError(f"gather index shape {index.shape} exceeds input shape {self.shape} in dim {d}")
        n = self.shape[dim]
        x = self.shrink(tuple(None if d == dim else (0, i) for d, i in enumerate(index.shape)))
        # dim moves to the end as the one-hot axis; a size-1 dim takes its place, broadcast over the index
        x = x.unsqueeze(-1).transpose(dim, -1)
        mask = index.to(self.device).unsqueeze(-1) == type(self).arange(n, device=self.device)
        return mask.where(x, _zero(x.dtype)).sum(-1).cast(self.dtype)

    # ---- indexing ----
    def _parse_index(self, idx) -> list[tuple[str, Any]]:
        """`idx` as a list of ("int" | "slice" | "none" | "tensor", value), Ellipsis expanded, one per real dim."""
        # a list holding Tensors, lists, tuples, slices, None or ... indexes one dim per item, as a tuple does
        # (tinygrad 0.9, PyTorch and older numpy read it so: x[[[0]]] is x[[0]]); a list of ints stays one index
        # into the first dim
        as_tuple = isinstance(idx, tuple) or isinstance(idx, list) and any(
            isinstance(v, (MovementMixin, slice, list, tuple)) or v is None or v is Ellipsis for v in idx)
        raw = list(idx) if as_tuple else [idx]
        entries: list[tuple[str, Any]] = []
        host: dict[int, tuple[np.ndarray, int | None]] = {}  # index values given on the host, checked here
        ellipsis_at = None
        for i in raw:
            if i is None:
                entries.append(("none", None))
            elif i is Ellipsis:
                if ellipsis_at is not None:
                    raise IndexError("an index can only have a single ellipsis ('...')")
                ellipsis_at = len(entries)
            elif _is_int(i):
                entries.append(("int", int(i)))
            elif isinstance(i, slice):
                for v in (i.start, i.stop, i.step):
                    if v is not None and not _is_int(v) and not (isinstance(v, Node) and v is not i.step):
                        raise TypeError(f"slice bounds must be ints, symbolic ints or None, got {i}")
                entries.append(("slice", i))
            elif isinstance(i, MovementMixin):
                if i.dtype == dtypes.bool:
                    raise IndexError("indexing with a boolean Tensor needs a data-dependent shape and is not "
                                     "supported: use a Python/numpy bool mask or Tensor.where")
                if not dtypes.is_int(i.dtype):
                    raise IndexError(f"tensors used as indices must be int tensors, not {i.dtype}")
                c = _constant_value(i) if i.shape == () else None
                # a 0-d constant index (Tensor(1), Tensor(1) + 2) is the int it holds: a view, no gather kernel
                entries.append(("int", int(c)) if c is not None else ("tensor", i.to(self.device)))
            elif isinstance(i, (list, tuple, np.ndarray)):
                for t, arr, mask_size in self._sequence_index(i):
                    host[id(t)] = (arr, mask_size)
                    entries.append(("tensor", t))
            elif isinstance(i, (bool, np.bool_)):
                raise IndexError("indexing with a Python bool is not supported")
            else:
                raise IndexError(f"only ints, slices, None, ..., int lists and int Tensors are valid indices, "
                                 f"not {type(i).__name__}")
        n_real = sum(1 for k, _ in entries if k != "none")
        if n_real > self.ndim:
            raise IndexError(f"too many indices for a tensor of {self.ndim} dims: {n_real} given")
        fill = [("slice", slice(None))] * (self.ndim - n_real)
        at = len(entries) if ellipsis_at is None else ellipsis_at
        entries = entries[:at] + fill + entries[at:]
        dim = 0
        for k, v in entries:
            if k == "tensor" and id(v) in host:
                arr, mask_size = host[id(v)]
                size = self.shape[dim]
                if mask_size is not None and mask_size != size:
                    raise IndexError(f"the bool mask's size {mask_size} doesn't match dimension {dim} of size {size}")
                bad = arr[(arr < -size) | (arr >= size)]
                if bad.size:
                    raise IndexError(f"index {bad[0]} is out of bounds for dimension {dim} with size {size}")
            dim += k != "none"
        return entries

    def _sequence_index(self, i) -> list[tuple[Tensor, np.ndarray, int | None]]:
        """A list (or numpy array) index as int Tensors, with their host values and, for a bool mask, its sizes."""

        if any(isinstance(v, MovementMixin) for v in (i if isinstance(i, (list, tuple)) else ())):
            raise IndexError("a list of Tensors inside an index is not valid: stack them into one int Tensor")
        arr = np.asarray(i)
        if arr.dtype == np.bool_:
            if arr.ndim == 0:
                raise IndexError("indexing with a 0-d bool mask is not supported")
            # a host-side mask: its True positions are known here, one int index per masked dim
            return [(type(self)(p.astype(np.int32), device=self.device), p, n)
                    for p, n in zip(np.nonzero(arr), arr.shape)]
        if arr.size == 0:
            arr = arr.astype(np.int32)
        if arr.dtype.kind not in "iu":
            raise IndexError(f"only int lists are valid indices, got {i!r}")
        if arr.dtype.kind == "u" or arr.dtype.itemsize > 4:
            arr = arr.astype(np.int64) if arr.size and (arr.max() >= 2 ** 31 or arr.min() < -2 ** 31) \
                else arr.astype(np.int32)
        return [(type(self)(arr, device=self.device), arr, None)]

    def _basic_plan(self, entries) -> list[tuple[str, int, int, int]]:
        """Per dim of self: (kind, lowest selected position, count, step) for the ints and slices of `entries`."""
        plan, dim = [], 0
        for kind, val in entries:
            if kind == "none":
                continue
            size = self.shape[dim]
            if kind == "int":
                j = val + size if val < 0 else val
                if not 0 <= j < size:
                    raise IndexError(f"index {val} is out of bounds for dimension {dim} with size {size}")
                plan.append(("int", j, 1, 1))
            elif kind == "slice" and any(isinstance(b, Node) for b in (val.start, val.stop, size)):
                # a symbolic bound (a KV cache's position): a plain span, bounds taken as they are
                if val.step not in (None, 1):
                    raise ArgumentError(f"a slice with symbolic bounds needs step 1, got {val}")
                start = 0 if val.start is None else val.start
                stop = size if val.stop is None else val.stop
                if any(isinstance(b, int) and b < 0 for b in (start, stop)):
                    raise IndexError(f"a slice with symbolic bounds can't count from the end: {val}")
                plan.append(("slice", start, stop - start, 1))
            elif kind == "slice":
                if val.step == 0:
                    raise ArgumentError("slice step cannot be zero")
                start, stop, step = val.indices(size)
                n = len(range(start, stop, step))
                lo = 0 if n == 0 else start if step > 0 else start + (n - 1) * step
                plan.append(("slice", lo, n, step))
            else:
                plan.append(("tensor", 0, size, 1))
            dim += 1
        return plan

    def __getitem__(self, idx) -> Tensor:
        return self._getitem(self._parse_index(idx))

    def _getitem(self, entries) -> Tensor:
        plan = self._basic_plan(entries)
        x = self._basic_view(plan)
        tdims = [d for d, p in enumerate(plan) if p[0] == "tensor"]
        tensors = [v for k, v in entries if k == "tensor"]
        bshape = _index_bshape(tensors)
        if tensors:
            x = x._gather_advanced(tdims, tensors, bshape)
        # x is now bshape + the non-tensor dims in order; drop the int dims, place bshape, insert the Nones
        perm, kept_shape, final = _result_layout(entries, plan, bshape)
        return x.reshape(kept_shape).permute(perm).reshape(final)

    def _basic_view(self, plan) -> Tensor:
        """The ints and slices of `plan` as a view (tensor-indexed dims kept whole): a shrink to the selected span,
        every |step|-th element, and flips for negative steps."""
        x: Tensor = self.shrink(tuple((0, 0) if isinstance(n, int) and n == 0 else (lo, lo + (n - 1) * abs(st) + 1)
                                      for _, lo, n, st in plan))
        for d, (_, _, n, st) in enumerate(plan):
            if abs(st) != 1 and n > 1:
                x = x._every_nth(d, abs(st))
        return x.flip(tuple(d for d, p in enumerate(plan) if p[3] < 0))

    def _basic_place(self, plan, t: Tensor) -> Tensor:
        """The inverse of _basic_view: `t` (shaped like the view) at its positions in self's shape, zeros elsewhere."""
        t = t.flip(tuple(d for d, p in enumerate(plan) if p[3] < 0))
        for d, (_, _, n, st) in enumerate(plan):
            if abs(st) != 1 and n > 1:
                # spread: each element followed by |step|-1 zeros, the trailing ones cut
                t = t.unsqueeze(d + 1).pad(tuple((0, abs(st) - 1) if i == d + 1 else None for i in range(t.ndim + 1)))
                t = t.flatten(d, d + 1).shrink(tuple((0, (n - 1) * abs(st) + 1) if i == d else None
                                                     for i in range(t.ndim - 1)))
        return t.pad(tuple((lo, s - lo - t.shape[d]) for d, ((_, lo, _, _), s) in enumerate(zip(plan, self.shape))))

    def _onehot(self, tensors: list[Tensor], sizes: tuple[sint, ...], bshape: tuple[sint, ...], n_rest: int) -> Tensor:
        """bshape + sizes + (1,) * n_rest bools: whether every index tensor j points at position p_j of its dim."""
        k, nb = len(tensors), len(bshape)
        mask = None
        for j, (t, s) in enumerate(zip(tensors, sizes)):
            t = (t < 0).where(t + s, t)  # negative indices count from the end
            t = t.reshape((1,) * (nb - t.ndim) + t.shape + (1,) * (k + n_rest))
            ar = type(self).arange(s, device=self.device).reshape((1,) * (nb + j) + (s,) + (1,) * (k - j - 1 + n_rest))
            m = t == ar
            mask = m if mask is None else mask & m
        return mask

    def _gather_advanced(self, tdims: list[int], tensors: list[Tensor], bshape: tuple[sint, ...]) -> Tensor:
        """Gather at the tensor indices of dims `tdims`: one-hot masks against arange, a where and one sum.

        The result is shaped bshape + the other dims in order.
        """
        rest = [d for d in range(self.ndim) if d not in tdims]
        out_shape = tuple(bshape) + tuple(self.shape[d] for d in rest)
        if 0 in out_shape:
            # nothing to gather: an empty view of self keeps the gradient connected
            return self.shrink(tuple((0, 0) for _ in self.shape)).reshape(out_shape)
        x = self.permute(tdims + rest)
        k, nb = len(tdims), len(bshape)
        mask = self._onehot(tensors, x.shape[:k], bshape, len(rest))
        x = x.reshape((1,) * nb + x.shape)
        return mask.where(x, _zero(x.dtype)).sum(axis=tuple(range(nb, nb + k))).cast(self.dtype)

    def _every_nth(self, dim: int, n: int) -> Tensor:
        size = self.shape[dim]
        padded = math.ceil(size / n) * n
        x = self.pad(tuple((0, padded - size) if d == dim else None for d in range(self.ndim)))
        x = x.reshape(x.shape[:dim] + (padded // n, n) + x.shape[dim + 1:])
        x = x.shrink(tuple((0, 1) if d == dim + 1 else None for d in range(x.ndim)))
        return x.reshape(x.shape[:dim + 1] + x.shape[dim + 2:])

    # ---- setitem ----
    def __setitem__(self, idx, v) -> None:
        """Write `v` (a scalar or a Tensor broadcastable to `self[idx]`) into the selected positions, in place.

        The new value is built functionally (inverse views, one-hot masks and where), computed, and written into
        this tensor's buffer, so the Tensor object and the views of its buffer see it. Not differentiable.
        Where tensor indices repeat a position, the last write wins.
        """
        if self.requires_grad or (isinstance(v, MovementMixin) and v.requires_grad):
            raise NotImplementedError("setitem on a tensor that requires grad is not supported")
        if not isinstance(v, MovementMixin):
            if not isinstance(v, (bool, int, float, np.generic)):
                raise TypeError(f"can't assign a {type(v).__name__} to a Tensor's items")
            v = type(self)(v, device=self.device, dtype=self.dtype)
        v = v.to(self.device).cast(self.dtype)
        self._realize_base_for_write()
        entries = self._parse_index(idx)
        plan = self._basic_plan(entries)
        tensors = [val for k, val in entries if k == "tensor"]
        bshape = _index_bshape(tensors)
        perm, kept_shape, rshape = _result_layout(entries, plan, bshape)
        while v.ndim > len(rshape) and v.shape[0] == 1:
            v = v.reshape(v.shape[1:])
        try:
            v = v.expand(rshape)
        except ValueError:
            raise ArgumentError(f"setitem: value of shape {v.shape} can't be broadcast to the indexed shape "
                             f"{rshape}") from None
        if 0 in rshape or 0 in self.shape:
            return
        # v in the layout of the basic view: bshape + its non-tensor dims (ints as size 1)
        v = v.reshape(tuple(kept_shape[i] for i in perm)).permute(_argsort(perm))
        v = v.reshape(tuple(bshape) + tuple(n for kind, _, n, _ in plan if kind != "tensor"))
        if not tensors and self._has_buffer():
            # ints and slices select a view of the buffer: write v through it (as tinygrad 0.9 did), touching only
            # the selected elements; symbolic bounds (a position inside TinyJit) become kernel arguments
            self._basic_view(plan).assign(v).realize()
            return
        if any(isinstance(p[1], Node) or isinstance(p[2], Node) for p in plan):
            raise ArgumentError("setitem with symbolic bounds needs a realized tensor to write into: realize() "
                                "it (or make it contiguous) first")
        new_sub = self._scatter_advanced(plan, tensors, bshape, v) if tensors else v
        ones = type(self).ones(new_sub.shape, dtype=dtypes.bool, device=self.device)
        self._write(self._basic_place(plan, ones).where(self._basic_place(plan, new_sub), self))

    def _scatter_advanced(self, plan, tensors: list[Tensor], bshape: tuple[sint, ...], v: Tensor) -> Tensor:
        """The basic view of self with `v` (bshape + the non-tensor dims) written at the tensor indices.

        One-hot over the tensor-indexed dims only: for each of their positions, the last index that points there
        (a max of 1-based orders), then the value of that index (a sum), so the work is |view| * |bshape|.
        """
        sub = self._basic_view(plan)
        tdims = [d for d, p in enumerate(plan) if p[0] == "tensor"]
        rest = [d for d in range(sub.ndim) if d not in tdims]
        k, nb, nr = len(tdims), len(bshape), len(rest)
        subp = sub.permute(tdims + rest)
        mask = self._onehot(tensors, subp.shape[:k], bshape, nr)
        order = type(self).arange(1, prod(bshape) + 1, device=self.device).reshape(tuple(bshape) + (1,) * (k + nr))
        baxes = tuple(range(nb))
        last = mask.where(order, 0).max(axis=baxes) if nb else mask.where(order, 0)
        vals = v.reshape(tuple(bshape) + (1,) * k + tuple(sub.shape[d] for d in rest))
        val = (last == order).where(vals, _zero(self.dtype))
        val = val.sum(axis=baxes).cast(self.dtype) if nb else val
        return (last > 0).where(val, subp).permute(_argsort(tdims + rest))

    def _has_buffer(self) -> bool:
        """Whether this tensor reads a realized buffer of its own (not a constant), which a write can go into."""
        if type(self.device) is tuple:
            return False  # on several devices: written whole, each device its piece (see _write)
        base = self.lazydata.base
        return base.realized is not None and base.op is not LoadOps.CONST and not base.shared_const

    def _realize_base_for_write(self) -> None:
        """Give this tensor's unrealized base its buffer now, as tinygrad 0.9's setitem did (`self.realize()` first),
        so a write through a view (`t.T[1] = 5`, `t[:, ::2][1] = 5`) lands in the memory that `t` and every other
        view of it read, as in numpy and PyTorch. Otherwise the view would get a new value of its own and `t` would
        never see it. A constant or an arange that was never realized (`Tensor.zeros(n)`, `Tensor.arange(n)`) has no
        memory to share: the tensor written is given the values, and other views of it keep the old ones (call
        `.contiguous().realize()` on it first to write through views)."""
        if type(self.device) is not str or self.device.startswith("DISK"):
            return
        base = self.lazydata.base
        if base.realized is None and base.op is not LoadOps.CONST and not base.shared_const:
            type(self)(base, device=self.device).realize()

    def _write(self, new: Tensor) -> None:
        """Store `new` as this tensor's value, now: assign writes into this tensor's own buffer when it has one (so
        its views, and kernels a JIT captured, see it), through a temporary when `new` reads it shifted."""
        self.assign(new).realize()


    def expand_as(self, other: Tensor) -> Tensor:
        """Expand to the shape of `other` (see expand).

        >>> Tensor([1, 2]).expand_as(Tensor.ones(2, 2)).tolist()
        [[1, 2], [1, 2]]
        """
        return self.expand(other.shape)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int]) -> Tensor:
        """Rotate elements along `dims` by `shifts` (as torch.roll with dims given): two shrinks and a cat."""
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts) != len(dims):
            raise ArgumentError(f"roll needs as many shifts as dims, got {shifts} and {dims}")
        x = self
        for shift, dim in zip(shifts, dims):
            d = x._resolve_dim(dim)
            n = x.shape[d]
            if n == 0 or shift % n == 0:
                continue
            k = shift % n
            head = x.shrink(tuple((n - k, n) if i == d else None for i in range(x.ndim)))
            tail = x.shrink(tuple((0, n - k) if i == d else None for i in range(x.ndim)))
            x = head.cat(tail, dim=d)
        return x

def _tensors_and_dim(first, args, dim) -> tuple[list, int]:
    """The tensors of `a.cat(b, c)`, `Tensor.cat(a, b)` and `Tensor.cat([a, b])`, with a trailing int as the dim."""
    items = list(first) if isinstance(first, (list, tuple)) else [first]
    args = list(args)
    if args and _is_int(args[-1]):
        dim = args.pop()
    for a in args:
        items.extend(a if isinstance(a, (list, tuple)) else [a])
    for t in items:
        if not isinstance(t, MovementMixin):
            raise TypeError(f"expected Tensors, got {type(t).__name__}")
    return items, dim


def _advanced_position(entries) -> tuple[int, int]:
    """Where the broadcast advanced dims go (PyTorch rules): (kept slice dims before them, result dims before them).

    Ints and 0-d tensors act as ints and don't count; the other tensors are adjacent when nothing lies between them
    (a None does), and then take the place of the first one; otherwise they go in front.
    """
    rest = [k for k, v in entries if k != "int" and not (k == "tensor" and v.ndim == 0)]
    tpos = [i for i, k in enumerate(rest) if k == "tensor"]
    if not tpos or tpos[-1] - tpos[0] + 1 != len(tpos):
        return 0, 0
    return rest[:tpos[0]].count("slice"), tpos[0]


def _index_bshape(tensors) -> tuple[sint, ...]:
    """The broadcast shape of the index tensors."""
    try:
        return _broadcast_shape(*[t.shape for t in tensors])
    except ValueError:
        raise IndexError(f"index tensors of shapes {[t.shape for t in tensors]} can't be broadcast together") \
            from None


def _result_layout(entries, plan, bshape) -> tuple[list[int], tuple[sint, ...], tuple[sint, ...]]:
    """How bshape + the kept slice dims become the result: (permutation, the shape it applies to, final shape)."""
    kept = [p[2] for p in plan if p[0] == "slice"]
    nb, nk = len(bshape), len(kept)
    at, before = _advanced_position(entries)
    perm = list(range(nb, nb + at)) + list(range(nb)) + list(range(nb + at, nb + nk))
    final = []
    slices = iter(kept)
    for k, _ in entries:
        if k == "none":
            final.append(1)
        elif k == "slice":
            final.append(next(slices))
    return perm, tuple(bshape) + tuple(kept), tuple(final[:before]) + tuple(bshape) + tuple(final[before:])


def _argsort(order: Sequence[int]) -> list[int]:
    return sorted(range(len(order)), key=lambda i: order[i])
