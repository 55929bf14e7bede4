"""Continuous batching for the server: one thread owns the model and advances every running request together.

A request gets a free sequence slot of the model (its own KV cache), its prompt is prefilled alone, and from then on
each step is one `Transformer.forward_batch` over all running requests: the weights are read once for all of them,
which is what a decode step is bound by, and each request samples its own next token from its row with its own
parameters. Requests join as slots free up and leave when they finish; one failing (a client that went away while
streaming) ends only itself, and an error in a step ends the requests of that step with it, never the thread.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable

from tinygrad.apps.llm.generate import Decoding, Result
from tinygrad.apps.llm.model import Transformer
from tinygrad.apps.llm.sampling import SamplingParams
from tinygrad.apps.llm.tokenizer import Tokenizer


class _Job:
    def __init__(self, decoding: Decoding, prompt_ids: list[int]):
        self.d, self.prompt_ids = decoding, prompt_ids
        self.next = -1              # the token sampled last, which the next step feeds in
        self.error: BaseException | None = None
        self.result: Result | None = None
        self.done = threading.Event()


class BatchEngine:
    """Runs generations for many callers on one model (see the module docstring). `submit` blocks its caller until
    its generation is over and returns the Result (or raises what went wrong)."""

    def __init__(self, model: Transformer, tok: Tokenizer):
        self.model, self.tok = model, tok
        self.pending: queue.Queue[_Job] = queue.Queue()
        self.free = list(range(len(model.caches)))
        self.active: dict[int, _Job] = {}
        self.thread = threading.Thread(target=self._loop, name="llm-batch-engine", daemon=True)
        self.thread.start()

    def submit(self, prompt_ids: list[int], max_tokens: int, params: SamplingParams | None = None,
               stop: list[str] | None = None, on_text: Callable[[str], None] | None = None) -> Result:
        job = _Job(Decoding(self.tok, prompt_ids, max_tokens, self.model.max_context, params, stop, on_text),
                   list(prompt_ids))
        self.pending.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def _end(self, slot: int | None, job: _Job, error: BaseException | None = None) -> None:
        if slot is not None:
            self.active.pop(slot, None)
            self.free.append(slot)
        if error is None:
            try:
                job.result = job.d.finish()
            except Exception as e:  # noqa: BLE001 - the last text's callback (a client gone)
                error = e
        job.error = error
        job.done.set()

    def _push(self, slot: int, job: _Job, token: int) -> None:
        """Feeds a job its new token; ends it when it is over, or when its callback fails."""
        try:
            going = job.d.push(token)
        except Exception as e:  # noqa: BLE001 - a streaming client that went away ends its own request
            self._end(slot, job, e)
            return
        if going:
            job.next = token
        else:
            self._end(slot, job)

    def _admit(self, job: _Job) -> None:
        """Prefills a new job in a free slot and takes its first token."""
        slot = self.free.pop(0)
        self.active[slot] = job
        try:
            first = job.d.sampler(self.model.forward(job.prompt_ids, 0, slot=slot), job.d.history)
        except Exception as e:  # noqa: BLE001 - answered to its caller; the engine goes on
            self._end(slot, job, e)
            return
        self._push(slot, job, first)

    def _step(self) -> None:
        """One decode step for every active job."""
        slots = sorted(self.active)
        jobs = [self.active[s] for s in slots]
        try:
            logits = self.model.forward_batch([j.next for j in jobs], [j.d.pos for j in jobs], slots)
            tokens = [j.d.sampler(logits[row], j.d.history) for row, j in enumerate(jobs)]
        except Exception as e:  # noqa: BLE001 - the step's jobs end with the error; the engine goes on
            for s, j in zip(slots, jobs):
                self._end(s, j, e)
            return
        for s, j, t in zip(slots, jobs, tokens):
            j.d.pos += 1
            self._push(s, j, t)

    def _loop(self) -> None:
        while True:
            # new requests take free slots; with nothing running, wait for one
            while self.free:
                try:
                    job = self.pending.get(block=not self.active)
                except queue.Empty:
                    break
                self._admit(job)
            if self.active:
                self._step()
