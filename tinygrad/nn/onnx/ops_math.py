"""ONNX math ops: elementwise arithmetic, comparisons and logic, activations, Cast, reductions, ArgMax/TopK,
MatMul/Gemm/Einsum and Softmax. Each maps onto Tensor methods; ONNX's numpy-style broadcasting is tinygrad's."""
from __future__ import annotations

import math
from functools import reduce

from tinygrad.dtype import dtypes
from tinygrad.helpers import prod
from tinygrad.nn.onnx.node import OpCall, onnx_dtype, onnx_op, operand
from tinygrad.tensor import Tensor


def _same(t: Tensor, like: Tensor) -> Tensor:
    return t if t.dtype == like.dtype else t.cast(like.dtype)


# ---- arithmetic ----
@onnx_op("Add")
def add(n: OpCall) -> Tensor:
    return _same(n.x[0] + n.x[1], n.x[0])


@onnx_op("Sub")
def sub(n: OpCall) -> Tensor:
    return _same(n.x[0] - n.x[1], n.x[0])


@onnx_op("Mul")
def mul(n: OpCall) -> Tensor:
    return _same(n.x[0] * n.x[1], n.x[0])


@onnx_op("Div")
def div(n: OpCall) -> Tensor:
    a, b = n.x
    # integer division truncates in ONNX (as C); true division for floats
    if dtypes.is_float(a.dtype):
        return _same(a / b, a)
    return a.div(b, rounding_mode="trunc")


@onnx_op("Mod")
def mod(n: OpCall) -> Tensor:
    a, b = n.x
    if not n.attr("fmod", 0):
        return _same(a.mod(b), a)
    # fmod: the remainder takes the dividend's sign (C's fmod)
    q = a.div(b, rounding_mode="trunc")
    return _same(a - q * b, a)


@onnx_op("Pow")
def pow_(n: OpCall) -> Tensor:
    a, b = n.x
    if dtypes.is_float(a.dtype) and not dtypes.is_float(b.dtype):
        b = b.cast(a.dtype)
    return _same(a.pow(b), a)


@onnx_op("Neg")
def neg(n: OpCall) -> Tensor:
    return -n.x[0]


@onnx_op("Abs")
def abs_(n: OpCall) -> Tensor:
    return n.x[0].abs()


def _variadic(fn):
    return lambda n: reduce(fn, [x for x in n.x if x is not None])


onnx_op("Sum")(_variadic(lambda a, b: a + b))
onnx_op("Max")(_variadic(lambda a, b: a.maximum(b)))
onnx_op("Min")(_variadic(lambda a, b: a.minimum(b)))


@onnx_op("Mean")
def mean(n: OpCall) -> Tensor:
    xs = [x for x in n.x if x is not None]
    return reduce(lambda a, b: a + b, xs) / len(xs)


# ---- unary math ----
_UNARY = {"Exp": Tensor.exp, "Log": Tensor.log, "Sqrt": Tensor.sqrt, "Reciprocal": Tensor.reciprocal,
          "Floor": Tensor.floor, "Ceil": Tensor.ceil, "Round": Tensor.round, "Sign": Tensor.sign, "Sin": Tensor.sin,
          "Cos": Tensor.cos, "Tan": Tensor.tan, "Sinh": Tensor.sinh, "Cosh": Tensor.cosh, "Asinh": Tensor.asinh,
          "Acosh": Tensor.acosh, "Atanh": Tensor.atanh, "Tanh": Tensor.tanh, "Erf": Tensor.erf, "IsNaN": Tensor.isnan,
          "Sigmoid": Tensor.sigmoid, "Relu": Tensor.relu, "Softsign": Tensor.softsign, "Mish": Tensor.mish,
          "Not": Tensor.logical_not, "BitwiseNot": Tensor.bitwise_not}
for _name, _fn in _UNARY.items():
    onnx_op(_name)(lambda n, fn=_fn: fn(n.x[0]))


def _atan(x: Tensor) -> Tensor:
    """atan by three argument halvings (atan x = 2 atan(x / (1 + sqrt(1 + x^2)))) into |x| < 0.2, then its Taylor
    series, whose 8th term is below float32's precision there; tinygrad has no atan primitive."""
    y = x
    for _ in range(3):
        y = y / (1 + (1 + y * y).sqrt())
    y2, term, acc = y * y, y, y
    for k in range(1, 9):
        term = term * y2
        acc = acc + term * ((-1) ** k / (2 * k + 1))
    return acc * 8


@onnx_op("Atan")
def atan(n: OpCall) -> Tensor:
    return _atan(n.x[0])


def _asin(x: Tensor) -> Tensor:
    # asin x = 2 atan(x / (1 + sqrt(1 - x^2))): finite at x = +-1, unlike atan(x / sqrt(1 - x^2))
    return _atan(x / (1 + (1 - x * x).sqrt())) * 2


@onnx_op("Asin")
def asin(n: OpCall) -> Tensor:
    return _asin(n.x[0])


@onnx_op("Acos")
def acos(n: OpCall) -> Tensor:
    return math.pi / 2 - _asin(n.x[0])


@onnx_op("IsInf")
def isinf(n: OpCall) -> Tensor:
    return n.x[0].isinf(bool(n.attr("detect_positive", 1)), bool(n.attr("detect_negative", 1)))


# ---- activations ----
@onnx_op("LeakyRelu")
def leaky_relu(n: OpCall) -> Tensor:
    return n.x[0].leakyrelu(n.attr("alpha", 0.01))


@onnx_op("PRelu")
def prelu(n: OpCall) -> Tensor:
    x, slope = n.x
    return (x < 0).where(x * slope, x)


@onnx_op("Elu")
def elu(n: OpCall) -> Tensor:
    return n.x[0].elu(n.attr("alpha", 1.0))


@onnx_op("Celu")
def celu(n: OpCall) -> Tensor:
    return n.x[0].celu(n.attr("alpha", 1.0))


@onnx_op("Selu")
def selu(n: OpCall) -> Tensor:
    x, alpha, gamma = n.x[0], n.attr("alpha", 1.67326319217681884765625), n.attr("gamma", 1.05070102214813232421875)
    return gamma * (x > 0).where(x, alpha * (x.exp() - 1))


@onnx_op("ThresholdedRelu")
def thresholded_relu(n: OpCall) -> Tensor:
    x = n.x[0]
    return (x > n.attr("alpha", 1.0)).where(x, 0.0)


@onnx_op("HardSigmoid")
def hard_sigmoid(n: OpCall) -> Tensor:
    x = n.x[0]
    return (x * n.attr("alpha", 0.2) + n.attr("beta", 0.5)).clip(0.0, 1.0)


@onnx_op("HardSwish")
def hard_swish(n: OpCall) -> Tensor:
    x = n.x[0]
    return x * (x / 6 + 0.5).clip(0.0, 1.0)


@onnx_op("Softplus")
def softplus(n: OpCall) -> Tensor:
    x = n.x[0]
    # log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): no overflow for large x
    return x.maximum(0) + (1 + (-x.abs()).exp()).log()


@onnx_op("Gelu")
def gelu(n: OpCall) -> Tensor:
    x = n.x[0]
    if n.attr("approximate", "none") == "tanh":
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
    return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())


@onnx_op("Swish")
def swish(n: OpCall) -> Tensor:
    x = n.x[0]
    return x * (x * n.attr("alpha", 1.0)).sigmoid()


@onnx_op("Shrink")
def shrink(n: OpCall) -> Tensor:
    x, bias, lambd = n.x[0], n.attr("bias", 0.0), n.attr("lambd", 0.5)
    return _same((x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)), x)


@onnx_op("Clip")
def clip(n: OpCall) -> Tensor:
    x = n.x[0]
    if n.opset < 11:
        lo, hi = n.attr("min"), n.attr("max")
    else:
        lo = n.x[1] if n.has(1) else None
        hi = n.x[2] if n.has(2) else None
    if lo is not None:
        x = x.maximum(lo)
    if hi is not None:
        x = x.minimum(hi)
    return x


# ---- comparisons and logic ----
_BINARY = {"Equal": lambda a, b: a == b, "Less": lambda a, b: a < b, "LessOrEqual": lambda a, b: a <= b,
           "Greater": lambda a, b: a > b, "GreaterOrEqual": lambda a, b: a >= b, "And": lambda a, b: a & b,
           "Or": lambda a, b: a | b, "Xor": lambda a, b: a ^ b, "BitwiseAnd": lambda a, b: a & b,
           "BitwiseOr": lambda a, b: a | b, "BitwiseXor": lambda a, b: a ^ b}
for _name, _fn in _BINARY.items():
    onnx_op(_name)(lambda n, fn=_fn: fn(n.x[0], n.x[1]))


@onnx_op("BitShift")
def bit_shift(n: OpCall) -> Tensor:
    a, b = n.x
    return _same(a.lshift(b) if n.attr("direction") == "LEFT" else a.rshift(b), a)


@onnx_op("Where")
def where(n: OpCall) -> Tensor:
    c, a, b = n.x
    return c.cast(dtypes.bool).where(a, b)


# ---- casts ----
@onnx_op("Cast")
def cast(n: OpCall) -> Tensor:
    to = onnx_dtype(n.attr("to"))
    return n.x[0] if n.x[0].dtype == to else n.x[0].cast(to)


@onnx_op("CastLike")
def cast_like(n: OpCall) -> Tensor:
    return n.x[0].cast(n.x[1].dtype)


# ---- reductions ----
def _reduce_axes(n: OpCall, axes_input_since: int) -> tuple[int, ...] | None:
    """The axes to reduce (None: all, ()): from the attribute before `axes_input_since`, else the second input."""
    axes = n.attr("axes") if n.opset < axes_input_since else n.ints(1)
    if not axes:
        return () if n.attr("noop_with_empty_axes", 0) else None
    return tuple(axes)


def _reducer(name: str, since: int, fn):
    def impl(n: OpCall) -> Tensor:
        x, keep = n.x[0], bool(n.attr("keepdims", 1))
        axes = _reduce_axes(n, since)
        if axes == ():
            return fn(x, None, keep, True)
        red = range(x.ndim) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
        if name in _EMPTY_IDENTITY and any(x.shape[a] == 0 for a in red):
            # a reduction over nothing gives its identity (max: -inf, min: +inf)
            shape = tuple(1 if d in red else s for d, s in enumerate(x.shape) if keep or d not in red)
            return Tensor.full(shape, _EMPTY_IDENTITY[name](x.dtype), dtype=x.dtype)
        return fn(x, axes, keep, False)
    onnx_op(name)(impl)


_EMPTY_IDENTITY = {
    "ReduceMax": lambda dt: float("-inf") if dtypes.is_float(dt) else False if dt == dtypes.bool else dtypes.min(dt),
    "ReduceMin": lambda dt: float("inf") if dtypes.is_float(dt) else True if dt == dtypes.bool else dtypes.max(dt)}


def _sum(x: Tensor, axes, keep: bool) -> Tensor:
    return _same(x.sum(axes, keepdim=keep), x)


_reducer("ReduceSum", 13, lambda x, a, k, noop: x if noop else _sum(x, a, k))
_reducer("ReduceMean", 18, lambda x, a, k, noop: x if noop else _same(x.mean(a, keepdim=k), x))
_reducer("ReduceMax", 18, lambda x, a, k, noop: x if noop else x.max(a, keepdim=k))
_reducer("ReduceMin", 18, lambda x, a, k, noop: x if noop else x.min(a, keepdim=k))
_reducer("ReduceProd", 18, lambda x, a, k, noop: x if noop else _same(x.prod(a, keepdim=k), x))
_reducer("ReduceL1", 18, lambda x, a, k, noop: x.abs() if noop else _sum(x.abs(), a, k))
_reducer("ReduceL2", 18, lambda x, a, k, noop: x.abs() if noop else _same((x * x).sum(a, keepdim=k).sqrt(), x))
_reducer("ReduceSumSquare", 18, lambda x, a, k, noop: x * x if noop else _sum(x * x, a, k))
_reducer("ReduceLogSum", 18, lambda x, a, k, noop: x.log() if noop else x.sum(a, keepdim=k).log())
_reducer("ReduceLogSumExp", 18, lambda x, a, k, noop: x if noop else _same(x.logsumexp(a, keepdim=k), x))


def _arg(n: OpCall, largest: bool) -> Tensor:
    x, axis, keep = n.x[0], n.attr("axis", 0), bool(n.attr("keepdims", 1))
    axis = axis + x.ndim if axis < 0 else axis
    if n.attr("select_last_index", 0):
        # the last of equal extremes: search the flipped axis and map the index back
        size = x.shape[axis]
        idx = (x.flip(axis).argmax(axis, keepdim=keep) if largest else x.flip(axis).argmin(axis, keepdim=keep))
        return (size - 1 - idx).cast(dtypes.int64)
    return (x.argmax(axis, keepdim=keep) if largest else x.argmin(axis, keepdim=keep)).cast(dtypes.int64)


onnx_op("ArgMax")(lambda n: _arg(n, True))
onnx_op("ArgMin")(lambda n: _arg(n, False))


@onnx_op("TopK")
def topk(n: OpCall) -> tuple[Tensor, Tensor]:
    x = n.x[0]
    k = n.attr("k") if n.opset < 10 else n.ints(1)[0]
    axis, largest = n.attr("axis", -1), bool(n.attr("largest", 1))
    axis = axis + x.ndim if axis < 0 else axis
    # k passes of arg-extreme and masking: ties go to the lower index first, as ONNX asks
    size = x.shape[axis]
    ar = Tensor.arange(size).reshape(*[size if d == axis else 1 for d in range(x.ndim)])
    fill = float("-inf") if largest else float("inf")
    if not dtypes.is_float(x.dtype):
        fill = dtypes.min(x.dtype) if largest else dtypes.max(x.dtype)
    vals, idxs, cur = [], [], x
    for _ in range(k):
        i = cur.argmax(axis, keepdim=True) if largest else cur.argmin(axis, keepdim=True)
        hit = ar == i
        vals.append(hit.where(x, 0).sum(axis, keepdim=True).cast(x.dtype))
        idxs.append(i.cast(dtypes.int64))
        cur = hit.where(fill, cur)
    if k == 0:
        shape = tuple(0 if d == axis else s for d, s in enumerate(x.shape))
        return Tensor.zeros(*shape, dtype=x.dtype), Tensor.zeros(*shape, dtype=dtypes.int64)
    return Tensor.cat(*vals, dim=axis), Tensor.cat(*idxs, dim=axis)


@onnx_op("CumSum", "CumProd")
def cumulative(n: OpCall) -> Tensor:
    x, axis = n.x[0], n.ints(1)[0]
    axis = axis + x.ndim if axis < 0 else axis
    if n.attr("reverse", 0):
        x = x.flip(axis)
    prod_ = n.op == "CumProd"
    y = _same(x.cumprod(axis) if prod_ else x.cumsum(axis), x)
    if n.attr("exclusive", 0):
        # shifted by one along the axis, the identity first
        y = y.pad(tuple((1, -1) if d == axis else None for d in range(x.ndim)), value=1 if prod_ else 0)
    return y.flip(axis) if n.attr("reverse", 0) else y


# ---- matrix products ----
@onnx_op("MatMul")
def matmul(n: OpCall) -> Tensor:
    return operand(n.x[0]) @ operand(n.x[1])


@onnx_op("Gemm")
def gemm(n: OpCall) -> Tensor:
    a, b = operand(n.x[0]), operand(n.x[1])
    if n.attr("transA", 0):
        a = a.transpose(0, 1)
    if n.attr("transB", 0):
        b = b.transpose(0, 1)
    y = a @ b
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    if alpha != 1.0:
        y = y * alpha
    if n.has(2) and beta != 0.0:
        y = y + (n.x[2] if beta == 1.0 else n.x[2] * beta)
    return _same(y, n.x[0])


@onnx_op("Einsum")
def einsum(n: OpCall) -> Tensor:
    return Tensor.einsum(n.attr("equation").replace(" ", ""), *n.x)


# ---- softmax family ----
def _softmax_like(n: OpCall, fn) -> Tensor:
    x = n.x[0]
    if n.opset < 13:
        # before opset 13 the input is flattened to 2-D at `axis` (default 1) and normalized over the second dim
        axis = n.attr("axis", 1)
        axis = axis + x.ndim if axis < 0 else axis
        flat = x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))
        return fn(flat, -1).reshape(x.shape)
    return fn(x, n.attr("axis", -1))


def _hardmax(x: Tensor, axis: int) -> Tensor:
    axis = axis + x.ndim if axis < 0 else axis
    size = x.shape[axis]
    ar = Tensor.arange(size).reshape(*[size if d == axis else 1 for d in range(x.ndim)])
    return (ar == x.argmax(axis, keepdim=True)).cast(x.dtype)


onnx_op("Softmax")(lambda n: _softmax_like(n, lambda x, a: x.softmax(a)))
onnx_op("LogSoftmax")(lambda n: _softmax_like(n, lambda x, a: x.log_softmax(a)))
onnx_op("Hardmax")(lambda n: _softmax_like(n, _hardmax))
