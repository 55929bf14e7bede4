"""LLM inference speed and memory (Gemma 3 270M, SmolLM2-135M, any GGUF): this runtime beside llama.cpp and PyTorch,
on the same prompt ids.

Rows: prefill tok/s (the whole prompt in one call), decode tok/s (one token a step, greedy), time to first token
(the prompt's forward and the first greedy pick; warm, and in the process's first run, which compiles kernels and
pages weights in), resident memory after the first (short, untimed) generation, as a one-shot CLI run ends, and
after all runs (a prompt's second run can capture more jitted steps, as a server's would), and its peak. Columns: this
runtime (tinygrad.apps.llm, as its CLI runs: the tokenizer held, a 4096-position KV cache, greedy Sampler);
llama.cpp through llama-cpp-python with `--threads` threads (2 by default), when `llama_cpp` imports here or
`--llamacpp-python` names an interpreter that has it; PyTorch running a plain greedy Gemma 3 forward with a KV cache
over the same weights dequantized to float32 (Gemma 3 only), when torch imports. Each runs in a process of its own,
first once untimed with a few decode steps (kernel compiles, page-ins), then `--runs` times; `--rounds` rounds run
the columns in turn (A B A B: on a shared machine a busy spell then hurts both sides alike), and the best run of all
rounds is shown. The last rows count how many of each runtime's greedy tokens equal this runtime's from the start,
and give this runtime's speeds as a multiple of each other's (the ratio a noisy machine measures best).

    python extra/bench_llm.py --model PATH.gguf --llamacpp-python VENV/bin/python     # CPU, the real file
    python extra/bench_llm.py --model GEMMA.gguf --model SMOLLM2.gguf --rounds 3      # a table for each file
    python extra/bench_llm.py --synthetic --device CUDA --json                         # a GPU machine without it
    python extra/bench_llm.py --synthetic llama:llama-3.1-8b --device CUDA --no-torch  # any family and size

`--model` may be given several times (a table for each). The model defaults to $GEMMA3_GGUF (and $SMOLLM2_GGUF,
where set, as a second model) and the llama.cpp interpreter to $LLAMACPP_PYTHON where they are set (a venv of its
own with llama-cpp-python, so that neither runtime's dependencies reach the other).

`--synthetic` writes (to a temporary folder) a GGUF with the real file's metadata, tensor shapes and types and
random blocks (tinygrad/apps/llm/synthetic.py): the same speed, meaningless text. `--synthetic ARCH:SIZE` (a size of
synthetic.SIZES: llama:llama-3.2-1b, llama:llama-3.1-8b, qwen3:qwen3-8b, the tiny ones) writes that model with
`--quant` weights (Q4_K_M by default) into $TINYGRAD_SYNTHETIC_DIR (default ~/.cache/tinygrad/synthetic), or reuses
the file written there before; its prompt is token ids spread over the vocabulary (no tokenizer needed).

Imports only the standard library at the top: the llama.cpp worker runs under another venv's interpreter.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

import benchlib

# the Gemma 3 270M Q4_K_M file and the SmolLM2-135M-Instruct Q4_1 one, where the machine keeps them (else --model or
# --synthetic is needed)
DEFAULT_MODELS = [p for p in (os.environ.get("GEMMA3_GGUF"), os.environ.get("SMOLLM2_GGUF")) if p]
CONTEXT = 4096  # the CLI's default: its KV cache size is part of the memory row
LONG_WARMUP = 4  # untimed decode steps before each --long-decode measurement
WARMUP_DECODE = 8  # a jitted step is captured on its second call: a few more for anything compiled late
PARAGRAPH = (
    "The old lighthouse keeper climbed the spiral stairs every evening, carrying a lantern and a notebook. He wrote "
    "down the colour of the sky, the direction of the wind, and the names of the ships that passed the rocky point. "
    "Over forty years the notebooks filled three shelves, and when the light was finally automated, the town museum "
    "asked for them. Scientists later used his careful records to study how storms along the coast had changed "
    "during the last century, and his grandchildren still visit the point every summer.")  # 100 tokens with BOS


def memory_mb() -> tuple[float, float]:
    """(resident, peak resident) MB of this process, from /proc (Linux)."""
    vals = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                vals[line.split(":")[0]] = int(line.split()[1]) / 1024
    return vals.get("VmRSS", math.nan), vals.get("VmHWM", math.nan)


def timed_runs(step_prompt, step_one, ids: list[int], n_decode: int, runs: int) -> dict:
    """Time `runs` generations (after an untimed short one): `step_prompt(ids)` returns the first greedy token,
    `step_one(token, pos)` the next; the best prefill and decode times of the runs are kept."""
    def once(steps: int) -> tuple[float, float, list[int]]:
        t0 = time.perf_counter()
        tok = step_prompt(ids)
        t1 = time.perf_counter()
        out = [tok]
        for pos in range(len(ids), len(ids) + steps):
            tok = step_one(tok, pos)
            out.append(tok)
        return t1 - t0, time.perf_counter() - t1, out
    cold = once(WARMUP_DECODE)[0]
    first_rss = memory_mb()[0]  # what a one-shot CLI run holds at its end
    results = [once(n_decode) for _ in range(runs)]
    ttft = min(r[0] for r in results)
    decode = min(r[1] for r in results)
    rss, peak = memory_mb()
    return {"prefill_tok_s": len(ids) / ttft, "decode_tok_s": n_decode / decode, "ttft_ms": ttft * 1e3,
            "cold_ttft_ms": cold * 1e3, "first_rss_mb": first_rss, "rss_mb": rss, "peak_rss_mb": peak,
            "ids": results[0][2]}


def long_decode(step_one, tok: int, steps: int, far: int) -> dict:
    """Decode speed with the KV cache filled to position 1024 (or far / 2) and to `far` (the positions before are not
    computed: attention reads them whatever they hold, so the time is what a conversation that long costs a token):
    issue 28 wants 32k to keep >= 70% of 1k's speed."""
    out = {"near_position": min(1024, far // 2), "far_position": far}
    for key, pos in (("decode_1k_tok_s", out["near_position"]), ("decode_far_tok_s", far)):
        for i in range(LONG_WARMUP):
            tok = step_one(tok, pos + i)
        t0 = time.perf_counter()
        for i in range(steps):
            tok = step_one(tok, pos + LONG_WARMUP + i)
        out[key] = steps / (time.perf_counter() - t0)
    return out


# ---- workers: each prints one tagged JSON line ----
def worker_tinygrad(args, ids: list[int]) -> dict:
    from tinygrad.apps.llm.model import Transformer
    from tinygrad.apps.llm.sampling import Sampler, SamplingParams
    from tinygrad.apps.llm.tokenizer import Tokenizer
    from tinygrad.device import Device
    from tinygrad.nn.state_gguf import gguf_tensors
    device = Device.DEFAULT if args.device == "CPU" else args.device
    # what the CLI holds while it generates: the tokenizer and the model (it drops the metadata, whose vocabulary
    # lists alone take ~40 MB, and the tensor table once they are made)
    kv, tensors = gguf_tensors(args.model)
    try:
        tok = Tokenizer.from_gguf(kv)
    except ValueError:  # a vocabulary the tokenizer can't read yet: the prompt is ids anyway
        tok = None
    n_vocab = len(kv.get("tokenizer.ggml.tokens", ()))
    context = max(CONTEXT, args.long_decode + args.decode + LONG_WARMUP + 1) if args.long_decode else CONTEXT
    model = Transformer(kv, tensors, device=device, max_context=context)
    del kv, tensors
    sampler = Sampler(SamplingParams())
    history: list[int] = []

    def step_prompt(prompt):
        history[:] = list(prompt)
        return sampler(model.forward(prompt, 0), history)

    def step_one(t, pos):
        history.append(t)
        return sampler(model.forward([t], pos), history)
    res = timed_runs(step_prompt, step_one, ids, args.decode, args.runs)
    if args.long_decode:
        res.update(long_decode(step_one, ids[-1], args.decode, args.long_decode))
    res["label"] = f"tinygrad {device}"
    res["vocab"] = len(tok.vocab) if tok is not None else n_vocab
    return res


def worker_llamacpp(args, ids: list[int]) -> dict:
    import llama_cpp
    import numpy as np
    gpu = args.device != "CPU"
    if gpu and not llama_cpp.llama_supports_gpu_offload():
        raise RuntimeError("this llama-cpp-python is a CPU build: no column for --device " + args.device)
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=CONTEXT, n_threads=args.threads,
                          n_threads_batch=args.threads, n_gpu_layers=-1 if gpu else 0, logits_all=False,
                          verbose=False)

    def pick() -> int:
        # the last position's logits straight from the context (logits_all=False keeps none in llm.scores)
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
        return int(np.argmax(logits))

    def step_prompt(prompt):
        llm.reset()
        llm.eval(prompt)
        return pick()

    def step_one(t, pos):
        llm.eval([t])
        return pick()
    res = timed_runs(step_prompt, step_one, ids, args.decode, args.runs)
    res["label"] = f"llama.cpp {'GPU' if gpu else f'{args.threads} threads'}"
    return res


def worker_torch(args, ids: list[int]) -> dict:
    import numpy as np
    import torch

    from tinygrad.apps.llm.model import Config
    from tinygrad.nn.state_gguf import gguf_tensors
    dev = "cpu" if args.device == "CPU" else "cuda"
    if dev == "cpu":
        torch.set_num_threads(args.threads)
    kv, tensors = gguf_tensors(args.model)
    cfg = Config.from_gguf(kv, tensors)
    if cfg.arch != "gemma3":
        raise RuntimeError(f"the PyTorch column is Gemma 3 only, not {cfg.arch}")
    # every weight dequantized by tinygrad (on its default device) to float32, then handed to torch
    w = {n: torch.from_numpy(t.load().numpy().astype(np.float32)).to(dev) for n, t in tensors.items()}
    model = TorchGemma3(cfg, w, CONTEXT, dev)
    with torch.inference_mode():
        res = timed_runs(lambda p: model.greedy(p, 0), lambda t, pos: model.greedy([t], pos), ids, args.decode,
                         args.runs)
    res["label"] = f"PyTorch {dev} float32"
    return res


class TorchGemma3:
    """Gemma 3's forward in PyTorch with a KV cache (as tinygrad/apps/llm/model.py computes it), for the
    PyTorch column: weights `w` by GGUF name, float32."""

    def __init__(self, cfg, w: dict, context: int, dev: str):
        import torch
        self.torch, self.cfg, self.w = torch, cfg, w
        shape = (context, cfg.kv_heads, cfg.head_dim)
        self.cache = [(torch.zeros(shape, device=dev), torch.zeros(shape, device=dev)) for _ in range(cfg.layers)]
        half = torch.arange(cfg.head_dim // 2, device=dev, dtype=torch.float64)
        pos = torch.arange(context, device=dev, dtype=torch.float64)[:, None]
        self.rope = {}
        for base in (cfg.rope_base, cfg.family.local_rope_base):
            ang = pos * base ** (-2.0 * half / cfg.head_dim)
            self.rope[base] = (ang.cos().float(), ang.sin().float())
        self.dev = dev

    def rms(self, x, g):
        return x * self.torch.rsqrt(x.square().mean(-1, keepdim=True) + self.cfg.eps) * g

    def greedy(self, ids: list[int], start: int) -> int:
        torch, cfg, w = self.torch, self.cfg, self.w
        n, end = len(ids), start + len(ids)
        x = w["token_embd.weight"][torch.tensor(ids, device=self.dev)] * math.sqrt(cfg.dim)
        qpos = torch.arange(start, end, device=self.dev)[:, None]
        kpos = torch.arange(end, device=self.dev)[None, :]
        causal = kpos <= qpos
        sliding = causal & (kpos > qpos - cfg.window)
        for i in range(cfg.layers):
            p = f"blk.{i}."
            glob = cfg.is_global(i)
            h = self.rms(x, w[p + "attn_norm.weight"])
            q = (h @ w[p + "attn_q.weight"].T).view(n, cfg.heads, cfg.head_dim)
            k = (h @ w[p + "attn_k.weight"].T).view(n, cfg.kv_heads, cfg.head_dim)
            v = (h @ w[p + "attn_v.weight"].T).view(n, cfg.kv_heads, cfg.head_dim)
            q, k = self.rms(q, w[p + "attn_q_norm.weight"]), self.rms(k, w[p + "attn_k_norm.weight"])
            base = cfg.rope_base if glob else cfg.family.local_rope_base
            cos, sin = (t[start:end, None, :] for t in self.rope[base])
            d = cfg.head_dim // 2  # NEOX RoPE: dim j turns with dim j + head_dim/2
            q, k = (torch.cat([a[..., :d] * cos - a[..., d:] * sin, a[..., d:] * cos + a[..., :d] * sin], -1)
                    for a in (q, k))
            ck, cv = self.cache[i]
            ck[start:end], cv[start:end] = k, v
            rep = cfg.heads // cfg.kv_heads
            keys = ck[:end].repeat_interleave(rep, 1).permute(1, 2, 0)  # (heads, head_dim, end)
            vals = cv[:end].repeat_interleave(rep, 1).permute(1, 0, 2)  # (heads, end, head_dim)
            scores = (q.permute(1, 0, 2) @ keys) / math.sqrt(cfg.head_dim)
            scores = scores.masked_fill(~(causal if glob else sliding), float("-inf"))
            att = (scores.softmax(-1) @ vals).permute(1, 0, 2).reshape(n, -1)
            x = x + self.rms(att @ w[p + "attn_output.weight"].T, w[p + "post_attention_norm.weight"])
            h = self.rms(x, w[p + "ffn_norm.weight"])
            g = torch.nn.functional.gelu(h @ w[p + "ffn_gate.weight"].T, approximate="tanh")
            f = (g * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
            x = x + self.rms(f, w[p + "post_ffw_norm.weight"])
        logits = self.rms(x[-1], w["output_norm.weight"]) @ w["token_embd.weight"].T
        return int(logits.argmax())


WORKERS = {"tinygrad": worker_tinygrad, "llamacpp": worker_llamacpp, "torch": worker_torch}


# ---- the parent ----
def synthetic_ids(model: str, n: int) -> list[int]:
    """`n` ids of a synthetic model spread over its vocabulary (its BOS first): its text is meaningless anyway."""
    from tinygrad.nn.state_gguf import gguf_tensors
    kv = gguf_tensors(model)[0]
    vocab, bos = len(kv["tokenizer.ggml.tokens"]), kv.get("tokenizer.ggml.bos_token_id", 1)
    lo = min(300, vocab // 4)  # past the byte tokens; the last ones are control tokens
    return [bos] + [lo + (7919 * i) % (vocab - lo - 2) for i in range(n - 1)]


def synthetic_model(name: str, quant: str) -> str:
    """The path of synthetic model ARCH:SIZE with `quant` weights, written at the first use and reused after (written
    under another name and renamed, so a run cut short leaves no half file behind)."""
    from tinygrad.apps.llm.synthetic import write_synthetic
    folder = os.environ.get("TINYGRAD_SYNTHETIC_DIR") or os.path.expanduser("~/.cache/tinygrad/synthetic")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name.replace(':', '-')}-{quant}.gguf")
    if not os.path.exists(path):
        t = time.perf_counter()
        write_synthetic(path + ".part", name, quant)
        os.replace(path + ".part", path)
        gb, s = os.path.getsize(path) / 1e9, time.perf_counter() - t
        print(f"wrote {path} ({gb:.2f} GB) in {s:.0f} s", file=sys.stderr)
    return path


def prompt_ids(model: str, n: int) -> list[int]:
    """The paragraph's ids (BOS first), repeated as needed and cut to `n`."""
    from tinygrad.apps.llm.tokenizer import Tokenizer
    from tinygrad.nn.state_gguf import gguf_tensors
    tok = Tokenizer.from_gguf(gguf_tensors(model)[0])
    ids = tok.encode(PARAGRAPH)
    while len(ids) < n:
        ids += tok.encode(" " + PARAGRAPH, add_bos=False)
    return ids[:n]


def table_rows(results: dict) -> list[tuple[str, list[str]]]:
    ref = results.get("tinygrad", {}).get("ids")

    def cell(r, key, digits):
        return "-" if r is None or key not in r else f"{r[key]:.{digits}f}"

    def agree(r):
        if r is None or ref is None or "ids" not in r:
            return "-"
        same = next((i for i, (a, b) in enumerate(zip(r["ids"], ref)) if a != b), min(len(r["ids"]), len(ref)))
        return f"{same}/{len(ref)}"
    rows = [("prefill tok/s", "prefill_tok_s", 1), ("decode tok/s", "decode_tok_s", 1),
            ("time to first token ms", "ttft_ms", 1), ("first run's (cold) time to first token ms", "cold_ttft_ms", 1),
            ("resident MB after the first generation", "first_rss_mb", 0),
            ("resident MB after all", "rss_mb", 0),
            ("peak resident MB", "peak_rss_mb", 0)]
    out = [(name, [cell(r, key, d) for r in results.values()]) for name, key, d in rows]
    out.append(("greedy ids equal to tinygrad's", [agree(r) for r in results.values()]))
    far, near = next(((r["far_position"], r["near_position"]) for r in results.values() if "far_position" in r),
                     (None, None))
    if far is not None:
        out += [(f"decode tok/s at position {near}", [cell(r, "decode_1k_tok_s", 1) for r in results.values()]),
                (f"decode tok/s at position {far}", [cell(r, "decode_far_tok_s", 1) for r in results.values()]),
                (f"decode speed kept at {far} (of {near}'s)",
                 ["-" if "decode_far_tok_s" not in r else f"{r['decode_far_tok_s'] / r['decode_1k_tok_s']:.0%}"
                  for r in results.values()])]
    mine = results.get("tinygrad")

    def ratio(r, key):
        if mine is None or r is None or not r.get(key) or key not in mine:
            return "-"
        return f"{mine[key] / r[key]:.2f}x"
    return out + [(f"tinygrad's {what} tok/s over this", [ratio(r, f"{what}_tok_s") for r in results.values()])
                  for what in ("prefill", "decode")]


# the best of several rounds' results: speeds the highest, times the lowest, memory and ids of the first round
_BEST = {"prefill_tok_s": max, "decode_tok_s": max, "ttft_ms": min, "cold_ttft_ms": min}


def merge_rounds(old: dict | None, new: dict) -> dict:
    if old is None:
        return dict(new)
    return {**old, **{k: f(old[k], new[k]) for k, f in _BEST.items() if k in old and k in new}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", default=None,
                    help="a GGUF file, or several (--model A --model B: a table each; default: $GEMMA3_GGUF and "
                    "$SMOLLM2_GGUF, the timed files are gemma-3-270m-q4_k_m.gguf and SmolLM2-135M-Instruct.Q4_1.gguf)")
    ap.add_argument("--synthetic", nargs="?", const="gemma3-270m", metavar="ARCH:SIZE",
                    help="time a synthetic file: the 270M model's shapes, or ARCH:SIZE (see synthetic.SIZES)")
    ap.add_argument("--quant", default="Q4_K_M", help="the weights of a --synthetic ARCH:SIZE file (F32, F16, Q8_0, "
                    "Q4_K_M)")
    ap.add_argument("--device", default="CPU", type=str.upper, help="CPU (default) or CUDA")
    ap.add_argument("--prompt-tokens", type=benchlib.positive(int), default=100)
    ap.add_argument("--decode", type=benchlib.positive(int), default=128, help="decode steps timed")
    ap.add_argument("--runs", type=benchlib.positive(int), default=2, help="timed runs a round; the best is shown")
    ap.add_argument("--long-decode", type=benchlib.positive(int), default=0, metavar="POS",
                    help="also time tinygrad's decode with the cache filled to 1024 and to POS positions (e.g. 32768)")
    ap.add_argument("--rounds", type=benchlib.positive(int), default=2,
                    help="rounds of every column in turn (A B A B), each a process of its own; the best is shown")
    ap.add_argument("--threads", type=benchlib.positive(int), default=2, help="llama.cpp's and PyTorch's CPU threads")
    ap.add_argument("--llamacpp-python", metavar="PATH", type=benchlib.interpreter,
                    default=os.environ.get("LLAMACPP_PYTHON") or None,
                    help="an interpreter with llama-cpp-python (default: $LLAMACPP_PYTHON, else this one if it has it)")
    ap.add_argument("--no-torch", action="store_true", help="leave out the PyTorch column")
    ap.add_argument("--json", action="store_true",
                    help="print the results as one JSON object (a list, one a model, for several)")
    ap.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.model = args.model[0]
        benchlib.emit(WORKERS[args.worker](args, json.loads(args.ids)))
        return
    models = args.model or DEFAULT_MODELS or [""]
    tables = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in (models[:1] if args.synthetic else models):
            tables.append(bench_model(args, model, tmp))
    if args.json:
        out = [{"title": t, "machine": benchlib.machine_line(), "prompt_ids": ids, "results": res, "notes": notes}
               for t, ids, res, notes in tables]
        print(json.dumps(out[0] if len(out) == 1 else out))
        return
    print(benchlib.machine_line())
    for title, _, results, notes in tables:
        benchlib.print_table(title, [r["label"] for r in results.values()], table_rows(results))
        for note in notes:
            print("note:", note)


def bench_model(args, model: str, tmp: str) -> tuple[str, list[int], dict, list[str]]:
    """One model's (title, prompt ids, results by column, notes): every column's worker `args.rounds` times, in
    turn."""
    import importlib.util
    if args.synthetic == "gemma3-270m":
        from tinygrad.apps.llm.synthetic import write_gemma3_270m
        model = write_gemma3_270m(os.path.join(tmp, "gemma3-270m-synthetic.gguf"))
    elif args.synthetic:
        model = synthetic_model(args.synthetic, args.quant)
    elif not model or not os.path.exists(model):
        raise RuntimeError(f"no model file {model!r} (pass --model PATH, set GEMMA3_GGUF, or --synthetic)")
    if args.synthetic and args.synthetic != "gemma3-270m":
        ids = synthetic_ids(model, args.prompt_tokens)
    else:
        ids = prompt_ids(model, args.prompt_tokens)
    columns = {"tinygrad": sys.executable}
    llamacpp = args.llamacpp_python or (sys.executable if importlib.util.find_spec("llama_cpp") else None)
    if llamacpp:
        columns["llamacpp"] = llamacpp
    if not args.no_torch and importlib.util.find_spec("torch"):
        columns["torch"] = sys.executable
    common = ["--model", model, "--device", args.device, "--decode", str(args.decode), "--runs", str(args.runs),
              "--threads", str(args.threads), "--ids", json.dumps(ids)] + \
        (["--long-decode", str(args.long_decode)] if args.long_decode else [])
    results: dict = {}
    notes: dict = {}
    for _ in range(args.rounds):
        for name, python in columns.items():
            if name in notes:
                continue
            try:
                res = benchlib.run_worker(python, [os.path.abspath(__file__), "--worker", name, *common], timeout=1800)
            except RuntimeError as e:
                notes[name] = f"{name}: {str(e).splitlines()[-1]}"
                continue
            results[name] = merge_rounds(results.get(name), res)
    title = (f"{'synthetic ' if args.synthetic else ''}{os.path.basename(model)}, {len(ids)}-token prompt, "
             f"{args.decode} decode steps, greedy, best of {args.rounds} x {args.runs} ({args.device})")
    return title, ids, {k: results[k] for k in columns if k in results}, list(notes.values())


if __name__ == "__main__":
    benchlib.run_main(main)
