"""Continuous batching for the server: one thread owns the model and advances every running request together.

A request gets a free sequence slot of the model (its own KV cache), its prompt is prefilled alone, and from then on
each step is one `Transformer.forward_batch` over all running requests: the weights are read once for all of them,
which is what a decode step is bound by, and each request samples its own next token from its row with its own
parameters. Requests join as slots free up and leave when they finish; one failing ends only itself, and an error in
a step ends the requests of that step with it, never the thread.

The engine's thread never touches a network socket: a job's text goes into its own bounded queue (`Job.events`),
which the caller's thread drains and writes. A job whose queue is full (its reader is not keeping up) is cancelled
rather than waited for, and a caller can cancel its job at any time (`Job.cancel`, e.g. its client hung up): the
engine ends a cancelled job before its next step, freeing the slot.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable

from tinygrad.apps.llm.generate import Decoding, Result
from tinygrad.apps.llm.model import Transformer
from tinygrad.apps.llm.sampling import SamplingParams
from tinygrad.apps.llm.tokenizer import Tokenizer


class Cancelled(Exception):
    """A job ended before its generation was over: its caller cancelled it, or its reader fell behind."""


class Job:
    """One request in the engine. `events` holds its text as it is made (strings; None once it is over); `done` is
    set when it is over, with `result` or `error` set first."""

    def __init__(self, decoding: Decoding, prompt_ids: list[int], buffer: int, stream: bool):
        self.d, self.prompt_ids = decoding, prompt_ids
        self.next = -1              # the token sampled last, which the next step feeds in
        self.error: BaseException | None = None
        self.result: Result | None = None
        self.done = threading.Event()
        self.events: queue.Queue[str | None] = queue.Queue(buffer + 1)  # + 1: room for the end's None
        self.cancelled: str | None = None   # why, once cancelled
        if stream:
            decoding.on_text = self._text

    def _text(self, text: str) -> None:
        """The engine's callback: never blocks; a reader this far behind loses its request."""
        if self.events.qsize() >= self.events.maxsize - 1:
            self.cancel("the client is not reading its stream")
            raise Cancelled(self.cancelled)
        self.events.put_nowait(text)

    def cancel(self, why: str = "cancelled") -> None:
        if self.cancelled is None:
            self.cancelled = why

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    def outcome(self) -> Result:
        """The Result of a job that is done, or what ended it, raised."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class BatchEngine:
    """Runs generations for many callers on one model (see the module docstring). `start` queues a generation and
    returns its Job at once; `submit` waits for it and returns the Result (or raises what went wrong)."""

    def __init__(self, model: Transformer, tok: Tokenizer, buffer: int = 256):
        self.model, self.tok, self.buffer = model, tok, buffer
        self.pending: queue.Queue[Job] = queue.Queue()
        self.free = list(range(len(model.caches)))
        self.active: dict[int, Job] = {}
        self.cancelled = 0          # jobs ended by a cancel (a client gone or too slow), for tests and metrics
        self.thread = threading.Thread(target=self._loop, name="llm-batch-engine", daemon=True)
        self.thread.start()

    def start(self, prompt_ids: list[int], max_tokens: int | None, params: SamplingParams | None = None,
              stop: list[str] | None = None, stream: bool = False) -> Job:
        """Queues a generation; with `stream`, its text goes to the Job's `events` as it is made."""
        job = Job(Decoding(self.tok, prompt_ids, max_tokens, self.model.max_context, params, stop),
                  list(prompt_ids), self.buffer, stream)
        self.pending.put(job)
        return job

    def submit(self, prompt_ids: list[int], max_tokens: int | None, params: SamplingParams | None = None,
               stop: list[str] | None = None, on_text: Callable[[str], None] | None = None) -> Result:
        """Generates on the caller's thread's behalf; `on_text` is called on the caller's thread, never the engine's."""
        job = self.start(prompt_ids, max_tokens, params, stop, stream=on_text is not None)
        if on_text is not None:
            while (text := job.events.get()) is not None:
                try:
                    on_text(text)
                except BaseException:
                    job.cancel("the caller's callback failed")
                    raise
        job.wait()
        return job.outcome()

    def _end(self, slot: int | None, job: Job, error: BaseException | None = None) -> None:
        if slot is not None:
            self.active.pop(slot, None)
            self.free.append(slot)
        if error is None:
            try:
                job.result = job.d.finish()
            except Exception as e:  # noqa: BLE001 - the last text's callback (a reader too slow)
                error = e
        if isinstance(error, Cancelled) or job.cancelled is not None:
            self.cancelled += 1
        job.error = error
        job.done.set()
        try:
            job.events.put_nowait(None)
        except queue.Full:  # the queue keeps a place for the end, but a cancelled reader may have left it full
            pass

    def _push(self, slot: int, job: Job, token: int) -> None:
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

    def _admit(self, job: Job) -> None:
        """Prefills a new job in a free slot and takes its first token."""
        if job.cancelled is not None:  # its client left while it waited
            self._end(None, job, Cancelled(job.cancelled))
            return
        slot = self.free.pop(0)
        self.active[slot] = job
        try:
            first = job.d.sample(self.model.forward(job.prompt_ids, 0, slot=slot))
        except Exception as e:  # noqa: BLE001 - answered to its caller; the engine goes on
            self._end(slot, job, e)
            return
        self._push(slot, job, first)

    def _step(self) -> None:
        """One decode step for every active job (the cancelled ones ended first)."""
        for s, j in list(self.active.items()):
            if j.cancelled is not None:
                self._end(s, j, Cancelled(j.cancelled))
        if not self.active:
            return
        slots = sorted(self.active)
        jobs = [self.active[s] for s in slots]
        try:
            logits = self.model.forward_batch([j.next for j in jobs], [j.d.pos for j in jobs], slots)
            tokens = [j.d.sample(logits[row]) for row, j in enumerate(jobs)]
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
