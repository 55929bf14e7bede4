"""`python -m tinygrad.viz [--trace FILE] [--port N] [--save FILE | --load FILE] [script.py [args ...]]`: run a
script with VIZ on (if one is given) and serve the page of what it realized, with the trace as its timeline."""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import traceback

import tinygrad.viz as viz
from tinygrad.helpers import Context


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tinygrad.viz", description=__doc__)
    ap.add_argument("--trace", help="a Chrome trace JSON (PROFILE=1's) to draw as the timeline")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    ap.add_argument("--save", help="write the page's JSON to this file instead of serving it")
    ap.add_argument("--load", help="serve a JSON written by --save")
    ap.add_argument("script", nargs="?", help="a Python script to run with VIZ on")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    a = ap.parse_args(argv)
    if a.load and (a.script or a.save):
        ap.error("--load serves a saved page: no script, no --save")
    # a VIZ=1 environment would also serve at exit: this command serves once, here
    viz._registered = True
    rc = 0
    if a.script:
        # as `python script.py` would: its arguments, and its folder first on the import path
        sys.argv = [a.script, *a.args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
        with Context(VIZ=1):
            try:
                runpy.run_path(a.script, run_name="__main__")
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            except Exception:  # what ran up to the error is worth a look: show it, then the page
                traceback.print_exc()
                rc = 1
    data = None
    if a.load:
        with open(a.load) as f:
            data = json.load(f)
    if a.save:
        out = viz.snapshot(trace=viz.load_trace(a.trace) if a.trace else None)
        with open(a.save, "w") as f:
            json.dump(out, f)
        print(f"tinygrad viz: wrote {len(out['items'])} items to {a.save}")
        return rc
    viz.serve(trace=a.trace, port=a.port, data=data)
    return rc


if __name__ == "__main__":
    sys.exit(main())
