"""Continuous batching for the server: one thread owns the model and advances every running request together.

A request gets a free sequence slot of the model (its own KV cache) and its prompt is prefilled in chunks between
two decode steps of the requests already running, so a long prompt delays their next tokens by a few chunks' time,
never by its whole prefill. How much runs between two steps is set by time, not by a token count: while requests
decode, chunks run as long as the time since their last tokens, the next chunk's and a decode step's (each measured
as the engine runs, see _Timing) stay within `max_gap_s`, each chunk the largest of the model's sizes
(Transformer.prefill_chunks, 4 to 64 tokens) that fits, and at least one chunk; with none decoding, up to IDLE_PIECE
tokens in the model's largest chunks (nobody waits, and bigger chunks prefill faster). Several admitted prompts go
in one pass (Transformer.prefill_batch: a chunk of each, their rows through the weights together) when their pass
fits the time, as prompts arriving together do before anything decodes. Once its prompt is in, a request joins the
decode steps, each one `Transformer.forward_batch` over all running requests: the weights are read once for all of
them, which is what a decode step is bound by, and each request samples its own next token from its row with its own
parameters. Where a step and a separate chunk would not fit the gap together (a CPU's steps take most of it), each
step takes the first prompt's next chunk (MIX_CHUNK tokens) into its own pass instead (Transformer.step_and_prefill),
so the prompt costs the streams its extra rows and not a weight read of its own.
Requests join as slots free up and leave when they finish; one failing ends only itself, and an error in a step ends
the requests of that step with it, never the thread.

Captures: every row count of a step is a TinyJit capture whose first use compiles and schedules the model's kernels
for it (seconds on a GPU, more on a CPU), which would stall every running stream the first time a stream joins or
leaves. So a step's rows are padded to a power of two (the slots at most) with rows of free slots (a dummy token at
position 1: only that position of their caches is written, and their prompt-cache records are cut to position 0):
log2(slots) + 1 captures serve any number of streams. While nothing runs or waits, the engine makes those captures
(and the prefill passes' and the mixed steps') one at a time before they are needed (`warm_left`: how many are
still to make; /health reports it); a request arriving meanwhile waits for at most the capture being made.

The engine's thread never touches a network socket: a job's text goes into a bounded queue (`Job.events`, shared by
the jobs of one request: its `n` choices), which the caller's thread drains and writes. A job whose queue is full (its
reader is not keeping up) is cancelled rather than waited for, and a caller can cancel its job at any time
(`Job.cancel`, e.g. its client hung up): the engine ends a cancelled job before its next step, freeing the slot.

Prompt cache: a slot's KV cache keeps the sequence it last held after its job ends (`cached`: the ids whose keys and
values it holds). A new job takes the free slot whose sequence shares the longest prefix with its prompt and
prefills only the rest: the next turn of a conversation (its prompt the last one's, the answer, and the new message)
reuses the whole of the last turn. A position's keys and values depend on the ids up to it only, so what is reused is
what a cold prefill would compute.
"""
from __future__ import annotations

import collections
import math
import queue
import threading
import time
from dataclasses import replace
from typing import Callable

from tinygrad.apps.llm.generate import Decoding, Result
from tinygrad.apps.llm.model import Transformer
from tinygrad.apps.llm.sampling import Sampler, SamplingParams, sample_rows, warm_up
from tinygrad.apps.llm.tokenizer import Tokenizer


class Cancelled(Exception):
    """A job ended before its generation was over: its caller cancelled it, or its reader fell behind."""


# the largest prefill chunk between two decode steps, and the gap between a running stream's tokens that the chunks
# and a step together aim at beside a long prompt (200 ms is where streamed text starts to look stuck)
PREFILL_PIECE = 256
MAX_GAP_S = 0.15
# the chunk a decode step takes in beside its rows (see BatchEngine._mix_chunk)
MIX_CHUNK = 4
IDLE_PIECE = 512        # with nothing decoding: pieces still end, so a cancelled prompt stops within one
# the most prompts one prefill pass takes: each adds its own attention to the pass's graph, whose first two calls
# (before its capture) schedule it all in Python; 8 chunks of up to 64 tokens already fill a GPU's matrix units
MAX_PARTS = 8

# what a Job's events queue holds: (the job's index among its request's, its new text or None once it is over, how
# many of its tokens' logprobs are out by then)
Event = tuple[int, "str | None", int]


class Job:
    """One generation in the engine. `events` holds its text as it is made (see Event; shared with the other choices
    of its request, which keep `reserve` places in it for their ends); `done` is set when it is over, with `result` or
    `error` set first."""

    def __init__(self, decoding: Decoding, prompt_ids: list[int], events: queue.Queue[Event], stream: bool,
                 index: int = 0, reserve: int = 1):
        self.d, self.prompt_ids, self.index, self.reserve = decoding, prompt_ids, index, reserve
        self.next = -1              # the token sampled last, which the next step feeds in
        self.slot: int | None = None
        self.filled = 0             # prompt tokens in its slot's cache so far
        self.reused = 0             # of which the prompt cache kept from the slot's last sequence
        self.started = time.monotonic()
        self.first_at: float | None = None   # when its first token was sampled (time to first token)
        self.error: BaseException | None = None
        self.result: Result | None = None
        self.done = threading.Event()
        self.events = events
        self.cancelled: str | None = None   # why, once cancelled
        if stream:
            decoding.on_text = self._text

    def _text(self, text: str) -> None:
        """The engine's callback: never blocks; a reader this far behind loses its request."""
        if self.events.qsize() >= self.events.maxsize - self.reserve:
            self.cancel("the client is not reading its stream")
            raise Cancelled(self.cancelled)
        self.events.put_nowait((self.index, text, len(self.d.res.logprobs)))

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
    """Runs generations for many callers on one model (see the module docstring). `start` queues a request's
    generations and returns their Jobs at once; `submit` waits for one and returns its Result (or raises what went
    wrong)."""

    def __init__(self, model: Transformer, tok: Tokenizer, buffer: int = 256, prefill_piece: int = PREFILL_PIECE,
                 max_gap_s: float = MAX_GAP_S, mix: bool = True, warm: bool = False):
        self.model, self.tok, self.buffer, self.prefill_piece = model, tok, buffer, prefill_piece
        self.max_gap_s = max_gap_s
        self.pass_s: dict[tuple[int, int], _Timing] = {}   # a prefill pass's time by (jobs, chunk size)
        self.step_s = _Timing()                             # a decode step's
        # with streams running, each decode step may take a chunk of the first prompt being prefilled in its own pass
        # (Transformer.step_and_prefill; see _mix_chunk)
        self.mixing = mix
        self.pending: queue.Queue[Job] = queue.Queue()
        self.free = list(range(len(model.caches)))
        self.filling: list[Job] = []        # admitted, their prompts being prefilled (the first one's next piece next)
        self.active: dict[int, Job] = {}    # decoding, by slot
        self.cached: dict[int, list[int]] = {}   # the ids whose keys and values a free slot's cache holds
        self.reused = 0             # prompt tokens whose prefill the prompt cache saved
        self.cancelled = 0          # jobs ended by a cancel (a client gone or too slow), for tests and metrics
        self.warmed: BaseException | None = None     # what failed in the engine thread's warm-up
        # the captures still to make while idle (see the module docstring): decode steps first, then prefill passes
        self.to_warm = self._captures() if warm else []
        self.pad_sampler: Sampler | None = None     # a padding row's draw (greedy; its token is dropped)
        self.warm_errors: list[tuple[tuple, Exception]] = []    # captures the warm-up could not make, and why
        self.warm_times: list[tuple[tuple, float]] = []          # the seconds each one took
        ready = threading.Event()
        self.thread = threading.Thread(target=self._loop, args=(ready,), name="llm-batch-engine", daemon=True)
        self.thread.start()
        ready.wait()
        if self.warmed is not None:
            raise self.warmed

    def start(self, prompt_ids: list[int], max_tokens: int | None, params: SamplingParams | None = None,
              stop: list[str] | None = None, stream: bool = False, n: int = 1,
              logprobs: int | None = None, ignore_eos: bool = False) -> list[Job]:
        """Queues `n` generations of the prompt (OpenAI's choices: with a seed, choice i draws with seed + i, so each
        differs and all repeat); with `stream`, their text goes to their shared `events` as it is made."""
        params = params or SamplingParams()
        events: queue.Queue[Event] = queue.Queue(self.buffer * n + n)  # + n: room for each end's None
        jobs = []
        for i in range(n):
            p = params if params.seed is None or i == 0 else replace(params, seed=(params.seed + i) % (1 << 64))
            d = Decoding(self.tok, prompt_ids, max_tokens, self.model.max_context, p, stop, logprobs=logprobs,
                         ignore_eos=ignore_eos)
            d.sampler.max_rows = len(self.model.caches)   # its draws are the warmed-up ones of any row count
            jobs.append(Job(d, list(prompt_ids), events, stream, i, n))
        with self.pending.not_empty:  # all at once: the engine admits a request's choices together (one prefill)
            self.pending.queue.extend(jobs)
            self.pending.unfinished_tasks += len(jobs)
            self.pending.not_empty.notify()
        return jobs

    def submit(self, prompt_ids: list[int], max_tokens: int | None, params: SamplingParams | None = None,
               stop: list[str] | None = None, on_text: Callable[[str], None] | None = None) -> Result:
        """Generates on the caller's thread's behalf; `on_text` is called on the caller's thread, never the engine's."""
        job = self.start(prompt_ids, max_tokens, params, stop, stream=on_text is not None)[0]
        if on_text is not None:
            while (text := job.events.get()[1]) is not None:
                try:
                    on_text(text)
                except BaseException:
                    job.cancel("the caller's callback failed")
                    raise
        job.wait()
        return job.outcome()

    def cancel_all(self, why: str) -> None:
        """Cancels every job, waiting or running (the engine ends them before its next step)."""
        with self.pending.mutex:
            waiting = list(self.pending.queue)
        for job in waiting + list(self.filling) + list(self.active.values()):
            job.cancel(why)

    @property
    def warm_left(self) -> int:
        """How many of the steps' and passes' captures are not made yet (0: none compiles inside a request)."""
        return len(self.to_warm)

    def _bucket(self, k: int) -> int:
        """The rows a step of k streams runs: the next power of two (the slots at most), where enough free slots
        pad it; else k itself (a capture of its own)."""
        slots = len(self.model.caches)
        rows = 1 << (k - 1).bit_length()
        rows = min(rows, slots)
        return rows if rows - k <= len(self.free) else k

    def _pads(self, k: int) -> list[int]:
        """Free slots for the padding rows of a step of k streams (those whose caches keep the least first); a pad
        writes position 1 of its slot's cache, so the slot's prompt-cache record keeps position 0 only."""
        pads = sorted(self.free, key=lambda s: len(self.cached.get(s, ())))[:self._bucket(k) - k]
        for s in pads:
            self.cached[s] = self.cached.get(s, [])[:1]
        return pads

    def _captures(self) -> list[tuple]:
        """Every capture a running server uses, to make while idle: decode steps of each padded row count, prefill
        passes of each (parts, chunk) `_group` picks, and the mixed steps (rows, MIX chunk) where mixing is on."""
        slots = len(self.model.caches)
        rows = sorted({min(1 << b, slots) for b in range(slots.bit_length() + 1)})
        sizes = [c for c in self.model.prefill_chunks if c <= self.prefill_piece] or [self.model.prefill_chunks[0]]
        # cheapest first: a request arriving meanwhile waits for the capture being made. A decode step of r rows
        # compiles each row's own attention kernels (its position is a Variable of its own), so 16 and 32 rows take
        # the longest: they come after the prefill passes every request needs
        todo: list[tuple] = [("decode", r) for r in rows if r <= 8]
        g = 1
        while g <= min(slots, MAX_PARTS):
            todo += [("parts", g, c) for c in sizes if c <= self.model.max_context]
            g *= 2
        todo += [("decode", r) for r in rows if r > 8]
        if self.mixing and slots > 1:
            mix = [c for c in self.model.prefill_chunks if c <= min(MIX_CHUNK, self.prefill_piece)]
            chunk = mix[-1] if mix else self.model.prefill_chunks[0]
            todo += [("step+chunk", r, chunk) for r in rows if r < slots and r + 1 + chunk <= self.model.max_context]
        return todo

    def _warm_one(self) -> None:
        """Makes the next capture of to_warm (called only while no job runs or waits: every slot is free). Each is
        called twice (compiled on the first call, captured on the second); what it writes into the slots' caches
        is garbage, so their prompt-cache records are dropped."""
        what = self.to_warm[0]     # taken off once made: warm_left counts it until then
        m, slots = self.model, sorted(self.free)
        used, st = slots, time.perf_counter()
        try:
            for _ in range(2):
                if what[0] == "decode":
                    r = what[1]
                    m.forward_batch([0] * r, [1] * r, slots[:r])
                    used = slots[:r]
                elif what[0] == "parts" and what[1] == 1:   # one prompt's chunk: Transformer.forward (_prefill)
                    m.forward([0] * what[2], 0, slot=slots[0], chunk=what[2])
                    used = slots[:1]
                elif what[0] == "parts":
                    _, g, c = what
                    m.prefill_batch([([0], 0, s) for s in slots[:g]], c)
                    used = slots[:g]
                else:
                    _, r, c = what
                    m.step_and_prefill([0] * r, [1] * r, slots[:r], ([0], 0, slots[r]), c)
                    used = slots[:r + 1]
        except Exception as e:  # noqa: BLE001 - made at its first real use instead (where the error is answered)
            self.warm_errors.append((what, e))
        finally:
            self.warm_times.append((what, time.perf_counter() - st))
            self.to_warm.pop(0)
        for s in used:
            self.cached[s] = []

    def _end(self, slot: int | None, job: Job, error: BaseException | None = None) -> None:
        if job in self.filling:
            self.filling.remove(job)
        if slot is not None:
            self.active.pop(slot, None)
            self.free.append(slot)
            if job.filled < len(job.prompt_ids):     # ended while its prompt was prefilled
                self.cached[slot] = job.prompt_ids[:job.filled]
            elif error is None or isinstance(error, Cancelled):
                self.cached[slot] = job.d.history[:job.d.pos]   # the last sampled token was never fed
            else:                                    # a failed step may have written part of a position
                self.cached[slot] = []
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
            job.events.put_nowait((job.index, None, len(job.d.res.logprobs)))
        except queue.Full:  # the queue keeps a place for the end, but a cancelled reader may have left it full
            pass

    def _push(self, slot: int, job: Job, token: int) -> None:
        """Feeds a job its new token; ends it when it is over, or when its callback fails."""
        if job.first_at is None:
            job.first_at = time.monotonic()
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
        """Gives a new job a free slot; its prompt is prefilled piece by piece (_fill)."""
        if job.cancelled is not None:  # its client left while it waited
            self._end(None, job, Cancelled(job.cancelled))
            return
        # the free slot whose cache shares the longest prefix with the prompt (the first freed among equals); its
        # last token is always prefilled again, for the logits of the first sample
        ids = job.prompt_ids
        shared = {s: _common(self.cached.get(s, []), ids) for s in self.free}
        job.slot = max(self.free, key=lambda s: shared[s])
        self.free.remove(job.slot)
        job.filled = min(shared[job.slot], len(ids) - 1)
        job.reused = job.filled
        self.reused += job.filled
        self.cached[job.slot] = []
        self.filling.append(job)

    def _fill(self, force: bool = True) -> None:
        """Prefills the admitted jobs' prompts, the first admitted first, for as long as the running streams' gap
        allows (see the module docstring); several jobs' next chunks go in one pass where the time allows. A job
        whose last chunk is in takes its first token and joins the decode steps. At least one chunk runs when
        `force` (else the next decode step takes one in: _step), so prompts always move on."""
        since = time.perf_counter() if self.active else None     # when the running streams got their last tokens
        tokens = 0
        while self.filling:
            for job in [j for j in self.filling if j.cancelled is not None]:
                self._end(job.slot, job, Cancelled(job.cancelled))
            if not self.filling or (since is None and tokens >= IDLE_PIECE):
                return
            budget = math.inf if since is None else self.max_gap_s - (time.perf_counter() - since) - self.step_s.value
            pick = self._group(budget, tokens == 0 and (force or since is None))
            if pick is None:
                return
            jobs, c = pick
            if len(jobs) == 1:
                left = len(jobs[0].prompt_ids) - jobs[0].filled
                n = min(left, IDLE_PIECE - tokens) if since is None else min(left, c, self.prefill_piece)
                tokens += n
                started = self._prefill(jobs[0], n, None if since is None else c)
            else:
                tokens += sum(min(len(j.prompt_ids) - j.filled, c) for j in jobs)
                started = self._prefill_parts(jobs, c)
            if started and since is None:
                since = time.perf_counter()     # a stream is running now: its next token is due

    def _group(self, budget: float, first: bool) -> tuple[list[Job], int] | None:
        """Which admitted jobs' next chunks go in the next pass, and the chunk size: the most prompt tokens whose
        pass's measured (or extrapolated) time fits in `budget` seconds, a power of two of jobs (each count a capture
        of its own), each chunk no larger than the first job needs; None when nothing fits (one job's smallest
        chunk when `first`: prompts always move on)."""
        sizes = [c for c in self.model.prefill_chunks if c <= self.prefill_piece] or [self.model.prefill_chunks[0]]
        need = next((c for c in sizes if c >= len(self.filling[0].prompt_ids) - self.filling[0].filled), sizes[-1])
        best: tuple[int, int, int] | None = None     # (tokens, jobs, chunk)
        g = 1
        while g <= min(len(self.filling), MAX_PARTS):
            for c in sizes:
                if c > need:
                    break
                jobs = self.filling[:g]
                if g > 1 and any(j.filled + c > self.model.max_context for j in jobs):
                    continue
                n = sum(min(len(j.prompt_ids) - j.filled, c) for j in jobs)
                if self._cost(g, c) <= budget and (best is None or n > best[0]):
                    best = (n, g, c)
            g *= 2
        if best is None:
            return ([self.filling[0]], sizes[0]) if first else None
        return self.filling[:best[1]], best[2]

    def _cost(self, parts: int, chunk: int) -> float:
        """The expected seconds of a pass of `parts` chunks of `chunk` tokens: measured, or the measured pass of the
        most rows below it scaled by the rows (more than it takes, as the weights are read once for more rows);
        unknown past one smallest chunk, which is tried first."""
        if (parts, chunk) in self.pass_s:
            return self.pass_s[(parts, chunk)].value
        rows = parts * chunk
        known = [k for k in self.pass_s if k[0] * k[1] <= rows]
        if known:
            k = max(known, key=lambda k: k[0] * k[1])
            return self.pass_s[k].value * rows / (k[0] * k[1])
        return 0.0 if (parts, chunk) == (1, self.model.prefill_chunks[0]) else math.inf

    def _prefill_parts(self, jobs: list[Job], chunk: int) -> bool:
        """Prefills the next chunk of each job's prompt in one pass (Transformer.prefill_batch); those whose
        prompts are in sample their first tokens and join the decode steps. Returns whether any did."""
        parts = [(j.prompt_ids[j.filled:j.filled + chunk], j.filled, j.slot) for j in jobs]
        last = [j.filled + len(ids) == len(j.prompt_ids) for j, (ids, _, _) in zip(jobs, parts)]
        try:
            t0 = time.perf_counter()
            h = self.model.prefill_batch(parts, chunk)
            if not any(last):   # a pass without the output projection's rows
                self.pass_s.setdefault((len(jobs), chunk), _Timing()).add(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - answered to their callers; the engine goes on
            for j in jobs:
                self._end(j.slot, j, e)
            return False
        started = False
        for b, (j, (ids, _, _), done) in enumerate(zip(jobs, parts, last)):
            j.filled += len(ids)
            if not done:
                continue
            self.filling.remove(j)
            self.active[j.slot] = j
            try:  # sampled at once: the next head_at reuses its logits' buffer
                first = j.d.sample(self.model.head_at(h, b * chunk + len(ids) - 1))
            except Exception as e:  # noqa: BLE001 - answered to its caller
                self._end(j.slot, j, e)
                continue
            self._push(j.slot, j, first)
            started = started or j.slot in self.active
        return started

    def _prefill(self, job: Job, n: int, chunk: int | None) -> bool:
        """Prefills the next n tokens of a job's prompt (in chunks of `chunk`, else the model's own choice); after
        its last ones the job samples its first token and joins the decode steps. Returns whether it did."""
        piece = job.prompt_ids[job.filled:job.filled + n]
        last = job.filled + n == len(job.prompt_ids)
        try:
            t0 = time.perf_counter()
            if n == 1 and job.filled:  # one token left (the prompt cache kept the rest): a decode step's
                out = self.model.forward_batch(piece, [job.filled], [job.slot])
            else:
                out = self.model.forward(piece, job.filled, slot=job.slot, logits=last, chunk=chunk)
                if chunk is not None and not last:
                    self.pass_s.setdefault((1, chunk), _Timing()).add(time.perf_counter() - t0)
            job.filled += n
            if not last:
                return False
            self.filling.pop(0)
            self.active[job.slot] = job
            first = job.d.sample(out)
        except Exception as e:  # noqa: BLE001 - answered to its caller; the engine goes on
            self._end(job.slot, job, e)
            return False
        self._push(job.slot, job, first)
        return job.slot in self.active

    def _step(self) -> None:
        """One decode step for every active job (the cancelled ones ended first)."""
        for s, j in list(self.active.items()):
            if j.cancelled is not None:
                self._end(s, j, Cancelled(j.cancelled))
        if not self.active:
            return
        slots = sorted(self.active)
        jobs = [self.active[s] for s in slots]
        mix = self._mix_chunk()
        filler = self.filling[0] if mix else None
        pads = self._pads(len(slots))   # the rows after the jobs' (see the module docstring)
        if pads and self.pad_sampler is None:
            self.pad_sampler = Sampler(SamplingParams(temperature=0.0))
        tokens_in = [j.next for j in jobs] + [0] * len(pads)
        positions = [j.d.pos for j in jobs] + [1] * len(pads)
        try:
            t0 = time.perf_counter()
            if filler is not None:
                piece = filler.prompt_ids[filler.filled:filler.filled + mix]
                logits, h = self.model.step_and_prefill(tokens_in, positions, slots + pads,
                                                        (piece, filler.filled, filler.slot), mix)
            else:
                logits = self.model.forward_batch(tokens_in, positions, slots + pads)
            tokens = sample_rows(logits, [j.d.sampler for j in jobs] + [self.pad_sampler] * len(pads),
                                 [j.d.history for j in jobs] + [[]] * len(pads),
                                 [j.d.res.ids for j in jobs] + [[]] * len(pads), len(self.model.caches))
            if any(j.d.logprobs is not None for j in jobs):
                host = logits.numpy()
                for row, j in enumerate(jobs):
                    if j.d.logprobs is not None:
                        j.d.note_logprobs(host[row], tokens[row])
            self.step_s.add(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - the step's jobs end with the error; the engine goes on
            for s, j in zip(slots, jobs):
                self._end(s, j, e)
            if filler is not None:
                self._end(filler.slot, filler, e)
            return
        for s, j, t in zip(slots, jobs, tokens):
            j.d.pos += 1
            self._push(s, j, t)
        if filler is not None:
            self._chunk_done(filler, len(piece), h, len(tokens_in) + len(piece) - 1)

    def _mix_chunk(self) -> int | None:
        """The chunk of the first admitted prompt that the next decode step takes in (Transformer.step_and_prefill),
        or None. One size, the largest of the model's up to MIX_CHUNK (and prefill_piece), the prompt's last piece
        padded to it: each size would be a capture of its own for every row count, compiled at its first use inside
        a request (a stall of seconds on a CPU); and on the CPU, where this runs, a step with 16 more rows measured
        about 2.3x one with 4 more (and a separate 4-token pass 4x the step alone).
        None where a step and a separate pass of the smallest chunk fit the gap together."""
        if not self.mixing or not self.filling or self.filling[0].slot in self.active:
            return None
        # where they fit apart, they go apart: a GPU's steps are that short, and its slots many (a combined pass's
        # captures are one per row count)
        if self.step_s.value + self._cost(1, self.model.prefill_chunks[0]) <= self.max_gap_s:
            return None
        sizes = [c for c in self.model.prefill_chunks if c <= min(MIX_CHUNK, self.prefill_piece)]
        chunk = sizes[-1] if sizes else self.model.prefill_chunks[0]
        return chunk if self.filling[0].filled + chunk <= self.model.max_context else None

    def _chunk_done(self, job: Job, n: int, h, row: int) -> None:
        """Counts a chunk of n prompt tokens of job in; after its last, it samples its first token (from row `row`
        of hidden states h) and joins the decode steps."""
        job.filled += n
        if job.filled < len(job.prompt_ids):
            return
        self.filling.remove(job)
        self.active[job.slot] = job
        try:
            first = job.d.sample(self.model.head_at(h, row))
        except Exception as e:  # noqa: BLE001 - answered to its caller
            self._end(job.slot, job, e)
            return
        self._push(job.slot, job, first)

    def _loop(self, ready: threading.Event) -> None:
        # every sampling path's kernels for 1..slots rows, before the first request (see sampling.py), on this thread:
        # the draws' TinyJit captures are the thread's own
        try:
            warm_up(self.model.device, self.model.cfg.vocab, len(self.model.caches))
        except BaseException as e:  # noqa: BLE001 - raised by __init__
            self.warmed = e
            return
        finally:
            ready.set()
        while True:
            # new requests take free slots; with nothing running, wait for one
            while self.free:
                try:
                    job = self.pending.get(block=not self.active and not self.filling and not self.to_warm)
                except queue.Empty:
                    break
                self._admit(job)
            if self.to_warm and not self.active and not self.filling and self.pending.empty():
                self._warm_one()    # idle: the next capture before a request needs it
                continue
            # one piece of prefill, then one decode step: a long prompt never holds the running streams for long
            if self.filling:
                # a chunk is forced in unless the next step takes one in (and the time may leave room for more)
                self._fill(force=not self.active or self._mix_chunk() is None)
            if self.active:
                self._step()


class _Timing:
    """A running estimate of how long something takes: the second slowest of its last 8 times. It follows a machine
    that slows down within two measurements, and forgets one slow outlier (a step that compiled, a preempted one),
    where a mean that jumps to a slow time would starve prefill for many steps after it."""

    def __init__(self):
        self.times: collections.deque[float] = collections.deque(maxlen=8)

    def add(self, seconds: float) -> None:
        self.times.append(seconds)

    @property
    def value(self) -> float:
        return sorted(self.times)[-2] if len(self.times) > 1 else self.times[0] if self.times else 0.0


def _common(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of a and b."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
