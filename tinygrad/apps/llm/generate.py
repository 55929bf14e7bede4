"""Generation: a prompt's ids through the model, then one token at a time (sampled on the device, see sampling.py),
stopping at EOS, at a stop string (the text is cut before it), after max_tokens (None: no limit but the context's
end), or at the context's end."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

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
    seed: int = 0           # the sampler's seed (drawn at random when none was given)


class Decoding:
    """One sequence's generation after its prompt, token by token, whoever runs the model (`generate` alone, or the
    server's batches): `push(token)` takes each sampled token and says whether to go on; `pos` is the position the
    next token goes to; `finish()` the Result. Text goes to `on_text` as it is made, held back while it could
    still be the start of a stop string."""

    def __init__(self, tok: Tokenizer, prompt_ids: list[int], max_tokens: int | None, max_context: int,
                 params: SamplingParams | None = None, stop: list[str] | None = None,
                 on_text: Callable[[str], None] | None = None):
        self.tok, self.max_tokens, self.max_context, self.on_text = tok, max_tokens, max_context, on_text
        self.sampler = Sampler(params or SamplingParams())
        self.stop = [s for s in (stop or []) if s]
        self.res = Result(list(prompt_ids), seed=self.sampler.seed)
        self.history = list(prompt_ids)
        self.pos = len(prompt_ids)
        self.stream = StreamDecoder(tok)
        self.text, self.shown, self.stopped = "", 0, False

    def sample(self, logits) -> int:
        """The next token from the model's logits for this sequence's last position."""
        return self.sampler(logits, self.history, self.res.ids)

    def push(self, nxt: int) -> bool:
        """Takes the next sampled token; False once generation is over (EOS, a stop string, max_tokens, or the
        context's end)."""
        res = self.res
        res.ids.append(nxt)
        self.history.append(nxt)
        if nxt == self.tok.eos or nxt in self.tok.end_ids:
            res.finish = "stop"
            return False
        self.text += self.stream.feed(nxt)
        cut = min((self.text.find(s) for s in self.stop if s in self.text), default=-1)
        if cut >= 0:
            self.text, self.stopped, res.finish = self.text[:cut], True, "stop"
            return False
        # what can be shown: all but a tail that could still grow into a stop string
        hold = max((k for s in self.stop for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)
        if self.on_text is not None and len(self.text) - hold > self.shown:
            self.on_text(self.text[self.shown:len(self.text) - hold])
            self.shown = len(self.text) - hold
        return (self.max_tokens is None or len(res.ids) < self.max_tokens) and self.pos < self.max_context

    def finish(self) -> Result:
        if not self.stopped:
            self.text += self.stream.flush()
        if self.on_text is not None and len(self.text) > self.shown:
            self.on_text(self.text[self.shown:])
            self.shown = len(self.text)
        self.res.text = self.text
        return self.res


def generate(model: Transformer, tok: Tokenizer, prompt_ids: list[int], max_tokens: int | None,
             params: SamplingParams | None = None, stop: list[str] | None = None, on_text=None) -> Result:
    """Generate up to `max_tokens` after `prompt_ids`; `on_text(str)` gets the text as it is made (held back while
    it could still be the start of a stop string)."""
    d = Decoding(tok, prompt_ids, max_tokens, model.max_context, params, stop, on_text)
    t0 = time.perf_counter()
    nxt = d.sample(model.forward(prompt_ids, 0))
    d.res.ttft_s = time.perf_counter() - t0
    d.res.prefill_tok_s = len(prompt_ids) / d.res.ttft_s if d.res.ttft_s > 0 else 0.0
    t1 = time.perf_counter()
    while d.push(nxt):
        nxt = d.sample(model.forward([nxt], d.pos))
        d.pos += 1
    res = d.finish()
    dt = time.perf_counter() - t1
    res.decode_tok_s = len(res.ids) / dt if dt > 0 else 0.0
    return res
