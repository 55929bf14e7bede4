"""ONNX ops whose output shape depends on input values, computed with numpy on the host: Compress, Unique,
NonMaxSuppression; and ops whose gather tables are built there: ReverseSequence, GridSample (per-dim weights from the
grid's values) and AffineGrid. Reading values this way is what
makes the runner drop TinyJit for a model when those values come from the inputs' data (see runner.py)."""
from __future__ import annotations

import numpy as np

from tinygrad.helpers import prod
from tinygrad.nn.onnx.node import OpCall, onnx_op
from tinygrad.nn.onnx.ops_nn import cubic_coeffs
from tinygrad.tensor import Tensor


@onnx_op("Compress")
def compress(n: OpCall) -> Tensor:
    x, cond = n.x[0], n.host(1).astype(bool).reshape(-1)
    axis = n.attr("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = axis + x.ndim if axis < 0 else axis
    keep = np.nonzero(cond[:x.shape[axis]])[0].tolist()
    if not keep:
        return x.shrink(tuple((0, 0) if d == axis else None for d in range(x.ndim)))
    return x[(slice(None),) * axis + (keep,)]


@onnx_op("ReverseSequence")
def reverse_sequence(n: OpCall) -> Tensor:
    x, lens = n.x[0], n.host(1).reshape(-1)
    t_ax, b_ax = n.attr("time_axis", 0), n.attr("batch_axis", 1)
    steps = np.arange(x.shape[t_ax]).reshape(-1, 1)
    # row b reads step len[b]-1-t for its first len[b] steps and t after them
    table = np.where(steps < lens.reshape(1, -1), lens.reshape(1, -1) - 1 - steps, steps)
    if t_ax > b_ax:
        table = table.T
    shape = [1] * x.ndim
    shape[t_ax], shape[b_ax] = x.shape[t_ax], x.shape[b_ax]
    idx = np.broadcast_to(table.reshape(shape), tuple(x.shape)).astype(np.int32)
    return x.gather(t_ax, Tensor(np.array(idx, order="C")))


@onnx_op("Unique")
def unique(n: OpCall) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    x, axis = n.host(0), n.attr("axis")
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    if not n.attr("sorted", 1):
        # the values in order of first appearance; the inverse indices follow the new order
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = y[order] if axis is None else np.take(y, order, axis=axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as64 = [Tensor(np.array(a, dtype=np.int64).reshape(-1)) for a in (first, inverse, counts)]
    return Tensor(np.array(y, order="C")), *as64


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    y1, x1 = np.maximum(box[0], others[:, 0]), np.maximum(box[1], others[:, 1])
    y2, x2 = np.minimum(box[2], others[:, 2]), np.minimum(box[3], others[:, 3])
    inter = np.clip(y2 - y1, 0, None) * np.clip(x2 - x1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-12)


@onnx_op("NonMaxSuppression")
def non_max_suppression(n: OpCall) -> Tensor:
    boxes, scores = n.host(0).astype(np.float64), n.host(1).astype(np.float64)
    limit = int(n.scalar(2, 0))
    iou_t, score_t = float(n.scalar(3, 0.0)), n.scalar(4, None)
    if n.attr("center_point_box", 0):
        # (x_center, y_center, w, h) -> (y1, x1, y2, x2)
        cx, cy, w, h = (boxes[..., i] for i in range(4))
        boxes = np.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], -1)
    else:
        # corners may come in either order
        boxes = np.concatenate([np.minimum(boxes[..., :2], boxes[..., 2:]), np.maximum(boxes[..., :2], boxes[..., 2:])],
                               -1)
    out = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = [i for i in np.argsort(-s, kind="stable") if score_t is None or s[i] > score_t]
            kept: list[int] = []
            while cand and len(kept) < limit:
                i = cand.pop(0)
                kept.append(i)
                if cand:
                    ious = _iou(boxes[b, i], boxes[b, cand])
                    cand = [j for j, v in zip(cand, ious) if v <= iou_t]
            out.extend([b, c, i] for i in kept)
    return Tensor(np.array(out, dtype=np.int64).reshape(-1, 3))


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold coordinates outside [lo, hi] back in by reflecting at the nearer border, repeatedly."""
    rng = hi - lo
    below, above = lo - x, x - hi
    d = np.where(x < lo, below, above)
    k = np.floor(d / rng)
    r = d - k * rng
    even = (k % 2) == 0
    low_side = np.where(even, lo + r, hi - r)
    high_side = np.where(even, hi - r, lo + r)
    return np.where(x < lo, low_side, np.where(x > hi, high_side, x))


def _grid_weights(coord: np.ndarray, size: int, mode: str, pad: str, align: bool) -> np.ndarray:
    """(N, P, size) weights of one spatial dim at normalized grid coordinates (N, P), by GridSample's rules."""
    x = (coord + 1) / 2 * (size - 1) if align else ((coord + 1) * size - 1) / 2
    if mode == "nearest":
        x = np.rint(x)
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    outside = (x < lo) | (x > hi)
    if pad == "border":
        x = np.where(outside, np.clip(x, 0, size - 1), x)
    elif pad == "reflection":
        x = np.where(outside, _reflect(x, lo, hi), x)
    if mode == "nearest":
        taps = [(x, np.ones_like(x))]
    else:
        x0 = np.floor(x)
        t = x - x0
        taps = [(x0, 1 - t), (x0 + 1, t)] if mode == "linear" else \
            [(x0 + k - 1, cubic_coeffs(t, -0.75)[..., k]) for k in range(4)]
    w = np.zeros((*coord.shape, size))
    ni, pi = np.indices(coord.shape)
    for idx, c in taps:
        idx = idx.astype(np.int64) if mode == "nearest" else idx
        if pad == "zeros":
            c = np.where((idx >= 0) & (idx < size), c, 0.0)
            idx = np.clip(idx, 0, size - 1)
        elif pad == "border":
            idx = np.clip(idx, 0, size - 1)
        else:
            idx = np.where((idx < lo) | (idx > hi), _reflect(idx.astype(np.float64), lo, hi), idx)
        np.add.at(w, (ni, pi, idx.astype(np.int64)), c)
    return w


@onnx_op("GridSample")
def grid_sample(n: OpCall) -> Tensor:
    x, grid = n.x[0], n.host(1).astype(np.float64)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(n.attr("mode", "linear"), n.attr("mode", "linear"))
    pad, align = n.attr("padding_mode", "zeros"), bool(n.attr("align_corners", 0))
    bs, ch, dims = x.shape[0], x.shape[1], tuple(x.shape[2:])
    nd, out = len(dims), grid.shape[1:-1]
    coords = grid.reshape(bs, -1, nd)[..., ::-1]  # the grid's last entry is the first spatial dim
    y = x.float()
    # contract one spatial dim at a time with its (N, P, size) weights; P (the output points) is dim 2
    w0 = Tensor(_grid_weights(coords[..., 0], dims[0], mode, pad, align).astype(np.float32))
    y = (y.reshape(bs, ch, 1, dims[0], -1) * w0.reshape(bs, 1, -1, dims[0], 1)).sum(3)
    for i in range(1, nd):
        wi = _grid_weights(coords[..., i], dims[i], mode, pad, align).astype(np.float32)
        rest = prod(dims[i + 1:])
        y = (y.reshape(bs, ch, -1, dims[i], rest) * Tensor(wi).reshape(bs, 1, -1, dims[i], 1)).sum(3)
    return y.reshape(bs, ch, *out).cast(x.dtype)


@onnx_op("AffineGrid")
def affine_grid(n: OpCall) -> Tensor:
    theta, size = n.x[0], n.ints(1)
    align = bool(n.attr("align_corners", 0))
    spatial = size[2:]

    def base(length: int) -> np.ndarray:
        if align:
            return np.linspace(-1, 1, length) if length > 1 else np.zeros(1)
        return (np.arange(length) * 2 + 1) / length - 1
    # homogeneous base coordinates (x, y[, z], 1), x along the last dim
    axes = np.meshgrid(*[base(s) for s in spatial], indexing="ij")
    pts = np.stack([*axes[::-1], np.ones(spatial)], -1).reshape(-1, len(spatial) + 1).astype(np.float32)
    grid = Tensor(pts).reshape(1, -1, len(spatial) + 1) @ theta.transpose(1, 2).float()
    return grid.reshape(size[0], *spatial, len(spatial)).cast(theta.dtype)
