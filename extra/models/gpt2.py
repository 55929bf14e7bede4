"""GPT-2 (Radford et al., 2019), written with tinygrad.nn layers and Tensor ops so that it trains: learned position
embeddings, pre-norm blocks (LayerNorm, causal self-attention, LayerNorm, a gelu MLP), a final LayerNorm, and the
output projection tied to the token embedding.

Names follow Hugging Face's GPT2LMHeadModel without the "transformer." prefix ("h.0.attn.c_attn.weight"...), but
the linear weights are stored as tinygrad.nn.Linear keeps them, (out_features, in_features): the transpose of the
Conv1D layout of the Hugging Face checkpoints.

>>> model = GPT2(GPT2Config(vocab_size=16, n_positions=8, n_embd=8, n_layer=1, n_head=2))
>>> model(Tensor([[1, 2, 3]])).shape
(1, 3, 16)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tinygrad import Tensor
from tinygrad.nn import Embedding, LayerNorm, Linear

# a finite "minus infinity" for the keys after the query: exp underflows to exactly 0, without inf - inf = NaN
MASKED_SCORE = -1e30


@dataclass(frozen=True)
class GPT2Config:
    """The shape of a GPT-2 model; the defaults are GPT-2 small (124M parameters)."""
    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    layer_norm_epsilon: float = 1e-5


class Attention:
    """Causal multi-head self-attention: one projection to queries, keys and values, one back."""

    def __init__(self, cfg: GPT2Config):
        self.n_head, self.head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
        self.c_attn = Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = Linear(cfg.n_embd, cfg.n_embd)

    def __call__(self, x: Tensor) -> Tensor:
        bsz, seq, dim = x.shape
        # (batch, seq, 3, heads, head_dim) -> three (batch, heads, seq, head_dim)
        qkv = self.c_attn(x).reshape(bsz, seq, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        future = Tensor.ones(seq, seq, requires_grad=False).triu(1).cast("bool")
        scores = future.where(MASKED_SCORE, scores)
        out = scores.softmax(-1) @ v
        return self.c_proj(out.transpose(1, 2).reshape(bsz, seq, dim))


class MLP:
    """Two linear layers around a gelu (the tanh approximation GPT-2 was trained with)."""

    def __init__(self, cfg: GPT2Config):
        self.c_fc = Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = Linear(4 * cfg.n_embd, cfg.n_embd)

    def __call__(self, x: Tensor) -> Tensor:
        return self.c_proj(self.c_fc(x).gelu())


class Block:
    """A pre-norm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self, cfg: GPT2Config):
        self.ln_1 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = Attention(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)

    def __call__(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2:
    """The language model: token ids (batch, seq) -> logits (batch, seq, vocab_size)."""

    def __init__(self, cfg: GPT2Config):
        self.cfg = cfg
        self.wte = Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = Embedding(cfg.n_positions, cfg.n_embd)
        self.h = [Block(cfg) for _ in range(cfg.n_layer)]
        self.ln_f = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)

    def __call__(self, idx: Tensor) -> Tensor:
        seq = idx.shape[1]
        if seq > self.cfg.n_positions:
            raise ValueError(f"sequence of {seq} tokens is longer than n_positions={self.cfg.n_positions}")
        x = self.wte(idx) + self.wpe(Tensor.arange(seq, device=idx.device).reshape(1, seq))
        for block in self.h:
            x = block(x)
        # tied output projection: the token embedding's rows are the vocabulary's output weights
        return self.ln_f(x) @ self.wte.weight.T

    def loss(self, idx: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy of `targets` (batch, seq) under the logits of `idx`."""
        return self(idx).sparse_categorical_crossentropy(targets)


__all__ = ["GPT2Config", "GPT2", "Block", "Attention", "MLP"]
