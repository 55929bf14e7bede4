"""tinygrad.apps.llm.server: the OpenAI-style HTTP server on the small synthetic Gemma 3 of test_llm.py, driven with
urllib and raw sockets: OpenAI's request semantics (seeds, token limits, stop strings, usage in streams, content
parts, refusals of what it does not do, error shape), isolation between clients (slow readers, disconnects, slow and
oversized requests, keep-alive after a rejected body) and operations (API key, /health, a port in use, access log)."""
import json
import socket
import threading
import time
import urllib.error
import urllib.request

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
    ("/v1/chat/completions", _chat("t1", n=2), 400, "n"),
    ("/v1/chat/completions", _chat("t1", logprobs=True), 400, "logprobs"),
    ("/v1/completions", {"prompt": "t1", "logprobs": 3}, 400, "logprobs"),
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
    got = {}

    def client(p):
        got[p] = json.loads(served.post("/v1/completions", {"prompt": p, "max_tokens": 8,
                                                            "temperature": 0})[1])["choices"][0]["text"]
    threads = [threading.Thread(target=client, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert got == want  # five requests over two slots: each answer what it gets alone
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


# ---- operations -------------------------------------------------------------------------------------------------
def test_api_key_health_models_and_the_access_log(tiny):
    s = Served(tiny, api_key="sekret")
    try:
        st, text = s.post("/v1/completions", {"prompt": "t1", "max_tokens": 2})
        assert st == 401 and json.loads(text)["error"]["type"] == "authentication_error"
        st, _ = s.post("/v1/completions", {"prompt": "t1", "max_tokens": 2}, headers={"Authorization": "Bearer no"})
        assert st == 401
        st, _ = s.post("/v1/completions", {"prompt": "t1", "max_tokens": 2},
                       headers={"Authorization": "Bearer sekret"})
        assert st == 200
        assert s.get("/health") == (200, '{"status": "ok"}')
        st, text = s.get("/v1/models", {"Authorization": "Bearer sekret"})
        assert st == 200 and json.loads(text)["data"][0]["id"] == "tiny"
        deadline = time.monotonic() + 5  # a line is written once its answer is out: the client may see it first
        while len(s.log) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(s.log) == 5 and '"POST /v1/completions" 401' in s.log[0] and "2+1 tokens" in s.log[2], s.log
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
