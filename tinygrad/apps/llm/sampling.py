"""Choosing the next token on the device, from the logits (vocab,) that the model leaves there.

In order: the repetition penalty on the tokens seen lately (a positive logit divided by it, a negative one
multiplied: llama.cpp's rule), OpenAI's presence and frequency penalties on the tokens generated so far (subtracted:
`presence` once for a token that appeared, `frequency` times its count), the temperature, then the filters, each
keeping at least the best token: top-k (the k largest logits), min-p (probabilities at least min_p times the
largest), top-p (the smallest set of the most likely tokens whose probabilities add up to p). The draw is the
Gumbel-max trick: the argmax of the kept logits plus -log(-log(u)) for uniform u, which picks each token with its
softmax probability; temperature 0 is the plain argmax. The u come from a numpy Generator of the sampler's own
(seeded by `seed`, a fresh random seed when it is None), uploaded for each draw: a global generator would make a
seed's draws depend on what else ran between them (the server runs many requests at once). Nothing leaves the device
but the chosen id.

top-k and top-p need an order of the vocabulary, which a sort over 262,144 values would give at great cost; instead a
threshold is found by bisection (TOPP_STEPS halvings of the logit range, each one reduction), which keeps exactly the
values above it, so ties at the boundary are kept together.

The draw runs on all the rows of a batch step at once (`sample_rows`: each row its own request's parameters), as one
TinyJit replay. Every parameter is an input tensor, never a constant in a kernel, so a new temperature or top-k
compiles nothing; and with `max_rows` given (the server's slots) the number of rows is a symbolic Variable, so one
capture serves 1..max_rows rows. The kernels then depend only on whether any row penalizes and on the most any row
asks for: greedy (an argmax), sampled, or filtered with top-k or top-p (2 * TOPP_STEPS reductions a row): six sets
of kernels for any number of slots. These three stay apart because each costs the rows that do not need it: a
sampled draw uploads a row of noise per row, a filtered one runs 48 reductions over the vocabulary, and a penalized
one uploads two rows of the vocabulary's size per row. `warm_up` compiles and captures all six, which the server
does at start-up, so no request ever waits for a compiler.
"""
from __future__ import annotations

import math
import secrets
import threading
from dataclasses import dataclass

import numpy as np

from tinygrad.dtype import dtypes
from tinygrad.engine.jit import TinyJit
from tinygrad.shape.symbolic import Variable
from tinygrad.tensor import Tensor

# halvings of the logit range that find top-k's and top-p's thresholds (the range shrinks 2**24 times: below a
# float32 step for logits within +-100 of each other)
TOPP_STEPS = 24


@dataclass
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0            # 0: off
    top_p: float = 1.0        # 1: off
    min_p: float = 0.0        # 0: off
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int | None = 0      # None: a fresh random seed
    presence_penalty: float = 0.0   # OpenAI's, on generated tokens: -2..2
    frequency_penalty: float = 0.0

    def check(self) -> None:
        floats = (self.temperature, self.top_p, self.min_p, self.repeat_penalty, self.presence_penalty,
                  self.frequency_penalty)
        if not all(math.isfinite(v) for v in floats):
            raise ValueError(f"sampling parameters must be finite numbers: {self}")
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1 or not 0 <= self.min_p <= 1 or \
                self.repeat_penalty <= 0 or self.repeat_last_n < 0 or not -2 <= self.presence_penalty <= 2 or \
                not -2 <= self.frequency_penalty <= 2 or (self.seed is not None and self.seed < 0):
            raise ValueError(f"sampling parameters out of range: {self}")


def _threshold(logits: Tensor, lo: Tensor, enough) -> Tensor:
    """Per row of logits (rows, vocab): the largest t (to TOPP_STEPS halvings) with enough(logits >= t) true,
    bisecting between `lo` (rows, 1), where it is true, and the row's largest logit."""
    hi = logits.max(axis=1, keepdim=True).contiguous()
    lo = lo.contiguous()
    for _ in range(TOPP_STEPS):
        mid = (lo + hi) / 2
        ok = enough(logits >= mid)
        # NOTE: lo and hi in buffers of their own: every halving is then the same kernels over new buffers, compiled
        # once, where each one fused with the last became a deeper expression, a kernel of its own to compile
        lo, hi = ok.where(mid, lo).contiguous(), ok.where(hi, mid).contiguous()
    return lo


# the columns of a row's parameters (rows, _NPARAMS), in the order _draw reads them
_TEMP, _NOISE, _LOG_MIN_P, _TOP_K, _TOP_P, _REPEAT = range(6)
_NPARAMS = 6
_OFF = -1e30   # log(min_p) of a row without min-p: every logit passes (a finite stand-in for -inf)


# what a draw does to every row, by how much its rows ask for (see Sampler.mode)
GREEDY, SAMPLED, FILTERED = 0, 1, 2


def _draw(logits: Tensor, params: Tensor, noise: Tensor | None, seen: Tensor | None = None,
          penalty: Tensor | None = None, mode: int = SAMPLED) -> Tensor:
    """The chosen ids (rows,) of logits (rows, vocab): each row penalized, divided by its temperature (1 for a
    greedy row), filtered, and perturbed by its Gumbel noise (times 0 for a greedy row: the plain argmax). With
    every row greedy (mode GREEDY, no noise) only the penalties and the argmax run."""
    col = lambda c: params[:, c:c + 1]  # noqa: E731
    x = logits.cast(dtypes.float32)
    if seen is not None:
        rp = col(_REPEAT)
        x = (seen > 0).where((x > 0).where(x / rp, x * rp), x) - penalty
    if mode == GREEDY:
        return x.argmax(axis=1).realize()
    x = x / col(_TEMP)
    keep = x >= x.max(axis=1, keepdim=True) + col(_LOG_MIN_P)
    if mode == FILTERED:
        keep = keep & (x >= _threshold(x, x.min(axis=1, keepdim=True),
                                       lambda m: m.sum(axis=1, keepdim=True) >= col(_TOP_K)))
        probs = keep.where((x - x.max(axis=1, keepdim=True)).exp(), 0.0)
        probs = probs / probs.sum(axis=1, keepdim=True)
        lo = keep.where(x, float("inf")).min(axis=1, keepdim=True)
        keep = keep & (x >= _threshold(x, lo, lambda m: m.where(probs, 0.0).sum(axis=1, keepdim=True) >= col(_TOP_P)))
    gumbel = -(-noise.log()).log()
    return (keep.where(x, float("-inf")) + gumbel * col(_NOISE)).argmax(axis=1).realize()


# (device, rows or ("upto", max_rows), vocab, penalized, mode, logits' dtype) -> the TinyJit of _draw
_JITS: dict[tuple, TinyJit] = {}
# the keys warmed up on each thread (a TinyJit's capture is the calling thread's own)
_WARM: set[tuple] = set()
# the Variable of the row count of draws of up to max_rows rows, by max_rows
_ROWS: dict[int, Variable] = {}


def _neutral(rows: int, vocab: int, penalized: bool, mode: int) -> list[np.ndarray | None]:
    """Neutral inputs of a draw: greedy rows, no noise, nothing seen."""
    ins = [np.tile(np.array([1.0, 0.0, _OFF, vocab, 1.0, 1.0], np.float32), (rows, 1)),
           None if mode == GREEDY else np.full((rows, vocab), 0.5, np.float32)]
    if penalized:
        ins += [np.zeros((rows, vocab), np.float32) for _ in range(2)]
    return ins


def warm_up(device: str, vocab: int, max_rows: int, dtype=dtypes.float32) -> int:
    """Compiles and captures the draw's kernels for logits of `dtype` and 1..max_rows rows (`sample_rows` with
    `max_rows`), penalized or not, in every mode: six draws' kernels whatever max_rows is, captured for the calling
    thread (a no-op for what is captured already). Returns how many draws it ran."""
    ran = 0
    for penalized in (False, True):
        for mode in (GREEDY, SAMPLED, FILTERED):
            key = _key(device, 1, max_rows, vocab, penalized, mode, dtype)
            if (threading.get_ident(), key) in _WARM:
                continue
            # a TinyJit captures at its second call; two row counts, as the server's steps vary them
            for rows in (1, 2) if max_rows > 1 else (1, 1):
                logits = Tensor.zeros(rows, vocab, dtype=dtype, device=device).contiguous().realize()
                _run(key, logits, mode, max_rows, *_neutral(rows, vocab, penalized, mode))
                ran += 1
            _WARM.add((threading.get_ident(), key))
    return ran


def _key(device: str, rows: int, max_rows: int | None, vocab: int, penalized: bool, mode: int, dtype) -> tuple:
    return (device, ("upto", max_rows) if max_rows and max_rows > 1 else rows, vocab, penalized, mode, dtype)


def _run(key: tuple, logits: Tensor, mode: int, max_rows: int | None, *arrays: np.ndarray | None) -> list[int]:
    """The ids _draw picks from logits (rows, vocab) with inputs `arrays` (each (rows, ...), or None), through the
    TinyJit of `key`; its rows a Variable bound to rows when max_rows > 1."""
    rows, vocab = logits.shape
    fn = _JITS.get(key)
    if fn is None:
        fn = _JITS[key] = TinyJit(lambda *a: _draw(*a, mode=mode))
    ins = [None if a is None else Tensor(a, device=logits.device) for a in arrays]
    if not max_rows or max_rows <= 1:
        return [int(t) for t in fn(logits.contiguous(), *ins).numpy()]
    if rows > max_rows:
        raise ValueError(f"{rows} rows of logits to sample, past max_rows {max_rows}")
    var = _ROWS.get(max_rows)
    if var is None:
        var = _ROWS[max_rows] = Variable(f"sample_rows{max_rows}", 1, max_rows)
    n = var.bind(rows)
    sym = [None if t is None else t.reshape(n, t.shape[1]) for t in ins]
    out = fn(logits.contiguous().reshape(n, vocab), *sym)
    # the output's buffer is allocated for max_rows rows: read it whole, where reading the symbolic tensor would
    # shrink it to the bound count, a kernel for every count
    buf = out.realize().lazydata.base.realized
    host = np.empty(buf.size, dtype=out.dtype.np)
    buf.copyout(memoryview(host.view(np.uint8)))
    return [int(t) for t in host[:rows]]


class Sampler:
    """One request's sampling: its SamplingParams and its own generator (its seed), so a run is repeatable whatever
    else runs beside it. `seed` is the seed used (drawn at random when the params have none)."""

    def __init__(self, params: SamplingParams):
        params.check()
        self.p = params
        self.seed = params.seed if params.seed is not None else secrets.randbits(63)
        self.rng = np.random.default_rng(self.seed)
        self.max_rows: int | None = None   # the server's slots: its first tokens use the batch steps' draws
        self.penalized = params.repeat_penalty != 1.0 or bool(params.presence_penalty or params.frequency_penalty)
        # GREEDY: temperature 0; FILTERED: top-k or top-p, which cost 2 * TOPP_STEPS reductions; else SAMPLED
        self.mode = GREEDY if params.temperature == 0 else FILTERED if 0 < params.top_k or params.top_p < 1.0 \
            else SAMPLED

    def _row(self, vocab: int) -> np.ndarray:
        p = self.p
        if p.temperature == 0:
            return np.array([1.0, 0.0, _OFF, vocab, 1.0, p.repeat_penalty], np.float32)
        top_k = p.top_k if 0 < p.top_k < vocab else vocab
        log_min_p = math.log(p.min_p) if p.min_p > 0 else _OFF
        return np.array([p.temperature, 1.0, log_min_p, top_k, p.top_p, p.repeat_penalty], np.float32)

    def _noise(self, vocab: int) -> np.ndarray:
        """Uniform draws in (0, 1) for a sampled row (from this sampler's generator); a constant for a greedy one."""
        if self.p.temperature == 0:
            return np.full(vocab, 0.5, np.float32)
        return np.clip(self.rng.random(vocab, dtype=np.float32), 1e-10, 1 - 1e-7)

    def _penalties(self, vocab: int, history: list[int], generated: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Which tokens the repetition penalty applies to (the last repeat_last_n of `history`), and what the
        presence and frequency penalties subtract (counted over `generated`)."""
        p = self.p
        seen = np.zeros(vocab, np.float32)
        recent = history[-p.repeat_last_n:] if p.repeat_last_n and p.repeat_penalty != 1.0 else []
        if recent:
            seen[np.asarray(recent, np.int64)] = 1.0
        penalty = np.zeros(vocab, np.float32)
        if (p.presence_penalty or p.frequency_penalty) and generated:
            counts = np.bincount(np.asarray(generated, np.int64), minlength=vocab)[:vocab]
            penalty = (p.frequency_penalty * counts + p.presence_penalty * (counts > 0)).astype(np.float32)
        return seen, penalty

    def __call__(self, logits: Tensor, history: list[int], generated: list[int] | None = None) -> int:
        """The next token after `history` (prompt and generated ids) from logits (vocab,); `generated` (the ids
        generated so far) is what the presence and frequency penalties count."""
        return sample_rows(logits.reshape(1, -1), [self], [history], [generated or []], self.max_rows)[0]


def sample_rows(logits: Tensor, samplers: list[Sampler], histories: list[list[int]],
                generated: list[list[int]], max_rows: int | None = None) -> list[int]:
    """The next token of each row of logits (rows, vocab), row b drawn by samplers[b] after histories[b]. With
    `max_rows`, the draw's kernels serve any rows up to it (see the module docstring), else these rows only."""
    rows, vocab = logits.shape
    penalized = any(s.penalized for s in samplers)
    mode = max(s.mode for s in samplers)   # the most any row asks for
    key = _key(logits.device, rows, max_rows, vocab, penalized, mode, logits.dtype)
    arrays = [np.stack([s._row(vocab) for s in samplers]),
              None if mode == GREEDY else np.stack([s._noise(vocab) for s in samplers])]
    if penalized:
        pen = [s._penalties(vocab, h, g) for s, h, g in zip(samplers, histories, generated)]
        arrays += [np.stack([a for a, _ in pen]), np.stack([b for _, b in pen])]
    return _run(key, logits, mode, max_rows, *arrays)
