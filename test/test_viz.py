"""The visualizer (tinygrad/viz): the JSON its page reads for a small realized graph, the server, the VIZ=1 exit
path, and the page itself in a real browser.

The browser test starts Debian's headless `chromium` and drives it through the DevTools protocol over a WebSocket
client written here with the standard library (RFC 6455 framing, client side only): it loads the page the test
serves, clicks a kernel with real mouse events, checks the kernel's source is shown, fails on any console error or
uncaught exception, and saves screenshots to $TINYGRAD_ARTIFACTS (default test-artifacts/) for CI to keep.
It skips when chromium is not installed.
"""
from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from test.helpers import default_sigint
from tinygrad import Device, Tensor
from tinygrad.engine.runlog import RUN_LOG
from tinygrad.helpers import Context
from tinygrad.viz import serve, snapshot
from tinygrad.viz.__main__ import main as viz_main
from tinygrad.viz.snapshot import relinearize
from tinygrad.viz.trace import load_trace, parse_trace

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

def make_trace(first: str = "E_4", second: str = "r_4") -> dict:
    """A trace in the profiler's format: a host lane (a span nested in another) and a device lane, named by metadata
    events, with kernels `first` and `second`."""
    return {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "host"}},
        {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "CLANG"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 0, "args": {"name": "stream 0"}},
        {"ph": "X", "name": f"compile {first}", "cat": "host", "ts": 0, "dur": 300, "pid": 1, "tid": 0, "args": {}},
        {"ph": "X", "name": f"linearize {first}", "cat": "host", "ts": 10, "dur": 100, "pid": 1, "tid": 0,
         "args": {}},
        {"ph": "X", "name": first, "cat": "kernel", "ts": 310, "dur": 40.5, "pid": 2, "tid": 0,
         "args": {"global_size": [4], "flops": 8}},
        {"ph": "X", "name": second, "cat": "kernel", "ts": 400, "dur": 20, "pid": 2, "tid": 0, "args": {}},
        {"ph": "i", "name": "ignored instant", "ts": 5, "pid": 1, "tid": 0},
    ]}


TRACE = make_trace()


def _realize_small_graph():
    """Two kernels, the second reading the first's output, recorded into a cleared run log."""
    RUN_LOG.clear()
    with Context(VIZ=1):
        a = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
        b = (a * 2 + 1).realize()
        c = (a + b).sum().realize()
    return a, b, c


def _get(url: str) -> tuple[int, dict, bytes]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, dict(r.headers), r.read()


class TestSnapshot(unittest.TestCase):
    def test_small_graph(self):
        _, _, c = _realize_small_graph()
        self.assertEqual(c.numpy(), 34.0)
        data = snapshot()
        kernels = [i for i in data["items"] if i["kind"] == "kernel"]
        self.assertEqual(len(kernels), 2)
        self.assertEqual(len(data["programs"]), 2)
        first, second = kernels
        # the second kernel reads the buffer node the first wrote, and the edges say so
        self.assertIn(first["outputs"][0], second["inputs"])
        self.assertIn([f"k{first['id']}", f"b{first['outputs'][0]}"], data["edges"])
        self.assertIn([f"b{first['outputs'][0]}", f"k{second['id']}"], data["edges"])
        # every edge joins nodes that exist, and every item is joined to its buffers
        names = {f"k{i['id']}" for i in data["items"]} | {f"b{b['id']}" for b in data["buffers"]}
        self.assertTrue(all(a in names and b in names for a, b in data["edges"]))
        self.assertEqual(len(data["edges"]), sum(len(i["inputs"]) + len(i["outputs"]) for i in data["items"]))
        for k in kernels:
            p = data["programs"][k["program"]]
            self.assertIn(p["name"].split("n")[0], p["src"])
            self.assertIn("BufferOps.STORE", p["ast"])
            self.assertIn("DEFINE_GLOBAL", p["uops"])
            self.assertTrue(p["opts"].startswith("[") and p["opts"].endswith("]"))
            self.assertEqual(p["runs"], 1)
        # the sum's output is a one-element buffer; sizes and dtypes come through
        out = data["buffers"][second["outputs"][0]]
        self.assertEqual((out["size"], out["dtype"], out["version"]), (1, "float", 0))
        json.dumps(data, allow_nan=False)

    def test_uops_are_the_sources(self):
        """The uops shown are the ones the source was rendered from: linearized again with the kernel's Opts, they
        render to its source byte for byte (a conv, a matmul, a softmax and their gradients)."""
        RUN_LOG.clear()
        w, w2 = Tensor.rand(4, 3, 3, 3, requires_grad=True), Tensor.rand(36, 5, requires_grad=True)
        with Context(VIZ=1):
            x = Tensor.rand(2, 3, 5, 5, requires_grad=True)
            loss = (x.conv2d(w).relu().flatten(1) @ w2).softmax().sum()
            loss.backward()
            Tensor.realize(loss, w.grad, w2.grad, x.grad)
        kernels = [e for e in RUN_LOG.entries if getattr(e.runner, "spec", None) is not None]
        self.assertGreater(len(kernels), 5)
        for e in kernels:
            lin = relinearize(e.runner.dname, e.ast, e.runner.spec.applied_opts)
            self.assertEqual(Device[e.runner.dname].renderer(lin.name, lin.uops).src, e.runner.spec.src)

    def test_nothing_recorded_when_off(self):
        RUN_LOG.clear()
        (Tensor([1.0, 2.0]) * 3).realize()
        self.assertEqual(RUN_LOG.entries, [])

    def test_rewritten_buffer_gets_a_new_node(self):
        RUN_LOG.clear()
        with Context(VIZ=1):
            a = Tensor.zeros(4).contiguous().realize()
            a.assign(a + 1).realize()
        data = snapshot()
        versions = [b["version"] for b in data["buffers"] if b["buffer"] == data["buffers"][0]["buffer"]]
        self.assertEqual(versions, list(range(len(versions))))
        self.assertGreaterEqual(len(versions), 2)

    def test_log_is_bounded(self):
        from tinygrad.engine.runlog import RunLog
        _realize_small_graph()
        e = RUN_LOG.entries[-1]
        log = RunLog(limit=1)
        for _ in range(3):
            log.record(e.ast, e.runner, [], 0, None)
        self.assertEqual((len(log.entries), log.dropped), (1, 2))


class TestTrace(unittest.TestCase):
    def test_parse(self):
        t = parse_trace(TRACE)
        self.assertEqual([e["name"] for e in t["events"]], ["compile E_4", "linearize E_4", "E_4", "r_4"])
        self.assertEqual(t["processes"], {"1": "host", "2": "CLANG"})
        self.assertEqual(t["threads"], {"2:0": "stream 0"})
        self.assertEqual(parse_trace(TRACE["traceEvents"])["events"], t["events"])
        self.assertEqual(parse_trace([{"ph": "X", "name": "no ts"}])["skipped"], 1)
        with self.assertRaises(ValueError):
            parse_trace({"traceEvents": 3})


class TestServer(unittest.TestCase):
    def test_endpoint_and_page(self):
        _realize_small_graph()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.json")
            srv = serve(trace=path, block=False)
            try:
                code, headers, body = _get(srv.url + "api/data")
                data = json.loads(body)
                self.assertEqual(code, 200)
                self.assertEqual(data["items"], snapshot()["items"])
                self.assertIsNone(data["trace"])
                # the trace file is read at each request: one written after the server started shows
                with open(path, "w") as f:
                    json.dump(TRACE, f)
                self.assertEqual(len(json.loads(_get(srv.url + "api/data")[2])["trace"]["events"]), 4)
                code, headers, page = _get(srv.url)
                self.assertEqual(code, 200)
                self.assertIn("default-src 'none'", headers["Content-Security-Policy"])
                # one static page: nothing to fetch but the endpoint (the SVG namespace is a name, not a fetch)
                text = page.decode().replace("http://www.w3.org/2000/svg", "")
                self.assertNotIn("http://", text)
                self.assertNotIn("https://", text)
                self.assertNotIn(" src=", text)
                self.assertEqual(srv.server_address[0], "127.0.0.1")
            finally:
                srv.shutdown()
                srv.server_close()

    def test_cli_save_and_load(self):
        with tempfile.TemporaryDirectory() as d:
            script, out, trace = (os.path.join(d, n) for n in ("s.py", "out.json", "trace.json"))
            with open(script, "w") as f:
                f.write("from tinygrad import Tensor\n(Tensor([1.0, 2.0]) * 5).realize()\nraise SystemExit(3)\n")
            with open(trace, "w") as f:
                json.dump(TRACE, f)
            RUN_LOG.clear()
            argv, path = sys.argv, list(sys.path)
            try:
                # the script's exit code comes back, after the page's data is written
                self.assertEqual(viz_main(["--trace", trace, "--save", out, script]), 3)
            finally:
                sys.argv, sys.path[:] = argv, path
            with open(out) as f:
                saved = json.load(f)
            self.assertEqual(sum(i["kind"] == "kernel" for i in saved["items"]), 1)
            self.assertEqual(saved["trace"]["events"], load_trace(trace)["events"])
            # what --load serves: the saved data as it was
            srv = serve(data=saved, block=False)
            try:
                self.assertEqual(json.loads(_get(srv.url + "api/data")[2]), saved)
            finally:
                srv.shutdown()
                srv.server_close()


class TestVizAtExit(unittest.TestCase):
    def test_env_serves_at_exit(self):
        """VIZ=1 in the environment: the script runs, then its page is served until Ctrl-C."""
        tmp = tempfile.mkdtemp(prefix="tinygrad-viz-")
        trace = os.path.join(tmp, "trace.json")
        env = dict(os.environ, VIZ="1", VIZ_TRACE=trace, PYTHONPATH=str(ROOT))
        # a stand-in for the profiler: an exit handler registered before tinygrad's (so due after it), writing the
        # trace at exit
        code = ("import atexit, json\n"
                f"atexit.register(lambda: json.dump({TRACE!r}, open({trace!r}, 'w')))\n"
                "from tinygrad import Tensor\nprint((Tensor([1.0, 2.0]) + 1).numpy().tolist(), flush=True)\n")
        p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True,
                             preexec_fn=default_sigint)
        try:
            self.assertEqual(p.stdout.readline().strip(), "[2.0, 3.0]")
            line = p.stdout.readline()
            self.assertIn("http://127.0.0.1:", line)
            url = line.split()[-1]
            data = json.loads(_get(url + "api/data")[2])
            self.assertEqual(sum(i["kind"] == "kernel" for i in data["items"]), 1)
            self.assertEqual(len(data["trace"]["events"]), 4)
            p.send_signal(signal.SIGINT)
            self.assertEqual(p.wait(timeout=20), 0)
        finally:
            if p.poll() is None:
                p.kill()
            p.stdout.close()
            shutil.rmtree(tmp, ignore_errors=True)


# ---- a WebSocket client (RFC 6455), just enough for the DevTools protocol ----

class WebSocket:
    """Text frames over a plain TCP socket to ws://127.0.0.1: the client masks what it sends, the server doesn't."""

    def __init__(self, url: str, timeout: float = 20.0):
        assert url.startswith("ws://")
        hostport, _, path = url[5:].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("the DevTools socket closed during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"WebSocket handshake refused: {head[:200]!r}")

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the DevTools socket closed")
            buf += chunk
        return buf

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, text: str) -> None:
        self._send_frame(0x1, text.encode())

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            opcode = b0 & 0x0F
            if opcode == 0x9:  # ping: answer, keep reading
                self._send_frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise ConnectionError("the DevTools socket was closed by the browser")
            if opcode in (0x0, 0x1, 0x2):
                parts.append(payload)
                if b0 & 0x80:  # FIN: the message is whole
                    return b"".join(parts).decode()

    def close(self) -> None:
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class DevTools:
    """Calls on one page target; events that arrive meanwhile are kept in `events`."""

    def __init__(self, ws: WebSocket):
        self.ws, self.next_id, self.events = ws, 0, []

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def eval(self, expr: str):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def errors(self) -> list:
        """Console errors, uncaught exceptions and browser log errors (a failed load, a CSP refusal) so far."""
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"].get("exception", {}).get("description") or p["exceptionDetails"])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append([a.get("value", a.get("description")) for a in p.get("args", [])])
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"].get("text"))
        return out


def _wait(cond, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise TimeoutError(what)


@unittest.skipIf(CHROMIUM is None, "chromium is not installed (apt install chromium)")
class TestVizBrowser(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tinygrad-viz-chromium-")
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-dev-shm-usage",
             "--remote-debugging-port=0", f"--user-data-dir={self.tmp}", "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.tmp, "DevToolsActivePort")
        port = _wait(lambda: os.path.exists(port_file) and open(port_file).read().split("\n")[0], 15,
                     "chromium did not open its DevTools port")
        targets = _wait(lambda: [t for t in json.loads(_get(f"http://127.0.0.1:{port}/json/list")[2])
                                 if t.get("type") == "page"], 10, "no page target")
        self.ws = WebSocket(targets[0]["webSocketDebuggerUrl"])
        self.dt = DevTools(self.ws)

    def tearDown(self):
        self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _screenshot(self, name: str) -> None:
        out = pathlib.Path(os.environ.get("TINYGRAD_ARTIFACTS") or ROOT / "test-artifacts")
        out.mkdir(parents=True, exist_ok=True)
        png = base64.b64decode(self.dt.call("Page.captureScreenshot", format="png")["data"])
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        (out / name).write_bytes(png)

    def _click(self, selector: str) -> None:
        """A real click (mouse pressed and released at the element's centre), as a person would."""
        rect = self.dt.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                            "e.scrollIntoView({block: 'center', inline: 'center'}); "
                            "const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.dt.call("Input.dispatchMouseEvent", type=kind, x=rect[0], y=rect[1], button="left", clickCount=1)

    def test_click_into_a_kernel(self):
        _realize_small_graph()
        names = [p["name"] for p in snapshot()["programs"]]
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "trace.json")
            with open(trace, "w") as f:
                json.dump(make_trace(*names), f)
            srv = serve(trace=trace, block=False)
            try:
                data = json.loads(_get(srv.url + "api/data")[2])
                for domain in ("Runtime", "Log", "Page"):
                    self.dt.call(f"{domain}.enable")
                self.dt.call("Page.navigate", url=srv.url)
                _wait(lambda: self.dt.eval("document.body && document.body.getAttribute('data-ready')") == "1", 15,
                      f"the page did not load its data; console: {self.dt.errors()}")
                n_nodes = self.dt.eval("document.querySelectorAll('#graph .node').length")
                self.assertEqual(n_nodes, len(data["items"]) + len(data["buffers"]))
                # click the second kernel (the one reading the first's output)
                kernels = [i for i in data["items"] if i["kind"] == "kernel"]
                self._click(f"#graph [data-item=\"{kernels[1]['id']}\"]")
                prog = data["programs"][kernels[1]["program"]]
                _wait(lambda: self.dt.eval("(document.getElementById('pane-src') || {}).textContent") == prog["src"],
                      5, "the kernel's source was not shown after the click")
                for pane in ("ast", "opts", "uops"):
                    self.assertEqual(self.dt.eval(f"document.getElementById('pane-{pane}').textContent"), prog[pane])
                self._screenshot("viz-kernel.png")
                self._click("#tab-timeline")
                n_events = _wait(lambda: self.dt.eval("document.querySelectorAll('#timeline rect.event').length"), 5,
                                 "the timeline drew no events")
                self.assertEqual(n_events, 4)
                # the span nested in another on the same thread is drawn a row below it
                ys = self.dt.eval("[...document.querySelectorAll('#timeline rect.event')]"
                                  ".map((r) => +r.getAttribute('y'))")
                self.assertEqual(ys[1] - ys[0], 20)
                self._click("#timeline rect.event")
                self.assertIn(f"compile {names[0]}", self.dt.eval("document.getElementById('tl-info').textContent"))
                self._screenshot("viz-timeline.png")
                # a kernel's event links to the kernel: back in the schedule, with its source shown
                first = data["programs"][kernels[0]["program"]]
                self._click(f"#timeline rect[data-name=\"{first['name']}\"]")
                self._click("#tl-open-kernel")
                _wait(lambda: self.dt.eval("(document.getElementById('pane-src') || {}).textContent") == first["src"],
                      5, "the timeline's link did not open the kernel")
                self.assertTrue(self.dt.eval("document.getElementById('view-graph').classList.contains('on')"))
                self.assertEqual(self.dt.errors(), [])
            finally:
                srv.shutdown()
                srv.server_close()


if __name__ == "__main__":
    unittest.main()
