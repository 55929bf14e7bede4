"""An OpenAI-style HTTP server for one model: `POST /v1/completions` and `POST /v1/chat/completions`, each answered
whole or, with `"stream": true`, as server-sent events (`data: {chunk}` lines, then `data: [DONE]`).

Requests take `prompt` (completions) or `messages` (chat: role and content, written out by the model's chat template;
a model without one answers the chat endpoint with 400),
`max_tokens`, `temperature`, `top_k`, `top_p`, `min_p`, `repetition_penalty`, `seed` and `stop` (a string or a list).
Clients are served on threads of their own; their generations run together, batched (batching.py): each of the
model's sequence slots holds one request, and every decode step advances all of them at once (the weights read once
for all), so concurrent requests share the time a step takes; requests beyond the slots wait for one to free up.
A request the server can't take gets a 4xx answer with a JSON error naming the problem; a failure while generating
a 500; the server keeps serving either way.
"""
from __future__ import annotations

import json
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tinygrad.apps.llm.batching import BatchEngine
from tinygrad.apps.llm.chat import ChatTemplate, ChatTemplateError
from tinygrad.apps.llm.model import Transformer
from tinygrad.apps.llm.sampling import SamplingParams
from tinygrad.apps.llm.tokenizer import Tokenizer

MAX_BODY = 1 << 20


class RequestError(Exception):
    """A request the server can't take: answered with `status` and a JSON error."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def chat_ids(template: ChatTemplate | None, tok: Tokenizer, messages: Any) -> list[int]:
    """The prompt ids of a chat request's messages, written out by the model's chat template."""
    if template is None:
        raise RequestError(400, "this model has no chat template (its file has no tokenizer.chat_template, as a base "
                                "model's hasn't): use /v1/completions, or start the server with --chat-template")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list of {role, content}")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or \
                m.get("role") not in ("system", "user", "assistant"):
            raise RequestError(400, "each message needs a role (system, user or assistant) and a string content")
    try:
        return template.encode(tok, [{"role": m["role"], "content": m["content"]} for m in messages])
    except ChatTemplateError as e:  # the template refused the conversation (roles that don't alternate, ...)
        raise RequestError(400, str(e)) from None


def _params(body: dict) -> tuple[SamplingParams, int, list[str]]:
    def num(key, default, kind=float):
        v = body.get(key, default)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not float(v).is_integer()):
            raise RequestError(400, f"'{key}' must be a number, got {v!r}")
        return kind(v)
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise RequestError(400, "'stop' must be a string or a list of strings")
    max_tokens = num("max_tokens", 16, int)
    if max_tokens < 1:
        raise RequestError(400, f"'max_tokens' must be at least 1, got {max_tokens}")
    params = SamplingParams(num("temperature", 1.0), num("top_k", 0, int), num("top_p", 1.0), num("min_p", 0.0),
                            num("repetition_penalty", 1.0), seed=num("seed", 0, int))
    try:
        params.check()
    except ValueError as e:
        raise RequestError(400, str(e)) from None
    return params, max_tokens, stop


class LLMServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], model: Transformer, tok: Tokenizer, name: str = "model",
                 chat_template: ChatTemplate | None = None):
        super().__init__(address, _Handler)
        self.model, self.tok, self.name, self.chat_template = model, tok, name, chat_template
        self.engine = BatchEngine(model, tok)


class _Handler(BaseHTTPRequestHandler):
    server: LLMServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # quiet: a server for programs, not a log for people

    def _json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        kind = "invalid_request_error" if status < 500 else "server_error"
        self._json(status, {"error": {"message": message, "type": kind, "code": status}})

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.server.name, "object": "model"}]})
        elif self.path in ("/v1/completions", "/v1/chat/completions"):
            self._error(405, f"{self.path} takes POST")
        else:
            self._error(404, f"no endpoint {self.path}")

    def do_POST(self):  # noqa: N802 - http.server's name
        try:
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                raise RequestError(404, f"no endpoint {self.path}")
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                raise RequestError(411, "a request body with a Content-Length is needed")
            if int(length) > MAX_BODY:
                raise RequestError(413, f"the request body is over {MAX_BODY} bytes")
            try:
                body = json.loads(self.rfile.read(int(length)) or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise RequestError(400, f"the body is not JSON: {e}") from None
            if not isinstance(body, dict):
                raise RequestError(400, "the body must be a JSON object")
            chat = self.path == "/v1/chat/completions"
            if chat:
                ids = chat_ids(self.server.chat_template, self.server.tok, body.get("messages"))
            else:
                prompt = body.get("prompt")
                if not isinstance(prompt, str):
                    raise RequestError(400, "'prompt' must be a string")
                ids = self.server.tok.encode(prompt)
            params, max_tokens, stop = _params(body)
            if len(ids) + 1 > self.server.model.max_context:
                raise RequestError(400, f"the prompt's {len(ids)} tokens fill the context of "
                                        f"{self.server.model.max_context}")
            self._answer(chat, bool(body.get("stream")), ids, params, max_tokens, stop)
        except RequestError as e:
            self._error(e.status, str(e))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away
        except Exception as e:  # noqa: BLE001 - any failure is answered, and the server goes on
            try:
                self._error(500, f"{type(e).__name__}: {e}")
            except OSError:
                pass

    def _answer(self, chat: bool, stream: bool, ids: list[int], params: SamplingParams, max_tokens: int,
                stop: list[str]) -> None:
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created, name = int(time.time()), self.server.name
        kind = "chat.completion" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None) -> dict:
            if chat:
                choice = {"index": 0, "delta": {"content": text} if text is not None else {}, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish}
            return {"id": rid, "object": kind + (".chunk" if chat else ""), "created": created, "model": name,
                    "choices": [choice]}

        send = None
        if stream:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

            def send(text: str) -> None:
                self.wfile.write(f"data: {json.dumps(chunk(text, None), ensure_ascii=False)}\n\n".encode())
                self.wfile.flush()
        res = self.server.engine.submit(ids, max_tokens, params, stop, send)
        usage = {"prompt_tokens": len(ids), "completion_tokens": len(res.ids),
                 "total_tokens": len(ids) + len(res.ids)}
        if stream:
            self.wfile.write(f"data: {json.dumps(chunk(None, res.finish))}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            return
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": res.text}, "finish_reason": res.finish}
        else:
            choice = {"index": 0, "text": res.text, "finish_reason": res.finish}
        self._json(200, {"id": rid, "object": kind, "created": created, "model": name, "choices": [choice],
                         "usage": usage})


def serve(model: Transformer, tok: Tokenizer, port: int, host: str = "127.0.0.1", name: str = "model",
          chat_template: ChatTemplate | None = None) -> None:
    """Serve until interrupted (Ctrl-C stops it)."""
    srv = LLMServer((host, port), model, tok, name, chat_template)
    print(f"serving {name} on http://{host}:{srv.server_address[1]}/v1", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
