"""The profiler: its trace is valid Chrome trace event JSON (checked against the JSON Schema of the format as
Perfetto's importer reads it, test/fixtures/chrome_trace_event.schema.json), holds the host and kernel spans it
promises, times kernels as timing them directly does, and the summary CLI, the PROFILE knob and the compile progress
line work."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import tinygrad.profile as profile
from test import json_schema
from tinygrad import Tensor, TinyJit
from tinygrad.profile import Profile
from tinygrad.profile.summary import format_summary, summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The trace event format as Perfetto's JSON importer reads it, as a JSON Schema (its sources are named in the
# fixture's $comment); validated with the jsonschema package when it is installed, else with test/json_schema.py
with open(os.path.join(ROOT, "test", "fixtures", "chrome_trace_event.schema.json")) as _f:
    TRACE_SCHEMA = json.load(_f)


def check_trace(trace) -> list[str]:
    """Everything that makes `trace` not a valid Chrome trace (an empty list when valid)."""
    try:
        import jsonschema
    except ImportError:
        return json_schema.errors(trace, TRACE_SCHEMA)
    validator = jsonschema.Draft202012Validator(TRACE_SCHEMA)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(trace)]


_TIMING = """
import json, time
import numpy as np
from tinygrad import Tensor
from tinygrad.engine.realize import CompiledRunner, method_cache
from tinygrad.profile import Profile
n = 256
a = Tensor(np.random.default_rng(1).random((n, n), dtype=np.float32)).realize()
b = Tensor(np.random.default_rng(2).random((n, n), dtype=np.float32)).realize()
c = (a @ b).realize()
runner = next(r for r in method_cache.values() if isinstance(r, CompiledRunner) and r.op_estimate >= 2 * n ** 3)
bufs = [c.lazydata.base.realized, a.lazydata.base.realized, b.lazydata.base.realized]
direct = []
with Profile() as p:
    for _ in range(15):
        (a @ b).realize()
        st = time.perf_counter()
        et = runner(bufs, {}, wait=True)  # a GPU's own event time, as the profiler records it; else the wall time
        direct.append(et if et is not None else time.perf_counter() - st)
prof = [ev["dur"] * 1e-6 for ev in p.profiler.trace()["traceEvents"]
        if ev.get("cat") == "kernel" and ev["args"]["kernel"] == runner.name]
print(json.dumps({"profiled": min(prof), "direct": min(direct), "n": len(prof)}))
"""


def _workload(n: int = 128) -> Tensor:
    a = Tensor(np.random.default_rng(0).random((n, n), dtype=np.float32)).realize()
    return ((a @ a).relu().sum(axis=1)).realize()


class TestTrace(unittest.TestCase):
    def test_schema_accepts_what_perfetto_reads(self):
        ev = {"ph": "X", "pid": 0, "tid": 0, "name": "k", "ts": 1, "dur": 2}
        # the object form and a bare array of events; pid/tid as strings; ts/dur as strings of an integer
        self.assertEqual(check_trace({"traceEvents": [ev], "displayTimeUnit": "ns"}), [])
        self.assertEqual(check_trace([ev]), [])
        self.assertEqual(check_trace([{**ev, "pid": "gpu", "tid": "7", "ts": "12", "dur": "3"}]), [])
        others = [{"ph": "B", "name": "a", "ts": 1.5, "pid": 1, "tid": 1}, {"ph": "E", "ts": 2, "pid": 1, "tid": 1},
                  {"ph": "i", "name": "mark", "ts": 3, "s": "g"}, {"ph": "C", "name": "mem", "ts": 4,
                                                                  "args": {"bytes": 1024, "pinned": 0.5}},
                  {"ph": "s", "name": "f", "id": 1, "ts": 1}, {"ph": "t", "name": "f", "id": "1", "ts": 2},
                  {"ph": "f", "name": "f", "id": 1, "ts": 3, "bp": "e"},
                  {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "CUDA"}},
                  {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": 2, "args": {"sort_index": 3}}]
        self.assertEqual(check_trace({"traceEvents": others}), [])

    def test_schema_rejects_bad_traces(self):
        ev = {"ph": "X", "pid": 0, "tid": 0, "name": "k", "ts": 1, "dur": 2}
        bad = [{"traceEvents": [{k: v for k, v in ev.items() if k != "dur"}]},  # X without dur
               {"traceEvents": [{**ev, "ph": "Q"}]},                          # no such phase
               {"traceEvents": [{**ev, "dur": -1}]},                          # negative duration
               {"traceEvents": [{**ev, "ts": "soon"}]},                       # ts neither number nor integer
               {"traceEvents": [{**ev, "pid": -1}]},                          # pids are unsigned
               {"traceEvents": [{**ev, "args": [1]}]},                        # args is an object
               {"traceEvents": [ev], "displayTimeUnit": "s"},                 # only ms or ns
               {"events": [ev]},                                              # the key is traceEvents
               {"traceEvents": [{"ph": "C", "name": "c", "ts": 1, "args": {"v": "x"}}]},  # counters are numbers
               {"traceEvents": [{"ph": "M", "name": "thread_name", "args": {}}]},      # a name needs args.name
               {"traceEvents": [{"ph": "s", "name": "f", "ts": 1}]},                   # a flow needs its id
               "trace"]
        for trace in bad:
            self.assertTrue(check_trace(trace), trace)

    def test_trace_is_valid_and_has_every_span(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.json")
            with Profile(path):
                out = _workload()
                Tensor([1.0, 2.0]).to("CPU").realize()
            self.assertIsNone(profile.current)
            with open(path) as f:
                trace = json.load(f)
        self.assertEqual(check_trace(trace), [])
        events = trace["traceEvents"]
        # Perfetto would default a missing pid/tid to 0; ours name every track
        self.assertTrue(all(isinstance(ev.get("pid"), int) and isinstance(ev.get("tid"), int) for ev in events))
        host = {ev["name"] for ev in events if ev.get("cat") == "host"}
        self.assertTrue({"schedule", "copy"} <= host, host)
        kernels = [ev for ev in events if ev.get("cat") == "kernel"]
        self.assertGreaterEqual(len(kernels), 2)
        for ev in kernels:
            keys = {"kernel", "global_size", "local_size", "flops", "bytes", "GFLOPS", "GB/s"}
            self.assertTrue(keys <= set(ev["args"]), ev)
            self.assertGreater(ev["args"]["bytes"], 0)
        matmul = [ev for ev in kernels if ev["args"]["flops"] >= 2 * 128 ** 3]
        self.assertTrue(matmul, [ev["args"] for ev in kernels])
        # kernels are on their device's process, named by a metadata event
        names = {ev["pid"]: ev["args"]["name"] for ev in events if ev["ph"] == "M" and ev["name"] == "process_name"}
        self.assertEqual(names[0], "host")
        self.assertTrue(all(names[ev["pid"]] == out.device for ev in kernels))

    def test_cold_compile_spans(self):
        # a kernel of a shape no other test uses, with the on-disk caches bypassed, is linearized, rendered, compiled
        from tinygrad.helpers import Context
        with Context(CACHELEVEL=0), Profile() as p:
            (Tensor.ones(37, 3).contiguous() * 3.25 - 1).sum(axis=0).realize()
        host = {ev["name"] for ev in p.profiler.trace()["traceEvents"] if ev.get("cat") == "host"}
        self.assertTrue({"schedule", "linearize", "render"} <= host, host)

    def test_jit_kernels_are_profiled_one_by_one(self):
        @TinyJit
        def f(x):
            return (x * 2 + 1).sum()
        for _ in range(3):
            f(Tensor.rand(64).realize())
        with Profile() as p:
            f(Tensor.rand(64).realize())
        kernels = [ev for ev in p.profiler.trace()["traceEvents"] if ev.get("cat") == "kernel"]
        self.assertGreaterEqual(len(kernels), 1)

    def test_kernel_times_agree_with_direct_timing(self):
        # one thread (OMP_NUM_THREADS=1): a threaded kernel on two cores other processes share waits for a descheduled
        # thread now and then, by 10 ms and more, which no bound survives; the fastest of 15 calls each, profiled
        # calls and direct calls of the same compiled kernel interleaved
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
        out = subprocess.run([sys.executable, "-c", _TIMING], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(got["n"], 15)
        ratio = got["profiled"] / got["direct"]
        self.assertTrue(0.8 < ratio < 1.25, got)

    def test_off_by_default(self):
        self.assertIsNone(profile.current)


class TestSummary(unittest.TestCase):
    def test_summary_ranks_kernels(self):
        trace = {"traceEvents": [
            {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "CLANG"}},
            {"name": "a", "cat": "kernel", "ph": "X", "pid": 1, "tid": 0, "ts": 0, "dur": 100,
             "args": {"flops": 1000, "bytes": 2000}},
            {"name": "b", "cat": "kernel", "ph": "X", "pid": 1, "tid": 0, "ts": 0, "dur": 300,
             "args": {"flops": 3000, "bytes": 0}},
            {"name": "a", "cat": "kernel", "ph": "X", "pid": 1, "tid": 0, "ts": 0, "dur": 100,
             "args": {"flops": 1000, "bytes": 2000}},
            {"name": "compile", "cat": "host", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 1e6, "args": {}}]}
        stats = summary(trace)
        self.assertEqual([(s.name, s.count, s.us) for s in stats], [("b", 1, 300), ("a", 2, 200)])
        self.assertAlmostEqual(stats[1].gflops, 0.01)  # 2000 FLOPs in 200 us
        self.assertAlmostEqual(stats[1].gbs, 0.02)
        table = format_summary(stats)
        self.assertIn("60.0%", table)
        self.assertIn("CLANG", table)

    def test_cli_and_knob(self):
        with tempfile.TemporaryDirectory() as d:
            script = "from tinygrad import Tensor\n(Tensor.rand(64, 64) @ Tensor.rand(64, 64)).realize()\n"
            env = {**os.environ, "PROFILE": "1", "PYTHONPATH": ROOT}
            out = subprocess.run([sys.executable, "-c", script], cwd=d, env=env, capture_output=True, text=True,
                                 timeout=300)
            self.assertEqual(out.returncode, 0, out.stderr)
            path = os.path.join(d, "profile.json")
            with open(path) as f:
                self.assertEqual(check_trace(json.load(f)), [])
            cli = subprocess.run([sys.executable, "-m", "tinygrad.profile", path], env={**os.environ,
                                 "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=120)
            self.assertEqual(cli.returncode, 0, cli.stderr)
            self.assertIn("GFLOP/s", cli.stdout)
            self.assertIn("total", cli.stdout)


class TestProgress(unittest.TestCase):
    def test_debug1_counts_kernels_compiled(self):
        with tempfile.TemporaryDirectory() as d:
            # a cache of its own: every kernel is compiled
            env = {**os.environ, "DEBUG": "1", "CACHEDB": os.path.join(d, "cache.db"), "PYTHONPATH": ROOT}
            script = "from tinygrad import Tensor\n(Tensor.rand(8, 8) @ Tensor.rand(8, 8)).relu().realize()\n"
            out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = [ln for ln in out.stderr.splitlines() if ln.startswith("compiled ")]
        # not a terminal: plain lines, counting up
        self.assertGreaterEqual(len(lines), 1, out.stderr)
        self.assertTrue(lines[0].startswith("compiled 1 kernel ("), lines)
        self.assertNotIn("\r", out.stderr)

    def test_shown_after_threshold_without_debug(self):
        import contextlib
        import io

        from tinygrad.profile.progress import _Progress
        class Terminal(io.StringIO):
            def isatty(self):
                return True
        p = _Progress()
        buf = Terminal()
        with contextlib.redirect_stderr(buf):
            p.add(0.5)
            p.after = 1.0
            p.add(0.4)
            p.add(0.4)
        self.assertEqual(buf.getvalue(), "\rcompiled 3 kernels (1.3 s)\033[K")
        # a log file gets nothing below DEBUG=1
        log = io.StringIO()
        with contextlib.redirect_stderr(log):
            p.add(1.0)
        self.assertEqual(log.getvalue(), "")


if __name__ == "__main__":
    unittest.main()
