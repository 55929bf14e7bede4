"""ONNX neural-network ops: Conv/ConvTranspose, pooling, normalizations (Batch, Layer, Instance, Group, Lp, LRN,
MeanVariance) and Resize/Upsample. Resize builds, per resized axis, an (out, in) weight matrix on the host from the
ONNX coordinate mapping (nearest, linear, cubic; every coordinate_transformation_mode) and contracts the axis with
it, so each mode is a few lines of index arithmetic instead of a kernel of its own."""
from __future__ import annotations

import math

import numpy as np

from tinygrad.dtype import dtypes
from tinygrad.helpers import prod
from tinygrad.nn.onnx.node import OpCall, UnsupportedOp, onnx_op, operand
from tinygrad.tensor import Tensor


def _spatial(n: OpCall, name: str, nd: int, default: int) -> tuple[int, ...]:
    return tuple(n.attr(name) or [default] * nd)


def _pads(n: OpCall, in_: tuple[int, ...], k_: tuple[int, ...], s_: tuple[int, ...],
          d_: tuple[int, ...]) -> list[tuple[int, int]]:
    """(before, after) padding per spatial dim from `pads` or `auto_pad` (SAME_*: the output is ceil(in / stride),
    the odd pad going after for SAME_UPPER and before for SAME_LOWER)."""
    nd, auto = len(k_), n.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        tot = [max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i) for i, k, s, d in zip(in_, k_, s_, d_)]
        if auto == "SAME_UPPER":
            return [(t // 2, t - t // 2) for t in tot]
        return [(t - t // 2, t // 2) for t in tot]
    if auto == "VALID":
        return [(0, 0)] * nd
    p = n.attr("pads") or [0] * (2 * nd)
    return [(p[i], p[i + nd]) for i in range(nd)]


# ---- convolutions ----
@onnx_op("Conv")
def conv(n: OpCall) -> Tensor:
    x, w = n.x[0], operand(n.x[1])
    nd = w.ndim - 2
    k_ = tuple(w.shape[2:])
    s_, d_ = _spatial(n, "strides", nd, 1), _spatial(n, "dilations", nd, 1)
    pads = _pads(n, tuple(x.shape[2:]), k_, s_, d_)
    if any(pads) and all(a >= 0 and b >= 0 for a, b in pads):
        # padded into a buffer first: the conv's reads are then plain vector loads, where reading through the pad
        # masks each element (load by load); the extra copy is small beside the conv (CPU time on one thread,
        # ResNet convs 8x16x16x16 and 8x32x8x8 with 3x3 kernels: 0.43 -> 0.34 ms, 0.34 -> 0.27 ms)
        x, pads = x.pad(((0, 0), (0, 0), *pads)).contiguous(), [(0, 0)] * nd
    return operand(x).conv2d(w, n.x[2] if n.has(2) else None, groups=n.attr("group", 1), stride=s_, dilation=d_,
                             padding=pads)


@onnx_op("ConvTranspose")
def conv_transpose(n: OpCall) -> Tensor:
    x, w = operand(n.x[0]), operand(n.x[1])
    nd = w.ndim - 2
    k_, in_ = tuple(w.shape[2:]), tuple(x.shape[2:])
    s_, d_ = _spatial(n, "strides", nd, 1), _spatial(n, "dilations", nd, 1)
    op_ = _spatial(n, "output_padding", nd, 0)
    out_shape, auto = n.attr("output_shape"), n.attr("auto_pad", "NOTSET")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        # the padding that gives the wanted output size (SAME: input * stride)
        want = out_shape[-nd:] if out_shape is not None else [i * s for i, s in zip(in_, s_)]
        tot = [s * (i - 1) + o + (k - 1) * d + 1 - t for i, s, o, k, d, t in zip(in_, s_, op_, k_, d_, want)]
        if auto == "SAME_UPPER":
            pads = [(t // 2, t - t // 2) for t in tot]
        else:
            pads = [(t - t // 2, t // 2) for t in tot]
    else:
        p = n.attr("pads") or [0] * (2 * nd)
        pads = [(p[i], p[i + nd]) for i in range(nd)]
    # the extra output of output_padding beyond what stride/dilation allow is padded with zeros (then cropped)
    return x.conv_transpose2d(w, n.x[2] if n.has(2) else None, groups=n.attr("group", 1), stride=s_, dilation=d_,
                              padding=pads, output_padding=op_)


# ---- pooling ----
def _pool_setup(n: OpCall, x: Tensor):
    k_ = tuple(n.attr("kernel_shape"))
    nd = len(k_)
    s_, d_ = _spatial(n, "strides", nd, 1), _spatial(n, "dilations", nd, 1)
    return k_, s_, d_, _pads(n, tuple(x.shape[2:]), k_, s_, d_)


@onnx_op("MaxPool")
def max_pool(n: OpCall) -> Tensor:
    x = n.x[0]
    if n.nout > 1:
        raise UnsupportedOp("MaxPool's Indices output is not supported")
    if n.attr("storage_order", 0):
        raise UnsupportedOp("MaxPool storage_order=1")
    k_, s_, d_, pads = _pool_setup(n, x)
    return x.max_pool2d(k_, s_, d_, pads, ceil_mode=bool(n.attr("ceil_mode", 0)))


@onnx_op("AveragePool")
def average_pool(n: OpCall) -> Tensor:
    x = n.x[0]
    k_, s_, d_, pads = _pool_setup(n, x)
    return x.avg_pool2d(k_, s_, d_, pads, ceil_mode=bool(n.attr("ceil_mode", 0)),
                        count_include_pad=bool(n.attr("count_include_pad", 0)))


@onnx_op("LpPool")
def lp_pool(n: OpCall) -> Tensor:
    x, p = n.x[0], n.attr("p", 2)
    k_, s_, d_, pads = _pool_setup(n, x)
    # the sum of |x|^p over each window: a padded average times the window size (padding adds zeros)
    s = (x.abs() ** p).avg_pool2d(k_, s_, d_, pads, ceil_mode=bool(n.attr("ceil_mode", 0)),
                                  count_include_pad=True) * prod(k_)
    return s ** (1.0 / p)


@onnx_op("GlobalAveragePool")
def global_average_pool(n: OpCall) -> Tensor:
    x = n.x[0]
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalMaxPool")
def global_max_pool(n: OpCall) -> Tensor:
    x = n.x[0]
    return x.max(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalLpPool")
def global_lp_pool(n: OpCall) -> Tensor:
    x, p = n.x[0], n.attr("p", 2)
    return (x.abs() ** p).sum(tuple(range(2, x.ndim)), keepdim=True) ** (1.0 / p)


# ---- normalizations ----
def _channel(t: Tensor, ndim: int) -> Tensor:
    """A per-channel vector shaped to broadcast over (N, C, *spatial)."""
    return t.reshape(1, -1, *[1] * (ndim - 2))


@onnx_op("BatchNormalization")
def batch_norm(n: OpCall) -> Tensor:
    x, scale, bias, mean, var = n.x[:5]
    if n.attr("training_mode", 0):
        # batch statistics normalize; the running ones are updated with momentum (population variance, as ONNX)
        red = tuple(d for d in range(x.ndim) if d != 1)
        bmean, bvar = x.mean(red), x.var(red, correction=0)
        mom = n.attr("momentum", 0.9)
        inv = scale * (bvar + n.attr("epsilon", 1e-5)).rsqrt()
        y = x * _channel(inv, x.ndim) + _channel(bias - bmean * inv, x.ndim)
        return y, mean * mom + bmean * (1 - mom), var * mom + bvar * (1 - mom)
    inv = scale * (var + n.attr("epsilon", 1e-5)).rsqrt()
    return x * _channel(inv, x.ndim) + _channel(bias - mean * inv, x.ndim)


@onnx_op("LayerNormalization")
def layer_norm(n: OpCall) -> tuple[Tensor, Tensor, Tensor]:
    x, scale = n.x[0], n.x[1]
    axis = n.attr("axis", -1)
    axis = axis + x.ndim if axis < 0 else axis
    red = tuple(range(axis, x.ndim))
    # statistics in float32 (stash_type 1) for half inputs
    xf = x.float() if n.attr("stash_type", 1) == 1 and x.dtype != dtypes.float64 else x
    mean = xf.mean(red, keepdim=True)
    d = xf - mean
    inv = ((d * d).mean(red, keepdim=True) + n.attr("epsilon", 1e-5)).rsqrt()
    y = (d * inv).cast(x.dtype) * scale
    if n.has(2):
        y = y + n.x[2]
    return y, mean, inv


@onnx_op("InstanceNormalization")
def instance_norm(n: OpCall) -> Tensor:
    x, scale, bias = n.x
    red = tuple(range(2, x.ndim))
    mean = x.mean(red, keepdim=True)
    d = x - mean
    y = d * ((d * d).mean(red, keepdim=True) + n.attr("epsilon", 1e-5)).rsqrt()
    return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@onnx_op("GroupNormalization")
def group_norm(n: OpCall) -> Tensor:
    x, scale, bias = n.x
    g = n.attr("num_groups")
    bs, c = x.shape[:2]
    xg = x.reshape(bs, g, -1)
    mean = xg.mean(-1, keepdim=True)
    d = xg - mean
    y = (d * ((d * d).mean(-1, keepdim=True) + n.attr("epsilon", 1e-5)).rsqrt()).reshape(x.shape)
    if scale.shape[0] != c:
        # opset 18: one scale and bias per group
        scale, bias = (t.reshape(g, 1).expand(g, c // g).reshape(c) for t in (scale, bias))
    return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@onnx_op("LpNormalization")
def lp_norm(n: OpCall) -> Tensor:
    x, p, axis = n.x[0], n.attr("p", 2), n.attr("axis", -1)
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
    return (norm == 0).where(0.0, x / norm).cast(x.dtype)


@onnx_op("MeanVarianceNormalization")
def mean_variance_norm(n: OpCall) -> Tensor:
    x = n.x[0]
    axes = tuple(n.attr("axes", [0, 2, 3]))
    mean = x.mean(axes, keepdim=True)
    d = x - mean
    return d / ((d * d).mean(axes, keepdim=True).sqrt() + 1e-9)


@onnx_op("LRN")
def lrn(n: OpCall) -> Tensor:
    x, size = n.x[0], n.attr("size")
    alpha, beta, bias = n.attr("alpha", 1e-4), n.attr("beta", 0.75), n.attr("bias", 1.0)
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = (x * x).pad(tuple((lo, hi) if d == 1 else None for d in range(x.ndim)))
    c = x.shape[1]
    total = sum(sq.shrink(tuple((j, j + c) if d == 1 else None for d in range(x.ndim))) for j in range(size))
    return x / (bias + alpha / size * total) ** beta


# ---- resizing ----
def _source_coords(mode: str, out: int, size: int, scale: float, roi: tuple[float, float] | None) -> np.ndarray:
    """Where each output position samples the input, by ONNX's coordinate_transformation_mode."""
    x = np.arange(out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adj = out / (scale * size)
        return size / 2 * (1 - adj) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out > 1 else np.zeros(out)
    if mode == "align_corners":
        # the resized length is size * scale before rounding (sizes given: the same as out)
        length = size * scale
        return np.zeros(out) if out == 1 else x * (size - 1) / (length - 1)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if mode == "tf_crop_and_resize":
        a, b = roi
        if out == 1:
            return np.full(out, 0.5 * (a + b) * (size - 1))
        return a * (size - 1) + x * (b - a) * (size - 1) / (out - 1)
    raise UnsupportedOp(f"Resize coordinate_transformation_mode {mode!r}")


def cubic_coeffs(t: np.ndarray, a: float) -> np.ndarray:
    """Weights of the 4 neighbours floor(x)-1 .. floor(x)+2 at fraction t (Keys' cubic convolution with a)."""
    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _resize_weights(n: OpCall, mode: str, coord: str, size: int, out: int, scale: float,
                    roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """The (out, size) weight matrix of one axis, and which outputs fall outside the input (tf_crop_and_resize)."""
    src = _source_coords(coord, out, size, scale, roi)
    w = np.zeros((out, size))
    rows = np.arange(out)
    if mode == "nearest":
        nm = n.attr("nearest_mode", "round_prefer_floor")
        idx = {"round_prefer_floor": np.ceil(src - 0.5), "round_prefer_ceil": np.floor(src + 0.5),
               "floor": np.floor(src), "ceil": np.ceil(src)}[nm]
        w[rows, np.clip(idx, 0, size - 1).astype(np.int64)] = 1.0
    elif mode == "linear":
        s = np.clip(src, 0, size - 1) if coord != "tf_crop_and_resize" else src
        i0 = np.floor(s)
        lam = s - i0
        for off, wt in ((0, 1 - lam), (1, lam)):
            np.add.at(w, (rows, np.clip(i0 + off, 0, size - 1).astype(np.int64)), wt)
    elif mode == "cubic":
        i0 = np.floor(src)
        cw = cubic_coeffs(src - i0, n.attr("cubic_coeff_a", -0.75))
        for j, off in enumerate((-1, 0, 1, 2)):
            pos = i0 + off
            wt = cw[:, j]
            if n.attr("exclude_outside", 0):
                wt = np.where((pos < 0) | (pos > size - 1), 0.0, wt)
            np.add.at(w, (rows, np.clip(pos, 0, size - 1).astype(np.int64)), wt)
        if n.attr("exclude_outside", 0):
            w = w / w.sum(-1, keepdims=True)
    else:
        raise UnsupportedOp(f"Resize mode {mode!r}")
    outside = None
    if coord == "tf_crop_and_resize":
        outside = (src < 0) | (src > size - 1)
        w[outside] = 0.0
    return w, outside


def _resize(n: OpCall, x: Tensor, scales: list[float] | None, sizes: list[int] | None, axes: list[int],
            mode: str, coord: str, roi: list[float] | None) -> Tensor:
    in_ = [x.shape[a] for a in axes]
    if sizes is not None:
        policy = n.attr("keep_aspect_ratio_policy", "stretch")
        scales = [o / i for o, i in zip(sizes, in_)]
        if policy != "stretch":
            s = min(scales) if policy == "not_larger" else max(scales)
            scales = [s] * len(axes)
            sizes = [int(s * i + 0.5) for i in in_]
    else:
        sizes = [int(math.floor(i * s)) for i, s in zip(in_, scales)]
    if n.attr("antialias", 0) and any(s < 1 for s in scales) and mode != "nearest":
        raise UnsupportedOp("Resize with antialias on a downscale")
    ev = n.attr("extrapolation_value", 0.0)
    for j, (a, i, o, s) in enumerate(zip(axes, in_, sizes, scales)):
        r = None if roi is None else (roi[j], roi[j + len(axes)])
        if i == o and coord != "tf_crop_and_resize" and s == 1.0:
            continue
        w, outside = _resize_weights(n, mode, coord, i, o, s, r)
        xt = x.transpose(a, -1)
        y = (xt.unsqueeze(-2).float() * Tensor(w.astype(np.float32))).sum(-1)
        if outside is not None and outside.any():
            y = Tensor(outside).where(ev, y)
        x = y.cast(x.dtype).transpose(a, -1)
    return x


@onnx_op("Resize")
def resize(n: OpCall) -> Tensor:
    x = n.x[0]
    mode = n.attr("mode", "nearest")
    if n.opset < 11:
        scales = n.floats(1)
        return _resize(n, x, scales, None, list(range(x.ndim)), mode, "asymmetric", None)
    coord = n.attr("coordinate_transformation_mode", "half_pixel")
    roi, scales, sizes = n.floats(1), n.floats(2), n.ints(3)
    axes = n.attr("axes")
    axes = list(range(x.ndim)) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
    if roi is not None and len(roi) == 2 * x.ndim and len(axes) != x.ndim:
        roi = [roi[a] for a in axes] + [roi[a + x.ndim] for a in axes]
    if not scales:
        scales = None
    if not sizes:
        sizes = None
    return _resize(n, x, scales, sizes, axes, mode, coord, roi if roi else None)


@onnx_op("Upsample")
def upsample(n: OpCall) -> Tensor:
    x = n.x[0]
    scales = n.attr("scales") if n.opset < 9 else n.floats(1)
    mode = n.attr("mode", "nearest")
    n.attrs.setdefault("nearest_mode", "floor")
    return _resize(n, x, scales, None, list(range(x.ndim)), mode, "asymmetric", None)


# ---- losses ----
def _nll(n: OpCall, logp: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """Negative log-likelihood of (N, C, *d) log-probabilities at (N, *d) class targets, weighted per class; targets
    equal to ignore_index weigh 0. `mean` divides by the total weight, as ONNX (and PyTorch) do."""
    c = logp.shape[1]
    cls = Tensor.arange(c).reshape(1, c, *[1] * (logp.ndim - 2))
    hit = target.unsqueeze(1) == cls
    picked = -hit.where(logp, 0).sum(1)
    w = hit.where(weight.reshape(1, c, *[1] * (logp.ndim - 2)), 0).sum(1) if weight is not None else \
        Tensor.ones(*target.shape, dtype=logp.dtype)
    ignore = n.attr("ignore_index")
    if ignore is not None:
        w = (target == ignore).where(0, w)
    loss = picked * w
    red = n.attr("reduction", "mean")
    if red == "none":
        return loss.cast(logp.dtype)
    if red == "sum":
        return loss.sum().cast(logp.dtype)
    return (loss.sum() / w.sum()).cast(logp.dtype)


@onnx_op("NegativeLogLikelihoodLoss")
def nll_loss(n: OpCall) -> Tensor:
    return _nll(n, n.x[0], n.x[1], n.x[2] if n.has(2) else None)


@onnx_op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(n: OpCall) -> tuple[Tensor, Tensor]:
    logp = n.x[0].log_softmax(1)
    return _nll(n, logp, n.x[1], n.x[2] if n.has(2) else None), logp


# ---- signal processing ----
def _fit(x: Tensor, axis: int, length: int) -> Tensor:
    """Zero-pad or cut x along axis to length."""
    return x.pad(tuple((0, length - x.shape[axis]) if d == axis else None for d in range(x.ndim)))


@onnx_op("DFT")
def dft(n: OpCall) -> Tensor:
    """The discrete Fourier transform as products with cos/sin matrices built on the host; the last dim holds the
    real part (size 1) or real and imaginary parts (size 2)."""
    x = n.x[0]
    if n.opset < 20:
        axis = n.attr("axis", 1)
    else:
        axis = n.scalar(2, -2)
    axis = axis + x.ndim if axis < 0 else axis
    inverse, onesided = bool(n.attr("inverse", 0)), bool(n.attr("onesided", 0))
    length = n.scalar(1)
    if length is None:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    length = int(length)
    xr = x[..., 0].float()
    xi = x[..., 1].float() if x.shape[-1] == 2 else None
    xr = xr.transpose(axis, -1)
    xi = xi.transpose(axis, -1) if xi is not None else None
    if inverse and onesided:
        # real output from the first length//2 + 1 bins of a Hermitian spectrum; inner bins count twice
        m = length // 2 + 1
        k = np.arange(m).reshape(m, 1)
        ang = 2 * np.pi * k * np.arange(length).reshape(1, length) / length
        w = np.where((k == 0) | (2 * k == length), 1.0, 2.0) / length
        cos, sin = Tensor((w * np.cos(ang)).astype(np.float32)), Tensor((w * np.sin(ang)).astype(np.float32))
        xr = _fit(xr, xr.ndim - 1, m)
        y = (xr.unsqueeze(-1) * cos).sum(-2)
        if xi is not None:
            y = y - (_fit(xi, xi.ndim - 1, m).unsqueeze(-1) * sin).sum(-2)
        return y.transpose(axis, -1).unsqueeze(-1).cast(x.dtype)
    bins = length // 2 + 1 if onesided else length
    ang = 2 * np.pi * np.arange(length).reshape(length, 1) * np.arange(bins).reshape(1, bins) / length
    scale = 1 / length if inverse else 1.0
    cos, sin = Tensor((scale * np.cos(ang)).astype(np.float32)), Tensor((scale * np.sin(ang)).astype(np.float32))
    sign = 1 if inverse else -1  # e^{-i angle} forward, e^{+i angle} inverse
    xr = _fit(xr, xr.ndim - 1, length).unsqueeze(-1)
    re, im = (xr * cos).sum(-2), (xr * sin).sum(-2) * sign
    if xi is not None:
        xi = _fit(xi, xi.ndim - 1, length).unsqueeze(-1)
        re, im = re - (xi * sin).sum(-2) * sign, im + (xi * cos).sum(-2)
    y = re.unsqueeze(-1).cat(im.unsqueeze(-1), dim=-1)
    return y.transpose(axis, -2).cast(x.dtype)
