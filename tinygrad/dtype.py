"""Data types and the promotion rules between them.

>>> from tinygrad.dtype import dtypes, least_upper_dtype
>>> least_upper_dtype(dtypes.int8, dtypes.uint8)
dtypes.short
"""
from __future__ import annotations

import math
import os
from typing import Final, Union

import numpy as np

ConstType = Union[float, int, bool]


class literal(float):
    """A float constant the library's own formulas write (a polynomial's coefficients, sqrt(2 / pi)): compiled into
    the kernel, never read from a shared scalar buffer. A plain Python float in tensor arithmetic is a value code may
    vary between calls (a learning rate), so it reads a buffer and one compiled kernel serves every value; a
    formula's constants never vary, and compiled in they cost no load and the compiler can fold them."""
    __slots__ = ()


class DType:
    """A scalar type: `priority` orders promotion, `itemsize` is in bytes, `fmt` is the struct/memoryview code."""
    __slots__ = ("priority", "itemsize", "name", "fmt", "count", "_key", "_scalar")

    def __init__(self, priority: int, itemsize: int, name: str, fmt: str | None, count: int = 1):
        self.priority, self.itemsize, self.name, self.fmt, self.count = priority, itemsize, name, fmt, count
        self._key = (priority, itemsize, name, fmt, count)
        # a vector's lane type (set by vec)
        self._scalar: DType | None = None

    def __repr__(self) -> str:
        return f"dtypes.{INVERSE_NAMES[self.name]}" if self.count == 1 else f"dtypes.{self.name}"

    def __eq__(self, other) -> bool:
        # dtypes are nearly always the shared singletons: identity answers most comparisons at once
        return self is other or (isinstance(other, DType) and type(other) is type(self) and other._key == self._key)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key))

    def __reduce__(self):
        # the shared scalar singletons unpickle as themselves (code compares dtypes with `is`; cached ASTs hold them)
        if type(self) is DType and self.count == 1 and getattr(dtypes, INVERSE_NAMES.get(self.name, ""), None) == self:
            return getattr, (dtypes, INVERSE_NAMES[self.name])
        return type(self), (self.priority, self.itemsize, self.name, self.fmt, self.count)

    # ordered by (priority, itemsize, name, ...), as 0.9's dataclass(order=True) was: a promotion's result is >= its
    # inputs
    def __lt__(self, other: DType) -> bool:
        return self._key < other._key

    def __le__(self, other: DType) -> bool:
        return self._key <= other._key

    def __gt__(self, other: DType) -> bool:
        return self._key > other._key

    def __ge__(self, other: DType) -> bool:
        return self._key >= other._key

    def vec(self, sz: int) -> DType:
        """The vector type of `sz` lanes of this scalar type (used by vectorizing renderers)."""
        if self.count != 1 or sz <= 1:
            raise ValueError(f"can't vectorize {self} with size {sz}")
        # NOTE: "x" keeps names apart: float32 x 16 must not read as float16
        ret = DType(self.priority, self.itemsize * sz, f"{INVERSE_NAMES[self.name]}x{sz}", None, sz)
        ret._scalar = self
        return ret

    def scalar(self) -> DType:
        if self.count == 1:
            return self
        if self._scalar is None:  # a vector made without vec(): its name says the lane type
            return _BY_NAME[self.name.rstrip("0123456789").removesuffix("x")]
        return self._scalar

    @property
    def np(self) -> type | None:
        """The numpy scalar type with the same layout (np.float32 for dtypes.float32), or None (bfloat16 has none).
        A type, as in tinygrad 0.9: code calls it (`dt.np(3)`), checks `issubclass(dt.np, np.floating)`, and passes
        it wherever numpy takes a dtype."""
        return _NP.get(self.name)


class PtrDType(DType):
    """A pointer to `base`: the type of a kernel's buffer arguments."""
    __slots__ = ("base",)

    def __init__(self, base: DType):
        super().__init__(base.priority, base.itemsize, base.name, base.fmt, base.count)
        self.base = base

    def __reduce__(self):
        return PtrDType, (self.base,)

    def __repr__(self) -> str:
        return f"ptr.{self.base!r}"


class ImageDType(DType):
    """tinygrad 0.9's texture-memory type for Qualcomm GPUs (`dtypes.imageh(shape)`, `dtypes.imagef(shape)`): kept so
    code that names it imports; no device of this tinygrad stores images, so a Tensor of it is refused."""
    __slots__ = ("shape", "base")

    def __init__(self, priority: int, itemsize: int, name: str, fmt: str | None, count: int, shape: tuple,
                 base: DType):
        super().__init__(priority, itemsize, name, fmt, count)
        self.shape, self.base = tuple(shape), base
        self._key = self._key + (self.shape,)

    def __reduce__(self):
        return ImageDType, (self.priority, self.itemsize, self.name, self.fmt, self.count, self.shape, self.base)

    def __repr__(self) -> str:
        return f"dtypes.{self.name}({self.shape})"

    def scalar(self) -> DType:
        return self.base

    def vec(self, sz: int) -> DType:
        """The vector type of `sz` lanes of the image's element type (`base`, what its texels are read as)."""
        return self.base.vec(sz)


class dtypes:  # noqa: N801 - the public name users import
    """The namespace of scalar types, with the predicates and limits that go with them."""
    bool: Final[DType] = DType(0, 1, "bool", "?")
    int8: Final[DType] = DType(1, 1, "char", "b")
    uint8: Final[DType] = DType(2, 1, "unsigned char", "B")
    int16: Final[DType] = DType(3, 2, "short", "h")
    uint16: Final[DType] = DType(4, 2, "unsigned short", "H")
    int32: Final[DType] = DType(5, 4, "int", "i")
    uint32: Final[DType] = DType(6, 4, "unsigned int", "I")
    int64: Final[DType] = DType(7, 8, "long", "q")
    uint64: Final[DType] = DType(8, 8, "unsigned long", "Q")
    float16: Final[DType] = DType(9, 2, "half", "e")
    bfloat16: Final[DType] = DType(10, 2, "__bf16", None)
    float32: Final[DType] = DType(11, 4, "float", "f")
    float64: Final[DType] = DType(12, 8, "double", "d")

    # C-style aliases, as tinygrad spells them
    half = float16
    float = float32
    double = float64
    char = int8
    uchar = uint8
    short = int16
    ushort = uint16
    int = int32
    uint = uint32
    long = int64
    ulong = uint64

    default_float: DType = float32
    default_int: DType = int32

    @staticmethod
    def imageh(shape: tuple) -> ImageDType:
        """tinygrad 0.9's half-precision image type of `shape` (see ImageDType)."""
        return ImageDType(100, 2, "imageh", "e", 1, shape, dtypes.float32)

    @staticmethod
    def imagef(shape: tuple) -> ImageDType:
        """tinygrad 0.9's single-precision image type of `shape` (see ImageDType)."""
        return ImageDType(100, 4, "imagef", "f", 1, shape, dtypes.float32)

    @staticmethod
    def is_float(x: DType) -> bool:
        return x.scalar() in _FLOATS

    @staticmethod
    def is_int(x: DType) -> bool:
        return x.scalar() in _INTS

    @staticmethod
    def is_unsigned(x: DType) -> bool:
        return x.scalar() in _UINTS

    @staticmethod
    def from_np(x) -> DType:
        # NOTE: a dict lookup first: every Tensor made from an array asks, and numpy's dtype.name costs microseconds
        # each (the loop below took ~100 us for float32, a third of a small model's inference)
        hit = _FROM_NP.get(x) if isinstance(x, (type, np.dtype)) else None
        if hit is not None:
            return hit
        name = np.dtype(x).name
        for k, v in _NP.items():
            if np.dtype(v).name == name:
                return _BY_NAME[k]
        raise TypeError(f"numpy dtype {name} has no tinygrad dtype")

    @staticmethod
    def from_py(x) -> DType:
        """The dtype a Python value (or nested list of them) gets by default."""
        if isinstance(x, (list, tuple)):
            return max((dtypes.from_py(e) for e in x), key=lambda d: d.priority) if len(x) else dtypes.default_float
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, float):
            return dtypes.default_float
        return dtypes.default_int

    @staticmethod
    def as_const(val, dtype: DType) -> ConstType:
        """`val` converted to the Python type that holds constants of `dtype`."""
        if dtype == dtypes.bool:
            return bool(val)
        if dtypes.is_int(dtype):
            return int(val)
        return float(val)

    @staticmethod
    def min(dtype: DType) -> ConstType:
        if dtypes.is_int(dtype):
            return 0 if dtypes.is_unsigned(dtype) else -(2 ** (8 * dtype.itemsize - 1))
        return False if dtype == dtypes.bool else -math.inf

    @staticmethod
    def max(dtype: DType) -> ConstType:
        if dtypes.is_int(dtype):
            return 2 ** (8 * dtype.itemsize - (0 if dtypes.is_unsigned(dtype) else 1)) - 1
        return True if dtype == dtypes.bool else math.inf

    @staticmethod
    def fields() -> dict[str, DType]:
        return dict(DTYPES_DICT)


_ALL = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
        dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
_BY_NAME = {d.name: d for d in _ALL}
_FLOATS = frozenset((dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64))
_UINTS = frozenset((dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64))
_INTS = frozenset((dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)) | _UINTS
_NP_NAMES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", None,
             "float32", "float64"]
_NP = {d.name: np.dtype(n).type for d, n in zip(_ALL, _NP_NAMES) if n is not None}
# numpy's native-order dtypes and scalar types -> ours, for from_np's fast path
_FROM_NP = {**{np.dtype(t): _BY_NAME[k] for k, t in _NP.items()}, **{t: _BY_NAME[k] for k, t in _NP.items()}}
DTYPES_DICT = {"bool": dtypes.bool, "int8": dtypes.int8, "uint8": dtypes.uint8, "int16": dtypes.int16,
               "uint16": dtypes.uint16, "int32": dtypes.int32, "uint32": dtypes.uint32, "int64": dtypes.int64,
               "uint64": dtypes.uint64, "float16": dtypes.float16, "bfloat16": dtypes.bfloat16,
               "float32": dtypes.float32, "float64": dtypes.float64}
# repr uses tinygrad's short spellings (dtypes.float, dtypes.int, ...) where one exists
# tinygrad 0.9's reverse of DTYPES_DICT: DType -> its name there
INVERSE_DTYPES_DICT = {v: k for k, v in DTYPES_DICT.items()}
INVERSE_NAMES = {"bool": "bool", "char": "char", "unsigned char": "uchar", "short": "short",
                 "unsigned short": "ushort", "int": "int", "unsigned int": "uint", "long": "long",
                 "unsigned long": "ulong", "half": "half", "__bf16": "bfloat16", "float": "float", "double": "double"}

# The promotion lattice: each type's direct parents. A set of types promotes to the lowest-priority type that is
# reachable from all of them, so int8 + uint8 -> int16 and int64 + float16 -> float16 (ints never beat floats).
PROMO_LATTICE: dict[DType, list[DType]] = {
    dtypes.bool: [dtypes.int8, dtypes.uint8],
    dtypes.int8: [dtypes.int16], dtypes.int16: [dtypes.int32], dtypes.int32: [dtypes.int64],
    dtypes.int64: [dtypes.float16, dtypes.bfloat16],
    dtypes.uint8: [dtypes.int16, dtypes.uint16], dtypes.uint16: [dtypes.int32, dtypes.uint32],
    dtypes.uint32: [dtypes.int64, dtypes.uint64], dtypes.uint64: [dtypes.float16, dtypes.bfloat16],
    dtypes.float16: [dtypes.float32], dtypes.bfloat16: [dtypes.float32], dtypes.float32: [dtypes.float64],
}


def _ancestors(d: DType) -> set[DType]:
    seen, todo = {d}, [d]
    while todo:
        for p in PROMO_LATTICE.get(todo.pop(), []):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def least_upper_dtype(*ds: DType) -> DType:
    """The smallest dtype that every one of `ds` promotes to."""
    common = set.intersection(*[_ancestors(d.scalar()) for d in ds])
    return min(common, key=lambda d: d.priority)


def _env_default_float() -> None:
    """DEFAULT_FLOAT=HALF (or FLOAT16, BFLOAT16, FLOAT, DOUBLE, ...) in the environment sets dtypes.default_float at
    import, as in tinygrad 0.9."""
    name = os.environ.get("DEFAULT_FLOAT", "")
    if not name:
        return
    dt = getattr(dtypes, name.lower(), None)
    if not isinstance(dt, DType) or not dtypes.is_float(dt):
        raise ValueError(f"DEFAULT_FLOAT={name} is not a float dtype (half, bfloat16, float, double, ...)")
    dtypes.default_float = dt


_env_default_float()


def least_upper_float(dt: DType) -> DType:
    """`dt` if it is a float, else the default float (what division and transcendental ops compute in)."""
    return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)


def to_dtype(x: DType | str) -> DType:
    """The DType named or given by `x`, as Tensors take it (image types are refused: see ImageDType)."""
    if isinstance(x, ImageDType):
        raise NotImplementedError(f"{x!r}: image dtypes are not supported by any device of this tinygrad")
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in DTYPES_DICT:
        return DTYPES_DICT[x]
    if isinstance(x, str) and hasattr(dtypes, x) and isinstance(getattr(dtypes, x), DType):
        return getattr(dtypes, x)
    raise TypeError(f"{x!r} is not a dtype")
