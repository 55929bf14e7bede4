"""Reading a profiler trace (Chrome's trace event format, as PROFILE=1 writes it) for the visualizer's timeline.

Only what the page draws is kept: complete events ("X", with `ts` and `dur` in microseconds) and the names that
metadata events ("M": process_name, thread_name) give to pids and tids. The file is read, never imported from the
profiler's code: any tool's Chrome trace (PyTorch's, Perfetto's JSON export) draws the same way.
"""
from __future__ import annotations

import json
import os


def parse_trace(data) -> dict:
    """`data`: a trace object (`{"traceEvents": [...]}`) or a bare list of events. Returns {"events": [...],
    "processes": {pid: name}, "threads": {"pid:tid": name}, "skipped": n} with events sorted by start."""
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError("a trace is a list of events or an object with a 'traceEvents' list")
    kept, processes, threads, skipped = [], {}, {}, 0
    for ev in events:
        if not isinstance(ev, dict):
            skipped += 1
            continue
        ph = ev.get("ph")
        if ph == "M" and isinstance(ev.get("args"), dict):
            name = ev["args"].get("name")
            if ev.get("name") == "process_name":
                processes[str(ev.get("pid"))] = str(name)
            elif ev.get("name") == "thread_name":
                threads[f"{ev.get('pid')}:{ev.get('tid')}"] = str(name)
        elif ph == "X" and isinstance(ev.get("ts"), (int, float)) and isinstance(ev.get("dur"), (int, float)):
            kept.append({"name": str(ev.get("name", "")), "cat": str(ev.get("cat", "")), "ts": ev["ts"],
                         "dur": ev["dur"], "pid": str(ev.get("pid", "")), "tid": str(ev.get("tid", "")),
                         "args": ev.get("args") if isinstance(ev.get("args"), dict) else {}})
        elif ph == "X":
            skipped += 1
    kept.sort(key=lambda e: e["ts"])
    return {"events": kept, "processes": processes, "threads": threads, "skipped": skipped}


def load_trace(path: str | os.PathLike) -> dict:
    """The trace file at `path`, parsed (its path kept as `source`)."""
    with open(path) as f:
        ret = parse_trace(json.load(f))
    ret["source"] = os.fspath(path)
    return ret
