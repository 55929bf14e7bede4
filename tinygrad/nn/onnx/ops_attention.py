"""ONNX attention pieces of opset 23+: Attention (multi-head, grouped KV heads, masks, causal and sliding windows, KV
cache, softcap), RotaryEmbedding and RMSNormalization. Masks become an additive bias of 0 / -inf, and a row that
masks every key gives zeros (not NaN), as the ONNX reference does."""
from __future__ import annotations

import math

from tinygrad.dtype import dtypes
from tinygrad.nn.onnx.node import OpCall, onnx_dtype, onnx_op
from tinygrad.tensor import Tensor

_NEG_INF = float("-inf")


def _heads(t: Tensor, heads: int) -> Tensor:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    b, s, h = t.shape
    return t.reshape(b, s, heads, h // heads).transpose(1, 2)


def _as_bias(mask: Tensor, dtype) -> Tensor:
    return mask.where(0.0, _NEG_INF).cast(dtype) if mask.dtype == dtypes.bool else mask


def _window(qs: int, ks: int, offset: Tensor | int, left: int, right: int, causal: bool) -> Tensor:
    """0 where query i may see key j (j <= i + offset when causal; within the window), -inf elsewhere. A Tensor
    offset (per batch, from nonpad_kv_seqlen) gives shape (batch, 1, q, kv)."""
    i = Tensor.arange(qs).reshape(qs, 1)
    j = Tensor.arange(ks).reshape(1, ks)
    pos = i + (offset.reshape(-1, 1, 1, 1) if isinstance(offset, Tensor) else offset)
    ok = Tensor.ones(1, 1, dtype=dtypes.bool)
    if causal:
        ok = ok & (j <= pos)
    if left >= 0:
        ok = ok & (pos - j <= left)
    if right >= 0:
        ok = ok & (j - pos <= right)
    return ok.where(0.0, _NEG_INF)


@onnx_op("Attention")
def attention(n: OpCall) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    q, k, v = n.x[:3]
    mask = n.x[3] if n.has(3) else None
    three = q.ndim == 3
    if three:
        q, k, v = _heads(q, n.attr("q_num_heads")), _heads(k, n.attr("kv_num_heads")), \
            _heads(v, n.attr("kv_num_heads"))
    if n.has(4):
        k, v = n.x[4].cat(k, dim=2), n.x[5].cat(v, dim=2)
    present_k, present_v = k, v
    qs, ks = q.shape[2], k.shape[2]
    past = n.x[4].shape[2] if n.has(4) else 0
    nonpad = n.x[6] if n.has(6) else None
    bias: Tensor | None = None
    if mask is not None and mask.shape[-1] < ks:
        fill = False if mask.dtype == dtypes.bool else _NEG_INF
        mask = mask.pad(tuple([None] * (mask.ndim - 1) + [(0, ks - mask.shape[-1])]), value=fill)
    if mask is not None:
        bias = _as_bias(mask, q.dtype)
    causal = bool(n.attr("is_causal", 0))
    left, right = n.attr("left_window_size", -1), n.attr("right_window_size", -1)
    if causal or left >= 0 or right >= 0:
        offset = past if nonpad is None or past else (nonpad.cast(dtypes.int32) - qs)
        win = _window(qs, ks, offset, left, right, causal)
        bias = win if bias is None else bias + win
    if nonpad is not None:
        keep = Tensor.arange(ks).reshape(1, ks) < nonpad.reshape(-1, 1)
        pad_bias = keep.where(0.0, _NEG_INF).reshape(-1, 1, 1, ks)
        bias = pad_bias if bias is None else bias + pad_bias
    # grouped-query attention: each KV head serves q_heads / kv_heads query heads in a row
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk:
        b, _, s, d = k.shape
        k = k.reshape(b, hk, 1, s, d).expand(b, hk, hq // hk, s, d).reshape(b, hq, s, d)
        dv = v.shape[3]
        v = v.reshape(b, hk, 1, s, dv).expand(b, hk, hq // hk, s, dv).reshape(b, hq, s, dv)
    scale = n.attr("scale") or 1 / math.sqrt(q.shape[3])
    rs = math.sqrt(scale)
    qk = (q * rs) @ (k.transpose(-1, -2) * rs)
    softcap = n.attr("softcap", 0.0)
    if softcap and softcap > 0:
        qk = (qk / softcap).tanh() * softcap
    scores = qk if bias is None else qk + bias
    mode = n.attr("qk_matmul_output_mode", 0)
    qk_out = scores if mode == 2 else qk
    if n.attr("softmax_precision") is not None:
        scores = scores.cast(onnx_dtype(n.attr("softmax_precision")))
    # softmax that leaves fully masked rows at 0 instead of 0/0
    m = scores.max(-1, keepdim=True)
    dead = m == _NEG_INF
    e = (scores - dead.where(0.0, m)).exp()
    total = e.sum(-1, keepdim=True)
    p = e / (total == 0).where(1.0, total)
    if bias is not None:
        p = (bias.max(-1, keepdim=True) == _NEG_INF).where(0.0, p)
    p = p.cast(q.dtype)
    if mode == 3:
        qk_out = p
    y = p @ v
    if three:
        y = y.transpose(1, 2)
        y = y.reshape(y.shape[0], y.shape[1], -1)
    return y, present_k, present_v, qk_out.cast(q.dtype)


@onnx_op("RotaryEmbedding")
def rotary_embedding(n: OpCall) -> Tensor:
    x, cos, sin = n.x[:3]
    shape = x.shape
    # work in (batch, seq, heads, size)
    x = x.transpose(1, 2) if x.ndim == 4 else x.reshape(shape[0], shape[1], n.attr("num_heads"), -1)
    size = x.shape[3]
    rd = n.attr("rotary_embedding_dim", 0) or size
    if n.has(3):
        pos = n.x[3]
        cos, sin = cos[pos], sin[pos]
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    rot, rest = x[..., :rd], x[..., rd:]
    if n.attr("interleaved", 0):
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :rd // 2], rot[..., rd // 2:]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if n.attr("interleaved", 0):
        rot = real.unsqueeze(-1).cat(imag.unsqueeze(-1), dim=-1).reshape(rot.shape)
    else:
        rot = real.cat(imag, dim=-1)
    out = rot.cat(rest, dim=-1) if rd < size else rot
    return out.reshape(shape) if len(shape) == 3 else out.transpose(1, 2)


@onnx_op("RMSNormalization")
def rms_norm(n: OpCall) -> Tensor:
    x, scale = n.x[0], n.x[1]
    axis = n.attr("axis", -1)
    axis = axis + x.ndim if axis < 0 else axis
    xf = x.float() if x.dtype != dtypes.float64 else x
    y = xf * ((xf * xf).mean(tuple(range(axis, x.ndim)), keepdim=True) + n.attr("epsilon", 1e-5)).rsqrt()
    return (y * scale).cast(x.dtype)


@onnx_op("SwiGLU")
def swiglu(n: OpCall) -> Tensor:
    a, b = n.x[0], n.x[1]
    return (a * (a * n.attr("alpha", 1.0)).sigmoid() * b).cast(a.dtype)


@onnx_op("CausalConvWithState")
def causal_conv_with_state(n: OpCall) -> tuple[Tensor, Tensor]:
    """Depthwise causal 1-d convolution over (batch, channels, length) that carries its last k-1 inputs as state."""
    x, w = n.x[0], n.x[1]
    k = w.shape[2]
    bs, ch = x.shape[:2]
    past = n.x[3] if n.has(3) else Tensor.zeros(bs, ch, k - 1, dtype=x.dtype)
    padded = past.cat(x, dim=2)
    y = padded.conv2d(w, n.x[2] if n.has(2) else None, groups=ch).cast(x.dtype)
    if n.attr("activation", "none") in ("silu", "swish"):
        y = (y.float() * y.float().sigmoid()).cast(x.dtype)
    state = padded.shrink((None, None, (padded.shape[2] - (k - 1), padded.shape[2])))
    return y, state


@onnx_op("LinearAttention")
def linear_attention(n: OpCall) -> tuple[Tensor, Tensor]:
    """Recurrent linear attention over (batch, time, heads * size) inputs, unrolled over time: the (d_k, d_v) state
    per KV head decays (gated rules), is corrected toward the value (delta rules) and accumulates k v^T; each query
    reads it. Computed in float32, as the reference does."""
    q, k, v = n.x[:3]
    hq, hk = n.attr("q_num_heads"), n.attr("kv_num_heads")
    rule = n.attr("update_rule", "gated_delta")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    b, t = q.shape[:2]
    dk, dv = q.shape[2] // hq, v.shape[2] // hk
    q4, k4, v4 = (_heads(x.float(), h) for x, h in ((q, hq), (k, hk), (v, hk)))
    decay = n.x[4] if n.has(4) else None
    if decay is not None:
        decay = decay.float().reshape(b, t, hk, -1).transpose(1, 2)  # (b, hk, t, 1 or dk)
    beta = n.x[5] if n.has(5) else None
    if beta is not None:
        beta = beta.float().reshape(b, t, beta.shape[2], 1).transpose(1, 2)
    state = n.x[3].float() if n.has(3) else Tensor.zeros(b, hk, dk, dv)
    scale = n.attr("scale", 0.0) or 1 / math.sqrt(dk)
    outs = []
    for i in range(t):
        kt, vt = k4[:, :, i], v4[:, :, i]
        if gating:
            state = state * decay[:, :, i].exp().unsqueeze(-1)
        if delta:
            retrieved = (state * kt.unsqueeze(-1)).sum(2)
            vt = beta[:, :, i] * (vt - retrieved)
        state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
        read = state
        if hq != hk:
            read = state.unsqueeze(2).expand(b, hk, hq // hk, dk, dv).reshape(b, hq, dk, dv)
        outs.append((q4[:, :, i].unsqueeze(-1) * read).sum(2) * scale)
    y = Tensor.stack(*outs, dim=2).transpose(1, 2).reshape(b, t, hq * dv).cast(q.dtype)
    return y, state.cast(n.x[3].dtype if n.has(3) else q.dtype)


@onnx_op("TensorScatter")
def tensor_scatter(n: OpCall) -> Tensor:
    """Write a KV-cache update into the cache along `axis`, starting at each batch row's write index (wrapping
    around in circular mode); positions come from the indices on the host."""
    cache, upd = n.x[0], n.x[1]
    axis = n.attr("axis", -2)
    axis = axis + cache.ndim if axis < 0 else axis
    bs, size, steps = cache.shape[0], cache.shape[axis], upd.shape[axis]
    start = n.host(2).reshape(-1) if n.has(2) else [0] * bs
    pos = [[(int(s) + j) % size if n.attr("mode", "linear") == "circular" else int(s) + j for j in range(steps)]
           for s in start]
    hit = Tensor([[[p == c for c in range(size)] for p in row] for row in pos])  # (batch, steps, size)
    hit = hit.reshape(bs, *[1] * (cache.ndim - 2), steps, size)
    x, u = cache.transpose(axis, -1), upd.transpose(axis, -1)
    written = hit.where(u.unsqueeze(-1), 0).sum(-2).cast(cache.dtype)
    return hit.any(-2).where(written, x).transpose(axis, -1)
