"""ONNX quantization ops: QuantizeLinear/DequantizeLinear (per tensor, per axis and blocked), DynamicQuantizeLinear,
and the integer products MatMulInteger/ConvInteger/QLinearMatMul/QLinearConv. Integer products accumulate in int32
(as ONNX defines them); requantizing rounds half to even and saturates to the output type."""
from __future__ import annotations

from tinygrad.dtype import dtypes
from tinygrad.nn.onnx.node import OpCall, onnx_dtype, onnx_op
from tinygrad.nn.onnx.ops_nn import conv
from tinygrad.tensor import Tensor


def _along(param: Tensor, x: Tensor, axis: int, block: int) -> Tensor:
    """A scale or zero point shaped to broadcast over x: a scalar as is, a vector along `axis`, or (blocked) each
    entry repeated `block` times along `axis`."""
    if param.ndim == 0 or (param.ndim == 1 and param.shape[0] == 1 and not block):
        return param.reshape(())
    axis = axis + x.ndim if axis < 0 else axis
    if block:
        rep = param.unsqueeze(axis + 1).expand(*param.shape[:axis + 1], block, *param.shape[axis + 1:])
        rep = rep.reshape(*param.shape[:axis], param.shape[axis] * block, *param.shape[axis + 1:])
        return rep.shrink(tuple((0, x.shape[axis]) if d == axis else None for d in range(x.ndim)))
    return param.reshape(*[param.shape[0] if d == axis else 1 for d in range(x.ndim)])


def _saturate(y: Tensor, dtype) -> Tensor:
    return y.clip(dtypes.min(dtype), dtypes.max(dtype)).cast(dtype)


@onnx_op("DequantizeLinear")
def dequantize_linear(n: OpCall) -> Tensor:
    x, scale = n.x[0], n.x[1]
    axis, block = n.attr("axis", 1), n.attr("block_size", 0)
    y = x.cast(dtypes.float32)
    if n.has(2):
        y = y - _along(n.x[2], x, axis, block).cast(dtypes.float32)
    out = onnx_dtype(n.attr("output_dtype")) if n.attr("output_dtype") else scale.dtype
    return (y * _along(scale, x, axis, block).cast(dtypes.float32)).cast(out)


@onnx_op("QuantizeLinear")
def quantize_linear(n: OpCall) -> Tensor:
    x, scale = n.x[0], n.x[1]
    axis, block = n.attr("axis", 1), n.attr("block_size", 0)
    zp = n.x[2] if n.has(2) else None
    out = zp.dtype if zp is not None else \
        onnx_dtype(n.attr("output_dtype")) if n.attr("output_dtype") else dtypes.uint8
    y = (x.cast(dtypes.float32) / _along(scale, x, axis, block).cast(dtypes.float32)).round()
    if zp is not None:
        y = y + _along(zp, x, axis, block).cast(dtypes.float32)
    return _saturate(y, out)


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(n: OpCall) -> tuple[Tensor, Tensor, Tensor]:
    x = n.x[0].cast(dtypes.float32)
    lo, hi = x.min().minimum(0), x.max().maximum(0)
    scale = (hi - lo) / 255
    zp = _saturate((-lo / scale).round(), dtypes.uint8)
    y = _saturate((x / scale).round() + zp.cast(dtypes.float32), dtypes.uint8)
    return y, scale, zp


def _centered(t: Tensor, zp: Tensor | None, row: bool = False) -> Tensor:
    """An integer operand minus its zero point, in int32 (a per-row zero point of A is a column vector)."""
    t = t.cast(dtypes.int32)
    if zp is None:
        return t
    z = zp.cast(dtypes.int32)
    if row and z.ndim == 1 and z.shape[0] != 1:
        z = z.reshape(-1, 1)
    return t - z


@onnx_op("MatMulInteger")
def matmul_integer(n: OpCall) -> Tensor:
    a = _centered(n.x[0], n.x[2] if n.has(2) else None, row=True)
    b = _centered(n.x[1], n.x[3] if n.has(3) else None)
    return (a @ b).cast(dtypes.int32)


class _ConvArgs(OpCall):
    """The node as Conv sees it: the same attributes, other inputs."""
    __slots__ = ()


def _int_conv(n: OpCall, x: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    sub = _ConvArgs("Conv", [x, w, bias], n.attrs, n.opset, 1, lambda i: None)
    return conv(sub).cast(dtypes.int32)


@onnx_op("ConvInteger")
def conv_integer(n: OpCall) -> Tensor:
    x = _centered(n.x[0], n.x[2] if n.has(2) else None)
    w = n.x[1].cast(dtypes.int32)
    if n.has(3):
        z = n.x[3].cast(dtypes.int32)
        w = w - (z.reshape(-1, *[1] * (w.ndim - 1)) if z.ndim == 1 and z.shape[0] != 1 else z.reshape(()))
    return _int_conv(n, x, w, None)


def _requantize(acc: Tensor, real_scale: Tensor, y_zp: Tensor | None) -> Tensor:
    y = (acc.cast(dtypes.float32) * real_scale).round()
    out = y_zp.dtype if y_zp is not None else dtypes.uint8
    if y_zp is not None:
        y = y + y_zp.cast(dtypes.float32)
    return _saturate(y, out)


@onnx_op("QLinearMatMul")
def qlinear_matmul(n: OpCall) -> Tensor:
    a, a_s, a_z, b, b_s, b_z, y_s, y_z = n.x[:8]
    acc = _centered(a, a_z, row=True) @ _centered(b, b_z)
    a_s = a_s.reshape(-1, 1) if a_s.ndim == 1 and a_s.shape[0] != 1 else a_s.reshape(())
    real = a_s.cast(dtypes.float32) * b_s.cast(dtypes.float32) / y_s.cast(dtypes.float32)
    return _requantize(acc, real, y_z)


@onnx_op("QLinearConv")
def qlinear_conv(n: OpCall) -> Tensor:
    x, x_s, x_z, w, w_s, w_z, y_s, y_z = n.x[:8]
    bias = n.x[8] if n.has(8) else None
    xc = _centered(x, x_z)
    wz = w_z.cast(dtypes.int32)
    wc = w.cast(dtypes.int32) - (wz.reshape(-1, *[1] * (w.ndim - 1)) if wz.ndim == 1 and wz.shape[0] != 1
                                 else wz.reshape(()))
    acc = _int_conv(n, xc, wc, bias.cast(dtypes.int32) if bias is not None else None)
    ws = w_s.cast(dtypes.float32)
    ws = ws.reshape(1, -1, *[1] * (x.ndim - 2)) if ws.ndim == 1 and ws.shape[0] != 1 else ws.reshape(())
    real = x_s.cast(dtypes.float32) * ws / y_s.cast(dtypes.float32)
    return _requantize(acc, real, y_z)
