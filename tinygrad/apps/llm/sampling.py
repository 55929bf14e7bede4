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
"""
from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import numpy as np

from tinygrad.dtype import dtypes
from tinygrad.engine.jit import TinyJit
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
    """The largest t (to TOPP_STEPS halvings) with enough(logits >= t) true, bisecting between `lo` (where it is
    true) and the largest logit."""
    hi = logits.max()
    for _ in range(TOPP_STEPS):
        mid = (lo + hi) / 2
        ok = enough(logits >= mid)
        lo, hi = ok.where(mid, lo), ok.where(hi, mid)
    return lo


class Sampler:
    """Draws tokens with SamplingParams; one generator per sampler (its seed), so a run is repeatable whatever else
    runs beside it. `seed` is the seed used (drawn at random when the params have none)."""

    def __init__(self, params: SamplingParams):
        params.check()
        self.p = params
        self.seed = params.seed if params.seed is not None else secrets.randbits(63)
        self.rng = np.random.default_rng(self.seed)
        # greedy picks replay one captured argmax: scheduling it anew took a few times its run time, every token
        self._argmax = TinyJit(lambda logits: logits.argmax().realize())

    def __call__(self, logits: Tensor, history: list[int], generated: list[int] | None = None) -> int:
        """The next token after `history` (prompt and generated ids); `generated` (the ids generated so far) is what
        the presence and frequency penalties count."""
        p = self.p
        logits = logits.cast(dtypes.float32)
        recent = history[-p.repeat_last_n:] if p.repeat_last_n else []
        if p.repeat_penalty != 1.0 and recent:
            seen = (Tensor.arange(logits.shape[0], device=logits.device).reshape(1, -1) ==
                    Tensor(recent, device=logits.device).reshape(-1, 1)).max(axis=0)
            logits = seen.where((logits > 0).where(logits / p.repeat_penalty, logits * p.repeat_penalty), logits)
        if (p.presence_penalty or p.frequency_penalty) and generated:
            counts = np.bincount(np.asarray(generated, np.int64), minlength=logits.shape[0])[:logits.shape[0]]
            penalty = p.frequency_penalty * counts + p.presence_penalty * (counts > 0)
            logits = logits - Tensor(penalty.astype(np.float32), device=logits.device)
        if p.temperature == 0:
            return int(self._argmax(logits.contiguous()).item())
        logits = logits / p.temperature
        keep = None
        if p.top_k and p.top_k < logits.shape[0]:
            t = _threshold(logits, logits.min(), lambda m: m.sum() >= p.top_k)
            keep = logits >= t
        if p.min_p > 0:
            m = logits >= logits.max() + math.log(p.min_p)
            keep = m if keep is None else keep & m
        if p.top_p < 1.0:
            probs = (logits - logits.max()).exp()
            if keep is not None:
                probs = keep.where(probs, 0.0)
            probs = probs / probs.sum()
            lo = logits.min() if keep is None else keep.where(logits, float("inf")).min()
            t = _threshold(logits, lo, lambda m: m.where(probs, 0.0).sum() >= p.top_p)
            m = logits >= t
            keep = m if keep is None else keep & m
        if keep is not None:
            logits = keep.where(logits, float("-inf"))
        u = Tensor(self.rng.random(logits.shape[0], dtype=np.float32), device=logits.device).clip(1e-10, 1 - 1e-7)
        return int((logits - (-u.log()).log()).argmax().item())
