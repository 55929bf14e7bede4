"""Creating Tensors: constants, ranges, identity matrices and random initialisations.

A mixin of Tensor (tinygrad/tensor.py); new tensors are made with `cls(...)` so subclasses stay subclasses.

Random numbers are computed on the device, inside the kernels that use them, by a counter-based generator
(Threefry-2x32 with 20 rounds, as in Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): element
i of a call's output is a pure function of (i, the call's number, the seed), so a random tensor is just an index
(an IOTA leaf) run through integer ADD, XOR and shifts (mlops.Threefry). Its value does not depend on when it is
realized, and it fuses into its consumer like any elementwise op.

The per-call number and the seed's key live in a small realized uint32 tensor per device, read by the kernel (not
baked into it as constants), so repeated calls of one shape reuse one compiled kernel.

>>> from tinygrad import Tensor
>>> Tensor.manual_seed(1)
>>> a = Tensor.rand(3).tolist()
>>> Tensor.manual_seed(1)
>>> a == Tensor.rand(3).tolist()
True
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

import tinygrad.mlops as F
from tinygrad.device import Device
from tinygrad.dtype import ConstType, DType, dtypes, to_dtype
from tinygrad.errors import ArgumentError
from tinygrad.helpers import argfix, prod
from tinygrad.lazy import LazyBuffer
from tinygrad.multi import MultiLazyBuffer, canonical_devices
from tinygrad.ops import LoadOps
from tinygrad.shape.symbolic import Node, sint

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor

_U32 = 0xFFFFFFFF
# the random bits a [0, 1) float of each dtype takes: its significand, so every value is exact and below 1
_UNIT_BITS = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 32}


def check_shape(*shape) -> tuple[sint, ...]:
    """`shape` (given as `f(2, 3)` or `f((2, 3))`) as a tuple, each dim a non-negative int or a symbolic Node."""
    shape = argfix(*shape)
    out = []
    for s in shape:
        if isinstance(s, Node):
            out.append(s)
            continue
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
            raise TypeError(f"a shape holds ints, got {type(s).__name__} in {shape}")
        if s < 0:
            raise ArgumentError(f"a shape can't have negative dims, got {shape}")
        out.append(int(s))
    return tuple(out)


def _pop_dtype(kwargs: dict, default: DType) -> DType:
    dtype = kwargs.pop("dtype", None)
    return to_dtype(dtype) if dtype is not None else default


def _words(block: Tensor) -> tuple[Tensor, Tensor]:
    """The low and high uint32 words of uint64 `block`."""
    return block.cast(dtypes.uint32), F.ShiftRight.apply(*block._broadcasted(32)).cast(dtypes.uint32)


def _unit(bits: Tensor, dtype: DType) -> Tensor:
    """Uniform floats k * 2^-m in [0, 1) from the top m bits of uint32 `bits`, m being what `dtype` holds exactly
    (computed in float32, or float64 for a float64 result; casting to `dtype` afterwards is exact)."""
    m = _UNIT_BITS[dtype]
    top = F.ShiftRight.apply(*bits._broadcasted(32 - m)) if m < 32 else bits
    return top.cast(dtypes.float64 if dtype == dtypes.float64 else dtypes.float32) * 2.0 ** -m


class CreationMixin:
    __slots__ = ()
    # the generator: the seed, and per device a realized uint32 tensor (key word 0, key word 1, calls so far)
    _seed: ClassVar[int] = 0
    _rng_states: ClassVar[dict[str, Any]] = {}

    @classmethod
    def _loadop(cls, op: LoadOps, shape: tuple[sint, ...], device: str | None = None, dtype: DType | None = None,
                arg: Any = None, **kwargs) -> Tensor:
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if isinstance(device, (tuple, list)):
            # the same op on every device: nothing to copy
            devices = canonical_devices(device)
            mlb = MultiLazyBuffer([LazyBuffer.loadop(op, shape, dtype, d, arg) for d in devices], None)
            return cls(mlb, device=mlb.device, **kwargs)
        # EMPTY on a DISK device maps the file's first bytes (read-only); anything else made for one goes to the
        # default device (see Device.storage)
        lb = LazyBuffer.loadop(op, shape, dtype, Device.canonicalize(device) if op is LoadOps.EMPTY else
                               Device.storage(device), arg)
        return cls(lb, device=lb.device, **kwargs)

    @classmethod
    def _leaf(cls, t: Tensor, requires_grad: bool | None) -> Tensor:
        """`t`'s value as a new leaf tensor: what creation functions return, so `requires_grad` makes the gradient
        land on the returned tensor and not on the constants it was built from."""
        return cls(t.lazydata, device=t.device, requires_grad=requires_grad)

    # ---- constants ----
    @classmethod
    def empty(cls, *shape, **kwargs) -> Tensor:
        """A tensor whose contents are whatever its new buffer holds."""
        return cls._loadop(LoadOps.EMPTY, check_shape(*shape), **kwargs)

    @classmethod
    def full(cls, shape, fill_value: ConstType, **kwargs) -> Tensor:
        """`fill_value` broadcast to `shape`; the dtype defaults to the value's (bool, int or float)."""
        shape = check_shape(shape)
        if isinstance(fill_value, np.generic):
            fill_value = fill_value.item()
        dtype = _pop_dtype(kwargs, dtypes.from_py(fill_value))
        requires_grad = kwargs.pop("requires_grad", None)
        scalar = None
        multi = isinstance(kwargs.get("device"), (tuple, list))
        if isinstance(fill_value, float) and dtypes.is_float(dtype) and not multi:
            # a shared buffer holding the value, so each new value doesn't compile new kernels
            scalar = LazyBuffer.scalar(fill_value, dtype, Device.storage(kwargs.get("device")))
        t = cls(scalar if scalar is not None else fill_value, dtype=dtype, **kwargs)
        t = t.reshape((1,) * len(shape)).expand(shape)
        return cls._leaf(t, requires_grad)

    @classmethod
    def zeros(cls, *shape, **kwargs) -> Tensor:
        """A tensor of `shape` (as `zeros(2, 3)` or `zeros((2, 3))`) filled with 0; float32 unless `dtype=` says.

        >>> Tensor.zeros(2, 2).tolist()
        [[0.0, 0.0], [0.0, 0.0]]
        """
        return cls.full(check_shape(*shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})

    @classmethod
    def ones(cls, *shape, **kwargs) -> Tensor:
        """A tensor of `shape` (as `ones(2, 3)` or `ones((2, 3))`) filled with 1; float32 unless `dtype=` says.

        >>> Tensor.ones(2, dtype=dtypes.int32).tolist()
        [1, 1]
        """
        return cls.full(check_shape(*shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})

    def full_like(self, fill_value: ConstType, **kwargs) -> Tensor:
        """`fill_value` in this tensor's shape, with its dtype and device unless `dtype=`/`device=` say.

        >>> Tensor([1, 2, 3]).full_like(7).tolist()
        [7, 7, 7]
        """
        return type(self).full(self.shape, fill_value, **{"dtype": self.dtype, "device": self.device, **kwargs})

    def zeros_like(self, **kwargs) -> Tensor:
        """Zeros in this tensor's shape, dtype and device (keyword arguments override them).

        >>> Tensor([1.5, 2.5]).zeros_like().tolist()
        [0.0, 0.0]
        """
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs) -> Tensor:
        """Ones in this tensor's shape, dtype and device (keyword arguments override them).

        >>> Tensor([[4, 5]]).ones_like().tolist()
        [[1, 1]]
        """
        return self.full_like(1, **kwargs)

    @classmethod
    def from_node(cls, node: Node | int, **kwargs) -> Tensor:
        """A 0-d tensor holding a symbolic value (its variables must be bound), passed to kernels at launch."""
        if not isinstance(node, (Node, int)) or isinstance(node, bool):
            raise TypeError(f"from_node needs a symbolic Node or an int, got {type(node).__name__}")
        return cls(node, **{"requires_grad": False, **kwargs})

    # ---- ranges ----
    @classmethod
    def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1, **kwargs) -> Tensor:
        """`start, start+step, ...` up to (not including) `stop`, as torch.arange; one fused index, no data."""
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ArgumentError("arange step must not be 0")
        if isinstance(start, Node) or isinstance(stop, Node):
            # a symbolic range (e.g. up to a bound Variable): its length is symbolic too
            if not isinstance(step, int) or step < 0 or isinstance(step, bool):
                raise ArgumentError(f"a symbolic arange needs a positive int step, got {step!r}")
            n = (stop - start + step - 1) // step
        else:
            n = max(math.ceil((stop - start) / step), 0)
        floats = any(isinstance(x, float) for x in (start, stop, step))
        dtype = _pop_dtype(kwargs, dtypes.default_float if floats else dtypes.default_int)
        requires_grad = kwargs.pop("requires_grad", None)
        idx = cls._loadop(LoadOps.IOTA, (n,), dtype=dtypes.int32, **kwargs)
        if dtypes.is_float(dtype):
            out = idx.cast(dtype) * step + start
        else:
            out = (idx * step + start).cast(dtype) if (start, step) != (0, 1) else idx.cast(dtype)
        return cls._leaf(out, requires_grad)

    @classmethod
    def linspace(cls, start: int | float, stop: int | float, steps: int, **kwargs) -> Tensor:
        """`steps` evenly spaced values from `start` to `stop` inclusive, as torch.linspace (the first half counted
        up from `start`, the second down from `stop`, so both ends are exact)."""
        if isinstance(steps, bool) or not isinstance(steps, int):
            raise TypeError(f"linspace steps must be an int, got {type(steps).__name__}")
        if steps < 0:
            raise ArgumentError(f"linspace steps must be non-negative, got {steps}")
        dtype = _pop_dtype(kwargs, dtypes.default_float)
        if dtype == dtypes.bool:
            raise TypeError("linspace can't make a bool tensor")
        requires_grad = kwargs.pop("requires_grad", None)
        if steps <= 1:
            return cls([start][:steps], dtype=dtype, requires_grad=requires_grad, **kwargs)
        i = cls.arange(steps, dtype=dtypes.float64 if dtype == dtypes.float64 else dtypes.float32, **kwargs)
        delta = (stop - start) / (steps - 1)
        out = (i < steps // 2).where(i * delta + start, (i - (steps - 1)) * delta + stop)
        return cls._leaf(out.cast(dtype), requires_grad)

    @classmethod
    def eye(cls, n: int, m: int | None = None, **kwargs) -> Tensor:
        """The n x m (default n x n) matrix with ones on the diagonal."""
        m = n if m is None else m
        for name, v in (("n", n), ("m", m)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"eye {name} must be an int, got {type(v).__name__}")
            if v < 0:
                raise ArgumentError(f"eye {name} must be non-negative, got {v}")
        dtype = _pop_dtype(kwargs, dtypes.default_float)
        requires_grad = kwargs.pop("requires_grad", None)
        rows, cols = cls.arange(n, **kwargs).reshape(n, 1), cls.arange(m, **kwargs)
        return cls._leaf((rows == cols).cast(dtype), requires_grad)

    # ---- the random number generator ----
    @classmethod
    def manual_seed(cls, seed: int = 0) -> None:
        """Restart every device's random stream from `seed`: the same calls then give the same values."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"the seed must be an int, got {type(seed).__name__}")
        CreationMixin._seed = int(seed)
        # in place, so kernels that a TinyJit captured reading the state see the new seed too
        for device, lb in list(CreationMixin._rng_states.items()):
            state = cls(lb, device=device, requires_grad=False)
            state.assign(cls._seeded_state(device)).realize()
            CreationMixin._rng_states[device] = state.lazydata

    @classmethod
    def _seeded_state(cls, device: str) -> Tensor:
        """The generator's state right after seeding: key words 0 and 1 (the seed's low and high 32 bits), and 0
        calls so far."""
        seed = CreationMixin._seed
        return cls([seed & _U32, (seed >> 32) & _U32, 0], dtype=dtypes.uint32, device=device, requires_grad=False)

    @classmethod
    def _random_bits(cls, shape: tuple[sint, ...], device: str) -> Tensor:
        """A lazy uint64 tensor of `shape` whose 64 bits are random: Threefry of (element index, call number) under
        the seed's key.

        The key and the call number are read from a realized tensor, never baked into the kernel as constants, so
        every call with the same shape reuses one compiled kernel."""
        if isinstance(device, tuple):
            # drawn on the first device and copied: every device sees the same values
            return cls._random_bits(shape, device[0]).shard(device)
        # NOTE: the state is kept as a LazyBuffer, in a Tensor only while it is used: tinygrad 0.9's tests count the
        # Tensors alive (gc.get_objects()) and expect none but the user's
        lb = CreationMixin._rng_states.get(device)
        if lb is None:
            lb = CreationMixin._rng_states[device] = cls._seeded_state(device).realize().lazydata
        state = cls(lb, device=device, requires_grad=False)
        # NOTE: two tiny kernels. This call's key gets a buffer of its own, so a random tensor realized later still
        # reads the key it was made with; the state is then advanced in place, so kernels captured by a TinyJit
        # (this one and the copy back) advance it on every replay.
        step = (cls.arange(3, device=device) == 2).cast(dtypes.uint32)
        key = (state + step).realize()
        state.assign(key).realize()
        CreationMixin._rng_states[device] = state.lazydata
        k0, k1, call = (key.shrink(((i, i + 1),)).reshape((1,) * len(shape)).expand(shape) for i in range(3))
        idx = cls._loadop(LoadOps.IOTA, shape, device=device, dtype=dtypes.int32, requires_grad=False)
        return F.Threefry.apply(idx.cast(dtypes.uint32), call, k0, k1)

    @classmethod
    def _random_args(cls, name: str, shape: tuple, kwargs: dict, default_dtype: DType):
        shape = check_shape(*shape)
        dtype = _pop_dtype(kwargs, default_dtype)
        requires_grad = kwargs.pop("requires_grad", None)
        device = kwargs.pop("device", None)
        device = canonical_devices(device) if isinstance(device, (tuple, list)) else Device.storage(device)
        if kwargs:
            raise TypeError(f"{name} got unexpected keyword arguments {sorted(kwargs)}")
        return shape, dtype, requires_grad, device

    @classmethod
    def rand(cls, *shape, **kwargs) -> Tensor:
        """Uniform random floats in [0, 1), computed on the device (see the module docstring)."""
        shape, dtype, requires_grad, device = cls._random_args("rand", shape, kwargs, dtypes.default_float)
        if not dtypes.is_float(dtype):
            raise TypeError(f"rand makes floats, not {dtype}: use randint")
        x0, _ = _words(cls._random_bits(shape, device))
        return cls._leaf(_unit(x0, dtype).cast(dtype), requires_grad)

    @classmethod
    def randn(cls, *shape, **kwargs) -> Tensor:
        """Standard normal random floats, by the Box-Muller transform of two uniforms from the same counter."""
        shape, dtype, requires_grad, device = cls._random_args("randn", shape, kwargs, dtypes.default_float)
        if not dtypes.is_float(dtype):
            raise TypeError(f"randn makes floats, not {dtype}")
        x0, x1 = _words(cls._random_bits(shape, device))
        compute = dtypes.float64 if dtype == dtypes.float64 else dtypes.float32
        radius = ((1 - _unit(x0, compute)).log() * -2).sqrt()  # 1 - u lies in (0, 1]: log never sees 0
        return cls._leaf((radius * (_unit(x1, compute) * (2 * math.pi)).cos()).cast(dtype), requires_grad)

    @classmethod
    def randint(cls, *args, low: int = 0, high: int = 10, **kwargs) -> Tensor:
        """Uniform random ints in [low, high): `randint(*shape, low=, high=)` (tinygrad) or `randint([low,] high,
        shape)` (PyTorch). The dtype defaults to int32."""
        if args and isinstance(args[-1], (tuple, list)) and len(args) <= 3:
            bounds, args = args[:-1], tuple(args[-1])
            if len(bounds) == 2:
                low, high = bounds
            elif len(bounds) == 1:
                low, high = 0, bounds[0]
        shape, dtype, requires_grad, device = cls._random_args("randint", args, kwargs, dtypes.int32)
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in (low, high)):
            raise TypeError(f"randint bounds must be ints, got low={low!r}, high={high!r}")
        low, high = int(low), int(high)
        if high <= low:
            raise ArgumentError(f"randint needs low < high, got low={low}, high={high}")
        if not dtypes.is_int(dtype):
            raise TypeError(f"randint makes ints, not {dtype}")
        if low < dtypes.min(dtype) or high - 1 > dtypes.max(dtype):
            raise ArgumentError(f"randint range [{low}, {high}) doesn't fit {dtype}")
        # 64 random bits modulo the range: the bias, at most range / 2^64, is far below what any test can see
        offset = F.Mod.apply(*cls._random_bits(shape, device)._broadcasted(high - low))
        return cls._leaf((offset.cast(dtypes.int64) + low).cast(dtype), requires_grad)

    def rand_like(self, **kwargs) -> Tensor:
        """Uniform random values in [0, 1) in this tensor's shape, dtype and device (see `rand`).

        >>> Tensor.zeros(2, 3).rand_like().shape
        (2, 3)
        """
        return type(self).rand(*self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})

    def randn_like(self, **kwargs) -> Tensor:
        """Standard normal random values in this tensor's shape, dtype and device (see `randn`).

        >>> Tensor.zeros(2, 3, dtype=dtypes.float16).randn_like().dtype
        dtypes.half
        """
        return type(self).randn(*self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})

    @classmethod
    def normal(cls, *shape, mean: float = 0.0, std: float = 1.0, **kwargs) -> Tensor:
        """Normal random values with the given `mean` and `std`: `randn(*shape) * std + mean`.

        >>> Tensor.normal(2, 3, mean=1.0, std=0.5).shape
        (2, 3)
        """
        requires_grad = kwargs.pop("requires_grad", None)
        return cls._leaf(cls.randn(*shape, **kwargs) * std + mean, requires_grad)

    @classmethod
    def uniform(cls, *shape, low: float = 0.0, high: float = 1.0, **kwargs) -> Tensor:
        """Uniform in [low, high); an int dtype takes the floor of a float uniform."""
        dtype = _pop_dtype(kwargs, dtypes.default_float)
        requires_grad = kwargs.pop("requires_grad", None)
        u = cls.rand(*shape, dtype=dtypes.float64 if dtype == dtypes.float64 else dtypes.float32, **kwargs)
        if dtypes.is_float(dtype):
            out = (u * (high - low) + low).cast(dtype)
        else:
            # floor (the cast truncates a non-negative value) before shifting by low
            out = (u * (high - low)).cast(dtype) + low
        return cls._leaf(out, requires_grad)

    # ---- initialisations of weights (tinygrad 0.9's formulas; fan-in is prod(shape[1:])) ----
    @classmethod
    def scaled_uniform(cls, *shape, **kwargs) -> Tensor:
        """Uniform in [-1, 1) / sqrt(numel)."""
        shape = check_shape(*shape)
        return cls._init(cls.uniform(*shape, low=-1.0, high=1.0, **kwargs), prod(shape) ** -0.5 if prod(shape) else 1)

    @classmethod
    def glorot_uniform(cls, *shape, **kwargs) -> Tensor:
        """Uniform in [-1, 1) * sqrt(6 / (shape[0] + prod(shape[1:])))."""
        shape = check_shape(*shape)
        fans = shape[0] + prod(shape[1:]) if shape else 1
        return cls._init(cls.uniform(*shape, low=-1.0, high=1.0, **kwargs), (6 / fans) ** 0.5 if fans else 1)

    @classmethod
    def kaiming_uniform(cls, *shape, a: float = 0.01, **kwargs) -> Tensor:
        """Uniform in [-bound, bound), bound = sqrt(3) * gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2))."""
        shape = check_shape(*shape)
        fan_in = prod(shape[1:])
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan_in) if fan_in else 0.0
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_normal(cls, *shape, a: float = 0.01, **kwargs) -> Tensor:
        """Normal with std = gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2))."""
        shape = check_shape(*shape)
        fan_in = prod(shape[1:])
        std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan_in) if fan_in else 0.0
        return cls.normal(*shape, mean=0.0, std=std, **kwargs)

    @classmethod
    def _init(cls, t: Tensor, scale: float) -> Tensor:
        return cls._leaf(t * scale, t.requires_grad)

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """Sample indices from the (unnormalised) weights of the last axis, as torch.multinomial: with replacement,
        inverse-CDF lookup of device uniforms (one fused comparison and sum); without, one draw at a time, each
        drawn category's weight zeroed before the next (so at most as many samples as categories)."""
        if self.ndim not in (1, 2):
            raise ArgumentError(f"multinomial needs 1 or 2 dims, got shape {self.shape}")
        if num_samples < 1:
            raise ArgumentError(f"multinomial needs at least one sample, got num_samples={num_samples}")
        if not replacement and num_samples > self.shape[-1]:
            raise ArgumentError(f"can't draw {num_samples} samples without replacement from {self.shape[-1]} "
                                "categories")
        w = self.unsqueeze(0) if self.ndim == 1 else self
        if replacement or num_samples == 1:
            idx = w._draw(num_samples)
        else:
            w, draws = w.float(), []
            cats = type(self).arange(w.shape[1], device=self.device).reshape(1, -1)
            for _ in range(num_samples):
                draws.append(w._draw(1))
                w = (cats == draws[-1]).where(0.0, w)
            idx = draws[0].cat(*draws[1:], dim=1)
        return idx.squeeze(0) if self.ndim == 1 else idx

    def _draw(self, num_samples: int) -> Tensor:
        """`num_samples` indices per row of the 2-d weights, drawn with replacement (int32, rows x num_samples)."""
        cdf = self.float().cumsum(1)
        cdf = cdf / cdf[:, -1:]
        u = type(self).rand(self.shape[0], num_samples, 1, device=self.device)
        idx = (u >= cdf.unsqueeze(1)).sum(2).cast(dtypes.int32)
        return idx.minimum(self.shape[1] - 1)
