"""tinygrad.apps.llm: the tokenizer against hand-worked SentencePiece cases, and the transformer against a numpy
forward pass written from the architecture's description, on a small synthetic Gemma 3 GGUF (Q8_0 embedding,
sliding-window and global layers, QK-norm, post-norms, two RoPE bases), so no model file is needed."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tinygrad.apps.llm import StreamDecoder, Tokenizer, Transformer
from tinygrad.apps.llm.__main__ import main as llm_main
from tinygrad.nn.state_gguf import gguf_tensors
from tinygrad.nn.state_gguf_write import write_gguf

# ---- tokenizer ---------------------------------------------------------------------------------------------------
S = "\u2581"


def _vocab(extra=()):
    """tokens, scores, types: control 0-2, bytes 3-258, then pieces with scores (higher merges first)."""
    tokens, scores, types = ["<pad>", "<eos>", "<bos>"], [0.0, 0.0, 0.0], [3, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    pieces = [("a", -1), ("b", -1), ("c", -1), (S, -1), ("ab", -2), ("bc", -1.5), ("abc", -3), (S + "a", -2.5),
              ("h", -1), ("i", -1), ("hi", -2), ("é", -1)]
    for p, sc in pieces:
        tokens.append(p)
        scores.append(sc)
        types.append(1)
    for t, ty in extra:
        tokens.append(t)
        scores.append(0.0)
        types.append(ty)
    return tokens, scores, types


def _tok(extra=()):
    tokens, scores, types = _vocab(extra)
    return Tokenizer(tokens, scores, types, bos=2, eos=1, add_bos=True)


def test_spm_merges_by_score_then_leftmost():
    t = _tok()
    ids = lambda *ps: [t.ids[p] for p in ps]  # noqa: E731
    # "abc": pairs ab (-2) and bc (-1.5): bc merges first, then a + bc = abc is a token (score -3)
    assert t.encode("abc", add_bos=False) == ids("abc")
    # "abab": ab, ba (no token), ab: both ab merge (leftmost first), ab+ab is no token
    assert t.encode("abab", add_bos=False) == ids("ab", "ab")
    # a space is U+2581, merged with a following "a"; BOS first
    assert t.encode(" a hi") == [2] + ids(S + "a", S, "hi")


def test_byte_fallback_and_decode():
    t = _tok()
    # "ĉ" is no token: its two UTF-8 bytes; "é" is one
    got = t.encode("ĉé", add_bos=False)
    assert got == [3 + 0xC4, 3 + 0x89, t.ids["é"]]
    assert t.decode(got) == "ĉé" and t.decode([2] + t.encode(" a", add_bos=False)) == " a"


def test_user_defined_split_first_and_control_only_when_asked():
    t = _tok(extra=[("\n\n", 4), ("\n", 4), ("<start_of_turn>", 3)])
    nl2, nl, sot = t.ids["\n\n"], t.ids["\n"], t.ids["<start_of_turn>"]
    assert t.encode("a\n\n\nb", add_bos=False) == [t.ids["a"], nl2, nl, t.ids["b"]]
    plain = t.encode("<start_of_turn>a", add_bos=False)
    assert sot not in plain and t.decode(plain) == "<start_of_turn>a"
    assert t.encode("<start_of_turn>a", add_bos=False, special=True) == [sot, t.ids["a"]]


def test_stream_decoder_never_splits_a_character():
    t = _tok()
    ids = t.encode("ĉa😀", add_bos=False)  # two byte tokens, a, four byte tokens
    d = StreamDecoder(t)
    outs = [d.feed(i) for i in ids]
    assert outs[0] == "" and outs[1] == "ĉ" and "".join(outs) + d.flush() == "ĉa😀"
    assert all("\ufffd" not in o for o in outs)


# ---- a synthetic Gemma 3 ---------------------------------------------------------------------------------------------
DIM, HEADS, KV_HEADS, HEAD_DIM, FFN, LAYERS, VOCAB, WINDOW = 32, 2, 1, 16, 48, 6, 64, 3


def _q8_0(w: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Q8_0 blocks of w (rows, cols), and the values they hold."""
    blocks = w.reshape(-1, 32)
    d = (np.abs(blocks).max(axis=1) / 127).astype(np.float16)
    q = np.round(blocks / np.maximum(d.astype(np.float32), 1e-8)[:, None]).clip(-127, 127).astype(np.int8)
    raw = b"".join(dd.tobytes() + qq.tobytes() for dd, qq in zip(d, q))
    return raw, (d.astype(np.float32)[:, None] * q.astype(np.float32)).reshape(w.shape)


def _model(tmp_path, v_f16: bool = False):
    """A tiny Gemma 3 file of float32 weights (attn_v float16 where `v_f16`), and its weights as numpy arrays."""
    rng = np.random.default_rng(0)
    w = {}
    f = lambda *s, scale=0.3: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
    emb_raw, emb = _q8_0(f(VOCAB, DIM, scale=0.5))
    w["token_embd.weight"] = emb
    tensors = [("token_embd.weight", [DIM, VOCAB], 8, emb_raw)]
    names = {"attn_q": (HEADS * HEAD_DIM, DIM), "attn_k": (KV_HEADS * HEAD_DIM, DIM),
             "attn_v": (KV_HEADS * HEAD_DIM, DIM), "attn_output": (DIM, HEADS * HEAD_DIM), "ffn_gate": (FFN, DIM),
             "ffn_up": (FFN, DIM), "ffn_down": (DIM, FFN)}
    norms = {"attn_norm": DIM, "ffn_norm": DIM, "post_attention_norm": DIM, "post_ffw_norm": DIM,
             "attn_q_norm": HEAD_DIM, "attn_k_norm": HEAD_DIM}
    for i in range(LAYERS):
        for n, shape in names.items():
            a = f(*shape)
            if v_f16 and n == "attn_v":
                h = a.astype(np.float16)
                w[f"blk.{i}.{n}.weight"] = h.astype(np.float32)
                tensors.append((f"blk.{i}.{n}.weight", list(reversed(shape)), 1, h.tobytes()))
                continue
            w[f"blk.{i}.{n}.weight"] = a
            tensors.append((f"blk.{i}.{n}.weight", list(reversed(shape)), 0, a.tobytes()))
        for n, size in norms.items():
            a = (1 + f(size, scale=0.1)).astype(np.float32)
            w[f"blk.{i}.{n}.weight"] = a
            tensors.append((f"blk.{i}.{n}.weight", [size], 0, a.tobytes()))
    w["output_norm.weight"] = (1 + f(DIM, scale=0.1)).astype(np.float32)
    tensors.append(("output_norm.weight", [DIM], 0, w["output_norm.weight"].tobytes()))
    kv = [("general.architecture", 8, "gemma3"), ("gemma3.block_count", 4, LAYERS),
          ("gemma3.embedding_length", 4, DIM), ("gemma3.feed_forward_length", 4, FFN),
          ("gemma3.attention.head_count", 4, HEADS), ("gemma3.attention.head_count_kv", 4, KV_HEADS),
          ("gemma3.attention.key_length", 4, HEAD_DIM), ("gemma3.attention.value_length", 4, HEAD_DIM),
          ("gemma3.attention.layer_norm_rms_epsilon", 6, 1e-6), ("gemma3.rope.freq_base", 6, 1000000.0),
          ("gemma3.attention.sliding_window", 4, WINDOW), ("gemma3.context_length", 4, 64),
          ("tokenizer.ggml.model", 8, "llama"), ("tokenizer.ggml.tokens", 9, (8, [f"t{i}" for i in range(VOCAB)])),
          ("tokenizer.ggml.bos_token_id", 4, 2), ("tokenizer.ggml.eos_token_id", 4, 1)]
    path = tmp_path / "tiny-gemma3.gguf"
    path.write_bytes(write_gguf(kv, tensors))
    return path, w


def _ref_forward(w, ids):
    """Gemma 3's forward in numpy, float64, written from the architecture rather than from tinygrad.apps.llm: every
    sixth layer global and the rest windowed, a RoPE base for each kind, RMSNorm of q and k, norms stored as 1 + w."""
    x = w["token_embd.weight"][ids].astype(np.float64) * math.sqrt(DIM)
    n = len(ids)
    rms = lambda v, g: v / np.sqrt((v ** 2).mean(-1, keepdims=True) + 1e-6) * g  # noqa: E731

    def rope(v, base):  # (n, h, d), NEOX halves
        half = HEAD_DIM // 2
        inv = base ** (-2.0 * np.arange(half) / HEAD_DIM)
        ang = np.arange(n)[:, None, None] * inv[None, None, :]
        v1, v2 = v[..., :half], v[..., half:]
        return np.concatenate([v1 * np.cos(ang) - v2 * np.sin(ang), v2 * np.cos(ang) + v1 * np.sin(ang)], -1)
    for i in range(LAYERS):
        def g(name, i=i):
            return w[f"blk.{i}.{name}.weight"]
        glob = i % 6 == 5
        h = rms(x, g("attn_norm"))
        q = (h @ g("attn_q").T).reshape(n, HEADS, HEAD_DIM)
        k = (h @ g("attn_k").T).reshape(n, KV_HEADS, HEAD_DIM)
        v = (h @ g("attn_v").T).reshape(n, KV_HEADS, HEAD_DIM)
        q, k = rms(q, g("attn_q_norm")), rms(k, g("attn_k_norm"))
        base = 1000000.0 if glob else 10000.0
        q, k = rope(q, base), rope(k, base)
        out = np.zeros((n, HEADS, HEAD_DIM))
        for hh in range(HEADS):
            kk, vv = k[:, hh * KV_HEADS // HEADS], v[:, hh * KV_HEADS // HEADS]
            s = q[:, hh] @ kk.T / math.sqrt(HEAD_DIM)
            for a in range(n):
                for b in range(n):
                    if b > a or (not glob and b <= a - WINDOW):
                        s[a, b] = -np.inf
            p = np.exp(s - s.max(-1, keepdims=True))
            out[:, hh] = (p / p.sum(-1, keepdims=True)) @ vv
        x = x + rms(out.reshape(n, -1) @ g("attn_output").T, g("post_attention_norm"))
        h = rms(x, g("ffn_norm"))
        gate = h @ g("ffn_gate").T
        gelu = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3)))
        x = x + rms((gelu * (h @ g("ffn_up").T)) @ g("ffn_down").T, g("post_ffw_norm"))
    return rms(x[-1], w["output_norm.weight"]) @ w["token_embd.weight"].T


def test_transformer_matches_a_numpy_gemma3(tmp_path):
    path, w = _model(tmp_path)
    kv, tensors = gguf_tensors(str(path))
    model = Transformer(kv, tensors, max_context=16)
    ids = [5, 17, 3, 42, 9, 11, 60]  # longer than the window: the sliding layers drop the first positions
    np.testing.assert_allclose(model.forward(ids, 0).numpy(), _ref_forward(w, ids), rtol=2e-4, atol=2e-4)
    # the KV cache: the same logits one position at a time
    model2 = Transformer(kv, tensors, max_context=16)
    for p, t in enumerate(ids):
        got = model2.forward([t], p).numpy()
    np.testing.assert_allclose(got, _ref_forward(w, ids), rtol=2e-4, atol=2e-4)
    with pytest.raises(ValueError, match="past the context"):
        model2.forward([1, 2], 15)


def test_q_and_k_stacked_where_v_has_another_type(tmp_path):
    """q and k of one type and v of another (as Gemma 3's Q5_0, Q5_0, Q8_0): q and k are one stacked Linear, v its
    own, and the logits are the reference's."""
    path, w = _model(tmp_path, v_f16=True)
    kv, tensors = gguf_tensors(str(path))
    model = Transformer(kv, tensors, max_context=16)
    assert all("qk" in L and "attn_v" in L and "qkv" not in L for L in model.layers)
    ids = [5, 17, 3, 42, 9, 11, 60]
    np.testing.assert_allclose(model.forward(ids, 0).numpy(), _ref_forward(w, ids), rtol=2e-4, atol=2e-4)


def test_cli_json_and_logits_for(tmp_path, capsys):
    path, w = _model(tmp_path)
    assert llm_main(["--model", str(path), "--logits-for", "[2, 7, 9]", "--context", "16"]) == 0
    logits = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    np.testing.assert_allclose(logits, _ref_forward(w, [2, 7, 9]), rtol=2e-4, atol=2e-4)
    assert llm_main(["--model", str(path), "--prompt", "", "--max-tokens", "4", "--json", "--context", "16"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["prompt_ids"] == [2] and len(out["ids"]) <= 4 and set(out) >= {"text", "prefill_tok_s", "decode_tok_s"}
    # greedy: each generated id is the argmax of the reference given everything before it
    seq = [2]
    for i in out["ids"]:
        assert i == int(np.argmax(_ref_forward(w, seq)))
        seq.append(i)
    with pytest.raises(SystemExit):
        llm_main(["--model", str(path), "--logits-for", "[1, 99999]"])


def _random_blocks(ttype: int, nbytes: int, n: int, seed: int) -> np.ndarray:
    """n random blocks (n, nbytes) of a quantized type: every bit pattern, its fp16 fields finite."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)

    def f16():
        return np.frombuffer(rng.uniform(-2, 2, n).astype(np.float16).tobytes(), np.uint8).reshape(n, 2)
    # the fp16 fields: scales at the start (Q4_K: d and dmin; Q4_1, Q5_1: d and m), at the end for Q6_K
    if ttype == 14:
        raw[:, 208:210] = f16()
    else:
        raw[:, :2] = f16()
        if ttype in (3, 7, 12):
            raw[:, 2:4] = f16()
    return raw


def _gguf_matrix(raw: np.ndarray, ttype: int, shape: tuple[int, int], name: str = "w"):
    """A GGUFTensor (rows, cols) over blocks `raw` held in memory."""
    from tinygrad.nn.state_file import CheckpointBytes
    from tinygrad.nn.state_gguf import GGUFTensor
    return GGUFTensor(CheckpointBytes.in_memory(raw.tobytes(), name), name, shape, ttype, 0, raw.nbytes)


# ttype, block bytes, values a block, the planes' bytes a block: Q8_0 the file's, Q4_0/Q5_0 a byte a value and the
# file's fp16 scale, Q4_1/Q5_1 that and the fp16 minimum, Q4_K/Q6_K a byte a value and float32 scales (and offsets)
PLANE_CASES = [(2, 18, 32, 34), (3, 20, 32, 36), (6, 22, 32, 34), (7, 24, 32, 36), (8, 34, 32, 34),
               (12, 144, 256, 256 + 64), (14, 210, 256, 256 + 64)]


@pytest.mark.parametrize("ttype,nbytes,block,plane_bytes", PLANE_CASES)
def test_int8_planes_equal_gguf_dequantization(ttype, nbytes, block, plane_bytes, monkeypatch):
    """The planes hold the values gguf's dequantization gives, bit for bit (on the host and in the device's kernel),
    in the bytes the type's layout says: fp16 scales where the file's are (Q8_0 takes exactly the file's bytes).
    Planes are what a GPU keeps: forced here on the CPU."""
    from tinygrad import Device, Tensor
    from tinygrad.apps.llm.linear import PLANE_LAYOUT, Linear, _planes, plane_values
    monkeypatch.setattr(Linear, "FILE_BITS_TYPES", frozenset())
    from tinygrad.nn.state_gguf import dequantize
    raw = _random_blocks(ttype, nbytes, 64, ttype)
    want = dequantize(ttype, Tensor(raw.reshape(-1)), (64 * block,)).numpy().reshape(64, block)
    planes = _planes(ttype, raw.reshape(-1))
    np.testing.assert_array_equal(plane_values(*planes), want)
    assert sum(p.nbytes for p in planes if p is not None) == 64 * plane_bytes
    assert planes[1].dtype == PLANE_LAYOUT[ttype][1]
    if ttype in (2, 3, 6, 7, 8):
        assert planes[1].dtype == np.float16 and planes[1].nbytes == 64 * 2  # the file's scale bytes
    if ttype in (3, 7):
        assert planes[2].dtype == np.float16 and planes[2].nbytes == 64 * 2  # and its minimums
    # a (4, 16 * block) matrix on the device: its kernel's values equal too (Q4_K's q * d - m within a rounding:
    # a GPU compiler may fuse it into one fma)
    lin = Linear(_gguf_matrix(raw, ttype, (4, 16 * block)), Device.DEFAULT)
    assert lin.qs.nbytes() + lin.d.nbytes() + (lin.m.nbytes() if lin.m is not None else 0) == 64 * plane_bytes
    if lin.m is None:
        np.testing.assert_array_equal(lin.weight().numpy(), want.reshape(4, 16 * block))
    else:
        np.testing.assert_allclose(lin.weight().numpy(), want.reshape(4, 16 * block), rtol=1e-6, atol=1e-7)


def test_planes_load_in_chunks_as_in_one_piece(monkeypatch):
    """Matrices larger than a load chunk are made and written chunk by chunk (the last chunk overlapping the one
    before), stacked ones too (a chunk spanning two of them): the device holds the same planes (forced on the CPU)."""
    from tinygrad import Device
    from tinygrad.apps.llm import linear as model
    from tinygrad.apps.llm.linear import Linear, plane_values
    monkeypatch.setattr(Linear, "FILE_BITS_TYPES", frozenset())
    q, k = _random_blocks(8, 34, 13 * 4, 1), _random_blocks(6, 22, 7 * 4, 2)  # 13 and 7 rows of 128 values
    want = np.concatenate([plane_values(*model._planes(8, q.reshape(-1))).reshape(13, 128),
                           plane_values(*model._planes(6, k.reshape(-1))).reshape(7, 128)])
    ts = [_gguf_matrix(q, 8, (13, 128), "q"), _gguf_matrix(k, 6, (7, 128), "k")]
    whole = Linear.stacked(ts, Device.DEFAULT)
    monkeypatch.setattr(model, "LOAD_CHUNK_BYTES", 3 * 128)  # 3 rows a chunk: 7 chunks, the last overlapping
    chunked = Linear.stacked(ts, Device.DEFAULT)
    for lin in (whole, chunked):
        assert lin.shape == (20, 128) and lin.d.dtype == model.dtypes.float16
        np.testing.assert_array_equal(lin.weight().numpy(), want)
    np.testing.assert_array_equal(Linear(ts[0], Device.DEFAULT).weight().numpy(), want[:13])
    # Q4_K (offsets) and Q6_K (16-value groups) in chunks
    for ttype, nbytes in ((12, 144), (14, 210)):
        raw = _random_blocks(ttype, nbytes, 10, ttype)
        lin = Linear(_gguf_matrix(raw, ttype, (5, 512)), Device.DEFAULT)
        np.testing.assert_allclose(lin.weight().numpy(), plane_values(*model._planes(ttype, raw.reshape(-1))).reshape(
            5, 512), rtol=1e-6, atol=1e-7)


LOAD_PEAK_SCRIPT = """
import sys
from tinygrad.apps.llm.model import Transformer
from tinygrad.nn.state_gguf import gguf_tensors


def vm(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


kv, tensors = gguf_tensors(sys.argv[1])
before = vm("VmRSS")
model = Transformer(kv, tensors, max_context=64)
stored = sum(lin.device_bytes() for lin in [model.output] + [v for L in model.layers for v in L.values()]
             if hasattr(lin, "device_bytes"))
print(before, vm("VmHWM"), stored)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads peak memory from /proc (Linux)")
def test_loading_peaks_at_the_weights_and_a_chunk(tmp_path):
    """Loading one layer of the synthetic Gemma 3 270M (its 178 MB Q8_0 embedding table is most of the file) in a
    fresh process on the host device: the peak resident memory stays within the blocks it keeps plus a fixed
    allowance (a chunk in flight, the file's pages of it, compiled kernels, the norms), where one whole-table
    temporary would add 168 MB or more."""
    from tinygrad.apps.llm.synthetic import write_gemma3_270m
    path = write_gemma3_270m(tmp_path / "g.gguf", layers=1)
    # on the host device, whatever the default here: the weights are then what host memory holds (a GPU's driver
    # and compiler take host memory of their own)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA", "AMD", "METAL", "CPU")}
    env.update(PYTHONPATH=os.pathsep.join(sys.path), CLANG="1")
    out = subprocess.run([sys.executable, "-c", LOAD_PEAK_SCRIPT, path], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    before, peak, stored = map(int, out.stdout.split())
    # the 178 MB table (Q8_0's blocks, or its planes: the same bytes) and a layer's 4 MB of matrices (6 MB where
    # Q5_0's and Q6_K's keep planes: TG_LLM_FILE_BITS=0, or a device without integer vectors)
    assert 181e6 < stored < 185e6
    assert peak - before < stored + 48e6, (before, peak, stored)


# ---- sampling ---------------------------------------------------------------------------------------------------
def test_sampling_filters_keep_the_right_tokens_and_draw_by_probability():
    from tinygrad import Tensor
    from tinygrad.apps.llm.sampling import Sampler, SamplingParams
    rng = np.random.default_rng(1)
    logits = rng.standard_normal(1000).astype(np.float32) * 3
    order = np.argsort(-logits)
    t = Tensor(logits)
    assert Sampler(SamplingParams())(t, []) == int(order[0])  # temperature 0: the argmax
    # the repetition penalty can move the argmax off a repeated token
    pen = Sampler(SamplingParams(repeat_penalty=1e6))(t, [int(order[0])])
    assert pen == int(order[1])
    # top-k: every draw among the k best; top-p: among the smallest set holding p of the mass; min-p likewise
    s = Sampler(SamplingParams(temperature=1.0, top_k=5, seed=3))
    assert {s(t, []) for _ in range(40)} <= set(order[:5].tolist())
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    nucleus = order[:int(np.searchsorted(np.cumsum(probs[order]), 0.9) + 1)]
    assert len(nucleus) > 2
    s = Sampler(SamplingParams(temperature=1.0, top_p=0.9, seed=4))
    drawn = [s(t, []) for _ in range(60)]
    assert set(drawn) <= set(nucleus.tolist()) and len(set(drawn)) > 1
    s = Sampler(SamplingParams(temperature=1.0, min_p=0.2, seed=5))
    assert all(probs[i] >= 0.2 * probs.max() for i in (s(t, []) for _ in range(40)))
    # the draw follows the softmax: two tokens of logits 0 and log 3 come out about 1:3
    two = Tensor(np.array([0.0, np.log(3.0)], np.float32))
    s = Sampler(SamplingParams(temperature=1.0, seed=6))
    ones = sum(s(two, []) for _ in range(400))
    assert 250 < ones < 350
    # a seed repeats its draws
    a, b = Sampler(SamplingParams(temperature=1.0, seed=7)), Sampler(SamplingParams(temperature=1.0, seed=7))
    assert [a(t, []) for _ in range(5)] == [b(t, []) for _ in range(5)]
    with pytest.raises(ValueError, match="out of range"):
        Sampler(SamplingParams(top_p=0.0))


def test_generate_streams_its_text_and_stops_at_a_stop_string(tmp_path):
    from tinygrad.apps.llm.generate import generate
    from tinygrad.apps.llm.sampling import SamplingParams
    path, _ = _model(tmp_path)
    kv, tensors = gguf_tensors(str(path))
    tok = Tokenizer.from_gguf(kv)
    model = Transformer(kv, tensors, max_context=32)
    full = generate(model, tok, [2], 8, SamplingParams())
    assert full.text == tok.decode(full.ids) and len(full.ids) >= 2
    # stop at the text of the second generated token: the text ends before it, and the stream shows exactly that
    stop = tok.decode(full.ids[:2])[len(tok.decode(full.ids[:1])):]
    shown = []
    res = generate(model, tok, [2], 8, SamplingParams(), stop=[stop], on_text=shown.append)
    assert res.text == full.text[:full.text.find(stop)] and "".join(shown) == res.text


def test_forward_batch_rows_equal_each_sequence_alone(tmp_path):
    path, _ = _model(tmp_path)
    kv, tensors = gguf_tensors(str(path))
    rng = np.random.default_rng(5)
    prompts = [[int(i) for i in rng.integers(3, VOCAB, n)] for n in (5, 9, 3)]
    alone = Transformer(kv, tensors, max_context=48)
    want = []
    for p in prompts:  # each sequence by itself, slot 0, unjitted: prompt, then one more token
        alone.forward(p, 0, jit=False)
        want.append(alone.forward([7], len(p), jit=False).numpy())
    model = Transformer(kv, tensors, max_context=48, slots=3)
    for _ in range(3):  # captured on the second call, replayed on the third
        for s, p in enumerate(prompts):
            model.forward(p, 0, slot=s)
        got = model.forward_batch([7, 7, 7], [len(p) for p in prompts], [0, 1, 2]).numpy()
        np.testing.assert_allclose(got, np.stack(want), rtol=1e-4, atol=1e-4)
    # two of the slots, in another order of slots: the capture of two rows
    got = model.forward_batch([7, 7], [len(prompts[2]), len(prompts[0])], [2, 0]).numpy()
    np.testing.assert_allclose(got, np.stack([want[2], want[0]]), rtol=1e-4, atol=1e-4)
    assert model.batched_steps == 4
    for bad in (([7], [3], [3]), ([7, 7], [3, 3], [1, 1]), ([7], [0], [0]), ([7], [48], [0]), ([], [], [])):
        with pytest.raises(ValueError):
            model.forward_batch(*bad)
    with pytest.raises(ValueError, match="slot"):
        model.forward([3], 0, slot=3)
    with pytest.raises(ValueError, match="slots"):
        Transformer(kv, tensors, max_context=48, slots=0)


def test_cli_names_what_it_cannot_load(tmp_path, capsys):
    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"# not a model")
    for path in (str(bad), str(tmp_path / "missing.gguf")):
        with pytest.raises(SystemExit) as e:
            llm_main(["--model", path, "--prompt", "hi"])
        assert e.value.code == 2 and "can't load" in capsys.readouterr().err


def test_chunked_jitted_prefill_matches_one_pass(tmp_path):
    path, w = _model(tmp_path)
    kv, tensors = gguf_tensors(str(path))
    ids = [int(i) for i in np.random.default_rng(3).integers(3, VOCAB, 40)]
    plain = Transformer(kv, tensors, max_context=48)
    want = plain.forward(ids[:20], 0, jit=False).numpy()
    want2 = plain.forward(ids[20:40], 20, jit=False).numpy()  # a second prompt piece after the first
    chunked = Transformer(kv, tensors, max_context=48)
    for _ in range(3):  # the third call replays the captured chunks
        np.testing.assert_allclose(chunked.forward(ids[:20], 0).numpy(), want, rtol=1e-4, atol=1e-4)
        # 20 tokens at 20: a 16-chunk, then the context's last 4 positions (no chunk fits) in one plain step
        np.testing.assert_allclose(chunked.forward(ids[20:40], 20).numpy(), want2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(want, _ref_forward(w, ids[:20]), rtol=2e-4, atol=2e-4)
    with pytest.raises(ValueError, match="vocabulary"):
        chunked.forward([VOCAB], 0)


# ---- the tokenizer's compact vocabulary --------------------------------------------------------------------------
def test_vocab_finds_what_a_dict_finds():
    """Vocab against a dict built in id order, on texts with repeats (the last id wins) and a table small enough
    for long probe chains."""
    from tinygrad.apps.llm.tokenizer import Vocab
    rng = np.random.default_rng(4)
    alphabet = ["a", "b", S, "é", "😀", "\n", " "]
    texts = ["".join(rng.choice(alphabet, rng.integers(0, 5))) for _ in range(300)]
    v, want = Vocab(texts), {t: i for i, t in enumerate(texts)}
    assert len(v) == len(texts) and [v.text(i) for i in range(len(texts))] == texts
    assert all(v.raw(i) == t.encode() for i, t in enumerate(texts))
    for t in set(texts) | {"zz", "a" * 9, S + "x"}:
        assert v.get(t) == want.get(t) and (t in v) == (t in want), t
    with pytest.raises(KeyError):
        v["zz"]
    assert len(Vocab([])) == 0 and Vocab([]).get("a") is None


# ---- the model file changed under a running model ------------------------------------------------------------------
SERVER_FILE_CHANGED = r"""
import json, os, sys, threading, urllib.error, urllib.request
from tinygrad.apps.llm import Tokenizer, Transformer
from tinygrad.apps.llm.server import LLMServer
from tinygrad.nn.state_gguf import gguf_tensors
path = sys.argv[1]
good = open(path, "rb").read()
kv, tensors = gguf_tensors(path)
model = Transformer(kv, tensors, max_context=32)
srv = LLMServer(("127.0.0.1", 0), model, Tokenizer.from_gguf(kv), "tiny")
threading.Thread(target=srv.serve_forever, daemon=True).start()
def ask():
    body = json.dumps({"prompt": "t5 t6", "max_tokens": 3, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{srv.server_address[1]}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())["choices"][0]["text"]
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"]["message"]
def rewrite(data):  # in place: the same file (inode) the model mapped
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(data)
out = {"first": ask()}
os.truncate(path, 1000)  # the embedding table is at the start of the data, past the header
out["truncated"] = ask()
rewrite(good)
out["restored"] = ask()
bad = bytearray(good)
bad[1000:len(good) // 2] = bytes(b ^ 0xFF for b in bad[1000:len(good) // 2])
rewrite(bytes(bad))  # the same size, other bytes
out["rewritten"] = ask()
rewrite(good)
os.replace(path, path + ".old")  # replaced by a rename: the map keeps the old file, which is whole
open(path, "wb").write(b"GGUF" + bytes(100))
out["renamed"] = ask()
print(json.dumps(out))
srv.shutdown()
"""


def test_server_survives_its_model_file_truncated_or_rewritten(tmp_path):
    path, _ = _model(tmp_path)
    r = subprocess.run([sys.executable, "-c", SERVER_FILE_CHANGED, str(path)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONPATH": os.getcwd()})
    # a SIGBUS would show as returncode -7
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["first"][0] == 200
    assert out["truncated"][0] == 500 and "truncated" in out["truncated"][1] and "load it again" in out["truncated"][1]
    assert out["restored"] == out["first"]
    assert out["rewritten"][0] == 500 and "rewritten" in out["rewritten"][1]
    assert out["renamed"] == out["first"]


TRUNCATED_DURING_READ = r"""
import os, sys
from tinygrad.apps.llm import Transformer
from tinygrad.nn.state_file import CheckpointBytes, CheckpointChangedError
from tinygrad.nn.state_gguf import gguf_tensors
path = sys.argv[1]
kv, tensors = gguf_tensors(path)
model = Transformer(kv, tensors, max_context=32)
before = model.embed([5, 6])
# the file is cut short after the size check passed (the check skipped: the window between check and read)
CheckpointBytes.check_unchanged = lambda *a: None
os.truncate(path, 1000)
try:
    model.embed([5, 6])
    print("no error")
except CheckpointChangedError as e:
    print("raised", "truncated" in str(e))
"""


def test_embedding_rows_truncated_during_the_read_raise(tmp_path):
    """The embedding rows are read from the file with pread, not through the map: a file cut short between the
    size check and the read is CheckpointChangedError, never a SIGBUS (-7)."""
    path, _ = _model(tmp_path)
    r = subprocess.run([sys.executable, "-c", TRUNCATED_DURING_READ, str(path)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert r.stdout.strip().splitlines()[-1] == "raised True"


def test_chat_cli_survives_its_model_file_truncated(tmp_path):
    path, _ = _model(tmp_path)
    good = path.read_bytes()
    # the synthetic file has no chat template of its own: --chat needs one named
    cmd = [sys.executable, "-m", "tinygrad.apps.llm", "--model", str(path), "--chat", "--chat-template", "chatml",
           "--context", "32", "--max-tokens", "2"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})

    def turn(line):
        p.stdin.write(line + "\n")
        p.stdin.flush()
        return p.stdout.readline()  # the prompt, the answer (or nothing) and its newline
    try:
        first = turn("t5 t6")
        os.truncate(path, 1000)
        turn("t7")
        with open(path, "r+b") as f:
            f.write(good)
        again = turn("t5 t6")
        out, err = p.communicate("", timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, (p.returncode, err[-3000:])
    assert err.count("error:") == 1 and "truncated" in err
    assert first.startswith("> ") and again.startswith("> ")


def test_batched_greedy_decode_equals_each_sequence_alone_with_a_capture_per_row_count(tmp_path):
    # sequences join and leave the batch in every combination and order of slots (as a server's streams do): each
    # one's greedy ids are those it gets decoded alone, and the batched steps are captured once per row count
    path, _ = _model(tmp_path)
    kv, tensors = gguf_tensors(str(path))
    rng = np.random.default_rng(11)
    prompts = [[int(i) for i in rng.integers(3, VOCAB, n)] for n in (4, 7, 2)]
    steps = 8
    alone = Transformer(kv, tensors, max_context=48)
    # greedy ids of a model this small mostly repeat the last token: the logits tell a row that read another
    # sequence's cache apart
    want, want_logits = [], []
    for p in prompts:
        logits = [alone.forward(p, 0).numpy()]
        ids = [int(logits[-1].argmax())]
        for t in range(steps - 1):
            logits.append(alone.forward([ids[-1]], len(p) + t).numpy())
            ids.append(int(logits[-1].argmax()))
        want.append(ids)
        want_logits.append(logits)
    model = Transformer(kv, tensors, max_context=48, slots=3)
    got = [[int(model.forward(p, 0, slot=s).numpy().argmax())] for s, p in enumerate(prompts)]
    # each set's rows in the order given: a replay serves other slots, in another order, than its capture
    sets = [(0, 1, 2), (0, 1), (2, 0), (1, 2), (2, 1, 0), (0,), (2,), (1,), (1, 0, 2), (2, 1), (0, 2), (1,), (0, 1)]
    for slots in sets * 2:
        slots = [s for s in slots if len(got[s]) < steps]
        if not slots:
            continue
        pos = [len(prompts[s]) + len(got[s]) - 1 for s in slots]
        rows = model.forward_batch([got[s][-1] for s in slots], pos, slots).numpy()
        for s, row in zip(slots, rows):
            np.testing.assert_allclose(row, want_logits[s][len(got[s])], rtol=1e-4, atol=1e-4)
            got[s].append(int(row.argmax()))
    assert got == want
    batch_keys = {k for k in model._jits if k[0] == "batch"}
    assert batch_keys == {("batch", 1), ("batch", 2), ("batch", 3)}
