"""GPT-2's causal self-attention layer with a key/value cache, under the name tinygrad 0.9's tests import
(`from examples.gpt2 import Attention`). The full models live under extra/ (extra/models, extra/examples).

Attention(dim, n_heads)(x, start_pos, mask): x is (batch, seqlen, dim), start_pos the position of x's first token
(an int or a bound Variable, so a TinyJit can replay one decoding step at any position), mask None or additive
(added to the attention scores, -inf where a token may not look). Each call writes its keys and values into the cache
at [start_pos, start_pos + seqlen) and attends over [0, start_pos + seqlen).
"""
from __future__ import annotations

from tinygrad import Tensor, Variable
from tinygrad.nn import Linear


class Attention:
    """Multi-head causal self-attention with a key/value cache of `max_context` positions (GPT-2 layout: one
    projection to queries, keys and values, c_attn, and one back, c_proj)."""

    def __init__(self, dim: int, n_heads: int, max_context: int = 1024):
        if dim % n_heads:
            raise ValueError(f"dim {dim} is not a multiple of n_heads {n_heads}")
        self.c_attn = Linear(dim, 3 * dim)
        self.c_proj = Linear(dim, dim)
        self.dim, self.n_heads, self.head_dim, self.max_context = dim, n_heads, dim // n_heads, max_context
        self.cache_kv: Tensor | None = None

    def __call__(self, x: Tensor, start_pos: Variable | int, mask: Tensor | None) -> Tensor:
        bsz, seqlen = x.shape[0], x.shape[1]
        if isinstance(start_pos, Variable) and (mask is not None or start_pos.unbind()[1] == 0):
            # a prompt (several tokens, a mask) runs outside the JIT: its position as a plain int
            start_pos = start_pos.unbind()[1]
        if seqlen == 0:
            return Tensor.zeros(bsz, 0, self.dim, dtype=x.dtype, device=x.device)
        q, k, v = (t.reshape(bsz, seqlen, self.n_heads, self.head_dim) for t in self.c_attn(x).chunk(3, dim=2))
        if self.cache_kv is None:
            shape = (2, bsz, self.max_context, self.n_heads, self.head_dim)
            self.cache_kv = Tensor.zeros(*shape, dtype=x.dtype, device=x.device).contiguous().realize()
        end = start_pos + seqlen
        self.cache_kv.shrink((None, None, (start_pos, end), None, None)).assign(Tensor.stack(k, v)).realize()
        keys = self.cache_kv[0].shrink((None, (0, end), None, None))
        values = self.cache_kv[1].shrink((None, (0, end), None, None))
        out = q.transpose(1, 2).scaled_dot_product_attention(keys.transpose(1, 2), values.transpose(1, 2), mask)
        return self.c_proj(out.transpose(1, 2).reshape(bsz, seqlen, self.dim))
