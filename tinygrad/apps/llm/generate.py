"""Generation: a prompt's ids through the model, then one token at a time (greedy, or sampled with a temperature
and a seed), stopping at EOS or after max_tokens."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from tinygrad.apps.llm.model import Transformer
from tinygrad.apps.llm.tokenizer import StreamDecoder, Tokenizer


@dataclass
class Result:
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    text: str = ""
    prefill_tok_s: float = 0.0
    decode_tok_s: float = 0.0
    ttft_s: float = 0.0


def pick(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """The next token: the argmax at temperature 0, else a draw from softmax(logits / temperature)."""
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def generate(model: Transformer, tok: Tokenizer, prompt_ids: list[int], max_tokens: int, temperature: float = 0.0,
             seed: int = 0, on_text=None) -> Result:
    """Generate up to `max_tokens` after `prompt_ids`; `on_text(str)` gets the text as it is made."""
    rng = np.random.default_rng(seed)
    res = Result(list(prompt_ids))
    stream = StreamDecoder(tok)
    t0 = time.perf_counter()
    logits = model.forward(prompt_ids, 0).numpy()
    res.ttft_s = time.perf_counter() - t0
    res.prefill_tok_s = len(prompt_ids) / res.ttft_s if res.ttft_s > 0 else 0.0
    pos = len(prompt_ids)
    t1 = time.perf_counter()
    pieces = []
    for _ in range(max_tokens):
        nxt = pick(logits, temperature, rng)
        res.ids.append(nxt)
        if nxt == tok.eos:
            break
        piece = stream.feed(nxt)
        pieces.append(piece)
        if on_text is not None and piece:
            on_text(piece)
        if len(res.ids) == max_tokens or pos >= model.max_context:
            break
        logits = model.forward([nxt], pos).numpy()
        pos += 1
    tail = stream.flush()
    if on_text is not None and tail:
        on_text(tail)
    res.text = "".join(pieces) + tail
    dt = time.perf_counter() - t1
    res.decode_tok_s = len(res.ids) / dt if dt > 0 else 0.0
    return res
