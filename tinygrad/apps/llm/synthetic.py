"""A synthetic Gemma 3 270M Q4_K_M GGUF: the real file's metadata, tensor names, shapes and ggml types, filled with
random (valid) quantized blocks and a made-up vocabulary of the same size.

Speed depends only on shapes and types, so this file times a runtime like the real one (253 MB) on a machine that
cannot get it (`python extra/bench_llm.py --synthetic`). Its outputs are meaningless text.

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

import numpy as np

from tinygrad.nn.state_gguf import GGML_TYPES
from tinygrad.nn.state_gguf_write import ARRAY, BOOL, F32, I32, STRING, U32, save_gguf

F32_, Q5_0, Q8_0, Q4_K, Q6_K = 0, 6, 8, 12, 14

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
