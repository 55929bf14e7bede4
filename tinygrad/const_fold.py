"""The value of an op whose operands are all constants, computed on the host as the kernel would compute it.

LazyBuffer folds an elementwise op, a cast or a reduce of constants into one constant (tinygrad 0.9 did: `Tensor.ones(4)
+ Tensor.ones(4)` needs no kernel). A fold must give the value the kernel would have given, so each op is computed
in the operands' own dtype with numpy's scalar arithmetic (IEEE rounding of float16/32/64, wrapping integers), and
every case whose C result is undefined or differs from numpy's (integer division by zero, a float out of an
integer's range, C's truncating division and remainder on negative operands) is computed as C does or not folded
at all (None: the kernel computes it).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinygrad.dtype import DType, dtypes
from tinygrad.ops import BinaryOps, UnaryOps

_NP = {dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64,
       dtypes.int8: np.int8, dtypes.int16: np.int16, dtypes.int32: np.int32, dtypes.int64: np.int64,
       dtypes.uint8: np.uint8, dtypes.uint16: np.uint16, dtypes.uint32: np.uint32, dtypes.uint64: np.uint64,
       dtypes.bool: np.bool_}

_FLOAT_UNARY = {UnaryOps.NEG: np.negative, UnaryOps.SQRT: np.sqrt, UnaryOps.EXP2: np.exp2, UnaryOps.LOG2: np.log2,
                UnaryOps.SIN: np.sin, UnaryOps.RECIP: np.reciprocal}
_ARITH = {BinaryOps.ADD: np.add, BinaryOps.SUB: np.subtract, BinaryOps.MUL: np.multiply, BinaryOps.MAX: np.maximum}
_CMP = {BinaryOps.CMPLT: np.less, BinaryOps.CMPEQ: np.equal, BinaryOps.CMPNE: np.not_equal}
_BITS = {BinaryOps.AND: np.bitwise_and, BinaryOps.OR: np.bitwise_or, BinaryOps.XOR: np.bitwise_xor}


def _py(x: Any) -> Any:
    """A numpy scalar as the plain Python value a CONST holds."""
    return x.item() if hasattr(x, "item") else x


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def evaluate(op: Any, vals: list, dtype: DType) -> Any:
    """`op` on constants `vals`, all of `dtype`, as a Python value (bool for comparisons), or None where it is not
    folded."""
    t = _NP.get(dtype)
    if t is None:  # bfloat16 and the rest: no numpy scalar of the kernel's arithmetic
        return None
    is_float, is_bool = dtypes.is_float(dtype), dtype == dtypes.bool
    with np.errstate(all="ignore"):
        xs = [t(v) for v in vals]
        if len(xs) == 1:
            if is_float and op in _FLOAT_UNARY:
                return _py(_FLOAT_UNARY[op](xs[0]))
            if op is UnaryOps.NEG and not is_bool:
                return _py(np.negative(xs[0]))
            return None
        if len(xs) != 2:
            return None
        a, b = xs
        if op in _CMP:
            return bool(_CMP[op](a, b))
        if is_bool:
            return bool(_BITS[op](a, b)) if op in _BITS else None
        if op is BinaryOps.MAX and is_float and (a != a or b != b or
                                                 (a == 0 and b == 0 and np.signbit(a) != np.signbit(b))):
            # the max of a nan, or of 0.0 and -0.0, is the device's choice (CUDA's fmax drops a nan): its kernel's
            return None
        if op in _ARITH:
            return _py(_ARITH[op](a, b))
        if op is BinaryOps.DIV:
            if is_float:
                return _py(np.divide(a, b))
            return None if b == 0 else _py(t(_c_div(int(a), int(b))))
        if op is BinaryOps.MOD and not is_float:
            return None if b == 0 else _py(t(int(a) - _c_div(int(a), int(b)) * int(b)))
        if op in _BITS and not is_float:
            return _py(_BITS[op](a, b))
    return None


def cast(val: Any, src: DType, dst: DType) -> Any:
    """Constant `val` of dtype `src` converted to `dst` as C converts it, or None where C's answer is undefined (a
    float outside the integer's range, nan into an integer) or there is no numpy scalar of `dst`."""
    t = _NP.get(dst)
    if t is None or _NP.get(src) is None:
        return None
    if dst == dtypes.bool:
        return bool(val)
    if dtypes.is_float(dst):
        with np.errstate(all="ignore"):
            return _py(t(val))
    if isinstance(val, float):
        if not math.isfinite(val):
            return None
        val = math.trunc(val)
        if not dtypes.min(dst) <= val <= dtypes.max(dst):
            return None
    # an integer into a narrower or unsigned one: modulo 2^bits, as every C compiler we target does
    bits = dst.itemsize * 8
    v = int(val) % (1 << bits)
    if not dtypes.is_unsigned(dst) and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def reduce_sum(val: Any, count: int, dtype: DType) -> Any:
    """The sum of `count` copies of constant `val` (one rounding, which the kernel's sum is within a few of)."""
    t = _NP.get(dtype)
    if t is None or dtype == dtypes.bool:
        return None
    if dtypes.is_float(dtype):
        with np.errstate(all="ignore"):
            return _py(t(np.float64(val) * count))
    return cast(int(val) * count, dtypes.int64, dtype)
