"""ONNX recurrent layers RNN, GRU and LSTM, unrolled over the (static) sequence length: forward, reverse or
bidirectional, either layout, initial states, peepholes, clip, per-batch sequence lengths and named activations."""
from __future__ import annotations

from typing import Callable

from tinygrad.nn.onnx.node import OpCall, UnsupportedOp, onnx_op
from tinygrad.tensor import Tensor

# ONNX activation names -> f(x, alpha, beta); alpha/beta default as the spec says for each
_ACTS: dict[str, Callable] = {
    "sigmoid": lambda x, a, b: x.sigmoid(), "tanh": lambda x, a, b: x.tanh(), "relu": lambda x, a, b: x.relu(),
    "leakyrelu": lambda x, a, b: x.leakyrelu(0.01 if a is None else a),
    "hardsigmoid": lambda x, a, b: (x * (0.2 if a is None else a) + (0.5 if b is None else b)).clip(0, 1),
    "affine": lambda x, a, b: x * (1.0 if a is None else a) + (0.0 if b is None else b),
    "scaledtanh": lambda x, a, b: (x * (1.0 if b is None else b)).tanh() * (1.0 if a is None else a),
    "thresholdedrelu": lambda x, a, b: (x > (1.0 if a is None else a)).where(x, 0),
    "elu": lambda x, a, b: x.elu(1.0 if a is None else a), "softsign": lambda x, a, b: x.softsign(),
    "softplus": lambda x, a, b: (1 + x.exp()).log(),
}


def _activations(n: OpCall, defaults: list[str], dirs: int) -> list[list[Callable]]:
    names = n.attr("activations") or defaults * dirs
    alphas, betas = list(n.attr("activation_alpha") or []), list(n.attr("activation_beta") or [])
    out, k = [], len(defaults)
    for d in range(dirs):
        fns = []
        for j, name in enumerate(names[d * k:(d + 1) * k]):
            if name.lower() not in _ACTS:
                raise UnsupportedOp(f"recurrent activation {name}")
            i = d * k + j
            a = alphas[i] if i < len(alphas) else None
            b = betas[i] if i < len(betas) else None
            fn = _ACTS[name.lower()]
            fns.append(lambda x, f=fn, a=a, b=b: f(x, a, b))
        out.append(fns)
    return out


def _recurrent(n: OpCall, gates: int, defaults: list[str], cell) -> tuple[Tensor, Tensor, Tensor | None]:
    x, w, r = n.x[0], n.x[1], n.x[2]
    layout = n.attr("layout", 0)
    if layout:
        x = x.transpose(0, 1)  # (seq, batch, input)
    seq, bs = x.shape[0], x.shape[1]
    hidden = n.attr("hidden_size") or r.shape[-1]
    direction = n.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    acts = _activations(n, defaults, dirs)
    clip = n.attr("clip")
    lens = n.ints(4)
    h0 = n.x[5] if n.has(5) else None
    if h0 is not None and layout:
        h0 = h0.transpose(0, 1)
    c0 = n.x[6] if len(n.x) > 6 and n.has(6) and n.op == "LSTM" else None
    if c0 is not None and layout:
        c0 = c0.transpose(0, 1)
    ys, hs, cs = [], [], []
    for d in range(dirs):
        wd, rd = w[d], r[d]
        bias = n.x[3][d] if n.has(3) else Tensor.zeros(2 * gates * hidden, dtype=x.dtype)
        wb, rb = bias[:gates * hidden], bias[gates * hidden:]
        h = h0[d] if h0 is not None else Tensor.zeros(bs, hidden, dtype=x.dtype)
        c = c0[d] if c0 is not None else Tensor.zeros(bs, hidden, dtype=x.dtype)
        reverse = direction == "reverse" or d == 1
        steps = range(seq - 1, -1, -1) if reverse else range(seq)
        xw = x @ wd.transpose(0, 1) + wb  # the input projections of every step at once
        out: list[Tensor | None] = [None] * seq
        for t in steps:
            nh, nc = cell(n, xw[t], h, c, rd, rb, hidden, acts[d], clip, d)
            if lens is not None and any(length < seq for length in lens):
                # steps past a row's length leave its state and give zeros
                live = Tensor([[t < length] for length in lens])
                nh, nc = live.where(nh, h), live.where(nc, c)
                out[t] = live.where(nh, 0)
            else:
                out[t] = nh
            h, c = nh, nc
        ys.append(Tensor.stack(*out, dim=0))
        hs.append(h)
        cs.append(c)
    y = Tensor.stack(*ys, dim=1)  # (seq, dirs, batch, hidden)
    yh, yc = Tensor.stack(*hs, dim=0), Tensor.stack(*cs, dim=0)
    if layout:
        y, yh, yc = y.permute(2, 0, 1, 3), yh.transpose(0, 1), yc.transpose(0, 1)
    return y, yh, yc


def _clip(v: Tensor, clip) -> Tensor:
    return v if clip is None else v.clip(-clip, clip)


def _rnn_cell(n, xw, h, c, r, rb, hidden, acts, clip, d):
    return acts[0](_clip(xw + h @ r.transpose(0, 1) + rb, clip)), c


def _gru_cell(n, xw, h, c, r, rb, hidden, acts, clip, d):
    f, g = acts
    rz, rr, rh = r[:hidden], r[hidden:2 * hidden], r[2 * hidden:]
    bz, br, bh = rb[:hidden], rb[hidden:2 * hidden], rb[2 * hidden:]
    xz, xr, xh = xw[:, :hidden], xw[:, hidden:2 * hidden], xw[:, 2 * hidden:]
    z = f(_clip(xz + h @ rz.transpose(0, 1) + bz, clip))
    rt = f(_clip(xr + h @ rr.transpose(0, 1) + br, clip))
    if n.attr("linear_before_reset", 0):
        ht = g(_clip(xh + rt * (h @ rh.transpose(0, 1) + bh), clip))
    else:
        ht = g(_clip(xh + (rt * h) @ rh.transpose(0, 1) + bh, clip))
    return (1 - z) * ht + z * h, c


def _lstm_cell(n, xw, h, c, r, rb, hidden, acts, clip, d):
    f, g, hf = acts
    pre = xw + h @ r.transpose(0, 1) + rb
    i, o, fg, cc = (pre[:, k * hidden:(k + 1) * hidden] for k in range(4))
    p = n.x[7][d] if len(n.x) > 7 and n.has(7) else None
    if p is not None:
        i, fg = i + p[:hidden] * c, fg + p[2 * hidden:] * c
    i, fg = f(_clip(i, clip)), f(_clip(fg, clip))
    if n.attr("input_forget", 0):
        fg = 1 - i
    ct = fg * c + i * g(_clip(cc, clip))
    if p is not None:
        o = o + p[hidden:2 * hidden] * ct
    o = f(_clip(o, clip))
    return o * hf(ct), ct


@onnx_op("RNN")
def rnn(n: OpCall) -> tuple[Tensor, Tensor]:
    y, yh, _ = _recurrent(n, 1, ["Tanh"], _rnn_cell)
    return y, yh


@onnx_op("GRU")
def gru(n: OpCall) -> tuple[Tensor, Tensor]:
    y, yh, _ = _recurrent(n, 3, ["Sigmoid", "Tanh"], _gru_cell)
    return y, yh


@onnx_op("LSTM")
def lstm(n: OpCall) -> tuple[Tensor, Tensor, Tensor]:
    return _recurrent(n, 4, ["Sigmoid", "Tanh", "Tanh"], _lstm_cell)
