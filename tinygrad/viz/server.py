"""The visualizer's web server: one static page (index.html, beside this file) and its JSON endpoint, on the
loopback only.

`GET /` is the page (HTML with its script and style inline: it fetches nothing but `/api/data`, and its
Content-Security-Policy forbids anything else); `GET /api/data` is `snapshot()`'s JSON. The run log is turned into
the snapshot once, when the server starts; a trace file is read at each request, so a profile written after the
server started (at exit, by the profiler) still shows.
"""
from __future__ import annotations

import json
import pathlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

PAGE = pathlib.Path(__file__).with_name("index.html")
_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:"


class VizServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer on 127.0.0.1 serving `data()` (a JSON-ready dict, asked for at every request)."""
    daemon_threads = True

    def __init__(self, data: Callable[[], dict], port: int = 0):
        self.data = data
        self.page = PAGE.read_bytes()
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (tests, and callers that go on working); `shutdown()` stops it."""
        t = threading.Thread(target=self.serve_forever, name="tinygrad-viz", daemon=True)
        t.start()
        return t


class _Handler(BaseHTTPRequestHandler):
    server: VizServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", self.server.page)
        elif path == "/api/data":
            try:
                body = json.dumps(self.server.data(), allow_nan=False).encode()
            except Exception as e:  # a bad trace file: the page says so instead of spinning
                self._send(500, "application/json", json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
                return
            self._send(200, "application/json", body)
        elif path == "/favicon.ico":
            self._send(204, "image/x-icon", b"")
        else:
            self._send(404, "text/plain", b"not found")

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", _CSP)
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        # quiet: the page's few requests would interleave with the program's own output
        pass
