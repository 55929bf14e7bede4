"""Synthetic GGUF files: random weights at a real model's shapes (or tiny ones), for timing and for checking the
runtime against llama.cpp on every family without downloading a model.

`write_gemma3_270m` copies the real Gemma 3 270M Q4_K_M file's metadata, tensor names, shapes and types.
`write_synthetic(path, "llama:llama-3.1-8b", "Q4_K_M")` writes any family at a named size (SIZES) and weight type
(QUANTS), streaming each tensor to disk a few MB at a time (an 8B Q4_K_M file is ~4.9 GB and never in memory), with
a made-up byte-level BPE or SentencePiece vocabulary. The same seed writes the same bytes. Outputs are meaningless
text; speed depends only on shapes and types.

    >>> import os, tempfile
    >>> from tinygrad.nn.state_gguf import gguf_tensors
    >>> path = write_gemma3_270m(os.path.join(tempfile.mkdtemp(), "g.gguf"))
    >>> kv, tensors = gguf_tensors(path)
    >>> tensors["blk.0.ffn_down.weight"].type_name, tensors["blk.2.ffn_down.weight"].type_name
    ('Q6_K', 'Q4_K')
"""
from __future__ import annotations

import itertools
import os
import string
from dataclasses import dataclass

import numpy as np

from tinygrad.nn.state_gguf import GGML_TYPES
from tinygrad.nn.state_gguf_write import ARRAY, BOOL, F32, I32, STRING, U32, gguf_chunks, save_gguf

F32_, F16, Q5_0, Q8_0, Q4_K, Q6_K = 0, 1, 6, 8, 12, 14

# gemma-3-270m-Q4_K_M.gguf's metadata in its order (read with gguf_tensors), less the tokenizer's arrays
GEMMA3_270M_KV = [
    ("general.architecture", STRING, "gemma3"), ("general.type", STRING, "model"),
    ("general.name", STRING, "Gemma 3 270m (synthetic)"), ("general.basename", STRING, "gemma-3"),
    ("general.size_label", STRING, "270M"), ("general.license", STRING, "gemma"),
    ("general.tags", ARRAY, (STRING, ["gemma3", "gemma", "google", "text-generation"])),
    ("gemma3.context_length", U32, 32768), ("gemma3.embedding_length", U32, 640), ("gemma3.block_count", U32, 18),
    ("gemma3.feed_forward_length", U32, 2048), ("gemma3.attention.head_count", U32, 4),
    ("gemma3.attention.layer_norm_rms_epsilon", F32, 1e-6), ("gemma3.attention.key_length", U32, 256),
    ("gemma3.attention.value_length", U32, 256), ("gemma3.rope.freq_base", F32, 1000000.0),
    ("gemma3.attention.sliding_window", U32, 512), ("gemma3.attention.head_count_kv", U32, 1),
    ("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.pre", STRING, "default"),
]
GEMMA3_270M_KV_TAIL = [
    ("tokenizer.ggml.bos_token_id", U32, 2), ("tokenizer.ggml.eos_token_id", U32, 1),
    ("tokenizer.ggml.unknown_token_id", U32, 3), ("tokenizer.ggml.padding_token_id", U32, 0),
    ("tokenizer.ggml.add_bos_token", BOOL, True), ("tokenizer.ggml.add_sep_token", BOOL, False),
    ("tokenizer.ggml.add_eos_token", BOOL, False), ("tokenizer.ggml.add_space_prefix", BOOL, False),
    ("general.quantization_version", U32, 2), ("general.file_type", U32, 15),
]
VOCAB, DIM, FFN, LAYERS, Q_DIM, KV_DIM, HEAD_DIM = 262144, 640, 2048, 18, 1024, 256, 256
# Q4_K_M gives these layers' attn_v Q8_0 (else Q5_0) and ffn_down Q6_K (else Q4_K)
MORE_BITS_LAYERS = (0, 1, 4, 7, 10, 13, 15, 16, 17)


def gemma3_270m_tensors(layers: int = LAYERS) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, shape outermost first, ggml type) of every tensor, in the real file's order (of its first `layers`
    layers)."""
    out = [("output_norm.weight", (DIM,), F32_), ("token_embd.weight", (VOCAB, DIM), Q8_0)]
    for i in range(layers):
        more = i in MORE_BITS_LAYERS
        layer = [("attn_k", (KV_DIM, DIM), Q5_0), ("attn_k_norm", (HEAD_DIM,), F32_), ("attn_norm", (DIM,), F32_),
                 ("attn_output", (DIM, Q_DIM), Q4_K), ("attn_q", (Q_DIM, DIM), Q5_0),
                 ("attn_q_norm", (HEAD_DIM,), F32_), ("attn_v", (KV_DIM, DIM), Q8_0 if more else Q5_0),
                 ("ffn_down", (DIM, FFN), Q6_K if more else Q4_K), ("ffn_gate", (FFN, DIM), Q5_0),
                 ("ffn_norm", (DIM,), F32_), ("ffn_up", (FFN, DIM), Q5_0), ("post_attention_norm", (DIM,), F32_),
                 ("post_ffw_norm", (DIM,), F32_)]
        out += [(f"blk.{i}.{n}.weight", shape, t) for n, shape, t in layer]
    return out


# where each type's fp16 scales sit in a block, and a scale that keeps the values near a trained model's (~0.02)
_SCALES = {Q8_0: ([(0, 2)], 3e-4), Q5_0: ([(0, 2)], 2e-3), Q4_K: ([(0, 2), (2, 4)], 1.5e-4),
           Q6_K: ([(208, 210)], 6e-5)}


def random_blocks(ttype: int, n_values: int, rng: np.random.Generator) -> bytes:
    """`n_values` values of quantized type `ttype` as random blocks: every quant bit pattern, small finite scales."""
    _, block, block_bytes, _ = GGML_TYPES[ttype]
    b = rng.integers(0, 256, (n_values // block, block_bytes), dtype=np.uint8)
    spans, scale = _SCALES[ttype]
    for lo, hi in spans:
        b[:, lo:hi] = (rng.uniform(0.5, 1.0, (len(b), 1)) * scale).astype(np.float16).view(np.uint8)
    return b.tobytes()


def synthetic_vocab(n: int = VOCAB) -> tuple[list[str], list[float], list[int]]:
    """tokens, scores, types of a vocabulary the tokenizer can use: control tokens (ids 0-3 as in Gemma, and its
    turn markers), the 256 byte tokens, then U+2581, punctuation, digits and every word of 1 to 4 lowercase letters
    alone and after U+2581, until there are `n` (262,144: the embedding's rows); shorter pieces score higher, so
    they merge first."""
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"] + [f"<0x{b:02X}>" for b in
                                                                                         range(256)]
    types = [3] * 6 + [6] * 256
    words = ("".join(w) for k in range(1, 5) for w in itertools.product(string.ascii_lowercase, repeat=k))
    pieces = itertools.chain(["\u2581"], ".,:;!?'\"()-0123456789\t", (p for w in words for p in (w, "\u2581" + w)))
    normal = list(itertools.islice(pieces, n - len(tokens)))
    return tokens + normal, [0.0] * len(tokens) + [-float(i) for i in range(len(normal))], types + [1] * len(normal)


def write_gemma3_270m(path: str | os.PathLike, seed: int = 0, layers: int = LAYERS) -> str:
    """Write the synthetic model to `path` (253 MB; with fewer `layers`, its first ones: 184 MB for one) and
    return the path."""
    if not 1 <= layers <= LAYERS:
        raise ValueError(f"the synthetic Gemma 3 270M has 1 to {LAYERS} layers, not {layers}")
    rng = np.random.default_rng(seed)
    tokens, scores, types = synthetic_vocab()
    head = [(k, t, layers if k == "gemma3.block_count" else v) for k, t, v in GEMMA3_270M_KV]
    kv = head + [("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
                           ("tokenizer.ggml.scores", ARRAY, (F32, scores)),
                           ("tokenizer.ggml.token_type", ARRAY, (I32, types))] + GEMMA3_270M_KV_TAIL
    tensors = []
    for name, shape, ttype in gemma3_270m_tensors(layers):
        if ttype == F32_:
            raw = np.ones(shape, np.float32).tobytes()  # RMSNorm gains (GGUF stores Gemma's 1 + w)
        else:
            raw = random_blocks(ttype, int(np.prod(shape)), rng)
        tensors.append((name, list(reversed(shape)), ttype, raw))
    save_gguf(path, kv, tensors)
    return str(path)


# ---- any family, any size ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """A model's numbers: what its GGUF's metadata says and which optional tensors it has."""
    arch: str
    layers: int
    dim: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    context: int = 4096
    rope_base: float = 10000.0
    tied: bool = True               # no output.weight: the embedding is the output projection
    bpe: bool = True                # byte-level BPE ("gpt2") vocabulary, else SentencePiece ("llama")
    pre: str = "default"            # tokenizer.ggml.pre of a BPE vocabulary
    rope_freqs: bool = False        # llama 3.1's rope_freqs.weight (per-pair frequency divisors)
    long_rope: bool = False         # Phi-3's rope_factors_short and rope_factors_long (divisors of each length)
    extra: tuple = ()               # more (key without the arch, GGUF value type, value)


_ROPE_DIMS, _SCALING, _FACTOR, _ORIG = "rope.dimension_count", "rope.scaling.type", "rope.scaling.factor", \
    "rope.scaling.original_context_length"
SIZES = {
    # real shapes (the config.json of each model)
    "llama-3.2-1b": Shape("llama", 16, 2048, 8192, 32, 8, 64, 128256, 131072, 500000.0, tied=True, pre="llama-bpe",
                          rope_freqs=True),
    "llama-3.1-8b": Shape("llama", 32, 4096, 14336, 32, 8, 128, 128256, 131072, 500000.0, tied=False,
                          pre="llama-bpe", rope_freqs=True),
    "qwen3-8b": Shape("qwen3", 36, 4096, 12288, 32, 8, 128, 151936, 40960, 1000000.0, tied=False, pre="qwen2"),
    # tiny ones, each trying what its family does differently (checked against llama.cpp in test_llm_families)
    "llama-tiny": Shape("llama", 2, 72, 160, 9, 3, 8, 384, 256, 500000.0, tied=True, pre="smollm",
                        rope_freqs=True),
    "llama-tiny-spm": Shape("llama", 2, 64, 128, 8, 2, 8, 400, 256, tied=False, bpe=False,
                            extra=((_SCALING, STRING, "linear"), (_FACTOR, F32, 4.0))),
    "qwen2-tiny": Shape("qwen2", 2, 64, 192, 4, 2, 16, 384, 256, 1000000.0, tied=False, pre="qwen2",
                        extra=((_SCALING, STRING, "yarn"), (_FACTOR, F32, 4.0), (_ORIG, U32, 64))),
    "qwen3-tiny": Shape("qwen3", 2, 64, 128, 8, 1, 32, 384, 256, 1000000.0, tied=True, pre="qwen2"),
    "gemma2-tiny": Shape("gemma2", 3, 64, 128, 4, 2, 32, 400, 256, bpe=False,
                         extra=(("attention.sliding_window", U32, 5), ("attn_logit_softcapping", F32, 5.0),
                                ("final_logit_softcapping", F32, 8.0))),
    "gemma3-tiny": Shape("gemma3", 6, 64, 128, 4, 1, 32, 400, 256, 1000000.0, bpe=False,
                         extra=(("attention.sliding_window", U32, 5),)),
    "phi3-tiny": Shape("phi3", 2, 64, 128, 4, 4, 16, 400, 256, tied=False, bpe=False,
                       extra=((_ROPE_DIMS, U32, 8),)),
    # Phi-3's long-context RoPE: the runs (64 and llama.cpp's 128 positions) pass the original context of 32
    "phi3-tiny-long": Shape("phi3", 2, 64, 128, 4, 4, 16, 400, 256, tied=False, bpe=False, long_rope=True,
                            extra=((_ORIG, U32, 32), ("rope.scaling.attn_factor", F32, 1.19))),
}
QUANTS = {"F32": F32_, "F16": F16, "Q8_0": Q8_0, "Q4_K_M": Q4_K}
_FILE_TYPE = {"F32": 0, "F16": 1, "Q8_0": 7, "Q4_K_M": 15}


def _more_bits(i: int, n: int) -> bool:
    """The layers whose attn_v and ffn_down Q4_K_M gives 6 bits (llama.cpp's use_more_bits)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def family_tensors(s: Shape, quant: str = "F32") -> list[tuple[str, tuple[int, ...], int, float]]:
    """(name, shape outermost first, ggml type, the values' standard deviation; 0 for norm gains near 1, -2 for
    gains near 3, -1, -3 and -4 for RoPE factors) of every tensor of
    a model of shape `s` with weights of type `quant`, in llama.cpp's names and order."""
    w = QUANTS[quant]
    q_dim, kv_dim = s.heads * s.head_dim, s.kv_heads * s.head_dim
    k_quant = quant == "Q4_K_M"
    embd_type = Q6_K if k_quant and s.tied else w
    # embedding rows of about unit size and an output projection with logits a few units apart, so greedy tokens
    # are clear-cut
    out = [("token_embd.weight", (s.vocab, s.dim), embd_type, 0.5 if s.tied else 1.0)]
    pairs = int(dict((k, v) for k, _, v in s.extra).get(_ROPE_DIMS, s.head_dim)) // 2
    if s.rope_freqs:
        out.append(("rope_freqs.weight", (pairs,), F32_, -1.0))
    if s.long_rope:
        out += [("rope_factors_long.weight", (pairs,), F32_, -4.0), ("rope_factors_short.weight", (pairs,), F32_, -3.0)]
    out.append(("output_norm.weight", (s.dim,), F32_, 0.0))
    if not s.tied:
        out.append(("output.weight", (s.vocab, s.dim), Q6_K if k_quant else w, 3.0 / np.sqrt(s.dim)))
    for i in range(s.layers):
        more = k_quant and _more_bits(i, s.layers)
        m = [("attn_norm", (s.dim,), F32_, 0.0)]
        if s.arch == "phi3":
            m.append(("attn_qkv", (q_dim + 2 * kv_dim, s.dim), w, 1 / np.sqrt(s.dim)))
        else:
            m += [("attn_q", (q_dim, s.dim), w, 1 / np.sqrt(s.dim)), ("attn_k", (kv_dim, s.dim), w, 1 / np.sqrt(s.dim)),
                  ("attn_v", (kv_dim, s.dim), Q6_K if more else w, 1 / np.sqrt(s.dim))]
        if s.arch == "qwen2":
            m += [(n, (d,), F32_, 0.1) for n, d in (("attn_q.bias", q_dim), ("attn_k.bias", kv_dim),
                                                    ("attn_v.bias", kv_dim))]
        if s.arch in ("qwen3", "gemma3"):
            m += [("attn_q_norm", (s.head_dim,), F32_, 0.0), ("attn_k_norm", (s.head_dim,), F32_, 0.0)]
        # a tied model's logits favour the input token (its embedding is in the residual): larger layer outputs (or
        # post-norm gains) make the next token depend on the context
        big = 3.0 if s.tied else 1.0
        m.append(("attn_output", (s.dim, q_dim), w, big / np.sqrt(q_dim)))
        if s.arch in ("gemma2", "gemma3"):
            m.append(("post_attention_norm", (s.dim,), F32_, -2.0))
        m.append(("ffn_norm", (s.dim,), F32_, 0.0))
        if s.arch == "phi3":
            m.append(("ffn_up", (2 * s.ffn, s.dim), w, 1 / np.sqrt(s.dim)))
        else:
            m += [(n, (s.ffn, s.dim), w, 1 / np.sqrt(s.dim)) for n in ("ffn_gate", "ffn_up")]
        m.append(("ffn_down", (s.dim, s.ffn), Q6_K if more else w, big / np.sqrt(s.ffn)))
        if s.arch in ("gemma2", "gemma3"):
            m.append(("post_ffw_norm", (s.dim,), F32_, -2.0))
        out += [(f"blk.{i}.{n}" + ("" if n.endswith(".bias") else ".weight"), shape, t, sd) for n, shape, t, sd in m]
    return out


def _byte_chars() -> list[str]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes are themselves, the rest 256 + n."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def bpe_vocab(n: int) -> tuple[list[str], list[int], list[str]]:
    """tokens, types and merges of a byte-level BPE vocabulary of `n` tokens: the 256 bytes, then merges of a letter
    after a letter or after a space (U+0120 in GPT-2's byte chars), then of those tokens and a letter, longer and
    longer (each token made one way only), then two control tokens (BOS, EOS) last."""
    chars = _byte_chars()
    tokens, merges = list(chars), []
    letters, space = string.ascii_lowercase, chars[32]
    made: list[str] = []

    def pieces():
        for a in (space,) + tuple(letters):
            for b in letters:
                yield a, b
        k = 0
        while True:  # breadth first: every token made so far, one letter longer
            for b in letters:
                yield made[k], b
            k += 1
    for a, b in itertools.islice(pieces(), max(0, n - 2 - len(tokens))):
        made.append(a + b)
        merges.append(f"{a} {b}")
    tokens += made + ["<|begin_of_text|>", "<|end_of_text|>"]
    return tokens, [1] * (len(tokens) - 2) + [3, 3], merges


def _vocab_kv(s: Shape) -> list:
    if s.bpe:
        tokens, types, merges = bpe_vocab(s.vocab)
        return [("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, s.pre),
                ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)), ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
                ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
                ("tokenizer.ggml.bos_token_id", U32, s.vocab - 2), ("tokenizer.ggml.eos_token_id", U32, s.vocab - 1),
                ("tokenizer.ggml.add_bos_token", BOOL, True)]
    tokens, scores, types = synthetic_vocab(s.vocab)
    return [("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.pre", STRING, "default"),
            ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)), ("tokenizer.ggml.scores", ARRAY, (F32, scores)),
            ("tokenizer.ggml.token_type", ARRAY, (I32, types)), ("tokenizer.ggml.bos_token_id", U32, 2),
            ("tokenizer.ggml.eos_token_id", U32, 1), ("tokenizer.ggml.unknown_token_id", U32, 3),
            ("tokenizer.ggml.padding_token_id", U32, 0), ("tokenizer.ggml.add_bos_token", BOOL, True)]


def family_kv(s: Shape, quant: str, name: str) -> list:
    """The metadata of a model of shape `s`."""
    a = s.arch
    # NOTE: the name must not hold the architecture's: llama.cpp gives files named "phi3" Phi-3's special tokens
    kv = [("general.architecture", STRING, a), ("general.name", STRING, f"Synthetic {quant}"),
          ("general.size_label", STRING, name),
          (f"{a}.context_length", U32, s.context), (f"{a}.embedding_length", U32, s.dim),
          (f"{a}.block_count", U32, s.layers), (f"{a}.feed_forward_length", U32, s.ffn),
          (f"{a}.attention.head_count", U32, s.heads), (f"{a}.attention.head_count_kv", U32, s.kv_heads),
          (f"{a}.attention.key_length", U32, s.head_dim), (f"{a}.attention.value_length", U32, s.head_dim),
          (f"{a}.attention.layer_norm_rms_epsilon", F32, 1e-5), (f"{a}.rope.freq_base", F32, s.rope_base)]
    kv += [(f"{a}.{k}", t, v) for k, t, v in s.extra]
    return kv + _vocab_kv(s) + [("general.quantization_version", U32, 2),
                                ("general.file_type", U32, _FILE_TYPE[quant])]


def _values(ttype: int, shape: tuple[int, ...], sd: float, rng: np.random.Generator) -> bytes:
    """Random values of one tensor (or a slab of its rows) as type `ttype`'s bytes: normal values of deviation `sd`
    for float types, blocks whose values spread about as much for Q8_0, random K-quant blocks (random_blocks)."""
    n = int(np.prod(shape))
    if sd == 0.0:   # RMSNorm gains near 1 (gemma's files hold 1 + w too)
        return rng.uniform(0.8, 1.2, n).astype(np.float32).tobytes()
    if sd == -2.0:  # larger gains
        return rng.uniform(2.0, 4.0, n).astype(np.float32).tobytes()
    if sd < 0:      # rope factors: divisors from 1 (fast pairs) to 8 (rope_freqs, as llama 3.1's), 2 (short), 16 (long)
        return np.geomspace(1.0, {-1.0: 8.0, -3.0: 2.0, -4.0: 16.0}[sd], n).astype(np.float32).tobytes()
    if ttype in (F32_, F16):
        return (rng.standard_normal(n) * sd).astype(np.float32 if ttype == F32_ else np.float16).tobytes()
    if ttype == Q8_0:
        b = np.empty((n // 32, 34), np.uint8)
        b[:, :2] = (rng.uniform(0.8, 1.2, (n // 32, 1)) * sd / 73).astype(np.float16).view(np.uint8)
        b[:, 2:] = rng.integers(-127, 128, (n // 32, 32), dtype=np.int8).view(np.uint8)
        return b.tobytes()
    return random_blocks(ttype, n, rng)


class _Streamed:
    """A tensor's bytes made when written, a slab of rows at a time: gguf_chunks needs only their length."""

    def __init__(self, ttype: int, shape: tuple[int, ...], sd: float, rng: np.random.Generator):
        self.ttype, self.shape, self.sd, self.rng = ttype, shape, sd, rng
        _, block, nbytes, _ = GGML_TYPES[ttype]
        self.nbytes = int(np.prod(shape)) // block * nbytes

    def __len__(self) -> int:
        return self.nbytes

    def write(self, f) -> None:
        row = int(np.prod(self.shape[1:])) if len(self.shape) > 1 else self.shape[0]
        rows = self.shape[0] if len(self.shape) > 1 else 1
        step = max(1, (8 << 20) // (row * 4))
        for lo in range(0, rows, step):
            f.write(_values(self.ttype, (min(step, rows - lo), row), self.sd, self.rng))


def write_synthetic(path: str | os.PathLike, name: str, quant: str = "F32", seed: int = 0) -> str:
    """Write the synthetic model `name` (a key of SIZES, or "ARCH:SIZE" with SIZE such a key) with weights of type
    `quant` (a key of QUANTS) to `path`, tensor by tensor, and return the path. The same arguments write the same
    bytes."""
    key = name.split(":", 1)[1] if ":" in name else name
    if key not in SIZES:
        raise ValueError(f"no synthetic size {name!r} (sizes: {', '.join(SIZES)})")
    if quant not in QUANTS:
        raise ValueError(f"no synthetic weight type {quant!r} (types: {', '.join(QUANTS)})")
    s = SIZES[key]
    if ":" in name and name.split(":", 1)[0] != s.arch:
        raise ValueError(f"size {key!r} is a {s.arch} model, not {name.split(':', 1)[0]}")
    rng = np.random.default_rng(seed)
    tensors = [(n, list(reversed(shape)), t, _Streamed(t, shape, sd, rng))
               for n, shape, t, sd in family_tensors(s, quant)]
    with open(path, "wb") as f:
        for chunk in gguf_chunks(family_kv(s, quant, key), tensors):
            if isinstance(chunk, _Streamed):
                chunk.write(f)
            else:
                f.write(chunk)
    return str(path)
