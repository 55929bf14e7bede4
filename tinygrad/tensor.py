"""Tensor: the user-facing n-dimensional array with autograd. Every method here is built from mlops Functions.

>>> from tinygrad import Tensor
>>> (Tensor([1.0, 2.0]) * 3).tolist()
[3.0, 6.0]
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence, Union

import numpy as np

import tinygrad.mlops as F
from tinygrad.device import Device
from tinygrad.dtype import ConstType, DType, dtypes, least_upper_dtype, least_upper_float, to_dtype
from tinygrad.helpers import all_int, argfix, make_pair, prod, toposort
from tinygrad.lazy import LazyBuffer
from tinygrad.ops import LoadOps
from tinygrad.shape.symbolic import Node, sint, sym_infer

TensorLike = Union["Tensor", ConstType]


def _broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded):
        sizes = {d for d in dims if not (isinstance(d, int) and d == 1)}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} can't be broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


class Tensor:
    """A lazily evaluated n-dimensional array that can compute gradients. See the module docstring."""
    __slots__ = ("lazydata", "requires_grad", "grad", "_ctx", "__weakref__")
    training: ClassVar[bool] = False
    no_grad: ClassVar[bool] = False
    _rng: ClassVar[np.random.Generator] = np.random.default_rng(0)

    def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):
        device = Device.canonicalize(device)
        dtype = to_dtype(dtype) if dtype is not None else None
        self.grad: Tensor | None = None
        self.requires_grad: bool | None = requires_grad
        self._ctx: F.Function | None = None
        if isinstance(data, LazyBuffer):
            if dtype is not None and dtype != data.dtype:
                raise TypeError(f"LazyBuffer has dtype {data.dtype}, not {dtype}")
            lb = data
        elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
            dt = dtype or dtypes.from_py(data)
            lb = LazyBuffer.loadop(LoadOps.CONST, (), dt, device, arg=dtypes.as_const(data, dt))
        elif isinstance(data, Node):
            # a symbolic value (e.g. a bound Variable): a constant whose value is passed to the kernel at launch
            if data.vars() and not all(v._val is not None for v in data.vars()):
                raise ValueError(f"can't make a Tensor of {data!r}: its variables must be bound")
            dt = dtype or dtypes.int32
            lb = LazyBuffer.loadop(LoadOps.CONST, (), dt, device, arg=data)
        elif data is None:
            lb = LazyBuffer.loadop(LoadOps.EMPTY, (0,), dtype or dtypes.default_float, device)
        elif isinstance(data, bytes):
            lb = LazyBuffer.fromcpu(np.frombuffer(data, np.uint8))
            dtype = dtype or dtypes.uint8
        elif isinstance(data, (list, tuple)):
            dt = dtype or dtypes.from_py(data)
            lb = LazyBuffer.fromcpu(_np_from(data, dt))
        elif isinstance(data, (np.ndarray, np.generic)):
            arr = np.asarray(data)
            if dtype is not None:
                arr = _np_from(arr, dtype)
            if arr.dtype == np.dtype("O") or arr.dtype.kind in "USV":
                raise TypeError(f"can't make a Tensor from numpy dtype {arr.dtype}")
            lb = LazyBuffer.fromcpu(arr)
        else:
            raise TypeError(f"can't create a Tensor from {type(data).__name__}: {data!r}")
        if dtype is not None and lb.dtype != dtype:
            lb = lb.cast(dtype)
        self.lazydata: LazyBuffer = lb if lb.device == device else lb.copy_to_device(device)

    # ---- properties ----
    @property
    def device(self) -> str:
        return self.lazydata.device

    @property
    def shape(self) -> tuple[sint, ...]:
        return self.lazydata.shape

    @property
    def dtype(self) -> DType:
        return self.lazydata.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> sint:
        return prod(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nbytes(self) -> int:
        return self.numel() * self.element_size()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<Tensor {self.lazydata!r} on {self.device} with grad {self.grad.lazydata if self.grad else None!r}>"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self):
        raise TypeError("the truth value of a Tensor is ambiguous: use .item() or .numpy()")

    # ---- realization ----
    def realize(self) -> Tensor:
        """Compute this tensor's data now (scheduling, compiling and running its kernels)."""
        Tensor.corealize([self])
        return self

    @staticmethod
    def corealize(lst: Sequence[Tensor]) -> None:
        from tinygrad.engine.realize import run_schedule
        from tinygrad.engine.schedule import create_schedule_with_vars
        run_schedule(*create_schedule_with_vars([t.lazydata for t in lst]))

    def schedule(self):
        from tinygrad.engine.schedule import create_schedule
        return create_schedule([self.lazydata])

    def _data(self) -> memoryview:
        """The bytes of this tensor, laid out contiguously (realizing it, and any constant, into a buffer)."""
        if 0 in self.shape:
            return memoryview(bytearray(0))
        t = self.contiguous().realize()
        return t.lazydata.base.realized.as_buffer()

    def numpy(self) -> np.ndarray:
        """A numpy copy of this tensor's data."""
        if not all_int(self.shape):
            raise ValueError(f"can't make a numpy array of symbolic shape {self.shape}")
        if self.dtype.np is None:
            return self.cast(dtypes.float32).numpy()
        if 0 in self.shape:
            return np.zeros(self.shape, dtype=self.dtype.np)
        return np.frombuffer(self._data(), dtype=self.dtype.np).reshape(self.shape).copy()

    def item(self) -> ConstType:
        if self.numel() != 1:
            raise ValueError(f"item() needs exactly one element, the tensor has shape {self.shape}")
        return self.numpy().reshape(-1)[0].item()

    def tolist(self):
        return self.numpy().tolist()

    def data(self) -> memoryview:
        return self._data().cast(self.dtype.fmt, self.shape) if self.shape else self._data().cast(self.dtype.fmt)

    def to(self, device: str | None) -> Tensor:
        device = Device.canonicalize(device)
        if device == self.device:
            return self
        ret = Tensor(self.lazydata, device, requires_grad=self.requires_grad)
        if self.grad is not None:
            ret.grad = self.grad.to(device)
        return ret

    def detach(self) -> Tensor:
        return Tensor(self.lazydata, device=self.device, requires_grad=False)

    def assign(self, x: TensorLike) -> Tensor:
        """Replace this tensor's value with `x` (same shape and dtype), keeping the Tensor object."""
        x = x if isinstance(x, Tensor) else Tensor(x, device=self.device, dtype=self.dtype)
        if x.shape != self.shape:
            raise ValueError(f"assign shape mismatch: {x.shape} into {self.shape}")
        if x.dtype != self.dtype:
            raise TypeError(f"assign dtype mismatch: {x.dtype} into {self.dtype}")
        if x.device != self.device:
            raise RuntimeError(f"assign device mismatch: {x.device} into {self.device}")
        self.lazydata = x.lazydata
        return self

    # ---- creation ----
    @staticmethod
    def _loadop(op: LoadOps, shape: tuple[sint, ...], device: str | None = None, dtype: DType | None = None,
                arg: Any = None, **kwargs) -> Tensor:
        lb = LazyBuffer.loadop(op, shape, dtype or dtypes.default_float, Device.canonicalize(device), arg)
        return Tensor(lb, **kwargs)

    @staticmethod
    def empty(*shape, **kwargs) -> Tensor:
        return Tensor._loadop(LoadOps.EMPTY, argfix(*shape), **kwargs)

    @staticmethod
    def full(shape: tuple[sint, ...], fill_value: ConstType, **kwargs) -> Tensor:
        shape = argfix(shape)
        dtype = to_dtype(kwargs.pop("dtype")) if kwargs.get("dtype") is not None else dtypes.from_py(fill_value)
        kwargs.pop("dtype", None)
        return Tensor(fill_value, dtype=dtype, **kwargs).reshape((1,) * len(shape)).expand(shape)

    @staticmethod
    def zeros(*shape, **kwargs) -> Tensor:
        return Tensor.full(argfix(*shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})

    @staticmethod
    def ones(*shape, **kwargs) -> Tensor:
        return Tensor.full(argfix(*shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})

    def full_like(self, fill_value: ConstType, **kwargs) -> Tensor:
        return Tensor.full(self.shape, fill_value, **{"dtype": self.dtype, "device": self.device, **kwargs})

    def zeros_like(self, **kwargs) -> Tensor:
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs) -> Tensor:
        return self.full_like(1, **kwargs)

    @staticmethod
    def arange(start: int | float, stop: int | float | None = None, step: int | float = 1, **kwargs) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must not be 0")
        n = max(math.ceil((stop - start) / step), 0)
        dtype = kwargs.pop("dtype", None) or (dtypes.default_float if any(isinstance(x, float)
                                                                         for x in (start, stop, step))
                                               else dtypes.default_int)
        if n == 0:
            return Tensor.empty(0, dtype=dtype, **kwargs)
        # cumulative sum of `step` over a lower-triangular view: one fused kernel, no host data
        steps = Tensor.full((n,), step, dtype=dtype, **kwargs)
        return (steps._cumsum() + (start - step)).cast(dtype)

    @staticmethod
    def eye(dim: int, **kwargs) -> Tensor:
        dtype = to_dtype(kwargs.pop("dtype", None) or dtypes.default_float)
        requires_grad = kwargs.pop("requires_grad", None)
        idx = Tensor.arange(dim, **kwargs)
        return (idx.unsqueeze(1) == idx).cast(dtype).requires_grad_(requires_grad)

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        Tensor._rng = np.random.default_rng(seed)

    @staticmethod
    def rand(*shape, **kwargs) -> Tensor:
        dtype = to_dtype(kwargs.pop("dtype", None) or dtypes.default_float)
        shape = argfix(*shape)
        data = Tensor._rng.random(size=_concrete(shape), dtype=np.float32)
        return Tensor(data, **kwargs).cast(dtype).reshape(shape)

    @staticmethod
    def randn(*shape, **kwargs) -> Tensor:
        dtype = to_dtype(kwargs.pop("dtype", None) or dtypes.default_float)
        shape = argfix(*shape)
        data = Tensor._rng.standard_normal(size=_concrete(shape), dtype=np.float32)
        return Tensor(data, **kwargs).cast(dtype).reshape(shape)

    @staticmethod
    def uniform(*shape, low: float = 0.0, high: float = 1.0, **kwargs) -> Tensor:
        dtype = kwargs.pop("dtype", dtypes.default_float)
        return ((high - low) * Tensor.rand(*shape, **kwargs) + low).cast(dtype)

    @staticmethod
    def scaled_uniform(*shape, **kwargs) -> Tensor:
        return Tensor.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul(prod(argfix(*shape)) ** -0.5)

    @staticmethod
    def glorot_uniform(*shape, **kwargs) -> Tensor:
        shape = argfix(*shape)
        return Tensor.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul((6 / (shape[0] + prod(shape[1:]))) ** 0.5)

    @staticmethod
    def kaiming_uniform(*shape, a: float = 0.01, **kwargs) -> Tensor:
        shape = argfix(*shape)
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
        return Tensor.uniform(*shape, low=-bound, high=bound, **kwargs)

    @staticmethod
    def kaiming_normal(*shape, a: float = 0.01, **kwargs) -> Tensor:
        shape = argfix(*shape)
        std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
        return Tensor.randn(*shape, **kwargs).mul(std)

    def requires_grad_(self, requires_grad: bool | None = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    # ---- autograd ----
    def _toposort(self) -> list[Tensor]:
        """Every tensor this one depends on through Functions, inputs before outputs."""
        return toposort(self, lambda t: t._ctx.parents if t._ctx is not None else ())

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate d(self)/d(leaf) into every leaf's `.grad` that requires grad."""
        if gradient is None:
            if self.shape not in ((), (1,)) and self.numel() != 1:
                raise RuntimeError(f"backward() without a gradient needs a scalar, this tensor has shape {self.shape}")
            gradient = Tensor(1.0, dtype=self.dtype, device=self.device, requires_grad=False).reshape(self.shape)
        if gradient.shape != self.shape:
            raise ValueError(f"gradient shape {gradient.shape} doesn't match tensor shape {self.shape}")
        self.grad = gradient
        for t0 in reversed(self._toposort()):
            if t0._ctx is None or t0.grad is None:
                continue
            ctx = t0._ctx
            grads = ctx.backward(t0.grad.lazydata)
            grads = [Tensor(g, device=self.device, requires_grad=False) if g is not None else None
                     for g in (grads if isinstance(grads, tuple) else (grads,))]
            for t, g in zip(ctx.parents, grads):
                if g is None or not t.requires_grad:
                    continue
                if g.shape != t.shape:
                    raise RuntimeError(f"internal error: gradient shape {g.shape} != tensor shape {t.shape} "
                                       f"in {type(ctx).__name__}.backward")
                t.grad = g if t.grad is None else (t.grad + g)
            del t0._ctx
            t0._ctx = None
        return self

    # ---- movement ----
    def reshape(self, shape, *args) -> Tensor:
        new_shape = argfix(shape, *args)
        if new_shape.count(-1) > 1:
            raise ValueError(f"only one dimension can be inferred in reshape {new_shape}")
        known = prod(s for s in new_shape if not (isinstance(s, int) and s == -1))
        if -1 in [s for s in new_shape if isinstance(s, int)]:
            if known == 0 or self.numel() % known != 0:
                raise ValueError(f"can't reshape {self.shape} to {new_shape}")
            new_shape = tuple(self.numel() // known if isinstance(s, int) and s == -1 else s for s in new_shape)
        if not _same_size(prod(new_shape), self.numel()):
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
        mask = F.Pad.apply(Tensor.ones_like(self, dtype=dtypes.bool, requires_grad=False), arg=full)
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

    @staticmethod
    def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
        first = tensors[0].unsqueeze(dim)
        return first.cat(*[t.unsqueeze(dim) for t in tensors[1:]], dim=dim)

    # ---- reductions ----
    def _axes(self, axis) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        return tuple(self._resolve_dim(a) for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))

    def _reduce(self, fxn: type[F.Function], axis=None, keepdim: bool = False) -> Tensor:
        axes = self._axes(axis)
        ret = fxn.apply(self, axis=axes) if axes else self
        return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis=None, keepdim: bool = False, acc_dtype: DType | None = None) -> Tensor:
        # small ints accumulate in int32, bools count as ints, as PyTorch does
        dt = acc_dtype or (dtypes.int32 if self.dtype == dtypes.bool or
                           (dtypes.is_int(self.dtype) and self.dtype.itemsize < 4 and not
                            dtypes.is_unsigned(self.dtype)) else
                           dtypes.uint32 if dtypes.is_unsigned(self.dtype) and self.dtype.itemsize < 4 else self.dtype)
        return self.cast(dt)._reduce(F.Sum, axis, keepdim)

    def max(self, axis=None, keepdim: bool = False) -> Tensor:
        return self._reduce(F.Max, axis, keepdim)

    def min(self, axis=None, keepdim: bool = False) -> Tensor:
        if dtypes.is_int(self.dtype) or self.dtype == dtypes.bool:
            return ~((~self).max(axis=axis, keepdim=keepdim))
        return -((-self).max(axis=axis, keepdim=keepdim))

    def mean(self, axis=None, keepdim: bool = False) -> Tensor:
        out_dtype = least_upper_float(self.dtype)
        n = prod(s for i, s in enumerate(self.shape) if i in self._axes(axis))
        s = self.cast(out_dtype).sum(axis=axis, keepdim=keepdim)
        return s * math.nan if isinstance(n, int) and n == 0 else s.div(n)

    def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
        sq = (self - self.mean(axis=axis, keepdim=True)).square()
        n = prod(s for i, s in enumerate(self.shape) if i in self._axes(axis))
        den = n - correction
        return sq.sum(axis=axis, keepdim=keepdim).div(max(0, den) if isinstance(den, int) else den)

    def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
        return self.var(axis, keepdim, correction).sqrt()

    def _softmax(self, axis) -> tuple[Tensor, Tensor, Tensor]:
        m = self - self.max(axis=axis, keepdim=True)
        e = m.exp()
        return m, e, e.sum(axis=axis, keepdim=True)

    def softmax(self, axis: int = -1) -> Tensor:
        _, e, ss = self._softmax(axis)
        return e.div(ss)

    def log_softmax(self, axis: int = -1) -> Tensor:
        m, _, ss = self._softmax(axis)
        return m - ss.log()

    def logsumexp(self, axis=None, keepdim: bool = False) -> Tensor:
        m = self.max(axis=axis, keepdim=True)
        return (self - m).exp().sum(axis=axis, keepdim=True).log().add(m).reshape(
            self.sum(axis=axis, keepdim=keepdim).shape)

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        if axis is None:
            return self.flatten().argmax(0)
        axis = self._resolve_dim(axis)
        n = self.shape[axis]
        is_max = self == self.max(axis=axis, keepdim=True)
        # the first index that holds the max: largest value of (n - index) among the hits
        rev = Tensor.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - axis - 1))
        return (n - (is_max * rev).max(axis=axis, keepdim=keepdim)).cast(dtypes.int32)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        return (-self).argmax(axis=axis, keepdim=keepdim)

    def _cumsum(self) -> Tensor:
        """Inclusive cumulative sum of a 1-d tensor, as one reduce over a lower-triangular view."""
        n = self.shape[0]
        # pad to 2n-1, view as n overlapping windows of length n, and sum each window
        x = self.pad(((n - 1, 0),))
        win = x.reshape(1, 2 * n - 1).expand(n + 1, 2 * n - 1).reshape(-1)[:(n + 1) * (2 * n - 2)]
        win = win.reshape(n + 1, 2 * n - 2)[1:, :n] if n > 1 else x.reshape(1, 1)
        return win.sum(axis=-1)

    # ---- elementwise: unary ----
    def neg(self) -> Tensor:
        return F.Neg.apply(self) if self.dtype != dtypes.bool else self.logical_not()

    def log(self) -> Tensor:
        return F.Log.apply(self.cast(least_upper_float(self.dtype)))

    def log2(self) -> Tensor:
        return self.log() / math.log(2)

    def exp(self) -> Tensor:
        return F.Exp.apply(self.cast(least_upper_float(self.dtype)))

    def exp2(self) -> Tensor:
        return F.Exp.apply(self.cast(least_upper_float(self.dtype)) * math.log(2))

    def sqrt(self) -> Tensor:
        return F.Sqrt.apply(self.cast(least_upper_float(self.dtype)))

    def rsqrt(self) -> Tensor:
        return self.reciprocal().sqrt()

    def sin(self) -> Tensor:
        return F.Sin.apply(self.cast(least_upper_float(self.dtype)))

    def cos(self) -> Tensor:
        return ((math.pi / 2) - self).sin()

    def tan(self) -> Tensor:
        return self.sin() / self.cos()

    def reciprocal(self) -> Tensor:
        return F.Reciprocal.apply(self.cast(least_upper_float(self.dtype)))

    def sigmoid(self) -> Tensor:
        return F.Sigmoid.apply(self.cast(least_upper_float(self.dtype)))

    def relu(self) -> Tensor:
        return F.Relu.apply(self)

    def leakyrelu(self, neg_slope: float = 0.01) -> Tensor:
        return self.relu() - (-neg_slope * self).relu()

    def tanh(self) -> Tensor:
        return 2.0 * ((2.0 * self).sigmoid()) - 1.0

    def gelu(self) -> Tensor:
        return 0.5 * self * (1 + (self * 0.7978845608 * (1 + 0.044715 * self * self)).tanh())

    def swish(self) -> Tensor:
        return self * self.sigmoid()

    def silu(self) -> Tensor:
        return self.swish()

    def abs(self) -> Tensor:
        return self.relu() + (-self).relu()

    def square(self) -> Tensor:
        return self * self

    def clip(self, min_, max_) -> Tensor:
        return self.maximum(min_).minimum(max_)

    def sign(self) -> Tensor:
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def logical_not(self) -> Tensor:
        return F.Eq.apply(*self._broadcasted(False))

    def __invert__(self) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"~ needs an int or bool tensor, not {self.dtype}")
        return self.xor(-1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype))

    def cast(self, dtype: DType | str) -> Tensor:
        dtype = to_dtype(dtype)
        return self if self.dtype == dtype else F.Cast.apply(self, dtype=dtype)

    def bitcast(self, dtype: DType | str) -> Tensor:
        dtype = to_dtype(dtype)
        return self if self.dtype == dtype else F.Cast.apply(self, dtype=dtype, bitcast=True)

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    # ---- elementwise: binary, with broadcasting ----
    def _broadcasted(self, y: TensorLike, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
        x: Tensor = self
        if not isinstance(y, Tensor):
            if isinstance(y, Node):
                y = Tensor(y, device=x.device, dtype=x.dtype if dtypes.is_float(x.dtype) else dtypes.int32,
                           requires_grad=False)
            elif not isinstance(y, (bool, int, float, np.generic)):
                raise TypeError(f"can't combine a Tensor with {type(y).__name__}")
        if not isinstance(y, Tensor):
            y = y.item() if isinstance(y, np.generic) else y
            # a Python scalar takes the tensor's dtype unless it needs a wider kind (float into an int tensor)
            if dtypes.is_float(x.dtype) or (dtypes.is_int(x.dtype) and isinstance(y, int) and
                                            not isinstance(y, bool)) or (x.dtype == dtypes.bool and
                                                                         isinstance(y, bool)):
                y_dtype = x.dtype
            else:
                y_dtype = dtypes.from_py(y)
            y = Tensor(dtypes.as_const(y, y_dtype), device=x.device, dtype=y_dtype, requires_grad=False)
        if x.device != y.device:
            raise RuntimeError(f"tensors are on different devices: {x.device} and {y.device}")
        if match_dtype and x.dtype != y.dtype:
            out = least_upper_dtype(x.dtype, y.dtype)
            x, y = x.cast(out), y.cast(out)
        if reverse:
            x, y = y, x
        shape = _broadcast_shape(x.shape, y.shape)
        return x.expand(shape), y.expand(shape)

    def add(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return F.Add.apply(*self._broadcasted(x, reverse))

    def sub(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return F.Sub.apply(*self._broadcasted(x, reverse))

    def mul(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return F.Mul.apply(*self._broadcasted(x, reverse))

    def div(self, x: TensorLike, reverse: bool = False, upcast: bool = True) -> Tensor:
        num, den = self._broadcasted(x, reverse)
        if upcast:
            num, den = num.cast(least_upper_float(num.dtype)), den.cast(least_upper_float(den.dtype))
        return F.Div.apply(num, den)

    def pow(self, x: TensorLike, reverse: bool = False) -> Tensor:
        if not isinstance(x, Tensor) and not reverse:
            if x == 2:
                return self * self
            if x == 1:
                return self
            if x == 0.5:
                return self.sqrt()
            if x == -1:
                return self.reciprocal()
        base, exp = self._broadcasted(x, reverse)
        base, exp = base.cast(least_upper_float(base.dtype)), exp.cast(least_upper_float(exp.dtype))
        # |b|^e via exp/log, then the sign: negative bases give (-1)^e for integral e and nan otherwise
        mag = (base.abs().log() * exp).exp()
        integral = (exp - exp.trunc()) == 0
        half = exp.abs() * 0.5
        odd = integral & ((half - half.trunc()) != 0)
        signed = odd.where(-mag, mag)
        return (base < 0).where(integral.where(signed, math.nan), mag)

    def trunc(self) -> Tensor:
        return self.cast(dtypes.int64).cast(self.dtype) if dtypes.is_float(self.dtype) else self

    def maximum(self, x: TensorLike) -> Tensor:
        return F.Maximum.apply(*self._broadcasted(x))

    def minimum(self, x: TensorLike) -> Tensor:
        return -((-self).maximum(-x if not isinstance(x, Tensor) else -x))

    def where(self, x: TensorLike, y: TensorLike) -> Tensor:
        if not isinstance(x, Tensor) and not isinstance(y, Tensor):
            x = Tensor(x, device=self.device, dtype=dtypes.from_py(x), requires_grad=False)
        if isinstance(x, Tensor):
            x, y = x._broadcasted(y)
        else:
            y, x = y._broadcasted(x)
        cond, x = self.cast(dtypes.bool)._broadcasted(x, match_dtype=False)
        cond, y = cond._broadcasted(y, match_dtype=False)
        return F.Where.apply(cond, *x._broadcasted(y))

    def xor(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return F.Xor.apply(*self._broadcasted(x, reverse))

    def __neg__(self) -> Tensor:
        return self.neg()

    def __add__(self, x) -> Tensor:
        return self.add(x)

    def __sub__(self, x) -> Tensor:
        return self.sub(x)

    def __mul__(self, x) -> Tensor:
        return self.mul(x)

    def __truediv__(self, x) -> Tensor:
        return self.div(x)

    def __pow__(self, x) -> Tensor:
        return self.pow(x)

    def __matmul__(self, x) -> Tensor:
        return self.matmul(x)

    def __xor__(self, x) -> Tensor:
        return self.xor(x)

    def __and__(self, x) -> Tensor:
        return F.BitwiseAnd.apply(*self._broadcasted(x))

    def __or__(self, x) -> Tensor:
        return F.BitwiseOr.apply(*self._broadcasted(x))

    def __mod__(self, x) -> Tensor:
        return F.Mod.apply(*self._broadcasted(x))

    def __radd__(self, x) -> Tensor:
        return self.add(x, True)

    def __rsub__(self, x) -> Tensor:
        return self.sub(x, True)

    def __rmul__(self, x) -> Tensor:
        return self.mul(x, True)

    def __rtruediv__(self, x) -> Tensor:
        return self.div(x, True)

    def __rpow__(self, x) -> Tensor:
        return self.pow(x, True)

    def __rmatmul__(self, x) -> Tensor:
        return Tensor(x, device=self.device).matmul(self) if not isinstance(x, Tensor) else x.matmul(self)

    def __iadd__(self, x) -> Tensor:
        return self.assign(self.add(x))

    def __isub__(self, x) -> Tensor:
        return self.assign(self.sub(x))

    def __imul__(self, x) -> Tensor:
        return self.assign(self.mul(x))

    def __itruediv__(self, x) -> Tensor:
        return self.assign(self.div(x))

    def __lt__(self, x) -> Tensor:
        return F.Less.apply(*self._broadcasted(x))

    def __gt__(self, x) -> Tensor:
        return F.Less.apply(*self._broadcasted(x, True))

    def __ge__(self, x) -> Tensor:
        return (self < x).logical_not()

    def __le__(self, x) -> Tensor:
        return (self > x).logical_not()

    def __eq__(self, x) -> Tensor:  # type: ignore[override]
        return F.Eq.apply(*self._broadcasted(x))

    def __ne__(self, x) -> Tensor:  # type: ignore[override]
        return F.Neq.apply(*self._broadcasted(x))

    # ---- processing ----
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
        return (self.unsqueeze(-1) == Tensor.arange(num_classes, device=self.device)).cast(dtypes.default_float)

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
        if not Tensor.training or p == 0:
            return self
        mask = (Tensor.rand(*self.shape, device=self.device, requires_grad=False) >= p)
        return self * mask * (1 / (1.0 - p))

    def pad2d(self, padding: Sequence[int], value: float = 0.0) -> Tensor:
        lr = make_pair(padding, 4) if isinstance(padding, int) else tuple(padding)
        arg = [None] * (self.ndim - len(lr) // 2) + [(lr[i], lr[i + 1]) for i in range(len(lr) - 2, -1, -2)]
        return self.pad(tuple(arg), value)


def _concrete(shape: tuple[sint, ...]) -> tuple[int, ...]:
    """`shape` with every symbolic dim replaced by its bound value."""
    return tuple(s if isinstance(s, int) else sym_infer(s, {}) for s in shape)


def _same_size(a: sint, b: sint) -> bool:
    """Whether two element counts agree (symbolic ones by their bound values)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return sym_infer(a, {}) == sym_infer(b, {})


def _np_from(data: Any, dtype: DType) -> np.ndarray:
    """`data` as a numpy array of `dtype` (bfloat16, which numpy lacks, goes through float32 and is cast later)."""
    npdt = dtype.np if dtype.np is not None else np.float32
    try:
        return np.array(data, dtype=npdt)
    except (ValueError, TypeError) as e:
        raise ValueError(f"can't make a Tensor of {dtype} from {type(data).__name__}: {e}") from None

