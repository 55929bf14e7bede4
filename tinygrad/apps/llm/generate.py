"""Generation: a prompt's ids through the model, then one token at a time (sampled on the device, see sampling.py),
stopping at EOS, at a stop string (the text is cut before it), or after max_tokens."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from tinygrad.apps.llm.model import Transformer
from tinygrad.apps.llm.sampling import Sampler, SamplingParams
from tinygrad.apps.llm.tokenizer import StreamDecoder, Tokenizer


@dataclass
class Result:
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    text: str = ""
    prefill_tok_s: float = 0.0
    decode_tok_s: float = 0.0
    ttft_s: float = 0.0
    finish: str = "length"  # "stop": EOS or a stop string; "length": max_tokens or the context's end


def generate(model: Transformer, tok: Tokenizer, prompt_ids: list[int], max_tokens: int,
             params: SamplingParams | None = None, stop: list[str] | None = None, on_text=None) -> Result:
    """Generate up to `max_tokens` after `prompt_ids`; `on_text(str)` gets the text as it is made (held back while
    it could still be the start of a stop string)."""
    sampler = Sampler(params or SamplingParams())
    stop = [s for s in (stop or []) if s]
    res = Result(list(prompt_ids))
    stream = StreamDecoder(tok)
    t0 = time.perf_counter()
    logits = model.forward(prompt_ids, 0)
    history = list(prompt_ids)
    nxt = sampler(logits, history)
    res.ttft_s = time.perf_counter() - t0
    res.prefill_tok_s = len(prompt_ids) / res.ttft_s if res.ttft_s > 0 else 0.0
    pos = len(prompt_ids)
    t1 = time.perf_counter()
    text, shown, stopped = "", 0, False
    while True:
        res.ids.append(nxt)
        history.append(nxt)
        if nxt == tok.eos or nxt in tok.end_ids:
            res.finish = "stop"
            break
        text += stream.feed(nxt)
        cut = min((text.find(s) for s in stop if s in text), default=-1)
        if cut >= 0:
            text, stopped, res.finish = text[:cut], True, "stop"
            break
        # what can be shown: all but a tail that could still grow into a stop string
        hold = max((k for s in stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        if on_text is not None and len(text) - hold > shown:
            on_text(text[shown:len(text) - hold])
            shown = len(text) - hold
        if len(res.ids) >= max_tokens or pos >= model.max_context:
            break
        nxt = sampler(model.forward([nxt], pos), history)
        pos += 1
    if not stopped:
        text += stream.flush()
    if on_text is not None and len(text) > shown:
        on_text(text[shown:])
    res.text = text
    dt = time.perf_counter() - t1
    res.decode_tok_s = len(res.ids) / dt if dt > 0 else 0.0
    return res
