"""ONNX shape and data-movement ops: Shape/Reshape/Flatten/(Un)Squeeze/Transpose, Concat/Split/Slice/Pad/Expand/
Tile, Gather/GatherElements/GatherND, Scatter*, constants (Constant, ConstantOfShape, Range, EyeLike, OneHot),
Identity/Dropout, NonZero and If. Shapes, axes and pads are read on the host (`n.ints`)."""
from __future__ import annotations

import numpy as np

from tinygrad.dtype import dtypes
from tinygrad.helpers import prod
from tinygrad.nn.onnx.node import OpCall, UnsupportedOp, onnx_dtype, onnx_op
from tinygrad.tensor import Tensor


def _ax(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _int64(values) -> Tensor:
    return Tensor(np.asarray(values, dtype=np.int64))


def _wrap(idx: Tensor, size: int) -> Tensor:
    """Negative indices count from the end, as ONNX allows."""
    return (idx < 0).where(idx + size, idx)


# ---- shapes ----
def _ints(shape_: tuple) -> list[int]:
    if not all(isinstance(s, int) for s in shape_):
        # a symbolic dim read as a value: the runner retraces with concrete shapes
        raise UnsupportedOp("a symbolic dim is read as a value")
    return list(shape_)


@onnx_op("Shape")
def shape(n: OpCall) -> Tensor:
    s = _ints(n.x[0].shape)
    start, end = n.attr("start", 0), n.attr("end", None)
    return _int64(s[start:end] if n.opset >= 15 else s)


@onnx_op("Size")
def size(n: OpCall) -> Tensor:
    return _int64(prod(_ints(n.x[0].shape)))


@onnx_op("Reshape")
def reshape(n: OpCall) -> Tensor:
    x = n.x[0]
    want = n.attr("shape") if n.opset < 5 else n.ints(1)
    if not n.attr("allowzero", 0):
        # 0 copies the input's dim at that position
        want = [x.shape[i] if s == 0 else s for i, s in enumerate(want)]
    if -1 in want:
        known = prod(s for s in want if s != -1)
        want = [prod(x.shape) // known if s == -1 else s for s in want]
    return x.reshape(tuple(want))


@onnx_op("Flatten")
def flatten(n: OpCall) -> Tensor:
    x = n.x[0]
    axis = _ax(n.attr("axis", 1), x.ndim)
    return x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))


def _axes(n: OpCall) -> list[int] | None:
    return n.attr("axes") if n.opset < 13 else n.ints(1)


@onnx_op("Squeeze")
def squeeze(n: OpCall) -> Tensor:
    x, axes = n.x[0], _axes(n)
    axes = [i for i, s in enumerate(x.shape) if s == 1] if axes is None else [_ax(a, x.ndim) for a in axes]
    return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


@onnx_op("Unsqueeze")
def unsqueeze(n: OpCall) -> Tensor:
    x, axes = n.x[0], _axes(n)
    rank = x.ndim + len(axes)
    axes = sorted(_ax(a, rank) for a in axes)
    dims = list(x.shape)
    for a in axes:
        dims.insert(a, 1)
    return x.reshape(tuple(dims))


@onnx_op("Transpose")
def transpose(n: OpCall) -> Tensor:
    x = n.x[0]
    perm = n.attr("perm") or list(range(x.ndim))[::-1]
    return x.permute(tuple(perm))


@onnx_op("Identity")
def identity(n: OpCall) -> Tensor:
    return n.x[0]


@onnx_op("Dropout")
def dropout(n: OpCall) -> tuple[Tensor, Tensor]:
    # inference: the input passes through and the mask keeps everything
    x = n.x[0]
    ratio = n.scalar(1, 0.5) if n.opset >= 12 else n.attr("ratio", 0.5)
    if n.has(2) and n.scalar(2, False) and ratio > 0:
        # training: tinygrad's random mask (so not the values of another runtime's generator)
        keep = Tensor.rand(*x.shape) >= ratio
        return keep.where(x / (1 - ratio), 0).cast(x.dtype), keep
    return x, Tensor.ones(*x.shape, dtype=dtypes.bool)


# ---- joining and cutting ----
@onnx_op("Concat")
def concat(n: OpCall) -> Tensor:
    xs = [x for x in n.x if x is not None]
    axis = _ax(n.attr("axis"), xs[0].ndim)
    xs = [x for x in xs if x.shape[axis] != 0] or xs[:1]
    return xs[0].cat(*xs[1:], dim=axis) if len(xs) > 1 else xs[0]


@onnx_op("Split")
def split(n: OpCall) -> tuple[Tensor, ...]:
    x = n.x[0]
    axis = _ax(n.attr("axis", 0), x.ndim)
    sizes = n.attr("split") if n.opset < 13 else n.ints(1)
    if not sizes:
        parts, dim = n.attr("num_outputs", n.nout), x.shape[axis]
        # equal parts, the last one smaller when dim doesn't divide (opset 18)
        step = -(-dim // parts)
        sizes = [min(step, dim - i * step) for i in range(parts)]
    return x.split(list(sizes), dim=axis)


@onnx_op("Slice")
def slice_(n: OpCall) -> Tensor:
    x = n.x[0]
    if n.opset < 10:
        starts, ends, axes, steps = n.attr("starts"), n.attr("ends"), n.attr("axes"), None
    else:
        starts, ends, axes, steps = n.ints(1), n.ints(2), n.ints(3), n.ints(4)
    axes = list(range(len(starts))) if axes is None else [_ax(a, x.ndim) for a in axes]
    steps = steps or [1] * len(starts)
    index: list[slice] = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        # clamp as numpy does; a negative stop after clamping means "through the first element"
        s, e, st = slice(s, e, st).indices(x.shape[a])
        index[a] = slice(s, None if e < 0 else e, st)
    return x[tuple(index)]


@onnx_op("Pad")
def pad(n: OpCall) -> Tensor:
    x = n.x[0]
    if n.opset < 11:
        pads, value = n.attr("pads") or n.attr("paddings"), n.attr("value", 0.0)
        axes = None
    else:
        pads, value, axes = n.ints(1), n.scalar(2, 0), n.ints(3)
    axes = list(range(x.ndim)) if axes is None else [_ax(a, x.ndim) for a in axes]
    half = len(pads) // 2
    pairs: list = [None] * x.ndim
    for i, a in enumerate(axes):
        pairs[a] = (pads[i], pads[i + half])
    mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[
        n.attr("mode", "constant")]
    if mode == "constant":
        return x.pad(tuple(pairs), value=value)
    return x.pad(tuple(pairs), mode=mode)


@onnx_op("Expand")
def expand(n: OpCall) -> Tensor:
    x = n.x[0]
    out = np.broadcast_shapes(tuple(x.shape), tuple(n.ints(1)))
    return x.reshape((1,) * (len(out) - x.ndim) + tuple(x.shape)).expand(out)


@onnx_op("Tile")
def tile(n: OpCall) -> Tensor:
    return n.x[0].repeat(tuple(n.ints(1)))


@onnx_op("Trilu")
def trilu(n: OpCall) -> Tensor:
    x, k = n.x[0], n.scalar(1, 0)
    return x.triu(k) if n.attr("upper", 1) else x.tril(k)


@onnx_op("DepthToSpace")
def depth_to_space(n: OpCall) -> Tensor:
    x, b = n.x[0], n.attr("blocksize")
    bs, c, h, w = x.shape
    if n.attr("mode", "DCR") == "DCR":
        y = x.reshape(bs, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(bs, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(bs, c // (b * b), h * b, w * b)


@onnx_op("SpaceToDepth")
def space_to_depth(n: OpCall) -> Tensor:
    x, b = n.x[0], n.attr("blocksize")
    bs, c, h, w = x.shape
    y = x.reshape(bs, c, h // b, b, w // b, b)
    y = y.permute(0, 1, 3, 5, 2, 4) if n.attr("mode", "DCR") == "CRD" else y.permute(0, 3, 5, 1, 2, 4)
    return y.reshape(bs, c * b * b, h // b, w // b)


# ---- gathers and scatters ----
@onnx_op("Gather")
def gather(n: OpCall) -> Tensor:
    x, idx = n.x
    axis = _ax(n.attr("axis", 0), x.ndim)
    idx = _wrap(idx, x.shape[axis])
    if idx.ndim == 0:
        # one index: a one-element gather without the indexed dim
        return x[(slice(None),) * axis + (idx.reshape(1),)].squeeze(axis)
    return x[(slice(None),) * axis + (idx,)]


@onnx_op("GatherElements")
def gather_elements(n: OpCall) -> Tensor:
    x, idx = n.x
    axis = _ax(n.attr("axis", 0), x.ndim)
    return x.gather(axis, _wrap(idx, x.shape[axis]))


def _linear_index(idx: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Row-major linear index of the index tuples in idx's last dim (negative entries wrapped)."""
    lin = None
    for j, d in enumerate(dims):
        col = _wrap(idx[..., j], d) * prod(dims[j + 1:])
        lin = col if lin is None else lin + col
    return lin


@onnx_op("GatherND")
def gather_nd(n: OpCall) -> Tensor:
    x, idx = n.x
    b, k = n.attr("batch_dims", 0), idx.shape[-1]
    dims = tuple(x.shape[:b + k])
    lin = _linear_index(idx, dims[b:])
    # the batch position of every index tuple joins the linear index
    for j in range(b):
        ar = Tensor.arange(idx.shape[j]).reshape(*[idx.shape[j] if d == j else 1 for d in range(idx.ndim - 1)])
        lin = lin + ar * prod(dims[j + 1:])
    flat = x.reshape(prod(dims), *x.shape[b + k:])
    return flat[lin.cast(dtypes.int32)]


def _combine(reduction: str, data: Tensor, hit: Tensor, contrib: Tensor) -> Tensor:
    if reduction == "none":
        return hit.where(contrib, data)
    if reduction == "add":
        return data + contrib
    if reduction == "mul":
        return data * contrib
    if reduction == "max":
        return hit.where(data.maximum(contrib), data)
    if reduction == "min":
        return hit.where(data.minimum(contrib), data)
    raise UnsupportedOp(f"scatter reduction {reduction!r}")


def _fold(reduction: str, onehot: Tensor, upd: Tensor, axis: int, dtype) -> Tensor:
    """Collapse the updates over the index axis into the target positions (onehot[..., target])."""
    if reduction == "mul":
        return onehot.where(upd, 1).prod(axis).cast(dtype)
    if reduction in ("max", "min"):
        fill = float("-inf") if reduction == "max" else float("inf")
        if not dtypes.is_float(dtype):
            fill = dtypes.min(dtype) if reduction == "max" else dtypes.max(dtype)
        picked = onehot.where(upd, fill)
        return (picked.max(axis) if reduction == "max" else picked.min(axis)).cast(dtype)
    return onehot.where(upd, 0).sum(axis).cast(dtype)


@onnx_op("ScatterElements", "Scatter")
def scatter_elements(n: OpCall) -> Tensor:
    data, idx, upd = n.x
    axis = _ax(n.attr("axis", 0), data.ndim)
    reduction = n.attr("reduction", "none")
    size = data.shape[axis]
    idx = _wrap(idx, size)
    # onehot[..., t] says whether the update at this index position goes to target t along `axis`
    onehot = idx.unsqueeze(-1) == Tensor.arange(size)
    u = upd.unsqueeze(-1)
    contrib = _fold(reduction, onehot, u, axis, data.dtype)
    hit = onehot.any(axis)
    # the target axis (last) moves back into place; dims the indices don't cover are padded to the data's
    perm = list(range(axis)) + [data.ndim - 1] + list(range(axis, data.ndim - 1))
    contrib, hit = contrib.permute(perm), hit.permute(perm)
    padding = tuple(None if d == axis else (0, data.shape[d] - idx.shape[d]) for d in range(data.ndim))
    contrib, hit = contrib.pad(padding), hit.pad(padding)
    return _combine(reduction, data, hit, contrib)


@onnx_op("ScatterND")
def scatter_nd(n: OpCall) -> Tensor:
    data, idx, upd = n.x
    k = idx.shape[-1]
    rows, rest = prod(data.shape[:k]), tuple(data.shape[k:])
    lin = _linear_index(idx, tuple(data.shape[:k])).reshape(-1)
    m = lin.shape[0]
    onehot = (lin.reshape(m, 1) == Tensor.arange(rows)).reshape(m, rows, *[1] * len(rest))
    u = upd.reshape(m, 1, *rest)
    reduction = n.attr("reduction", "none")
    contrib = _fold(reduction, onehot, u, 0, data.dtype)
    hit = onehot.any(0)
    flat = data.reshape(rows, *rest)
    return _combine(reduction, flat, hit, contrib).reshape(data.shape)


# ---- constants ----
@onnx_op("Constant")
def constant(n: OpCall) -> Tensor:
    for key, dt in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                    ("value_ints", np.int64)):
        if key in n.attrs:
            return Tensor(np.asarray(n.attrs[key], dtype=dt))
    if "value" not in n.attrs:
        raise UnsupportedOp(f"Constant with attributes {list(n.attrs)}")
    v = n.attrs["value"]
    if v.dtype.kind in "USO":
        raise UnsupportedOp("string constants are not supported")
    if v.dtype.name == "bfloat16":
        return Tensor(v.astype(np.float32)).cast(dtypes.bfloat16)
    return Tensor(np.array(v, order="C"))


@onnx_op("ConstantOfShape")
def constant_of_shape(n: OpCall) -> Tensor:
    value = n.attr("value")
    shape_ = tuple(n.ints(0))
    if value is None:
        return Tensor.zeros(*shape_, dtype=dtypes.float32) if shape_ else Tensor(np.zeros((), np.float32))
    if prod(shape_) == 0:
        return Tensor(np.zeros(shape_, dtype=value.dtype))
    return Tensor.full(shape_, value.reshape(-1)[0].item(), dtype=dtypes.from_np(value.dtype))


@onnx_op("Range")
def range_(n: OpCall) -> Tensor:
    start, limit, delta = (n.host(i).reshape(()) for i in range(3))
    if start.dtype.name == "bfloat16":
        vals = np.arange(float(start), float(limit), float(delta), dtype=np.float32)
        return Tensor(vals).cast(dtypes.bfloat16)
    return Tensor(np.arange(start, limit, delta, dtype=start.dtype))


@onnx_op("EyeLike")
def eye_like(n: OpCall) -> Tensor:
    x = n.x[0]
    dt = onnx_dtype(n.attr("dtype")) if "dtype" in n.attrs else x.dtype
    rows, cols = x.shape
    return Tensor(np.eye(rows, cols, k=n.attr("k", 0), dtype=dt.np))


@onnx_op("OneHot")
def one_hot(n: OpCall) -> Tensor:
    idx, depth, values = n.x[0], int(n.scalar(1)), n.x[2]
    axis = _ax(n.attr("axis", -1), idx.ndim + 1)
    idx = _wrap(idx, depth).unsqueeze(axis)
    ar = Tensor.arange(depth).reshape(*[depth if d == axis else 1 for d in range(idx.ndim)])
    return (idx == ar).where(values[1], values[0])


@onnx_op("NonZero")
def nonzero(n: OpCall) -> Tensor:
    # the output's shape depends on the data: computed on the host (this makes the model run without TinyJit)
    return _int64(np.array(np.nonzero(n.host(0))).reshape(n.x[0].ndim, -1))


@onnx_op("If")
def if_(n: OpCall) -> tuple[Tensor, ...]:
    branch = n.attr("then_branch") if n.scalar(0) else n.attr("else_branch")
    return tuple(n.run_graph(branch))


@onnx_op("CenterCropPad")
def center_crop_pad(n: OpCall) -> Tensor:
    x, want = n.x[0], n.ints(1)
    axes = n.attr("axes")
    axes = list(range(x.ndim)) if axes is None else [_ax(a, x.ndim) for a in axes]
    pairs: list = [None] * x.ndim
    for a, s in zip(axes, want):
        # crop or pad around the centre; the odd element goes at the end (a negative pad crops)
        d = s - x.shape[a]
        lo = d // 2 if d >= 0 else -((-d) // 2)
        pairs[a] = (lo, d - lo)
    return x.pad(tuple(pairs))


@onnx_op("BitCast")
def bit_cast(n: OpCall) -> Tensor:
    return n.x[0].bitcast(onnx_dtype(n.attr("to")))


def _window(n: OpCall, coeffs: tuple[float, ...]) -> Tensor:
    """A generalized cosine window sum_k (-1)^k a_k cos(2 pi k i / N), N = size (periodic) or size - 1."""
    size = int(n.scalar(0))
    denom = size if n.attr("periodic", 1) else size - 1
    i = np.arange(size, dtype=np.float64)
    w = sum((-1) ** k * a * np.cos(2 * np.pi * k * i / denom) for k, a in enumerate(coeffs))
    dt = onnx_dtype(n.attr("output_datatype", 1))
    return Tensor(np.asarray(w, dtype=np.float32)).cast(dt)


onnx_op("HannWindow")(lambda n: _window(n, (0.5, 0.5)))
onnx_op("HammingWindow")(lambda n: _window(n, (25 / 46, 21 / 46)))
onnx_op("BlackmanWindow")(lambda n: _window(n, (0.42, 0.5, 0.08)))


@onnx_op("Loop")
def loop(n: OpCall) -> tuple[Tensor, ...]:
    """Loop unrolled on the host: the trip count and the condition are read each iteration (a condition computed
    from the inputs' data makes the model run without TinyJit); scan outputs are stacked on a new first axis."""
    body = n.attr("body")
    names = list(body.inputs)
    trip = n.scalar(0) if n.has(0) else None
    cond = bool(n.scalar(1)) if n.has(1) else True
    carried = list(n.x[2:])
    scans: list[list[Tensor]] = []
    i = 0
    while cond and (trip is None or i < trip):
        ins = {names[0]: _int64(i), names[1]: Tensor(np.array(cond))}
        ins.update(zip(names[2:], carried))
        outs = n.run_graph(body, ins)
        cond = bool(n.read(outs[0])) if n.has(1) or trip is None else True
        carried = list(outs[1:1 + len(carried)])
        scans.append(list(outs[1 + len(carried):]))
        i += 1
    n_scan = len(body.outputs) - 1 - len(carried)
    stacked = [Tensor.stack(*[s[k] for s in scans], dim=0) if scans else None for k in range(n_scan)]
    return (*carried, *stacked)


@onnx_op("Scan")
def scan(n: OpCall) -> tuple[Tensor, ...]:
    """Scan (opset 9+) unrolled: the body runs once per slice of the scan inputs along their axes (reversed where
    a direction is 1), carrying its states; scan outputs are stacked along their axes."""
    if n.opset < 9:
        raise UnsupportedOp("Scan before opset 9 (batched, with sequence_lens)")
    body, m = n.attr("body"), n.attr("num_scan_inputs")
    names = list(body.inputs)
    states, xs = list(n.x[:len(n.x) - m]), list(n.x[len(n.x) - m:])
    in_axes = [_ax(a, x.ndim) for a, x in zip(n.attr("scan_input_axes") or [0] * m, xs)]
    in_dirs = n.attr("scan_input_directions") or [0] * m
    steps = xs[0].shape[in_axes[0]]
    outs: list[list[Tensor]] = []
    for i in range(steps):
        slices = [x.shrink(tuple(((steps - 1 - i if r else i), (steps - i if r else i + 1)) if d == a else None
                                 for d in range(x.ndim))).squeeze(a) for x, a, r in zip(xs, in_axes, in_dirs)]
        res = n.run_graph(body, dict(zip(names, states + slices)))
        states = list(res[:len(states)])
        outs.append(list(res[len(states):]))
    k = len(body.outputs) - len(states)
    out_axes = n.attr("scan_output_axes") or [0] * k
    out_dirs = n.attr("scan_output_directions") or [0] * k
    stacked = []
    for j in range(k):
        seq = [o[j] for o in outs]
        if out_dirs[j]:
            seq = seq[::-1]
        stacked.append(Tensor.stack(*seq, dim=_ax(out_axes[j], seq[0].ndim + 1)))
    return (*states, *stacked)
