"""Creating Tensors: constants, ranges, identity matrices and random initialisations.

A mixin of Tensor (tinygrad/tensor.py); new tensors are made with `type(self)` so subclasses stay subclasses.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tinygrad.device import Device
from tinygrad.dtype import ConstType, DType, dtypes, to_dtype
from tinygrad.helpers import argfix, prod
from tinygrad.lazy import LazyBuffer
from tinygrad.ops import LoadOps
from tinygrad.shape.symbolic import sint, sym_infer

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor


def concrete_shape(shape: tuple[sint, ...]) -> tuple[int, ...]:
    """`shape` with every symbolic dim replaced by its bound value."""
    return tuple(s if isinstance(s, int) else sym_infer(s, {}) for s in shape)


class CreationMixin:
    __slots__ = ()

    @classmethod
    def _loadop(cls, op: LoadOps, shape: tuple[sint, ...], device: str | None = None, dtype: DType | None = None,
                arg: Any = None, **kwargs) -> Tensor:
        lb = LazyBuffer.loadop(op, shape, dtype or dtypes.default_float, Device.canonicalize(device), arg)
        return cls(lb, **kwargs)

    @classmethod
    def empty(cls, *shape, **kwargs) -> Tensor:
        return cls._loadop(LoadOps.EMPTY, argfix(*shape), **kwargs)

    @classmethod
    def full(cls, shape: tuple[sint, ...], fill_value: ConstType, **kwargs) -> Tensor:
        shape = argfix(shape)
        dtype = to_dtype(kwargs.pop("dtype")) if kwargs.get("dtype") is not None else dtypes.from_py(fill_value)
        kwargs.pop("dtype", None)
        return cls(fill_value, dtype=dtype, **kwargs).reshape((1,) * len(shape)).expand(shape)

    @classmethod
    def zeros(cls, *shape, **kwargs) -> Tensor:
        return cls.full(argfix(*shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})

    @classmethod
    def ones(cls, *shape, **kwargs) -> Tensor:
        return cls.full(argfix(*shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})

    def full_like(self, fill_value: ConstType, **kwargs) -> Tensor:
        return type(self).full(self.shape, fill_value, **{"dtype": self.dtype, "device": self.device, **kwargs})

    def zeros_like(self, **kwargs) -> Tensor:
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs) -> Tensor:
        return self.full_like(1, **kwargs)

    @classmethod
    def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1, **kwargs) -> Tensor:
        """`start, start+step, ...` up to (not including) `stop`, as torch.arange; one fused index, no data."""
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must not be 0")
        n = max(math.ceil((stop - start) / step), 0)
        dtype = to_dtype(kwargs.pop("dtype", None) or (dtypes.default_float if any(isinstance(x, float) for x in
                                                                                    (start, stop, step))
                                                        else dtypes.default_int))
        idx = cls._loadop(LoadOps.IOTA, (n,), dtype=dtypes.int32, **kwargs)
        if dtypes.is_float(dtype):
            return idx.cast(dtype) * step + start
        return (idx * step + start).cast(dtype) if (start, step) != (0, 1) else idx.cast(dtype)

    @classmethod
    def eye(cls, dim: int, **kwargs) -> Tensor:
        dtype = to_dtype(kwargs.pop("dtype", None) or dtypes.default_float)
        requires_grad = kwargs.pop("requires_grad", None)
        idx = cls.arange(dim, **kwargs)
        return (idx.unsqueeze(1) == idx).cast(dtype).requires_grad_(requires_grad)

    @classmethod
    def manual_seed(cls, seed: int = 0) -> None:
        cls._rng = np.random.default_rng(seed)

    @classmethod
    def rand(cls, *shape, **kwargs) -> Tensor:
        dtype = to_dtype(kwargs.pop("dtype", None) or dtypes.default_float)
        shape = argfix(*shape)
        data = cls._rng.random(size=concrete_shape(shape), dtype=np.float32)
        return cls(data, **kwargs).cast(dtype).reshape(shape)

    @classmethod
    def randn(cls, *shape, **kwargs) -> Tensor:
        dtype = to_dtype(kwargs.pop("dtype", None) or dtypes.default_float)
        shape = argfix(*shape)
        data = cls._rng.standard_normal(size=concrete_shape(shape), dtype=np.float32)
        return cls(data, **kwargs).cast(dtype).reshape(shape)

    @classmethod
    def uniform(cls, *shape, low: float = 0.0, high: float = 1.0, **kwargs) -> Tensor:
        dtype = kwargs.pop("dtype", dtypes.default_float)
        return ((high - low) * cls.rand(*shape, **kwargs) + low).cast(dtype)

    @classmethod
    def scaled_uniform(cls, *shape, **kwargs) -> Tensor:
        return cls.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul(prod(argfix(*shape)) ** -0.5)

    @classmethod
    def glorot_uniform(cls, *shape, **kwargs) -> Tensor:
        shape = argfix(*shape)
        return cls.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul((6 / (shape[0] + prod(shape[1:]))) ** 0.5)

    @classmethod
    def kaiming_uniform(cls, *shape, a: float = 0.01, **kwargs) -> Tensor:
        shape = argfix(*shape)
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_normal(cls, *shape, a: float = 0.01, **kwargs) -> Tensor:
        shape = argfix(*shape)
        std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
        return cls.randn(*shape, **kwargs).mul(std)
