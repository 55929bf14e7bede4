"""An OpenAI-style HTTP server for one model: `POST /v1/completions` and `POST /v1/chat/completions`, each answered
whole or, with `"stream": true`, as server-sent events (`data: {chunk}` lines, then `data: [DONE]`); `GET /v1/models`,
`GET /metrics` (Prometheus's text format, see metrics.py) and `GET /health` (unauthenticated: for load balancers).

Requests take `prompt` (completions) or `messages` (chat: role and content, a string or a list of text parts, written
out by the model's chat template; a model without one answers the chat endpoint with 400), `max_tokens` (chat:
`max_completion_tokens` too; unset, a chat answer runs to EOS or the context's end, a completion to 16 tokens; either
is cut to the operator's `max_tokens_cap`), `temperature`, `top_k`, `top_p`, `min_p`, `repetition_penalty`,
`presence_penalty`, `frequency_penalty`, `seed` (unset: a random one; set: the same text whatever else runs),
`stop` (a string or a list), `stream_options.include_usage`, `n` (choices; with a seed, choice i uses seed + i) and
logprobs (completions: `logprobs`, the number of alternatives; chat: `logprobs: true` and `top_logprobs`), and
vLLM's `ignore_eos` (generate max_tokens whatever comes: for benchmarks). What
the server does not do (tools, images, response_format, logit_bias, ...) is refused with a 400 naming the field
rather than ignored, and a request for another model than the one served is a 404. Errors have OpenAI's shape:
`{"error": {message, type, param, code}}`.

Generations run together, batched (batching.py), on the engine's thread; everything a client can be slow at happens
on the client's own thread: reading and parsing the request (under a header deadline, a body deadline and a body
size limit), tokenizing (after a check that the text could fit the context at all), and writing the answer (a stream
is fed from a bounded queue; a reader that falls behind or stops for `write_timeout` loses its request). A client
that hangs up, streaming or not, cancels its generation. A rejected request's connection is closed unless its body
was read, so the body can't be taken for the next request. Connections past `max_connections` get a 503 at once.
Each request gets one access-log line. SIGTERM or Ctrl-C shuts down gracefully (`serve`, `LLMServer.stop`): no new
connections, the running requests finish within a grace period or are cancelled, and the process exits 0.
"""
from __future__ import annotations

import errno
import hmac
import json
import math
import queue
import select
import signal
import socket
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from tinygrad.apps.llm.batching import MAX_GAP_S, PREFILL_PIECE, BatchEngine, Cancelled, Job
from tinygrad.apps.llm.chat import ChatTemplate, ChatTemplateError
from tinygrad.apps.llm.metrics import Metrics
from tinygrad.apps.llm.model import Transformer
from tinygrad.apps.llm.sampling import SamplingParams
from tinygrad.apps.llm.tokenizer import Tokenizer

MAX_BODY = 1 << 20
COMPLETION_DEFAULT_MAX_TOKENS = 16   # OpenAI's default for /v1/completions
_TYPES = {401: "authentication_error"}  # the rest: invalid_request_error below 500, server_error from 500
# fields a client may send that this server does not act on: refused, since ignoring them changes the answer's meaning
_UNSUPPORTED = ("tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "response_format",
                "logit_bias", "audio", "modalities", "prediction", "suffix", "echo", "best_of")
MAX_N = 16            # choices a request may ask for (each takes a slot's turn, as a request of its own does)
MAX_LOGPROBS = 20     # alternatives a token's logprobs may list (OpenAI's chat limit; its completions allow 5)


class RequestError(Exception):
    """A request the server can't take: answered with `status` and an OpenAI-shaped error naming `param`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


def _text_content(content: Any, where: str) -> str:
    """A message's content: a string, or a list of text parts ({"type": "text", "text": ...}) joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(400, f"{where}.content must be a string or a list of text parts", f"{where}.content")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            raise RequestError(400, f"{where}.content[{j}] is a {kind!r} part: this server takes text parts only "
                                    "(no images or audio)", f"{where}.content[{j}]", "unsupported_content")
        texts.append(part["text"])
    return "".join(texts)


def _messages(messages: Any) -> list[dict[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list of {role, content}", "messages")
    out = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "developer":  # OpenAI's newer name for the system role
            role = "system"
        if role not in ("system", "user", "assistant"):
            raise RequestError(400, f"messages[{i}] needs a role of system, user or assistant, got {role!r}",
                               f"messages[{i}].role")
        for key in ("tool_calls", "function_call"):
            if m.get(key):
                raise RequestError(400, f"messages[{i}].{key}: this server does not support tools",
                                   f"messages[{i}].{key}", "unsupported_parameter")
        out.append({"role": role, "content": _text_content(m.get("content"), f"messages[{i}]")})
    return out


def chat_ids(template: ChatTemplate | None, tok: Tokenizer, messages: Any, max_chars: int | None = None,
             context: int | None = None) -> list[int]:
    """The prompt ids of a chat request's messages, written out by the model's chat template; `max_chars` and
    `context` refuse a conversation too long to fit before all of it is tokenized."""
    if template is None:
        raise RequestError(400, "this model has no chat template (its file has no tokenizer.chat_template, as a base "
                                "model's hasn't): use /v1/completions, or start the server with --chat-template")
    msgs = _messages(messages)
    _check_chars(sum(len(m["content"]) for m in msgs), max_chars, "messages")
    if context is not None:
        _check_tokens(tok, "\n".join(m["content"] for m in msgs), context, "messages")
    try:
        return template.encode(tok, msgs)
    except ChatTemplateError as e:  # the template refused the conversation (roles that don't alternate, ...)
        raise RequestError(400, str(e), "messages") from None


def _check_chars(n: int, max_chars: int | None, param: str) -> None:
    if max_chars is not None and n > max_chars:
        raise RequestError(400, f"the {param} hold {n} characters, more than the context's tokens can hold "
                                f"({max_chars} characters at most)", param, "context_length_exceeded")


def _check_tokens(tok: Tokenizer, text: str, context: int, param: str, piece: int = 2048) -> None:
    """Refuses text that could not fit the context, tokenizing only about a context's worth of it: pieces cut before
    a space are tokenized in turn until their count passes the context by a margin (a cut adds a token or two, never
    more than the margin allows for). The whole text is tokenized afterwards only if it passed, so a megabyte
    prompt costs what a context's worth does, not seconds of a thread that holds the GIL beside the engine."""
    if len(text.encode("utf-8", "surrogatepass")) + 2 <= context:  # a byte is one token at most: it fits
        return
    limit, n, start = context + context // 4 + 16, 0, 0
    while start < len(text):
        end = min(start + piece, len(text))
        if end < len(text):
            cut = text.rfind(" ", start + piece // 2, end)
            end = cut if cut > start else end
        n += len(tok.encode(text[start:end], add_bos=False))
        if n > limit:
            raise RequestError(400, f"the {param} hold more than {context} tokens, the context's size", param,
                               "context_length_exceeded")
        start = end


class Ask:
    """A request's parsed options."""

    def __init__(self, params: SamplingParams, max_tokens: int | None, stop: list[str], stream: bool,
                 include_usage: bool, n: int = 1, logprobs: int | None = None, ignore_eos: bool = False):
        self.params, self.max_tokens, self.stop = params, max_tokens, stop
        self.stream, self.include_usage, self.n, self.logprobs = stream, include_usage, n, logprobs
        self.ignore_eos = ignore_eos


def parse_options(body: dict, chat: bool, name: str, cap: int | None) -> Ask:
    """Checks a request body's options against what the server does (see the module docstring)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(400, "'model' must be a string", "model")
    if model is not None and model != name:
        raise RequestError(404, f"the model {model!r} does not exist: this server serves {name!r}", "model",
                           "model_not_found")
    for key in _UNSUPPORTED:
        if body.get(key) not in (None, False, {}, []) and not (key == "response_format" and
                                                               body[key] == {"type": "text"}):
            raise RequestError(400, f"'{key}' is not supported by this server", key, "unsupported_parameter")

    def num(key, default, kind=float):
        v = body.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or \
                (kind is int and not float(v).is_integer()):
            raise RequestError(400, f"'{key}' must be a finite {'integer' if kind is int else 'number'}, got {v!r}",
                               key)
        return kind(v)
    n = num("n", 1, int)
    if not 1 <= n <= MAX_N:
        raise RequestError(400, f"'n' must be 1 to {MAX_N}, got {n}", "n")
    logprobs = _logprobs(body, chat, num)
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise RequestError(400, "'stop' must be a string or a list of strings", "stop")
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = num(key, None if chat else COMPLETION_DEFAULT_MAX_TOKENS, int)
    if max_tokens is not None and max_tokens < 1:
        raise RequestError(400, f"'{key}' must be at least 1, got {max_tokens}", key)
    if cap is not None:
        max_tokens = cap if max_tokens is None else min(max_tokens, cap)
    seed = num("seed", None, int)
    if seed is not None:
        seed %= 1 << 64  # OpenAI's seeds are signed 64-bit; numpy's must not be negative
    params = SamplingParams(num("temperature", 1.0), num("top_k", 0, int), num("top_p", 1.0), num("min_p", 0.0),
                            num("repetition_penalty", 1.0), seed=seed,
                            presence_penalty=num("presence_penalty", 0.0),
                            frequency_penalty=num("frequency_penalty", 0.0))
    try:
        params.check()
    except ValueError as e:
        raise RequestError(400, str(e)) from None
    so = body.get("stream_options")
    if so is not None and not isinstance(so, dict):
        raise RequestError(400, "'stream_options' must be an object", "stream_options")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise RequestError(400, "'ignore_eos' must be a boolean", "ignore_eos")
    return Ask(params, max_tokens, stop, bool(body.get("stream")), bool((so or {}).get("include_usage")), n,
               logprobs, ignore_eos)


def _logprobs(body: dict, chat: bool, num) -> int | None:
    """How many alternatives each token's logprobs list (None: no logprobs). Completions: `logprobs` is that number;
    chat: `logprobs: true` asks for them and `top_logprobs` is the number."""
    if chat:
        on = body.get("logprobs")
        if on not in (None, True, False):
            raise RequestError(400, "'logprobs' must be a boolean", "logprobs")
        top = num("top_logprobs", None, int)
        if top is not None and not on:
            raise RequestError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs")
        key, k = "top_logprobs", (top or 0) if on else None
    else:
        key, k = "logprobs", num("logprobs", None, int)
    if k is not None and not 0 <= k <= MAX_LOGPROBS:
        raise RequestError(400, f"'{key}' must be 0 to {MAX_LOGPROBS}, got {k}", key)
    return k


def logprobs_object(tok: Tokenizer, entries: list, chat: bool, offset: int = 0) -> dict:
    """OpenAI's logprobs of a choice's tokens (entries of Result.logprobs). Completions: parallel lists of the
    tokens, their logprobs, their alternatives ({token: logprob}) and their offsets in the text (from `offset`, the
    length of the text before them); chat: one record per token with its UTF-8 bytes."""
    def piece(t: int) -> tuple[str, bytes]:
        raw = tok.token_bytes(t)
        return raw.decode("utf-8", "replace"), raw
    if chat:
        def record(t, lp):
            text, raw = piece(t)
            return {"token": text, "logprob": lp, "bytes": list(raw)}
        return {"content": [{**record(t, lp), "top_logprobs": [record(a, alp) for a, alp in top]}
                            for t, lp, top in entries], "refusal": None}
    tokens = [piece(t)[0] for t, _, _ in entries]
    offsets = []
    for text in tokens:
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": [lp for _, lp, _ in entries],
            "top_logprobs": [{piece(a)[0]: alp for a, alp in top} for _, _, top in entries], "text_offset": offsets}


def _stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class LLMServer(ThreadingHTTPServer):
    """The server (see the module docstring). Timeouts are in seconds; `access_log` takes each request's line. With
    `warm` (the CLI's default; `--no-warm` turns it off) the engine makes every decode step's and prefill pass's
    capture while idle (BatchEngine), so no request waits for their compiles; off, each is made at its first use."""

    daemon_threads = True
    # the listen backlog: socketserver's 5 overflowed under 64 clients connecting at once (connections reset or their
    # handshakes retried a second later)
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], model: Transformer, tok: Tokenizer, name: str = "model",
                 chat_template: ChatTemplate | None = None, *, api_key: str | None = None,
                 max_tokens_cap: int | None = None, header_timeout: float = 10.0, body_timeout: float = 30.0,
                 write_timeout: float = 30.0, stream_buffer: int = 256, max_body: int = MAX_BODY,
                 max_connections: int = 256, prefill_piece: int = PREFILL_PIECE, max_gap_s: float = MAX_GAP_S,
                 mix_prefill: bool = True, access_log: Callable[[str], None] | None = _stderr_log, warm: bool = False):
        self.model, self.tok, self.name, self.chat_template = model, tok, name, chat_template
        self.api_key, self.max_tokens_cap, self.max_body = api_key, max_tokens_cap, max_body
        self.header_timeout, self.body_timeout, self.write_timeout = header_timeout, body_timeout, write_timeout
        self.access_log = access_log
        # the longest token's bytes bound how many characters one token covers: text longer than the context times
        # that can't fit, and is refused before tokenizing it (which takes seconds for a megabyte)
        longest = max((len(tok.vocab.raw(i)) for i in range(len(tok.vocab))), default=1)
        self.max_prompt_chars = model.max_context * max(longest, 1)
        self.max_connections, self.connections, self._count_lock = max_connections, 0, threading.Lock()
        super().__init__(address, _Handler)  # binds first: a port in use starts no engine
        self.engine = engine = BatchEngine(model, tok, buffer=stream_buffer, prefill_piece=prefill_piece,
                                           max_gap_s=max_gap_s, mix=mix_prefill, warm=warm)
        self.metrics = Metrics({
            "llm_queue_depth": ("Requests waiting for a slot.", lambda: engine.pending.qsize()),
            "llm_running_streams": ("Requests holding a slot (prefilling or generating).",
                                    lambda: len(engine.active) + len(engine.filling)),
            "llm_captures_to_make": ("Decode steps' and prefill passes' captures not made yet (made while idle).",
                                     lambda: engine.warm_left)})
        self.draining = False       # set by stop(): requests still arriving on open connections get a 503
        self.in_flight, self._flight_lock = 0, threading.Lock()

    def server_close(self) -> None:
        # a closed server's engine makes no more captures (none yet when binding failed: socketserver closes then)
        if getattr(self, "engine", None) is not None:
            self.engine.to_warm.clear()
        super().server_close()

    def stop(self, grace: float = 30.0) -> int:
        """Graceful shutdown: stops taking connections (the listening socket closes: new ones are refused), lets
        the requests in flight finish for up to `grace` seconds, then cancels what still runs. Call it from another
        thread than serve_forever's. Returns how many requests were cancelled."""
        self.draining = True
        self.shutdown()
        self.socket.close()
        deadline = time.monotonic() + grace
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        left = self.in_flight
        if left:
            self.engine.cancel_all("the server is shutting down")
            deadline = time.monotonic() + 5.0  # their threads answer and log
            while self.in_flight and time.monotonic() < deadline:
                time.sleep(0.02)
        return left

    def flight(self, delta: int) -> None:
        with self._flight_lock:
            self.in_flight += delta

    def process_request(self, request, client_address) -> None:
        """A thread for each connection, up to `max_connections` at once; past that a connection gets a 503 and is
        closed at once, so a flood of idle connections can't pile up threads (each is cut after header_timeout)."""
        with self._count_lock:
            full = self.connections >= self.max_connections
            if not full:
                self.connections += 1
        if not full:
            super().process_request(request, client_address)
            return
        body = json.dumps({"error": {"message": f"the server has {self.max_connections} connections open: retry "
                                                "later", "type": "server_error", "param": None, "code": None}})
        try:
            request.settimeout(1.0)
            request.sendall(f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
                            f"{len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n{body}".encode())
        except OSError:
            pass
        self.shutdown_request(request)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._count_lock:
                self.connections -= 1


class _Handler(BaseHTTPRequestHandler):
    server: LLMServer
    protocol_version = "HTTP/1.1"
    # what http.server assumes until a request line parses: its HTTP/0.9 answered a malformed line with a bare body,
    # no status line or headers, which clients can't tell from a broken connection
    default_request_version = "HTTP/1.1"

    # ---- the connection: deadlines, logging -----------------------------------------------------------------------
    def setup(self) -> None:
        self.timeout = self.server.header_timeout
        super().setup()

    def handle_one_request(self) -> None:
        """One request, its line and headers read under the header deadline (a slow sender is cut off, as is an idle
        keep-alive connection)."""
        self._status, self._t0, self._note, self._logged = 0, time.monotonic(), "", False
        self.command, self.path, self.raw_requestline = None, "", b""
        self._timer = threading.Timer(self.server.header_timeout, self._cut_off)
        self._timer.daemon = True
        self._timer.start()
        try:
            super().handle_one_request()
        finally:
            self._timer.cancel()
            if self.raw_requestline and not self._logged:  # refused by http.server itself (a malformed request)
                self._log()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line or headers, an unknown method), in OpenAI's shape."""
        try:
            self._error(RequestError(code, message or explain or HTTPStatus(code).phrase), close=True)
        except OSError:
            self.close_connection = True

    def _cut_off(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _headers_read(self) -> None:
        self._timer.cancel()
        self.connection.settimeout(self.server.write_timeout)

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status = code
        super().send_response(code, message)

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # http.server's own lines are replaced by one access-log line a request (_log)

    def _log(self) -> None:
        self._logged = True
        known = ("/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics")
        self.server.metrics.request(self.path if self.path in known else "other", self._status)
        if self.server.access_log is not None:
            dt = time.monotonic() - self._t0
            self.server.access_log(f'{self.client_address[0]} "{self.command} {self.path}" {self._status or "-"} '
                                   f'{dt:.3f}s{self._note}')

    # ---- answers --------------------------------------------------------------------------------------------------
    def _json(self, status: int, obj: dict, close: bool = False) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _error(self, e: RequestError, close: bool = False) -> None:
        kind = _TYPES.get(e.status, "invalid_request_error" if e.status < 500 else "server_error")
        self._json(e.status, {"error": {"message": str(e), "type": kind, "param": e.param, "code": e.code}}, close)

    def _authorize(self) -> None:
        key = self.server.api_key
        if key is None:
            return
        got = self.headers.get("Authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {key}".encode()):
            raise RequestError(401, "a valid API key is needed: send 'Authorization: Bearer KEY'", None,
                               "invalid_api_key")

    def do_GET(self):  # noqa: N802 - http.server's name
        self._headers_read()
        try:
            if self.path == "/health":
                left = self.server.engine.warm_left
                # still making captures while idle: serving already, a first request may wait for one
                self._json(200, {"status": "ok"} if not left else {"status": "ok", "warming": left})
                return
            self._authorize()
            if self.path == "/metrics":
                data = self.server.metrics.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [self._model_card()]})
            elif self.path == f"/v1/models/{self.server.name}":
                self._json(200, self._model_card())
            elif self.path.startswith("/v1/models/"):
                raise RequestError(404, f"the model {self.path[11:]!r} does not exist: this server serves "
                                        f"{self.server.name!r}", "model", "model_not_found")
            elif self.path in ("/v1/completions", "/v1/chat/completions"):
                raise RequestError(405, f"{self.path} takes POST")
            else:
                raise RequestError(404, f"no endpoint {self.path}")
        except RequestError as e:
            self._error(e)
        finally:
            self._log()

    def _model_card(self) -> dict:
        return {"id": self.server.name, "object": "model", "created": 0, "owned_by": "tinygrad"}

    def _read_body(self) -> bytes:
        """The body, under the body deadline and size limit. Until it is read whole, an error closes the connection:
        its unread bytes must not be taken for the next request."""
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(411, "send the body with a Content-Length (chunked bodies are not taken)")
        if length is None or not length.isdigit():
            raise RequestError(411, "a request body with a Content-Length is needed")
        n = int(length)
        if n > self.server.max_body:
            raise RequestError(413, f"the request body is over {self.server.max_body} bytes")
        deadline = time.monotonic() + self.server.body_timeout
        parts, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RequestError(408, f"the body took over {self.server.body_timeout} s to arrive")
            self.connection.settimeout(left)
            try:
                part = self.rfile.read1(min(n - got, 1 << 16))
            except TimeoutError:
                raise RequestError(408, f"the body took over {self.server.body_timeout} s to arrive") from None
            if not part:
                raise ConnectionResetError("the client closed before sending its body")
            parts.append(part)
            got += len(part)
        self.connection.settimeout(self.server.write_timeout)
        return b"".join(parts)

    def do_POST(self):  # noqa: N802 - http.server's name
        self._headers_read()
        body_read = False
        self.server.flight(1)
        try:
            if self.server.draining:
                raise RequestError(503, "the server is shutting down")
            self._authorize()
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                raise RequestError(404, f"no endpoint {self.path}")
            raw = self._read_body()
            body_read = True
            try:
                body = json.loads(raw or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise RequestError(400, f"the body is not JSON: {e}") from None
            if not isinstance(body, dict):
                raise RequestError(400, "the body must be a JSON object")
            chat = self.path == "/v1/chat/completions"
            ask = parse_options(body, chat, self.server.name, self.server.max_tokens_cap)
            limit = self.server.max_prompt_chars
            if chat:
                ids = chat_ids(self.server.chat_template, self.server.tok, body.get("messages"), limit,
                               self.server.model.max_context)
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, list) and len(prompt) == 1:  # the client library's batch of one
                    prompt = prompt[0]
                if not isinstance(prompt, str):
                    raise RequestError(400, "'prompt' must be a string", "prompt")
                _check_chars(len(prompt), limit, "prompt")
                _check_tokens(self.server.tok, prompt, self.server.model.max_context, "prompt")
                ids = self.server.tok.encode(prompt)
            if len(ids) + 1 > self.server.model.max_context:
                raise RequestError(400, f"the prompt's {len(ids)} tokens fill the context of "
                                        f"{self.server.model.max_context}", "messages" if chat else "prompt",
                                   "context_length_exceeded")
            self._answer(chat, ids, ask)
        except RequestError as e:
            try:
                self._error(e, close=not body_read)
            except OSError:
                self.close_connection = True
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away (or stopped reading)
        except Exception as e:  # noqa: BLE001 - any failure is answered, and the server goes on
            try:
                self._error(RequestError(500, f"{type(e).__name__}: {e}"), close=True)
            except OSError:
                self.close_connection = True
        finally:
            if self.server.draining:
                self.close_connection = True
            self.server.flight(-1)
            self._log()

    # ---- generation -----------------------------------------------------------------------------------------------
    def _client_gone(self) -> bool:
        """Whether the client closed its end (its next bytes, if any, are left for the next request)."""
        try:
            if hasattr(select, "poll"):  # poll, not select: select fails for descriptors past 1023
                p = select.poll()
                p.register(self.connection, select.POLLIN)
                readable = bool(p.poll(0))
            else:
                readable = bool(select.select([self.connection], [], [], 0)[0])
            return readable and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _watch(self, jobs: list[Job]) -> bool:
        """Waits for jobs, cancelling them if the client hangs up; whether they ended with the client still there."""
        for job in jobs:
            while not job.wait(0.1):
                if self._client_gone():
                    for j in jobs:
                        j.cancel("the client disconnected")
                    return False
        return True

    def _answer(self, chat: bool, ids: list[int], ask: Ask) -> None:
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created, name = int(time.time()), self.server.name
        kind = "chat.completion" if chat else "text_completion"
        jobs = self.server.engine.start(ids, ask.max_tokens, ask.params, ask.stop, ask.stream, ask.n, ask.logprobs,
                                        ask.ignore_eos)
        if ask.stream:
            self._stream(jobs, rid, created, chat, kind, len(ids), ask)
            return
        if not self._watch(jobs):
            self._note = " cancelled: the client disconnected"
            self.close_connection = True
            return
        results = [job.outcome() for job in jobs]
        made = sum(len(r.ids) for r in results)
        self._count(jobs, len(ids), made)
        self._note = f" {len(ids)}+{made} tokens"
        usage = _usage(jobs, len(ids), made)
        choices = []
        for i, res in enumerate(results):
            lp = None if ask.logprobs is None else logprobs_object(self.server.tok, res.logprobs, chat)
            if chat:
                choices.append({"index": i, "message": {"role": "assistant", "content": res.text}, "logprobs": lp,
                                "finish_reason": res.finish})
            else:
                choices.append({"index": i, "text": res.text, "logprobs": lp, "finish_reason": res.finish})
        self._json(200, {"id": rid, "object": kind, "created": created, "model": name, "choices": choices,
                         "usage": usage})

    def _count(self, jobs: list[Job], prompt: int, made: int) -> None:
        """The metrics of an answered request: its tokens, and its time to the first token of any choice."""
        self.server.metrics.tokens(prompt, made)
        firsts = [j.first_at - j.started for j in jobs if j.first_at is not None]
        if firsts:
            self.server.metrics.ttft(min(firsts))

    def _send(self, data: bytes) -> None:
        """Writes one server-sent event; the socket's timeout is the write timeout, so a reader that stopped raises."""
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(self, jobs: list[Job], rid: str, created: int, chat: bool, kind: str, n_prompt: int,
                ask: Ask) -> None:
        """Writes the jobs' text as server-sent events from this thread, as the engine makes it: each chunk carries
        one choice's new text (and the logprobs of the tokens that made it, when asked for)."""
        tok, include_usage = self.server.tok, ask.include_usage
        sent = [0] * len(jobs)        # each choice's tokens whose logprobs are out
        offsets = [0] * len(jobs)     # and the length of its text so far

        def event(choices: list, usage: Any = None) -> bytes:
            obj = {"id": rid, "object": kind + (".chunk" if chat else ""), "created": created,
                   "model": self.server.name, "choices": choices}
            if include_usage:
                obj["usage"] = usage
            return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()

        def choice(i: int, text: str | None, upto: int | None = None, finish: str | None = None,
                   role: bool = False) -> dict:
            lp = None
            if ask.logprobs is not None and upto is not None:
                entries = jobs[i].d.res.logprobs[sent[i]:upto]
                lp = logprobs_object(tok, entries, chat, offsets[i])
                sent[i] += len(entries)
            offsets[i] += len(text or "")
            if not chat:
                return {"index": i, "text": text or "", "logprobs": lp, "finish_reason": finish}
            delta = {"role": "assistant", "content": ""} if role else {} if text is None else {"content": text}
            return {"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish}

        self.close_connection = True
        events = jobs[0].events
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.flush()
            if chat:  # each choice's first chunk carries the role, as OpenAI's does
                for i in range(len(jobs)):
                    self._send(event([choice(i, None, role=True)]))
            running = len(jobs)
            while running:
                try:
                    i, text, upto = events.get(timeout=0.1)
                except queue.Empty:
                    if self._client_gone():
                        raise ConnectionResetError("the client disconnected") from None
                    if all(j.done.is_set() for j in jobs) and events.empty():
                        break
                    continue
                if text is None:
                    running -= 1
                    continue
                self._send(event([choice(i, text, upto)]))
        except (ConnectionError, TimeoutError) as e:  # gone, or not reading for write_timeout: its generation ends
            for job in jobs:
                job.cancel(f"the client is gone ({type(e).__name__})")
            self._note = " cancelled: the client is gone or too slow"
            return
        try:
            results = [(job.wait(), job.outcome())[1] for job in jobs]
        except Cancelled as e:
            self._note = f" cancelled: {e}"
            return
        except Exception as e:  # noqa: BLE001 - the headers are out: the error goes in the stream
            err = {"error": {"message": f"{type(e).__name__}: {e}", "type": "server_error", "param": None,
                             "code": None}}
            self.wfile.write(f"data: {json.dumps(err)}\n\n".encode())
            self._note = " failed"
            return
        made = sum(len(r.ids) for r in results)
        self._count(jobs, n_prompt, made)
        self._note = f" {n_prompt}+{made} tokens"
        for i, res in enumerate(results):
            self.wfile.write(event([choice(i, None, len(res.logprobs), res.finish)]))
        if include_usage:
            self.wfile.write(event([], _usage(jobs, n_prompt, made)))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def _usage(jobs: list[Job], prompt: int, made: int) -> dict:
    """OpenAI's usage record; `cached_tokens`: the prompt tokens the prompt cache saved prefilling (the first
    choice's: the prompt is counted once)."""
    return {"prompt_tokens": prompt, "completion_tokens": made, "total_tokens": prompt + made,
            "prompt_tokens_details": {"cached_tokens": jobs[0].reused}}


def serve(model: Transformer, tok: Tokenizer, port: int, host: str = "127.0.0.1", name: str = "model",
          chat_template: ChatTemplate | None = None, grace: float = 30.0, **options: Any) -> int:
    """Serve until SIGTERM or Ctrl-C (SIGINT), then shut down gracefully (LLMServer.stop: no new connections, the
    running requests finish within `grace` seconds or are cancelled; a second signal cancels them at once) and
    return 0; `options` go to LLMServer. Returns 1 when the address can't be had (in use, or not this machine's)."""
    try:
        srv = LLMServer((host, port), model, tok, name, chat_template, **options)
    except OSError as e:
        why = f"port {port} is in use on {host}" if e.errno == errno.EADDRINUSE else e.strerror or str(e)
        print(f"error: can't serve on {host}:{port}: {why} (choose another with --serve PORT / --host)",
              file=sys.stderr)
        return 1
    stop, signals = threading.Event(), []

    def on_signal(signum, frame):
        if stop.is_set():  # a second one: no more waiting
            srv.engine.cancel_all("the server is shutting down")
        stop.set()
    if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
        signals = [(sig, signal.signal(sig, on_signal)) for sig in (signal.SIGTERM, signal.SIGINT)]
    print(f"serving {name} on http://{host}:{srv.server_address[1]}/v1", flush=True)
    threading.Thread(target=srv.serve_forever, name="llm-accept", daemon=True).start()
    try:
        while not stop.wait(0.2):  # a timed wait: the main thread must come back to run the signal handler
            pass
        print(f"shutting down: {srv.in_flight} requests in flight, {grace:g} s to finish", file=sys.stderr,
              flush=True)
        cancelled = srv.stop(grace)
        if cancelled:
            print(f"cancelled {cancelled} requests still running after {grace:g} s", file=sys.stderr, flush=True)
    finally:
        for sig, old in signals:
            signal.signal(sig, old)
        srv.server_close()
    return 0
