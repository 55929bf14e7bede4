"""tinygrad.apps.llm.server: the OpenAI-style HTTP server on the small synthetic Gemma 3 of test_llm.py, driven with
urllib, raw sockets and the official `openai` client: OpenAI's request semantics (seeds, token limits, stop strings,
usage in streams, content parts, refusals of what it does not do, error shape), isolation between clients (slow
readers, disconnects, slow and oversized requests, keep-alive after a rejected body) and operations (API key, /health,
a port in use, access log)."""
import json
import queue
import socket
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from test.test_llm import _model
from tinygrad.apps.llm import Tokenizer, Transformer
from tinygrad.apps.llm.__main__ import main as llm_main
from tinygrad.apps.llm.chat import BUILTIN, ChatTemplate
from tinygrad.apps.llm.generate import generate
from tinygrad.apps.llm.sampling import SamplingParams
from tinygrad.apps.llm.server import LLMServer, _Handler, serve
from tinygrad.nn.state_gguf import gguf_tensors

CONTEXT = 48


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The model (two slots), its tokenizer and a ChatML template (the synthetic file has none)."""
    path, _ = _model(tmp_path_factory.mktemp("llm"))
    kv, tensors = gguf_tensors(str(path))
    tok = Tokenizer.from_gguf(kv)
    model = Transformer(kv, tensors, max_context=CONTEXT, slots=2)
    return model, tok, ChatTemplate.for_tokenizer(BUILTIN["chatml"], tok), path


class Served:
    """A running LLMServer and a client for it."""

    def __init__(self, tiny, **options):
        model, tok, template, _ = tiny
        self.log: list[str] = []
        options.setdefault("access_log", self.log.append)
        self.srv = LLMServer(("127.0.0.1", 0), model, tok, "tiny", template, **options)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def post(self, route, body=None, raw=None, headers=None, timeout=60):
        data = raw if raw is not None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{route}", data=data,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        return self._open(req, timeout)

    def get(self, route, headers=None):
        return self._open(urllib.request.Request(f"http://127.0.0.1:{self.port}{route}", headers=headers or {}), 60)

    @staticmethod
    def _open(req, timeout):
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def events(self, route, body):
        st, text = self.post(route, {**body, "stream": True})
        assert st == 200, text
        lines = [ln[6:] for ln in text.split("\n") if ln.startswith("data: ")]
        assert lines[-1] == "[DONE]"
        return [json.loads(e) for e in lines[:-1]]

    def raw(self, data: bytes, timeout=10.0) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.sendall(data)
        return s

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def served(tiny):
    s = Served(tiny)
    yield s
    s.close()


def _greedy_together(served, prompts, max_tokens):
    """Each prompt's greedy completion text, the requests sent at once from a thread each."""
    got = {}

    def client(p):
        got[p] = json.loads(served.post("/v1/completions", {"prompt": p, "max_tokens": max_tokens,
                                                            "temperature": 0})[1])["choices"][0]["text"]
    threads = [threading.Thread(target=client, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return got


def _chat(content, **kw):
    return {"messages": [{"role": "user", "content": content}], **kw}


def _read_all(s: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            part = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            return out
        if not part:
            return out
        out += part


def _http(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            ).encode() + extra + b"\r\n" + body


# ---- OpenAI semantics -------------------------------------------------------------------------------------------
def test_greedy_answers_equal_generate_plain_streamed_and_batched(tiny, served):
    model, tok, template, _ = tiny
    want = {p: generate(model, tok, tok.encode(p), 5, SamplingParams()).text for p in ("t1", "t2 t3")}
    want_chat = generate(model, tok, template.encode(tok, [{"role": "user", "content": "t4"}]), 5,
                         SamplingParams()).text
    got = {}

    def client(i):
        p = ("t1", "t2 t3")[i % 2]
        if i % 3 == 0:
            ev = served.events("/v1/completions", {"prompt": p, "max_tokens": 5, "temperature": 0})
            got[i] = ("".join(e["choices"][0]["text"] for e in ev), want[p])
        elif i % 3 == 1:
            st, body = served.post("/v1/completions", {"prompt": p, "max_tokens": 5, "temperature": 0})
            out = json.loads(body)
            assert out["usage"]["prompt_tokens"] == len(tok.encode(p))
            got[i] = (out["choices"][0]["text"], want[p])
        else:
            st, body = served.post("/v1/chat/completions", _chat("t4", max_tokens=5, temperature=0))
            got[i] = (json.loads(body)["choices"][0]["message"]["content"], want_chat)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(got) == 6 and all(a == b for a, b in got.values()), got


def test_no_seed_is_random_and_a_seed_repeats_whatever_runs_beside_it(served):
    body = {"prompt": "t2 t3", "max_tokens": 12, "temperature": 2.0}
    texts = {json.loads(served.post("/v1/completions", body)[1])["choices"][0]["text"] for _ in range(3)}
    assert len(texts) > 1  # no seed: a fresh one each time (seed 0 every time gave one text)
    alone = json.loads(served.post("/v1/completions", {**body, "seed": 5})[1])["choices"][0]["text"]
    got = {}

    def client(i):
        b = {**body, "seed": 5} if i == 0 else body
        got[i] = json.loads(served.post("/v1/completions", b)[1])["choices"][0]["text"]
    threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert got[0] == alone
    # top_k 1 and min_p 1 keep only the best token: greedy at any temperature
    greedy = json.loads(served.post("/v1/completions", {"prompt": "t2 t3", "max_tokens": 6, "temperature": 0})[1])
    assert greedy["choices"][0]["text"]
    for extra in ({"top_k": 1}, {"min_p": 1.0}):
        out = json.loads(served.post("/v1/completions", {"prompt": "t2 t3", "max_tokens": 6, "temperature": 1.5,
                                                         **extra})[1])
        assert out["choices"][0]["text"] == greedy["choices"][0]["text"], extra


def test_token_limits_chat_runs_to_the_end_and_the_cap_holds(tiny, served):
    model, tok, template, _ = tiny
    ids = template.encode(tok, [{"role": "user", "content": "t4"}])
    full = generate(model, tok, ids, None, SamplingParams())
    out = json.loads(served.post("/v1/chat/completions", _chat("t4", temperature=0))[1])
    # unset: to EOS or the context's end (OpenAI's completions default of 16 does not apply to chat)
    assert out["choices"][0]["message"]["content"] == full.text
    assert out["usage"]["completion_tokens"] == len(full.ids) and len(full.ids) > 16 or full.finish == "stop"
    out = json.loads(served.post("/v1/chat/completions", _chat("t4", temperature=0, max_completion_tokens=3,
                                                               max_tokens=9))[1])
    assert out["usage"]["completion_tokens"] == 3 and out["choices"][0]["finish_reason"] == "length"
    out = json.loads(served.post("/v1/completions", {"prompt": "t1", "temperature": 0})[1])
    assert out["usage"]["completion_tokens"] <= 16
    capped = Served(tiny, max_tokens_cap=4)
    try:
        for body in (_chat("t4", temperature=0), _chat("t4", temperature=0, max_tokens=10 ** 9)):
            out = json.loads(capped.post("/v1/chat/completions", body)[1])
            assert out["usage"]["completion_tokens"] <= 4
    finally:
        capped.close()


def test_stop_strings_and_content_parts(tiny, served):
    model, tok, _, _ = tiny
    body = {"prompt": "t2", "max_tokens": 10, "temperature": 1.0, "seed": 3}
    text = json.loads(served.post("/v1/completions", body)[1])["choices"][0]["text"]
    stop = text[len(text) // 2:len(text) // 2 + 2]
    assert len(stop) == 2
    for s in (stop, ["zzzz", stop]):
        out = json.loads(served.post("/v1/completions", {**body, "stop": s})[1])
        assert out["choices"][0]["text"] == text[:text.find(stop)] and out["choices"][0]["finish_reason"] == "stop"
    plain = json.loads(served.post("/v1/chat/completions", _chat("t4 t5", max_tokens=5, temperature=0))[1])
    parts = json.loads(served.post("/v1/chat/completions", _chat([{"type": "text", "text": "t4"},
                                                                  {"type": "text", "text": " t5"}],
                                                                 max_tokens=5, temperature=0))[1])
    assert parts["choices"][0]["message"] == plain["choices"][0]["message"]


def test_stream_carries_the_role_first_and_usage_last_when_asked(served):
    ev = served.events("/v1/chat/completions", _chat("t4", max_tokens=4, temperature=0,
                                                     stream_options={"include_usage": True}))
    assert ev[0]["choices"][0]["delta"]["role"] == "assistant" and ev[0]["object"] == "chat.completion.chunk"
    assert ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == 4
    assert all(e["usage"] is None for e in ev[:-1]) and ev[-2]["choices"][0]["finish_reason"] == "length"
    ev = served.events("/v1/chat/completions", _chat("t4", max_tokens=4, temperature=0))
    assert all("usage" not in e for e in ev)


@pytest.mark.parametrize("route,body,status,param", [
    ("/v1/chat/completions", _chat("t1", tools=[{"type": "function", "function": {"name": "f"}}]), 400, "tools"),
    ("/v1/chat/completions", _chat([{"type": "image_url", "image_url": {"url": "x"}}]), 400, "messages[0].content[0]"),
    ("/v1/chat/completions", _chat("t1", response_format={"type": "json_object"}), 400, "response_format"),
    ("/v1/chat/completions", _chat("t1", n=17), 400, "n"),
    ("/v1/chat/completions", _chat("t1", top_logprobs=2), 400, "top_logprobs"),
    ("/v1/chat/completions", _chat("t1", logprobs=True, top_logprobs=21), 400, "top_logprobs"),
    ("/v1/completions", {"prompt": "t1", "logprobs": -1}, 400, "logprobs"),
    ("/v1/chat/completions", _chat("t1", model="gpt-4o"), 404, "model"),
    ("/v1/chat/completions", {"messages": [{"role": "x"}]}, 400, "messages[0].role"),
    ("/v1/completions", {"prompt": 3}, 400, "prompt"),
    ("/v1/completions", {"prompt": "t1", "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "t1", "temperature": float("inf")}, 400, "temperature"),
    ("/v1/completions", {"prompt": "t1", "temperature": float("nan")}, 400, "temperature"),
    ("/v1/completions", {"prompt": "t1", "top_p": 2}, 400, None),
    ("/v1/nothing", {}, 404, None),
])
def test_refusals_name_the_field_in_openais_error_shape(served, route, body, status, param):
    st, text = served.post(route, body)  # json.dumps writes NaN and Infinity, which Python's parser takes
    err = json.loads(text)["error"]
    assert st == status and set(err) == {"message", "type", "param", "code"} and err["param"] == param, text
    if status == 404 and param == "model":
        assert "'tiny'" in err["message"] and err["code"] == "model_not_found"
    # and the server still serves
    assert served.post("/v1/completions", {"prompt": "t1", "max_tokens": 1})[0] == 200


def test_requests_beyond_the_slots_wait_and_batch_beside_a_client_that_left(tiny, served):
    model, tok, _, _ = tiny
    prompts = ["t1", "t2 t3", "t4 t5 t6", "t7", "t8 t9"]
    want = {p: generate(model, tok, tok.encode(p), 8, SamplingParams()).text for p in prompts}
    steps = model.batched_steps
    # a streaming client that hangs up after the headers: its request ends, the others go on
    sock = served.raw(_http("/v1/completions", json.dumps({"prompt": "t2 t3", "max_tokens": 30, "temperature": 0,
                                                           "stream": True}).encode()))
    sock.recv(64)
    sock.close()
    assert _greedy_together(served, prompts, 8) == want  # five requests over two slots: each answer as alone
    assert model.batched_steps > steps  # and they ran together


def test_each_sampler_has_its_own_generator_and_the_openai_penalties():
    import numpy as np

    from tinygrad import Tensor
    from tinygrad.apps.llm.sampling import Sampler
    logits = Tensor((np.random.default_rng(1).standard_normal(200) * 2).astype(np.float32))
    alone = Sampler(SamplingParams(temperature=1.0, seed=9))
    want = [alone(logits, []) for _ in range(6)]
    # the same seed, its draws interleaved with another sampler's: the same tokens (one global RNG shifted them)
    a, other = Sampler(SamplingParams(temperature=1.0, seed=9)), Sampler(SamplingParams(temperature=1.0, seed=None))
    got = []
    for _ in range(6):
        other(logits, [])
        got.append(a(logits, []))
    assert got == want and a.seed == 9 and other.seed != Sampler(SamplingParams(seed=None)).seed
    # presence and frequency penalties count generated tokens only, and move even the greedy pick
    two = Tensor(np.array([1.0, 0.0, -5.0], np.float32))
    assert Sampler(SamplingParams(presence_penalty=1.5))(two, [0], [0]) == 1
    assert Sampler(SamplingParams(presence_penalty=1.5))(two, [0], []) == 0  # in the prompt only: no penalty
    assert Sampler(SamplingParams(frequency_penalty=0.4))(two, [0, 0], [0, 0]) == 0  # 0.8 off: still ahead
    assert Sampler(SamplingParams(frequency_penalty=0.4))(two, [0] * 3, [0] * 3) == 1  # 1.2 off
    for bad in ({"temperature": float("nan")}, {"presence_penalty": 3.0}, {"seed": -1}):
        with pytest.raises(ValueError):
            Sampler(SamplingParams(**bad))


def test_each_row_of_a_batch_draws_as_it_would_alone_with_any_row_count():
    import numpy as np

    from tinygrad import Tensor
    from tinygrad.apps.llm.sampling import Sampler, sample_rows
    from tinygrad.engine.realize import method_cache
    vocab, slots = 300, 4
    logits = (np.random.default_rng(2).standard_normal((slots, vocab)) * 2).astype(np.float32)
    asks = [SamplingParams(), SamplingParams(temperature=1.0, seed=3), SamplingParams(temperature=0.8, top_k=5, seed=4),
            SamplingParams(temperature=1.2, top_p=0.7, repeat_penalty=1.3, presence_penalty=0.5, seed=5)]
    history = [[1, 2, 3], [4], [5, 6], [7, 7, 8]]

    def draws(rows: list[int], steps: int = 4) -> dict[int, list[int]]:
        """Each row's tokens over `steps` draws of rows `rows` together (each row its own fresh sampler)."""
        samplers = [Sampler(asks[r]) for r in rows]
        for sm in samplers:
            sm.max_rows = slots
        out: dict[int, list[int]] = {r: [] for r in rows}
        gen: dict[int, list[int]] = {r: [] for r in rows}
        for _ in range(steps):
            got = sample_rows(Tensor(logits[rows]), samplers, [history[r] + gen[r] for r in rows],
                              [gen[r] for r in rows], slots)
            for r, t in zip(rows, got):
                out[r].append(t)
                gen[r].append(t)
        return out
    alone = {r: draws([r])[r] for r in range(slots)}
    # every row count and mix of parameters (greedy beside filtered and penalized rows): each row's own tokens
    for rows in ([0, 1], [3, 0, 2], [2, 1, 3, 0], [1, 3]):
        before = len(method_cache)
        assert draws(rows) == {r: alone[r] for r in rows}, rows
        assert len(method_cache) == before, rows  # one capture a path serves every row count up to the slots
    assert alone[0] == [int(np.argmax(logits[0]))] * 4
    assert set(alone[2]) <= set(np.argsort(-logits[2])[:5].tolist())


# ---- isolation --------------------------------------------------------------------------------------------------
def test_a_stalled_stream_is_dropped_and_never_stalls_the_others(tiny, monkeypatch):
    gate = threading.Event()
    real = _Handler._send

    def stuck(self, data):  # a client whose socket takes nothing: the first write blocks
        gate.wait(30)
        real(self, data)
    monkeypatch.setattr(_Handler, "_send", stuck)
    s = Served(tiny, stream_buffer=2)
    try:
        model, tok, _, _ = tiny
        sock = s.raw(_http("/v1/completions", json.dumps({"prompt": "t2 t3", "max_tokens": 30, "temperature": 0,
                                                          "stream": True}).encode()))
        want = generate(model, tok, tok.encode("t4"), 8, SamplingParams()).text
        t0 = time.monotonic()
        st, body = s.post("/v1/completions", {"prompt": "t4", "max_tokens": 8, "temperature": 0})
        assert st == 200 and json.loads(body)["choices"][0]["text"] == want and time.monotonic() - t0 < 20
        deadline = time.monotonic() + 10
        while s.srv.engine.cancelled < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.srv.engine.cancelled == 1 and not s.srv.engine.active  # its buffer overflowed: dropped
        gate.set()
        sock.close()
    finally:
        gate.set()
        s.close()


def test_a_reader_stopped_past_the_write_timeout_loses_its_request(tiny, monkeypatch):
    def timed_out(self, data):  # what sendall raises once the socket's write timeout has passed unread
        raise TimeoutError("timed out")
    monkeypatch.setattr(_Handler, "_send", timed_out)
    s = Served(tiny, write_timeout=0.2)
    try:
        sock = s.raw(_http("/v1/chat/completions", json.dumps(_chat("t4", stream=True)).encode()))
        deadline = time.monotonic() + 10
        while s.srv.engine.cancelled < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.srv.engine.cancelled == 1 and not s.srv.engine.active
        sock.close()
        while not s.log and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "too slow" in s.log[0], s.log
    finally:
        s.close()


@pytest.mark.parametrize("mix", [False, True])
def test_a_long_prompt_is_prefilled_in_pieces_between_a_running_streams_steps(tiny, monkeypatch, mix):
    model, tok = tiny[0], tiny[1]
    long_prompt = " ".join(f"t{i % 9 + 1}" for i in range(40))
    alone = generate(model, tok, tok.encode(long_prompt), 2, SamplingParams()).text
    calls = []
    real_forward, real_batch, real_mixed = model.forward, model.forward_batch, model.step_and_prefill

    def forward(ids, start_pos, *a, **kw):
        calls.append(("prefill", start_pos, len(ids)))
        return real_forward(ids, start_pos, *a, **kw)

    def batch(tokens, *a, **kw):
        time.sleep(0.02)  # a step of a bigger model's length: the stream outlives the prefill
        calls.append(("step", len(tokens)))
        return real_batch(tokens, *a, **kw)

    def mixed(tokens, positions, slots, part, chunk):
        time.sleep(0.02)
        calls.append(("mixed", part[1], len(part[0])))
        return real_mixed(tokens, positions, slots, part, chunk)
    monkeypatch.setattr(model, "forward", forward)
    monkeypatch.setattr(model, "forward_batch", batch)
    monkeypatch.setattr(model, "step_and_prefill", mixed)
    # a chunk, then a step (or a step taking a chunk in): no time is left for a second chunk
    s = Served(tiny, prefill_piece=4, max_gap_s=1e-6, mix_prefill=mix)
    try:
        body = {"prompt": "t2 t3", "max_tokens": 40, "temperature": 1.0, "seed": 1, "stream": True}
        sock = s.raw(_http("/v1/completions", json.dumps(body).encode()))
        while b"data:" not in sock.recv(4096):  # the stream is running
            pass
        n = len(tok.encode(long_prompt))
        assert n > 20
        st, text = s.post("/v1/completions", {"prompt": long_prompt, "max_tokens": 2, "temperature": 0})
        assert st == 200
        # what it answers alone (its first token from the pass's hidden states, its second from a step)
        assert json.loads(text)["choices"][0]["text"] == alone
        if mix:
            # every piece in a step of the stream's, the last one padded to the chunk
            pieces = [c for c in calls if c[0] == "mixed"]
            assert [c[2] for c in pieces] == [4] * (n // 4) + ([n % 4] if n % 4 else [])
            assert [c[1] for c in pieces] == list(range(0, n, 4))
            assert not [c for c in calls if c[0] == "prefill"][1:], calls
        else:
            pieces = [k for k, c in enumerate(calls) if c[0] == "prefill"][1:]  # the stream's own prefill came first
            # (a last piece of one token runs as a decode step of its own)
            assert [calls[k][2] for k in pieces] == [4] * (n // 4) + ([n % 4] if n % 4 > 1 else [])
            # a decode step of the running stream (both sequences, once the long one decodes) between every two
            assert all(any(c[0] == "step" for c in calls[a + 1:b]) for a, b in zip(pieces, pieces[1:])), calls
        sock.close()
    finally:
        s.close()


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_hangs_up_cancels_its_generation(tiny, monkeypatch, stream):
    model = tiny[0]
    real = model.forward_batch

    def slow(*a, **kw):  # a step of a big model's length, so the generation outlives the client
        time.sleep(0.05)
        return real(*a, **kw)
    monkeypatch.setattr(model, "forward_batch", slow)
    s = Served(tiny)
    try:
        sock = s.raw(_http("/v1/chat/completions", json.dumps(_chat("t4", temperature=0, stream=stream)).encode()))
        time.sleep(0.3)
        sock.close()
        deadline = time.monotonic() + 5
        while s.srv.engine.cancelled < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.srv.engine.cancelled == 1 and not s.srv.engine.active
        assert any("cancelled" in ln for ln in s.log), s.log
    finally:
        s.close()


def test_slow_and_oversized_requests_are_cut_off(tiny):
    s = Served(tiny, header_timeout=0.5, body_timeout=0.5, max_body=1000)
    try:
        t0 = time.monotonic()
        sock = s.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        assert _read_all(sock) == b"" and time.monotonic() - t0 < 5
        sock = s.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
        assert _read_all(sock).startswith(b"HTTP/1.1 408")  # the body never finished
        sock = s.raw(_http("/v1/completions", b"x" * 2000))
        assert _read_all(sock).startswith(b"HTTP/1.1 413")
        # a prompt too long to fit the context is refused before it is tokenized
        served = Served(tiny)
        try:
            t0 = time.monotonic()
            st, text = served.post("/v1/completions", {"prompt": "t1 " * 300_000})
            assert st == 400 and json.loads(text)["error"]["code"] == "context_length_exceeded"
            assert time.monotonic() - t0 < 5
        finally:
            served.close()
    finally:
        s.close()


def test_a_prompt_past_the_context_is_refused_after_tokenizing_about_a_context_of_it(tiny):
    from tinygrad.apps.llm.server import RequestError, _check_tokens
    tok = tiny[1]
    seen = []

    class Counting:  # the tokenizer, counting the characters it is given
        def encode(self, text, **kw):
            seen.append(len(text))
            return tok.encode(text, **kw)
    for text in ("t1 t2 " * 20, "t3" * 50, "t1\u00e9 " * 30):
        n = len(tok.encode(text))
        _check_tokens(Counting(), text, n, "prompt")  # exactly the context: taken
    seen.clear()
    with pytest.raises(RequestError, match="context") as e:
        _check_tokens(Counting(), "t1 t2 " * 100_000, 4096, "prompt", piece=2048)
    assert e.value.param == "prompt" and sum(seen) < 40_000  # of 600,000 characters


def test_connections_past_the_limit_get_a_503_at_once(tiny):
    s = Served(tiny, max_connections=2, header_timeout=5)
    try:
        idle = [s.raw(b"") for _ in range(2)]  # two connections that send nothing hold both places
        time.sleep(0.2)
        t0 = time.monotonic()
        out = _read_all(s.raw(b""))
        assert out.startswith(b"HTTP/1.1 503") and time.monotonic() - t0 < 3
        for sock in idle:
            sock.close()
        deadline = time.monotonic() + 5
        while s.srv.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.post("/v1/completions", {"prompt": "t1", "max_tokens": 1})[0] == 200
    finally:
        s.close()


def test_a_rejected_body_is_never_read_as_the_next_request(served):
    smuggled = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    # refused before its body is read (no such endpoint): the connection closes, the body is never parsed
    sock = served.raw(_http("/v1/nothing", smuggled))
    out = _read_all(sock)
    assert out.startswith(b"HTTP/1.1 404") and out.count(b"HTTP/1.1") == 1
    # refused after its body was read (not JSON): the connection goes on, and serves the next request
    sock = served.raw(_http("/v1/completions", b"{bad") + smuggled)
    sock.shutdown(socket.SHUT_WR)
    out = _read_all(sock)
    assert out.startswith(b"HTTP/1.1 400") and b"HTTP/1.1 200" in out
    # what http.server refuses itself (a method it has no handler for) is answered in OpenAI's shape too
    sock = served.raw(b"PUT /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = _read_all(sock).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 501") and json.loads(body)["error"]["type"] == "server_error"
    assert any('"PUT /v1/completions" 501' in ln for ln in served.log), served.log


def test_malformed_and_huge_request_heads_are_refused_and_the_server_goes_on(served):
    cases = [(b"\x16\x03\x01\x02\x00garbage\r\n\r\n", b"HTTP/1.1 400"),      # a TLS hello, not HTTP
             (b"GET /health HTTP/9.9\r\n\r\n", b"HTTP/1.1 505"),                  # a version it does not speak
             (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"HTTP/1.1 414"),  # a request line past 64 KiB
             (b"GET /health HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", b"HTTP/1.1 431"),  # a header too
             (b"GET /health HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", b"HTTP/1.1 431")]      # 200 headers
    for raw, want in cases:
        out = _read_all(served.raw(raw))
        assert out.startswith(want), (raw[:40], out[:80])
    assert served.get("/health")[0] == 200


# ---- operations -------------------------------------------------------------------------------------------------
def test_api_key_health_models_and_the_access_log(tiny):
    s = Served(tiny, api_key="sekret")
    try:
        st, text = s.post("/v1/completions", {"prompt": "t1", "max_tokens": 2})
        assert st == 401 and json.loads(text)["error"]["type"] == "authentication_error"
        st, _ = s.post("/v1/completions", {"prompt": "t1", "max_tokens": 2}, headers={"Authorization": "Bearer no"})
        assert st == 401
        st, text = s.post("/v1/completions", {"prompt": "t1", "max_tokens": 2},
                          headers={"Authorization": "Bearer sekret"})
        assert st == 200
        usage = json.loads(text)["usage"]  # unseeded sampling may stop at EOS after one token or run to two
        counts = f"{usage['prompt_tokens']}+{usage['completion_tokens']} tokens"
        assert s.get("/health") == (200, '{"status": "ok"}')
        st, text = s.get("/v1/models", {"Authorization": "Bearer sekret"})
        assert st == 200 and json.loads(text)["data"][0]["id"] == "tiny"
        deadline = time.monotonic() + 5  # a line is written once its answer is out: the client may see it first
        while len(s.log) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(s.log) == 5 and '"POST /v1/completions" 401' in s.log[0] and counts in s.log[2], s.log
    finally:
        s.close()


def test_a_port_in_use_is_a_clear_error(tiny, served, capsys):
    model, tok, _, path = tiny
    assert serve(model, tok, served.port, "127.0.0.1") == 1
    err = capsys.readouterr().err
    assert f"port {served.port} is in use" in err and "Traceback" not in err
    # the CLI's --serve, --host and --max-tokens-cap: it loads the model, then says the same and exits 1
    argv = ["--model", str(path), "--context", "16", "--serve", str(served.port), "--host", "127.0.0.1",
            "--max-tokens-cap", "8", "--api-key", "k"]
    assert llm_main(argv) == 1
    assert f"port {served.port} is in use on 127.0.0.1" in capsys.readouterr().err


# ---- the official openai client ---------------------------------------------------------------------------------
@pytest.fixture
def client(served):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=f"http://127.0.0.1:{served.port}/v1", api_key="unused", max_retries=0, timeout=60)


def test_the_openai_client_completions_and_chat_plain_and_streamed(tiny, client):
    model, tok, template, _ = tiny
    want = generate(model, tok, tok.encode("t2 t3"), 6, SamplingParams()).text
    out = client.completions.create(model="tiny", prompt="t2 t3", max_tokens=6, temperature=0)
    assert out.choices[0].text == want and out.usage.prompt_tokens == len(tok.encode("t2 t3"))
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    chunks = list(client.completions.create(model="tiny", prompt="t2 t3", max_tokens=6, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want
    assert chunks[-1].usage.completion_tokens == out.usage.completion_tokens
    ids = template.encode(tok, [{"role": "user", "content": "t4"}])
    want = generate(model, tok, ids, 5, SamplingParams()).text
    out = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "t4"}], max_tokens=5,
                                         temperature=0)
    assert out.choices[0].message.content == want and out.choices[0].message.role == "assistant"
    assert out.usage.prompt_tokens == len(ids) and out.object == "chat.completion"
    chunks = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "t4"}],
                                                 max_tokens=5, temperature=0, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant" and all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_the_openai_client_seed_stop_and_errors(client):
    openai = pytest.importorskip("openai")
    ask = {"model": "tiny", "prompt": "t2 t3", "max_tokens": 10, "temperature": 1.5, "seed": 11}
    a, b = (client.completions.create(**ask).choices[0].text for _ in range(2))
    assert a == b
    stop = a[len(a) // 2:len(a) // 2 + 2]
    out = client.completions.create(**ask, stop=[stop])
    assert out.choices[0].text == a[:a.find(stop)] and out.choices[0].finish_reason == "stop"
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "t1"}])
    assert e.value.status_code == 404 and e.value.code == "model_not_found" and "'tiny'" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "t1"}],
                                       response_format={"type": "json_object"})
    assert e.value.param == "response_format" and e.value.type == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="t1", max_tokens=0)
    assert e.value.param == "max_tokens" and e.value.status_code == 400
    assert [m.id for m in client.models.list()] == ["tiny"]


def test_n_choices_and_logprobs_in_openais_shapes(tiny, client):
    model, tok, _, _ = tiny
    ask = {"model": "tiny", "prompt": "t2 t3", "max_tokens": 8, "temperature": 1.5, "seed": 5}
    out = client.completions.create(**ask, n=3, logprobs=2)
    texts = [c.text for c in out.choices]
    assert [c.index for c in out.choices] == [0, 1, 2] and len(set(texts)) > 1  # each choice draws its own
    # choice i draws with seed + i: the same text as a request of its own with that seed
    assert texts[1] == client.completions.create(**{**ask, "seed": 6}).choices[0].text
    assert out.usage.completion_tokens > len(out.choices) and out.usage.prompt_tokens == len(tok.encode("t2 t3"))
    for c in out.choices:
        lp = c.logprobs
        assert "".join(lp.tokens) == c.text and len(lp.token_logprobs) == len(lp.tokens)
        assert all(v <= 0 for v in lp.token_logprobs) and all(len(t) == 2 for t in lp.top_logprobs)
        assert lp.text_offset == [sum(len(t) for t in lp.tokens[:k]) for k in range(len(lp.tokens))]
    # greedy: the chosen token is the likeliest, its logprob the model's own (a softmax of its logits)
    ids = tok.encode("t2 t3")
    logits = model.forward(ids, 0, jit=False).numpy().astype("float64")
    want = logits - (logits.max() + __import__("numpy").log(__import__("numpy").exp(logits - logits.max()).sum()))
    out = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "t4"}], max_tokens=4,
                                         temperature=0, logprobs=True, top_logprobs=3)
    content = out.choices[0].logprobs.content
    assert "".join(r.token for r in content) == out.choices[0].message.content
    assert all(r.top_logprobs[0].token == r.token and r.top_logprobs[0].logprob == r.logprob for r in content)
    assert all(bytes(r.bytes).decode("utf-8", "replace") == r.token for r in content)
    out = client.completions.create(model="tiny", prompt="t2 t3", max_tokens=1, temperature=0, logprobs=1)
    assert abs(out.choices[0].logprobs.token_logprobs[0] - want.max()) < 1e-4
    # streamed: each chunk carries its choice's index and its tokens' logprobs
    chunks = list(client.completions.create(**ask, n=2, logprobs=1, stream=True))
    for i in range(2):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert "".join(c.text for c in mine) == texts[i]
        assert "".join(t for c in mine if c.logprobs for t in c.logprobs.tokens) == texts[i]


def test_no_sampling_combination_compiles_a_kernel_inside_a_request(served):
    from tinygrad.engine.realize import method_cache
    body = {"prompt": "t2 t3", "max_tokens": 4}
    # the model's own kernels for one and two rows (prefill, decode steps; a request's two choices are prefilled in
    # one pass): compiled by first greedy requests
    assert served.post("/v1/completions", {**body, "temperature": 0, "n": 2})[0] == 200
    assert served.post("/v1/completions", {**body, "prompt": "t5 t6", "temperature": 0})[0] == 200
    before = len(method_cache)
    asks = [{"temperature": 0.7}, {"temperature": 1.3, "top_k": 3}, {"temperature": 1.0, "top_k": 7, "top_p": 0.5},
            {"temperature": 0.9, "top_p": 0.9, "min_p": 0.2}, {"temperature": 0, "repetition_penalty": 1.3},
            {"temperature": 1.1, "presence_penalty": 0.5, "frequency_penalty": 1.0, "top_k": 4},
            {"temperature": 0.5, "min_p": 0.05, "repetition_penalty": 0.8, "n": 2, "logprobs": 2}]
    for k, ask in enumerate(asks):
        st, text = served.post("/v1/completions", {**body, "seed": k, **ask})
        assert st == 200, text
    # every path was compiled at start-up, with its values as inputs
    assert len(method_cache) == before, [getattr(v, "name", v) for v in list(method_cache.values())[before:]]


def test_metrics_in_prometheus_text_format(tiny, served):
    st, text = served.post("/v1/completions", {"prompt": "t2 t3", "max_tokens": 3, "temperature": 0})
    usage = json.loads(text)["usage"]
    assert served.post("/v1/completions", {"prompt": "t1", "model": "other"})[0] == 404
    st, text = served.get("/metrics")
    assert st == 200
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert line.split()[1] in ("HELP", "TYPE")
            continue
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    assert samples['llm_requests_total{endpoint="/v1/completions",status="200"}'] == 1
    assert samples['llm_requests_total{endpoint="/v1/completions",status="404"}'] == 1
    assert samples["llm_prompt_tokens_total"] == usage["prompt_tokens"]
    assert samples["llm_completion_tokens_total"] == usage["completion_tokens"]
    buckets = [v for k, v in samples.items() if k.startswith("llm_time_to_first_token_seconds_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == samples["llm_time_to_first_token_seconds_count"] == 1
    assert 0 < samples["llm_time_to_first_token_seconds_sum"] < 60
    assert samples["llm_queue_depth"] == 0 and samples["llm_running_streams"] == 0
    assert "# TYPE llm_time_to_first_token_seconds histogram" in text


def test_graceful_stop_finishes_or_cancels_the_running_requests(tiny, monkeypatch):
    model = tiny[0]
    real = model.forward_batch

    def slow(*a, **kw):
        time.sleep(0.05)
        return real(*a, **kw)
    monkeypatch.setattr(model, "forward_batch", slow)
    for grace, max_tokens in ((10.0, 4), (0.3, 40)):
        s = Served(tiny)
        body = {"prompt": "t2 t3", "max_tokens": max_tokens, "temperature": 1.0, "seed": 1, "stream": True}
        sock = s.raw(_http("/v1/completions", json.dumps(body).encode()))
        while b"data:" not in sock.recv(4096):
            pass
        got = []
        stopper = threading.Thread(target=lambda srv=s.srv, g=grace, out=got: out.append(srv.stop(g)))
        stopper.start()
        deadline = time.monotonic() + 3  # the accept loop ends within its poll interval (0.5 s)
        with pytest.raises(ConnectionError):  # no new connections once stopping (refused, or reset in the backlog)
            while time.monotonic() < deadline:
                socket.create_connection(("127.0.0.1", s.port), timeout=2).close()
                time.sleep(0.05)
        rest = _read_all(sock)
        stopper.join(timeout=30)
        # within the grace period the stream ends whole; past it, it is cut off and counted as cancelled
        assert got == ([0] if grace > 1 else [1]) and (b"[DONE]" in rest) == (grace > 1)
        s.srv.server_close()


def test_sigterm_stops_the_server_gracefully_and_exits_0(tiny, capsys):
    import os
    import signal
    model, tok, _, _ = tiny
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()

    def terminate():  # once it answers: the signal handlers are set by then
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=terminate, daemon=True).start()
    assert serve(model, tok, port, "127.0.0.1", access_log=None) == 0
    assert "shutting down" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # its handlers are put back


def test_the_next_turn_reuses_the_last_turns_kv_cache_and_answers_as_a_cold_run(tiny, monkeypatch):
    model, tok, template, _ = tiny
    prefilled = []
    real = model.forward

    def forward(ids, start_pos, *a, **kw):
        prefilled.append(len(ids))
        return real(ids, start_pos, *a, **kw)
    s = Served(tiny)
    try:
        turn1 = [{"role": "user", "content": "t4 t5"}]
        ask = {"max_tokens": 5, "temperature": 0.8, "seed": 2}
        out1 = json.loads(s.post("/v1/chat/completions", {"messages": turn1, **ask})[1])
        answer = out1["choices"][0]["message"]["content"]
        turn2 = turn1 + [{"role": "assistant", "content": answer}, {"role": "user", "content": "t6 t7"}]
        ids1, ids2 = template.encode(tok, turn1), template.encode(tok, turn2)
        monkeypatch.setattr(model, "forward", forward)
        reused = s.srv.engine.reused
        out2 = json.loads(s.post("/v1/chat/completions", {"messages": turn2, **ask})[1])
        saved = s.srv.engine.reused - reused
        assert out2["usage"]["prompt_tokens_details"]["cached_tokens"] == saved
        assert saved >= len(ids1)  # the whole first prompt, and the answer as far as its tokens came back the same
        assert sum(prefilled) + saved == len(ids2) or (sum(prefilled) == 0 and saved == len(ids2) - 1)
        monkeypatch.undo()
        cold = generate(model, tok, ids2, 5, SamplingParams(temperature=0.8, seed=2))
        assert out2["choices"][0]["message"]["content"] == cold.text
    finally:
        s.close()


def test_prefill_batch_computes_what_a_prefill_each_computes(tiny):
    model = tiny[0]
    a, b = [2, 5, 7, 3, 9, 4], [8, 6]   # a: two chunks of 4, the second padded; b: one padded chunk
    want = [model.forward(ids, 0, slot=0).numpy() for ids in (a, b)]
    # each part's first chunk in one pass (b's is its last: its logits), then a's rest beside b's first again
    got_b = model.head_at(model.prefill_batch([(a[:4], 0, 0), (b, 0, 1)], 4), 4 + len(b) - 1).numpy()
    h = model.prefill_batch([(b, 0, 1), (a[4:], 4, 0)], 4)
    got = [model.head_at(h, row).numpy() for row in (4 + len(a[4:]) - 1, len(b) - 1)]
    assert np.allclose(got[0], want[0], atol=1e-4) and np.allclose(got_b, want[1], atol=1e-4)
    assert np.allclose(got[1], want[1], atol=1e-4)
    with pytest.raises(ValueError):
        model.prefill_batch([(a, 0, 0)], 4)  # more ids than the chunk


def test_a_decode_step_and_a_prompt_chunk_in_one_pass_compute_what_each_alone_computes(tiny):
    model = tiny[0]
    run, prompt = [2, 5, 7], [8, 6, 4, 3, 9]   # a sequence decoding in slot 0; a prompt prefilled in slot 1
    want_step = model.forward(run + [11], 0, slot=0).numpy()
    want_prompt = model.forward(prompt, 0, slot=1).numpy()
    # the run's last token stepped beside the prompt's first chunk, then beside its last (padded) one
    model.forward(run, 0, slot=0, logits=False)
    logits, _ = model.step_and_prefill([11], [len(run)], [0], (prompt[:4], 0, 1), 4)
    assert logits.shape == (1, model.cfg.vocab) and np.allclose(logits.numpy()[0], want_step, atol=1e-4)
    _, h = model.step_and_prefill([11], [len(run)], [0], (prompt[4:], 4, 1), 4)
    assert np.allclose(model.head_at(h, 1 + len(prompt[4:]) - 1).numpy(), want_prompt, atol=1e-4)
    with pytest.raises(ValueError):
        model.step_and_prefill([11], [len(run)], [0], (prompt, 0, 0), 8)  # the prompt in a stepping slot


def test_prompts_arriving_together_are_prefilled_in_one_pass_and_answer_as_alone(tiny, monkeypatch):
    model, tok = tiny[0], tiny[1]
    prompts = ["t1 t2 t3", "t4 t5"]
    want = {p: generate(model, tok, tok.encode(p), 6, SamplingParams()).text for p in prompts}
    passes = []
    real = model.prefill_batch

    def spy(parts, *a, **kw):
        passes.append(len(parts))
        return real(parts, *a, **kw)
    monkeypatch.setattr(model, "prefill_batch", spy)
    s = Served(tiny)
    try:
        engine = s.srv.engine
        waiting, engine.pending = engine.pending, queue.Queue()  # the engine waits on its queue, not this one
        jobs = [j for p in prompts for j in engine.start(tok.encode(p), 6, SamplingParams())]
        held, engine.pending = engine.pending, waiting
        with waiting.not_empty:  # both at once: the engine finds them together
            waiting.queue.extend(held.queue)
            waiting.not_empty.notify()
        for j in jobs:
            assert j.wait(60)
        assert [j.outcome().text for j in jobs] == [want[p] for p in prompts]
        assert 2 in passes, passes
    finally:
        s.close()


def test_idle_warm_up_makes_every_capture_and_padded_steps_answer_as_alone(tmp_path):
    # four slots: three streams run as a step of four rows (one padding row of the free slot); the captures of every
    # padded row count and prefill pass are made while the server is idle, before the requests need them
    path, _ = _model(tmp_path)
    kv, tensors = gguf_tensors(str(path))
    tok = Tokenizer.from_gguf(kv)
    model = Transformer(kv, tensors, max_context=CONTEXT, slots=4)
    prompts = ["t1", "t2 t3", "t4 t5 t6"]
    want = {p: generate(model, tok, tok.encode(p), 6, SamplingParams()).text for p in prompts}
    srv = Served((model, tok, None, path), warm=True, mix_prefill=False)
    try:
        engine = srv.srv.engine
        assert [w[:2] for w in engine._captures()[:4]] == [("decode", 1), ("decode", 2), ("decode", 4), ("parts", 1)]
        deadline = time.monotonic() + 300
        while engine.warm_left and time.monotonic() < deadline:
            assert json.loads(srv.get("/health")[1])["status"] == "ok"
            time.sleep(0.05)
        assert engine.warm_left == 0 and json.loads(srv.get("/health")[1]) == {"status": "ok"}
        steps, warmed = model.batched_steps, set(model._jits)
        assert _greedy_together(srv, prompts, 6) == want
        assert model.batched_steps > steps
        # every decode step and every prompts-together pass ran through a capture made while idle
        made = {k for k in set(model._jits) - warmed if isinstance(k, tuple) and k[0] in ("batch", "parts")}
        assert not made, made
        # only padded row counts ran: 1, 2 and 4 (never 3)
        assert not any(k[0] == "batch" and k[1] == 3 for k in model._jits if isinstance(k, tuple))
        # a padding row writes position 1 of its free slot: that slot's prompt-cache record keeps position 0 only;
        # with too few free slots to pad, a step runs its own row count (the engine is idle: no request waits)
        free, cached = list(engine.free), dict(engine.cached)
        engine.free, engine.cached = [3], {3: [5, 6, 7]}
        assert engine._bucket(3) == 4 and engine._pads(3) == [3] and engine.cached[3] == [5]
        engine.free = []
        assert engine._bucket(3) == 3 and engine._pads(3) == [] and engine._bucket(2) == 2
        engine.free, engine.cached = free, cached
    finally:
        srv.close()

