"""Processing ops: matrix products, convolutions, pools, resizing, normalisation layers, attention and losses.

Everything here is a composition of the other mixins' ops, so autograd comes for free. Sliding windows (convolutions,
pools) are zero-copy views made by `_pool` from pad/reshape/expand/shrink/permute; a convolution is then one
broadcast multiply and one sum over the window, which the scheduler fuses into a single kernel.

A mixin of Tensor (tinygrad/tensor.py); new tensors are made with `type(self)` so subclasses stay subclasses.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from tinygrad.dtype import DType, dtypes, least_upper_dtype
from tinygrad.errors import ArgumentError
from tinygrad.helpers import argfix, flatten, make_pair, prod

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor

_REDUCTIONS = ("mean", "sum", "none")
_INTERP_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "trilinear", "area")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _spatial_pads(padding, nd: int, k_: tuple[int, ...] = (), d_: tuple[int, ...] = ()) -> list[tuple[int, int]]:
    """Per spatial dim (first to last) the (before, after) padding described by `padding`:
    an int (every side), "valid"/"same" (as PyTorch), nd ints (PyTorch: both sides of each dim), 2*nd ints
    (tinygrad: (left, right, top, bottom, ...), last dim first) or nd (before, after) pairs."""
    if isinstance(padding, int):
        return [(padding, padding)] * nd
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * nd
        if padding == "same" and k_:
            tot = [d * (k - 1) for k, d in zip(k_, d_)]
            return [(t // 2, t - t // 2) for t in tot]
        raise ArgumentError(f"padding must be 'valid' or 'same' when a string, got {padding!r}")
    pads = list(padding)
    if len(pads) == nd and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pads):
        return [(int(p[0]), int(p[1])) for p in pads]
    if not all(isinstance(p, int) for p in pads):
        raise TypeError(f"padding must hold ints, got {padding!r}")
    if len(pads) == 2 * nd:
        return [(pads[2 * j], pads[2 * j + 1]) for j in range(nd)][::-1]
    if len(pads) == nd:
        return [(p, p) for p in pads]
    raise ArgumentError(f"padding {padding!r} needs 1, {nd} or {2 * nd} values for {nd} spatial dims")


def _make_tuple(x, cnt: int) -> tuple:
    """make_pair that takes floats too."""
    return (x,) * cnt if isinstance(x, (int, float)) else tuple(x)


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ArgumentError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")


class ProcessingMixin:
    __slots__ = ()

    # ---- matrix products ----
    def dot(self, w: Tensor, acc_dtype: DType | None = None) -> Tensor:
        """Matrix product with PyTorch's rules: 1-d operands are vectors, leading dims broadcast as batch dims.
        It is one broadcast multiply and one sum over the shared dim, so it fuses into a single kernel."""
        n1, n2 = self.ndim, w.ndim
        if n1 == 0 or n2 == 0:
            raise ArgumentError(f"matmul needs at least 1 dim on both sides, got {self.shape} and {w.shape}")
        inner = w.shape[-2] if n2 > 1 else w.shape[0]
        if self.shape[-1] != inner:
            raise ArgumentError(f"matmul shape mismatch: {self.shape} @ {w.shape} (inner dims {self.shape[-1]} and "
                             f"{inner})")
        # x: (..., n, 1, k) when w has a column dim; w: (..., 1, m, k) or (k,)
        x = self.unsqueeze(-2) if n1 > 1 and n2 > 1 else self
        if n2 > 1:
            w = w.transpose(-1, -2)
            if n1 > 1:
                w = w.unsqueeze(-3)
        return x.mul(w).sum(-1, acc_dtype=acc_dtype).cast(least_upper_dtype(x.dtype, w.dtype))

    def matmul(self, x: Tensor, reverse: bool = False, acc_dtype: DType | None = None) -> Tensor:
        """Matrix product self @ x (`reverse`: x @ self), with dot's rules for 1-d operands and batch dims.

        >>> Tensor([[1, 2], [3, 4]]).matmul(Tensor([[1], [1]])).tolist()
        [[3], [7]]
        """
        return x.dot(self, acc_dtype=acc_dtype) if reverse else self.dot(x, acc_dtype=acc_dtype)

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """self @ weight + bias, where `weight` is (in, out) as in tinygrad (a 1-d weight scales elementwise)."""
        x = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
        return x.add(bias) if bias is not None else x

    @classmethod
    def einsum(cls, formula: str, *operands) -> Tensor:
        """Einstein summation as torch.einsum: implicit output (the once-seen letters, sorted), repeated letters in
        one operand take its diagonal, `...` stands for broadcast dims. One multiply and one sum."""
        xs = list(argfix(*operands))
        formula = formula.replace(" ", "")
        lhs, arrow, rhs = formula.partition("->")
        terms = lhs.split(",")
        if len(terms) != len(xs):
            raise ArgumentError(f"einsum {formula!r} names {len(terms)} operands, got {len(xs)}")
        n_ell = 0
        for t, x in zip(terms, xs):
            if "..." in t:
                n_ell = max(n_ell, x.ndim - (len(t) - 3))
        ell = [chr(0x3b1 + j) for j in range(n_ell)]  # stand-in letters for the dims `...` covers
        letter_lists: list[list[str]] = []
        for t, x in zip(terms, xs):
            if t.count("...") > 1 or any(not (c.isalpha() or c == ".") for c in t):
                raise ArgumentError(f"bad einsum term {t!r} in {formula!r}")
            if "..." in t:
                pre, _, post = t.partition("...")
                n = x.ndim - len(pre) - len(post)
                if n < 0:
                    raise ArgumentError(f"einsum term {t!r} has more letters than operand dims {x.shape}")
                letters = list(pre) + ell[n_ell - n:] + list(post)
            else:
                letters = list(t)
            if "." in letters or len(letters) != x.ndim:
                raise ArgumentError(f"einsum term {t!r} doesn't match operand of shape {x.shape}")
            letter_lists.append(letters)
        if arrow:
            if rhs.count("...") > 1 or any(not (c.isalpha() or c == ".") for c in rhs):
                raise ArgumentError(f"bad einsum output {rhs!r}")
            pre, dots, post = rhs.partition("...")
            out = list(pre) + (ell if dots else []) + list(post)
            if "." in out:
                raise ArgumentError(f"bad einsum output {rhs!r}")
        else:
            counts: dict[str, int] = {}
            for c in flatten(t for t in terms):
                if c.isalpha():
                    counts[c] = counts.get(c, 0) + 1
            out = ell + sorted(c for c, n in counts.items() if n == 1)
        seen = set(flatten(letter_lists))
        if len(set(out)) != len(out) or any(c not in seen for c in out):
            raise ArgumentError(f"einsum output {rhs!r} repeats a letter or names one no operand has")
        # each operand: take diagonals of repeated letters, then line its dims up on the common letter order
        order = out + sorted(seen - set(out))
        aligned = []
        for x, letters in zip(xs, letter_lists):
            x, letters = x._einsum_diagonals(letters)
            x = x.permute(sorted(range(len(letters)), key=lambda i: order.index(letters[i])))
            present = set(letters)
            it = iter(x.shape)
            aligned.append(x.reshape(tuple(next(it) if c in present else 1 for c in order)))
        prod_ = aligned[0]
        for a in aligned[1:]:
            prod_ = prod_ * a
        red = tuple(range(len(out), len(order)))
        return prod_.sum(red).cast(prod_.dtype) if red else prod_

    def _einsum_diagonals(self, letters: list[str]) -> tuple[Tensor, list[str]]:
        x, letters = self, list(letters)
        while len(set(letters)) != len(letters):
            c = next(c for c in letters if letters.count(c) > 1)
            i, j = [k for k, d in enumerate(letters) if d == c][:2]
            if x.shape[i] != x.shape[j]:
                raise ArgumentError(f"einsum letter {c!r} has sizes {x.shape[i]} and {x.shape[j]} in one operand")
            rest = [k for k in range(x.ndim) if k not in (i, j)]
            x = x.permute(*rest, i, j)._diagonal_last2()
            letters = [letters[k] for k in rest] + [c]
        return x, letters

    def _diagonal_last2(self) -> Tensor:
        """The diagonal of the last two (equal) dims, as a view: (..., n, n) -> (..., n)."""
        n, lead = self.shape[-1], self.shape[:-2]
        x = self.reshape(*lead, n * n).pad(tuple([None] * len(lead) + [(0, n)]))
        return x.reshape(*lead, n, n + 1).shrink(tuple([None] * len(lead) + [None, (0, 1)])).reshape(*lead, n)

    # ---- sliding windows ----
    def _pool(self, k_: tuple[int, ...], stride: int | tuple[int, ...] = 1,
              dilation: int | tuple[int, ...] = 1) -> Tensor:
        """Every window of size k_ over the last len(k_) dims, as a view: (..., *i) -> (..., *o, *k)."""
        nd = len(k_)
        if self.ndim < nd:
            raise ArgumentError(f"a {nd}-d window needs at least {nd} dims, got shape {self.shape}")
        s_, d_ = make_pair(stride, nd), make_pair(dilation, nd)
        if len(s_) != nd or len(d_) != nd or any(v <= 0 for v in (*s_, *d_, *k_)):
            raise ArgumentError(f"bad window: kernel {k_}, stride {s_}, dilation {d_}")
        lead, i_ = self.shape[:-nd], self.shape[-nd:]
        o_ = tuple((i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(i_, k_, s_, d_))
        if any(o <= 0 for o in o_):
            raise ArgumentError(f"window {k_} (dilation {d_}) is larger than the input's last dims {i_}")
        nl, keep = len(lead), [None] * len(lead)
        if all(k <= s and d == 1 for k, s, d in zip(k_, s_, d_)):
            # windows don't overlap: cut each dim into o blocks of s and keep the first k of every block
            fit = [(0, o * s - i) for o, s, i in zip(o_, s_, i_)]
            x = self.pad(tuple(keep + [(0, max(0, p)) for _, p in fit]))
            x = x.shrink(tuple(keep + [(0, o * s) for o, s in zip(o_, s_)]))
            x = x.reshape(*lead, *flatten((o, s) for o, s in zip(o_, s_)))
            x = x.shrink(tuple(keep + flatten([(0, o), (0, k)] for o, k in zip(o_, k_))))
            return x.permute(*range(nl), *[nl + 2 * j for j in range(nd)], *[nl + 2 * j + 1 for j in range(nd)])
        # overlapping windows: tile each dim r times and view the tiles as k rows of length L = d (mod i), so row j
        # starts at element j*d; the window starts are then every s-th element of a row
        len_ = tuple(d + i * max(1, _cdiv(o * s - d, i)) for i, o, s, d in zip(i_, o_, s_, d_))
        r_ = tuple(_cdiv(k * L, i) for k, L, i in zip(k_, len_, i_))
        x = self.reshape(*lead, *flatten((1, i) for i in i_)).expand(*lead, *flatten(zip(r_, i_)))
        x = x.reshape(*lead, *[r * i for r, i in zip(r_, i_)])
        x = x.shrink(tuple(keep + [(0, k * L) for k, L in zip(k_, len_)])).reshape(*lead, *flatten(zip(k_, len_)))
        x = x.shrink(tuple(keep + flatten([None, (0, o * s)] for o, s in zip(o_, s_))))
        x = x.reshape(*lead, *flatten((k, o, s) for k, o, s in zip(k_, o_, s_)))
        x = x.shrink(tuple(keep + flatten([None, None, (0, 1)] for _ in range(nd))))
        x = x.reshape(*lead, *flatten(zip(k_, o_)))
        return x.permute(*range(nl), *[nl + 2 * j + 1 for j in range(nd)], *[nl + 2 * j for j in range(nd)])

    def _pad_spatial(self, pads: Sequence[tuple[int, int]], value: float = 0.0) -> Tensor:
        """Pad (or, for negative amounts, crop) the last len(pads) dims by (before, after) pairs."""
        keep = [None] * (self.ndim - len(pads))
        x = self.pad(tuple(keep + [(max(0, a), max(0, b)) for a, b in pads]), value)
        crop = [(max(0, -a), s - max(0, -b)) for (a, b), s in zip(pads, x.shape[len(keep):])]
        return x.shrink(tuple(keep + crop))

    def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0,
               acc_dtype: DType | None = None) -> Tensor:
        """N-d convolution (cross-correlation) as PyTorch's conv1d/2d/3d; the number of spatial dims comes from the
        weight (cout, cin/groups, *k). `padding`: int, "valid"/"same", one per dim, or tinygrad's
        (left, right, top, bottom, ...)."""
        nd = weight.ndim - 2
        if nd < 1 or self.ndim != nd + 2:
            raise ArgumentError(f"conv needs input (N, C, *spatial) and weight (Cout, C/groups, *k) with the same "
                             f"number of spatial dims, got {self.shape} and {weight.shape}")
        (bs, cin_), (cout, cin), k_ = self.shape[:2], weight.shape[:2], tuple(weight.shape[2:])
        if groups <= 0 or cin * groups != cin_ or cout % groups != 0:
            raise ArgumentError(f"conv input channels {cin_} and weight {weight.shape} don't fit groups={groups}")
        s_, d_ = make_pair(stride, nd), make_pair(dilation, nd)
        if len(s_) != nd or len(d_) != nd:
            raise ArgumentError(f"stride {stride} and dilation {dilation} need {nd} values")
        if isinstance(padding, str) and padding == "same" and any(s != 1 for s in s_):
            raise ArgumentError("padding='same' needs stride 1")
        x = self._pad_spatial(_spatial_pads(padding, nd, k_, d_))._pool(k_, s_, d_)  # (bs, cin_, *o, *k)
        rcout, o_ = cout // groups, x.shape[2:2 + nd]
        x = x.reshape(bs, groups, cin, 1, *o_, *k_).expand(bs, groups, cin, rcout, *o_, *k_)
        x = x.permute(0, 1, 3, *range(4, 4 + nd), 2, *range(4 + nd, 4 + 2 * nd))  # (bs, g, rcout, *o, cin, *k)
        w = weight.reshape(1, groups, rcout, *[1] * nd, cin, *k_)
        red = tuple(range(3 + nd, 4 + 2 * nd))
        prod_ = x * w
        ret = prod_.sum(red, acc_dtype=acc_dtype).cast(prod_.dtype).reshape(bs, cout, *o_)
        return ret if bias is None else ret.add(bias.reshape(1, -1, *[1] * nd))

    def conv_transpose2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1,
                         padding=0, output_padding=0) -> Tensor:
        """Transposed convolution as PyTorch's conv_transpose1d/2d/3d, weight (cin, cout/groups, *k): the input
        spread out by `stride` (zeros between), convolved with the flipped, transposed weight."""
        nd = weight.ndim - 2
        if nd < 1 or self.ndim != nd + 2:
            raise ArgumentError(f"conv_transpose needs input (N, C, *spatial) and weight (C, Cout/groups, *k) with the "
                             f"same number of spatial dims, got {self.shape} and {weight.shape}")
        (cin, rcout), k_ = weight.shape[:2], tuple(weight.shape[2:])
        if groups <= 0 or cin % groups != 0 or self.shape[1] != cin:
            raise ArgumentError(f"conv_transpose input channels {self.shape[1]} and weight {weight.shape} don't fit "
                             f"groups={groups}")
        s_, d_, op_ = make_pair(stride, nd), make_pair(dilation, nd), make_pair(output_padding, nd)
        if any(p >= max(s, d) for p, s, d in zip(op_, s_, d_)):
            raise ArgumentError(f"output_padding {op_} must be smaller than stride {s_} or dilation {d_}")
        pads = _spatial_pads(padding, nd)
        w = weight.reshape(groups, cin // groups, rcout, *k_).transpose(1, 2).flip(tuple(range(3, 3 + nd)))
        w = w.reshape(groups * rcout, cin // groups, *k_)
        x, lead, i_ = self, self.shape[:2], self.shape[2:]
        if any(s > 1 for s in s_):
            x = x.reshape(*lead, *flatten((i, 1) for i in i_))
            x = x.pad(tuple([None, None] + flatten([None, (0, s - 1)] for s in s_)))
            x = x.reshape(*lead, *[i * s for i, s in zip(i_, s_)])
            x = x.shrink(tuple([None, None] + [(0, (i - 1) * s + 1) for i, s in zip(i_, s_)]))
        cpads = [(d * (k - 1) - a, d * (k - 1) - b + op) for (a, b), k, d, op in zip(pads, k_, d_, op_)]
        return x.conv2d(w, bias, groups=groups, dilation=d_, padding=cpads)

    def _pool_pads(self, k_, s_, d_, padding, ceil_mode: bool) -> tuple[list[tuple[int, int]], list[int]]:
        """The padding pairs of a pool, and the extra padding after each dim that ceil_mode needs (as PyTorch:
        the last window must start inside the input or its left padding)."""
        nd = len(k_)
        pads = _spatial_pads(padding, nd)
        extra = []
        for i, k, s, d, (a, b) in zip(self.shape[-nd:], k_, s_, d_, pads):
            span, tot = d * (k - 1) + 1, i + a + b
            if tot < span:
                raise ArgumentError(f"pool window {k_} (dilation {d_}) is larger than the padded input "
                                 f"{self.shape[-nd:]}")
            o = (tot - span) // s + 1
            if ceil_mode:
                o = _cdiv(tot - span, s) + 1
                if (o - 1) * s >= i + a:
                    o -= 1
            extra.append(max(0, (o - 1) * s + span - tot))
        return pads, extra

    def _pool_args(self, kernel_size, stride, dilation):
        k_ = make_pair(kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        nd = len(k_)
        s_ = k_ if stride is None else make_pair(stride, nd)
        d_ = make_pair(dilation, nd)
        if len(s_) != nd or len(d_) != nd or self.ndim < nd:
            raise ArgumentError(f"pool of kernel {k_}, stride {s_}, dilation {d_} doesn't fit shape {self.shape}")
        return k_, s_, d_

    def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                   count_include_pad: bool = True) -> Tensor:
        """Average over windows of the last len(kernel_size) dims, as PyTorch's avg_pool (stride defaults to the
        kernel; count_include_pad counts the zero padding in the divisor, never the ceil_mode overhang)."""
        k_, s_, d_ = self._pool_args(kernel_size, stride, dilation)
        nd = len(k_)
        pads, extra = self._pool_pads(k_, s_, d_, padding, ceil_mode)
        full = [(a, b + e) for (a, b), e in zip(pads, extra)]
        red = tuple(range(-nd, 0))
        total = self._pad_spatial(full)._pool(k_, s_, d_).sum(red)
        if not any(e for e in extra) and (count_include_pad or not any(a or b for a, b in pads)):
            return total / prod(k_)
        # the divisor of each window: how many of its positions count, from a padded ones tensor
        ones = type(self).ones(*self.shape[-nd:], device=self.device, dtype=dtypes.default_float)
        ones = ones._pad_spatial(pads, 1.0 if count_include_pad else 0.0)._pad_spatial([(0, e) for e in extra])
        return total / ones._pool(k_, s_, d_).sum(red)

    def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False) -> Tensor:
        """Max over windows of the last len(kernel_size) dims, as PyTorch's max_pool (padding is -inf)."""
        k_, s_, d_ = self._pool_args(kernel_size, stride, dilation)
        nd = len(k_)
        pads, extra = self._pool_pads(k_, s_, d_, padding, ceil_mode)
        low = float("-inf") if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
        x = self._pad_spatial([(a, b + e) for (a, b), e in zip(pads, extra)], low)
        return x._pool(k_, s_, d_).max(tuple(range(-nd, 0)))

    # ---- resizing ----
    def interpolate(self, size=None, mode: str = "linear", align_corners: bool = False,
                    scale_factor=None) -> Tensor:
        """Resize the last len(size) dims (an int size: every dim after (N, C)) as torch.nn.functional.interpolate:
        modes "nearest", "nearest-exact", "linear" ("bilinear", "trilinear": the same, per dim) and "area".
        Each dim is resized by a sum against an (out, in) weight matrix built from aranges, or by a view when the
        nearest sample is a whole-number repeat or stride."""
        if mode not in _INTERP_MODES:
            raise ArgumentError(f"interpolate mode must be one of {_INTERP_MODES}, got {mode!r}")
        if align_corners and mode not in ("linear", "bilinear", "trilinear"):
            raise ArgumentError(f"align_corners only applies to the linear modes, not {mode!r}")
        if (size is None) == (scale_factor is None):
            raise ArgumentError("interpolate needs exactly one of size and scale_factor")
        spec = size if size is not None else scale_factor
        nd = len(spec) if isinstance(spec, (tuple, list)) else self.ndim - 2
        if nd < 1 or nd > self.ndim:
            raise ArgumentError(f"can't resize {nd} dims of a tensor of shape {self.shape}")
        in_ = self.shape[-nd:]
        sf_ = None if scale_factor is None else tuple(float(f) for f in _make_tuple(scale_factor, nd))
        out_ = tuple(make_pair(size, nd)) if size is not None else \
            tuple(int(math.floor(i * f)) for i, f in zip(in_, sf_))
        if len(out_) != nd or any(o <= 0 for o in out_):
            raise ArgumentError(f"bad interpolate output size {out_}")
        x = self
        for j, (i, o) in enumerate(zip(in_, out_)):
            dim = self.ndim - nd + j
            scale = 1.0 / sf_[j] if sf_ is not None else i / o
            x = x._resize_dim(dim, o, mode, align_corners, scale)
        return x

    def _resize_dim(self, dim: int, o: int, mode: str, align_corners: bool, scale: float) -> Tensor:
        i = self.shape[dim]
        # PyTorch leaves a dim of unchanged size alone, except nearest sampling with a scale_factor other than 1
        if o == i and (not mode.startswith("nearest") or scale == 1.0):
            return self
        x = self.transpose(dim, -1)
        lead = x.shape[:-1]
        if mode.startswith("nearest"):
            fast = x._nearest_view(o, mode == "nearest-exact", scale)
            if fast is not None:
                return fast.transpose(dim, -1)
        t = type(self)
        idx = t.arange(o, device=self.device).cast(dtypes.float32)
        cols = t.arange(i, device=self.device).reshape(1, i)
        if mode == "area":
            # adaptive average pooling: output r averages inputs j in [floor(r*i/o), ceil((r+1)*i/o)), that is
            # r*i < (j+1)*o and j*o < (r+1)*i
            r = t.arange(o, device=self.device).reshape(o, 1)
            inside = ((r * i < (cols + 1) * o) & (cols * o < (r + 1) * i)).cast(dtypes.float32)
            w = inside / inside.sum(-1, keepdim=True)
        elif mode.startswith("nearest"):
            src = (idx + 0.5) * scale if mode == "nearest-exact" else idx * scale
            src = src.cast(dtypes.int32).minimum(i - 1).reshape(o, 1)
            w = (cols == src).cast(dtypes.float32)
        else:
            if align_corners:
                src = idx * ((i - 1) / (o - 1) if o > 1 else 0.0)
            else:
                src = ((idx + 0.5) * scale - 0.5).maximum(0.0)
            i0 = src.cast(dtypes.int32)
            lam = (src - i0.cast(dtypes.float32)).reshape(o, 1)
            i0 = i0.minimum(i - 1).reshape(o, 1)
            i1 = (i0 + 1).minimum(i - 1)
            w = (cols == i0).cast(dtypes.float32) * (1.0 - lam) + (cols == i1).cast(dtypes.float32) * lam
        w = w.cast(x.dtype) if dtypes.is_float(x.dtype) else w
        out = (x.reshape(*lead, 1, i) * w).sum(-1)
        return out.transpose(dim, -1)

    def _nearest_view(self, o: int, exact: bool, scale: float) -> Tensor | None:
        """Nearest resize of the last dim as a view, for a power-of-two repeat or a whole-number stride, where the
        float index math (src = floor(dst * scale)) is exact, so the result is PyTorch's."""
        i, lead = self.shape[-1], self.shape[:-1]
        if o % i == 0 and (o // i) & (o // i - 1) == 0 and scale == 1 / (o // i):
            r = o // i
            return self.reshape(*lead, i, 1).expand(*lead, i, r).reshape(*lead, o)
        if i % o == 0 and scale == i // o:
            r = i // o
            off = r // 2 if exact else 0
            x = self.reshape(*lead, o, r).shrink(tuple([None] * len(lead) + [None, (off, off + 1)]))
            return x.reshape(*lead, o)
        return None

    # ---- layers ----
    def sequential(self, ll: list) -> Tensor:
        """Apply each callable of `ll` in turn (layers, functions), feeding each the previous result.

        >>> Tensor([1.0, -2.0]).sequential([Tensor.relu, lambda x: x * 2]).tolist()
        [2.0, 0.0]
        """
        x = self
        for f in ll:
            x = f(x)
        return x

    def layernorm(self, axis=-1, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps) over `axis` (biased variance), without affine parameters."""
        y = self - self.mean(axis, keepdim=True)
        return y.mul((y * y).mean(axis, keepdim=True).add(eps).rsqrt())

    def batchnorm(self, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                  axis=1) -> Tensor:
        """(x - mean) * invstd * weight + bias, the per-channel tensors laid along `axis` (an int or a tuple)."""
        axes = tuple(self._resolve_dim(a) for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
        shape = tuple(s if d in axes else 1 for d, s in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        ret = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return ret + bias.reshape(shape) if bias is not None else ret

    def dropout(self, p: float = 0.5) -> Tensor:
        """In training mode, zero each element with probability p and scale the rest by 1/(1-p); else a no-op.
        The mask comes from Tensor.rand, so Tensor.manual_seed makes it repeatable."""
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"dropout probability must be in [0, 1], got {p}")
        if not type(self).training or p == 0:
            return self
        if p == 1:
            return self * 0
        keep = type(self).rand(*self.shape, device=self.device, requires_grad=False) >= p
        return keep.where(self * (1.0 / (1.0 - p)), 0.0)

    def scaled_dot_product_attention(self, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                     dropout_p: float = 0.0, is_causal: bool = False) -> Tensor:
        """softmax(q @ k^T / sqrt(d) + mask) @ v. A bool mask keeps where True; a float mask is added; is_causal
        keeps the lower triangle. Dropout on the weights applies in training mode only, as tinygrad's."""
        if is_causal:
            if attn_mask is not None:
                raise ArgumentError("pass either attn_mask or is_causal, not both")
            t = type(self)
            rows = t.arange(self.shape[-2], device=self.device).reshape(-1, 1)
            attn_mask = rows >= t.arange(key.shape[-2], device=self.device).reshape(1, -1)
        qk = self.matmul(key.transpose(-2, -1)) * (1.0 / math.sqrt(self.shape[-1]))
        if attn_mask is not None:
            qk = attn_mask.where(qk, float("-inf")) if attn_mask.dtype == dtypes.bool else qk + attn_mask
        return qk.softmax(-1).dropout(dropout_p).matmul(value)

    def pad2d(self, padding: Sequence[int], value: float = 0.0) -> Tensor:
        """Pad the last dims by tinygrad's flat (left, right, top, bottom, ...) list, last dim first."""
        lr = make_pair(padding, 4) if isinstance(padding, int) else tuple(padding)
        if len(lr) % 2 or len(lr) // 2 > self.ndim:
            raise ArgumentError(f"pad2d needs pairs of padding for at most {self.ndim} dims, got {padding}")
        return self._pad_spatial(_spatial_pads(lr, len(lr) // 2), value)

    def _tri(self, k: int, upper: bool) -> Tensor:
        if self.ndim < 2:
            raise ArgumentError(f"tril/triu need at least 2 dims, got shape {self.shape}")
        t = type(self)
        r, c = self.shape[-2], self.shape[-1]
        rows = t.arange(r, device=self.device).reshape(r, 1)
        cols = t.arange(c, device=self.device).reshape(1, c)
        keep = (cols - rows >= k) if upper else (cols - rows <= k)
        return keep.where(self, t.zeros_like(self, requires_grad=False))

    def tril(self, diagonal: int = 0) -> Tensor:
        """The lower triangle (on and below `diagonal`) of the last two dims, zeros elsewhere."""
        return self._tri(diagonal, upper=False)

    def triu(self, diagonal: int = 0) -> Tensor:
        """The upper triangle (on and above `diagonal`) of the last two dims, zeros elsewhere."""
        return self._tri(diagonal, upper=True)

    def cross_entropy(self, target: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
        """torch.nn.functional.cross_entropy over the last axis: `target` holds class indices (ints) or
        probabilities (floats, same shape as the logits)."""
        if dtypes.is_float(target.dtype):
            if target.shape != self.shape:
                raise ArgumentError(f"probability targets need the logits' shape {self.shape}, got {target.shape}")
            n = self.shape[-1]
            target = target * (1 - label_smoothing) + label_smoothing / n
            return (-(self.log_softmax(-1) * target).sum(-1))._reduce_loss(reduction)
        return self.sparse_categorical_crossentropy(target, label_smoothing=label_smoothing, reduction=reduction)

    # ---- encodings and losses ----
    def one_hot(self, num_classes: int) -> Tensor:
        """A new last dim of `num_classes` with 1 at each element's value and 0 elsewhere (int, as PyTorch)."""
        if num_classes <= 0:
            raise ArgumentError(f"one_hot needs a positive num_classes, got {num_classes}")
        hit = self.unsqueeze(-1) == type(self).arange(num_classes, device=self.device)
        return hit.cast(dtypes.default_int)

    def _reduce_loss(self, reduction: str) -> Tensor:
        _check_reduction(reduction)
        return self.mean() if reduction == "mean" else self.sum() if reduction == "sum" else self

    def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:  # noqa: N803
        """-(y log p + (1-y) log(1-p)) for probabilities `self`; logs are clamped at -100 as PyTorch's."""
        _check_reduction(reduction)
        loss = -(Y * self.log().maximum(-100.0) + (1 - Y) * (1 - self).log().maximum(-100.0))
        return loss._reduce_loss(reduction)

    def binary_crossentropy_logits(self, Y: Tensor, reduction: str = "mean") -> Tensor:  # noqa: N803
        """binary_crossentropy of sigmoid(self), in the stable form max(x, 0) - x*y + log(1 + exp(-|x|))."""
        _check_reduction(reduction)
        loss = self.maximum(0) - Y * self + (1 + (-self.abs()).exp()).log()
        return loss._reduce_loss(reduction)

    def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,  # noqa: N803
                                        reduction: str = "mean") -> Tensor:
        """Cross entropy of integer labels `Y` under logits `self` (classes on the last axis), as PyTorch's
        cross_entropy: labels equal to ignore_index count nothing ("mean" divides by the others), and
        label_smoothing mixes in the uniform distribution."""
        _check_reduction(reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        if tuple(Y.shape) != tuple(self.shape[:-1]):
            raise ArgumentError(f"labels of shape {Y.shape} don't match logits of shape {self.shape}")
        log_probs = self.log_softmax(-1)
        keep = Y != ignore_index
        hit = (Y.unsqueeze(-1) == type(self).arange(self.shape[-1], device=self.device)) & keep.unsqueeze(-1)
        loss = -hit.where(log_probs, 0.0).sum(-1)
        if label_smoothing:
            smooth = -keep.where(log_probs.mean(-1), 0.0)
            loss = (1 - label_smoothing) * loss + label_smoothing * smooth
        if reduction == "none":
            return loss
        return loss.sum() if reduction == "sum" else loss.sum() / keep.sum()
