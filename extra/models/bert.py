"""A BERT encoder that loads Hugging Face BERT weights (safetensors), as sentence-transformers models use it.

The layers are named as in Hugging Face's BertModel ("encoder.layer.0.attention.self.query.weight"...), so a
checkpoint's state dict loads by name: `Bert.from_pretrained(model_dir)` reads config.json and model.safetensors.
A "bert." prefix on the names (checkpoints of BertFor* heads) is dropped, and so are weights this encoder has no
use for (the pooler, the position_ids buffer, heads).

Padding: `attention_mask` (1 = token, 0 = padding) gives padded keys a score of -1e30, so their softmax weight is
exactly 0 and a sequence gets the same hidden states alone or padded in a batch.

>>> cfg = BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
...                  intermediate_size=16, max_position_embeddings=16)
>>> Bert(cfg)(Tensor([[1, 2, 3]])).shape
(1, 3, 8)
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, fields

import numpy as np

from tinygrad import Tensor, dtypes
from tinygrad.nn import Embedding, LayerNorm, Linear
from tinygrad.nn.state import get_state_dict, load_state_dict, safe_load

# a finite "minus infinity" for masked attention scores: exp underflows to exactly 0, and a row with every key
# masked still gives finite (uniform) weights instead of NaN
MASKED_SCORE = -1e30


@dataclass(frozen=True)
class BertConfig:
    """The shape of a BERT model: the fields of a Hugging Face BertConfig that the encoder needs."""
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "int" and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"BertConfig.{f.name} must be a positive int, got {v!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                             f"{self.num_attention_heads}")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not supported (have {sorted(ACTIVATIONS)})")

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> BertConfig:
        """A Hugging Face config.json; keys this encoder does not use (dropout, model_type...) are ignored."""
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: only absolute position embeddings are supported, got "
                             f"{raw['position_embedding_type']!r}")
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})


def gelu_erf(x: Tensor) -> Tensor:
    """GELU in BERT's exact form, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)). Tensor.gelu is the tanh
    approximation, which moves BERT's hidden states by about 1e-3."""
    return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())


ACTIVATIONS = {"gelu": gelu_erf, "gelu_new": Tensor.gelu, "gelu_pytorch_tanh": Tensor.gelu, "relu": Tensor.relu}


class BertEmbeddings:
    """word + position + token type embeddings, then LayerNorm."""

    def __init__(self, cfg: BertConfig):
        self.word_embeddings = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)  # noqa: N815 - the checkpoint's name
        self._host_table: np.ndarray | None = None

    def words(self, input_ids: Tensor | np.ndarray) -> Tensor:
        """The word vectors of `input_ids`, (B, T, hidden).

        A Tensor of ids goes through Embedding (a one-hot product: fused kernels, but B*T*vocab*hidden work). Ids
        given on the host (a numpy array) pick their rows on the host from a host copy of the table instead, a
        plain memory copy: 30522-entry vocabularies make the one-hot product cost more than the whole encoder.
        """
        if isinstance(input_ids, Tensor):
            return self.word_embeddings(input_ids)
        ids = np.asarray(input_ids)
        if not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"input_ids must be integers, got {ids.dtype}")
        vocab = self.word_embeddings.vocab_sz
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise IndexError(f"input_ids must be in [0, {vocab}), got values from {ids.min()} to {ids.max()}")
        if self._host_table is None:
            self._host_table = self.word_embeddings.weight.numpy()
        return Tensor(self._host_table[ids], device=self.word_embeddings.weight.device)

    def __call__(self, input_ids: Tensor | np.ndarray, token_type_ids: Tensor | None = None) -> Tensor:
        return self.combine(self.words(input_ids), token_type_ids)

    def combine(self, words: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """LayerNorm(word vectors + position + token type embeddings): the part after the word lookup."""
        seq = words.shape[1]
        max_pos = self.position_embeddings.weight.shape[0]
        if seq > max_pos:
            raise ValueError(f"sequence length {seq} exceeds max_position_embeddings {max_pos}")
        # positions 0..seq-1 are the table's first rows: a view, no lookup needed
        x = words + self.position_embeddings.weight[:seq]
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x).contiguous()

    def invalidate_host_table(self) -> None:
        """Forget the host copy of the word table (call after changing word_embeddings.weight)."""
        self._host_table = None


class BertSelfAttention:
    def __init__(self, cfg: BertConfig):
        self.heads, self.head_dim = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
        self.query = Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = Linear(cfg.hidden_size, cfg.hidden_size)

    def _split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)

    def __call__(self, x: Tensor, score_bias: Tensor | None) -> Tensor:
        q, k, v = (self._split_heads(lin(x)) for lin in (self.query, self.key, self.value))
        scores = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        if score_bias is not None:
            scores = scores + score_bias
        # NOTE: the probabilities are made a kernel's output, else their exp would be recomputed for every
        # output column of the product with v (scaled_dot_product_attention leaves them lazy)
        out = scores.softmax(-1).contiguous().matmul(v)  # (B, heads, T, head_dim)
        b, _, t, _ = out.shape
        return out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)


class BertSelfOutput:
    """dense, then LayerNorm of the residual sum (also the feed-forward's output block: BertOutput)."""

    def __init__(self, cfg: BertConfig, in_features: int):
        self.dense = Linear(in_features, cfg.hidden_size)
        self.LayerNorm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)  # noqa: N815 - the checkpoint's name

    def __call__(self, h: Tensor, residual: Tensor) -> Tensor:
        # NOTE: contiguous() makes the block's output a kernel's output: it is read by several matmuls and the next
        # residual, and left lazy its elementwise chain would be recomputed inside each of them, layer after layer
        return self.LayerNorm(self.dense(h) + residual).contiguous()


class BertAttention:
    def __init__(self, cfg: BertConfig):
        # NOTE: an attribute named `self`, because the checkpoint names it so ("attention.self.query.weight")
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg, cfg.hidden_size)

    def __call__(self, x: Tensor, score_bias: Tensor | None) -> Tensor:
        return self.output(self.self(x, score_bias), x)


class BertIntermediate:
    def __init__(self, cfg: BertConfig):
        self.dense = Linear(cfg.hidden_size, cfg.intermediate_size)
        self.act = ACTIVATIONS[cfg.hidden_act]

    def __call__(self, x: Tensor) -> Tensor:
        # NOTE: contiguous, so the activation (an erf polynomial) runs once per value instead of once per output
        # column of the next matmul, into which it would fuse
        return self.act(self.dense(x)).contiguous()


class BertLayer:
    def __init__(self, cfg: BertConfig):
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertSelfOutput(cfg, cfg.intermediate_size)

    def __call__(self, x: Tensor, score_bias: Tensor | None) -> Tensor:
        a = self.attention(x, score_bias)
        return self.output(self.intermediate(a), a)


class BertEncoder:
    def __init__(self, cfg: BertConfig):
        self.layer = [BertLayer(cfg) for _ in range(cfg.num_hidden_layers)]

    def __call__(self, x: Tensor, score_bias: Tensor | None) -> Tensor:
        for layer in self.layer:
            x = layer(x, score_bias)
        return x


class Bert:
    """The encoder: embeddings, then the layers; returns the last hidden states (B, T, hidden)."""

    def __init__(self, cfg: BertConfig):
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = BertEncoder(cfg)

    def __call__(self, input_ids: Tensor | np.ndarray, attention_mask: Tensor | np.ndarray | None = None,
                 token_type_ids: Tensor | None = None) -> Tensor:
        """input_ids (B, T) ints, a Tensor or a host array (see BertEmbeddings.words); attention_mask (B, T) with
        1 on tokens and 0 on padding (None: no padding); token_type_ids (B, T) or None (all type 0)."""
        if len(input_ids.shape) != 2:
            raise ValueError(f"input_ids must be (batch, seq), got shape {tuple(input_ids.shape)}")
        return self.from_words(self.embeddings.words(input_ids), attention_mask, token_type_ids)

    def from_words(self, words: Tensor, attention_mask: Tensor | np.ndarray | None = None,
                   token_type_ids: Tensor | None = None) -> Tensor:
        """The encoder from the word vectors (B, T, hidden) on: Tensors in, Tensors out, so TinyJit can take it."""
        if words.ndim != 3 or words.shape[-1] != self.config.hidden_size:
            raise ValueError(f"word vectors must be (batch, seq, {self.config.hidden_size}), got {words.shape}")
        score_bias = None
        if attention_mask is not None:
            if tuple(attention_mask.shape) != tuple(words.shape[:2]):
                raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} must be (batch, seq) = "
                                 f"{tuple(words.shape[:2])}")
            score_bias = self.score_bias(attention_mask)
        return self.encoder(self.embeddings.combine(words, token_type_ids), score_bias)

    def score_bias(self, attention_mask: Tensor | np.ndarray) -> Tensor:
        """(B, 1, 1, T): 0 where a key is a token, MASKED_SCORE where it is padding, added to every score."""
        if not isinstance(attention_mask, Tensor):
            attention_mask = Tensor(np.asarray(attention_mask, dtype=np.float32))
        b, t = attention_mask.shape
        keep = attention_mask.cast(dtypes.float32).reshape(b, 1, 1, t)
        return (1 - keep) * MASKED_SCORE

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, weights: str = "model.safetensors") -> Bert:
        """config.json and the safetensors weights of a Hugging Face BERT checkpoint directory."""
        cfg = BertConfig.from_json(os.path.join(model_dir, "config.json"))
        model = cls(cfg)
        model.load_weights(os.path.join(model_dir, weights))
        return model

    def load_weights(self, path: str | os.PathLike) -> None:
        """Load a safetensors file by the Hugging Face BertModel names; every tensor of this model must be there."""
        raw = safe_load(path)
        state = {}
        for name, t in raw.items():
            state[name.removeprefix("bert.")] = t
        own = set(get_state_dict(self))
        missing = sorted(own - state.keys())
        if missing:
            raise KeyError(f"{path}: the checkpoint lacks {len(missing)} tensors of this BertConfig, e.g. "
                           f"{missing[:3]}")
        # the pooler, position_ids and task heads are not part of the encoder
        load_state_dict(self, {k: v for k, v in state.items() if k in own}, verbose=False)
        self.embeddings.invalidate_host_table()


def mean_pool(hidden: Tensor, attention_mask: Tensor | np.ndarray) -> Tensor:
    """The mean of each sequence's hidden states over its tokens (mask 1), padding left out: (B, hidden)."""
    if not isinstance(attention_mask, Tensor):
        attention_mask = Tensor(np.asarray(attention_mask, dtype=np.float32))
    m = attention_mask.cast(hidden.dtype).unsqueeze(-1)
    # a sequence without tokens divides by a clamped count (giving zeros), as sentence-transformers does
    return (hidden * m).sum(1) / m.sum(1).maximum(1e-9)


def l2_normalize(x: Tensor, eps: float = 1e-12) -> Tensor:
    """Each row divided by its L2 norm (at least eps), as torch.nn.functional.normalize."""
    return x / (x * x).sum(-1, keepdim=True).sqrt().maximum(eps)
