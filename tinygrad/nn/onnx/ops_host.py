"""ONNX ops whose output shape depends on input values, computed with numpy on the host: Compress, Unique,
NonMaxSuppression, plus ReverseSequence (its index table is built on the host). Reading values this way is what
makes the runner drop TinyJit for a model when those values come from the inputs' data (see runner.py)."""
from __future__ import annotations

import numpy as np

from tinygrad.nn.onnx.node import OpCall, onnx_op
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
