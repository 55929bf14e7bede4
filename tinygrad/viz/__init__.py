"""The visualizer: a web page on the loopback showing what tinygrad ran.

- the schedule as a graph of kernels (and copies) and the buffers they read and write, in the order they ran;
- for each kernel, side by side: its AST, the Opts it was compiled with, its uops and its rendered source;
- a profiler trace (Chrome's trace event format, PROFILE=1's) as a timeline, one lane per device and stream.

Recording is the engine's (engine/runlog.py) while the VIZ knob is on. Three ways in:

    VIZ=1 python script.py              # at exit, serve what the script realized (Ctrl-C ends it)
    python -m tinygrad.viz script.py    # the same, with --trace FILE for a timeline, --save FILE for the JSON
    python -m tinygrad.viz --trace trace.json

and in code: `with Context(VIZ=1): ...` records; `serve(block=False)` returns a running `VizServer`.
"""
from __future__ import annotations

import atexit
import os

from tinygrad.engine.runlog import RUN_LOG, RunLog
from tinygrad.helpers import getenv
from tinygrad.viz.server import VizServer
from tinygrad.viz.snapshot import snapshot
from tinygrad.viz.trace import load_trace

__all__ = ["serve", "serve_at_exit", "snapshot", "load_trace", "VizServer"]


def serve(trace: str | os.PathLike | None = None, port: int = 0, block: bool = True, log: RunLog = RUN_LOG,
          data: dict | None = None) -> VizServer:
    """Serve the page for `log` (or a saved snapshot `data`) and the trace file `trace` on 127.0.0.1:`port` (0: a
    free one), printing its address. `block`: until Ctrl-C (then returns the stopped server); else in a thread."""
    base = data if data is not None else snapshot(log)

    def current() -> dict:
        # the trace file is read at each request: a profiler may write it after the server started
        return dict(base, trace=load_trace(trace) if trace is not None and os.path.exists(trace) else base.get("trace"))

    srv = VizServer(current, port)
    print(f"tinygrad viz: serving {len(base['items'])} items at {srv.url}", flush=True)
    if not block:
        srv.start()
        return srv
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return srv


_registered = False


def serve_at_exit() -> None:
    """Serve the page when the program exits (VIZ=1 in the environment: tinygrad/__init__.py calls this). The trace
    named by VIZ_TRACE, if any, is drawn as the timeline (give it PROFILE's output file)."""
    global _registered
    if not _registered:
        _registered = True
        atexit.register(_at_exit)


_exiting = False


def _at_exit() -> None:
    global _exiting
    if _exiting:
        return
    _exiting = True
    # serving blocks until Ctrl-C: every other exit handler runs first, those registered before this one (due after
    # it) too, as a profiler's may be that writes the trace the page draws; cleared then, none runs twice
    run_others, clear = getattr(atexit, "_run_exitfuncs", None), getattr(atexit, "_clear", None)
    if run_others is not None and clear is not None:
        run_others()
        clear()
    if not RUN_LOG.entries:
        print("tinygrad viz: nothing was realized while VIZ was on", flush=True)
        return
    serve(trace=getenv("VIZ_TRACE", "") or None)
