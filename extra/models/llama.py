"""LLaMA's building blocks, under the module tinygrad 0.9's code imports them from (`from extra.models.llama import
RMSNorm`; the norm itself lives in tinygrad.nn), and one Llama-style decoder layer written with Tensor ops:
RMSNorm, grouped-query attention with rotary position embeddings (the rotate-half form of Hugging Face's Llama)
and a causal mask, RMSNorm, a SwiGLU MLP, each added to the residual.

Parameters are named as in Hugging Face's LlamaDecoderLayer ("self_attn.q_proj.weight", "mlp.gate_proj.weight",
"input_layernorm.weight"...), linear weights (out_features, in_features), no biases.

>>> layer = DecoderLayer(LayerConfig(dim=16, n_heads=4, n_kv_heads=2, hidden_dim=32))
>>> layer(Tensor.ones(1, 5, 16)).shape
(1, 5, 16)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tinygrad import Tensor
from tinygrad.nn import Linear, RMSNorm


@dataclass(frozen=True)
class LayerConfig:
    """The shape of one decoder layer; the defaults are Llama 3 8B's (and Mistral 7B's)."""
    dim: int = 4096
    n_heads: int = 32
    n_kv_heads: int = 8
    hidden_dim: int = 14336
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


def rope_tables(seq: int, head_dim: int, theta: float, device: str | None = None) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotary angles, (seq, head_dim) in float32: position p, frequency pair i turns by
    p * theta^(-2i/head_dim), the half-dims laid side by side as rotate_half expects."""
    half = head_dim // 2
    inv_freq = (Tensor.arange(half, device=device).float() * (-2.0 * math.log(theta) / head_dim)).exp()
    angles = Tensor.arange(seq, device=device).float().reshape(seq, 1) * inv_freq.reshape(1, half)
    angles = angles.cat(angles, dim=1)
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, heads, T, head_dim) rotated: x * cos + rotate_half(x) * sin, in float32, cast back to x's dtype."""
    half = x.shape[-1] // 2
    xf = x.float()
    rotated = (-xf[..., half:]).cat(xf[..., :half], dim=-1)
    return (xf * cos + rotated * sin).cast(x.dtype)


class Attention:
    """Grouped-query self-attention: n_heads query heads share n_kv_heads key/value heads, causal."""

    def __init__(self, cfg: LayerConfig):
        self.cfg = cfg
        hd = cfg.head_dim
        self.q_proj = Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.k_proj = Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = Linear(cfg.n_heads * hd, cfg.dim, bias=False)

    def __call__(self, x: Tensor) -> Tensor:
        cfg, (b, t, _) = self.cfg, x.shape
        hd, rep = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
        q = self.q_proj(x).reshape(b, t, cfg.n_heads, hd).transpose(1, 2)
        k = self.k_proj(x).reshape(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        v = self.v_proj(x).reshape(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        cos, sin = rope_tables(t, hd, cfg.rope_theta, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # each key/value head serves `rep` consecutive query heads (a broadcast, not a copy, until the kernel)
        k = k.reshape(b, cfg.n_kv_heads, 1, t, hd).expand(b, cfg.n_kv_heads, rep, t, hd).reshape(b, cfg.n_heads, t, hd)
        v = v.reshape(b, cfg.n_kv_heads, 1, t, hd).expand(b, cfg.n_kv_heads, rep, t, hd).reshape(b, cfg.n_heads, t, hd)
        out = q.scaled_dot_product_attention(k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, cfg.n_heads * hd))


class FeedForward:
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: LayerConfig):
        self.gate_proj = Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.up_proj = Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.down_proj = Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def __call__(self, x: Tensor) -> Tensor:
        return self.down_proj(self.gate_proj(x).silu() * self.up_proj(x))


class DecoderLayer:
    """x + attention(norm(x)), then + mlp(norm(.)): hidden states (B, T, dim) in, the same shape out."""

    def __init__(self, cfg: LayerConfig):
        self.input_layernorm = RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.mlp = FeedForward(cfg)

    def __call__(self, x: Tensor) -> Tensor:
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


__all__ = ["RMSNorm", "LayerConfig", "DecoderLayer", "Attention", "FeedForward", "rope_tables", "apply_rope"]
