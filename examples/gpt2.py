"""GPT-2 (decoder-only transformer) with a key/value cache, under the names tinygrad 0.9's tests import
(`from examples.gpt2 import Attention, Transformer`); no weights are loaded here. The models that load published
weights live under extra/ (extra/models, extra/examples).

Attention(dim, n_heads)(x, start_pos, mask): x is (batch, seqlen, dim), start_pos the position of x's first token
(an int or a bound Variable, so a TinyJit can replay one decoding step at any position), mask None or additive
(added to the attention scores, -inf where a token may not look). Each call writes its keys and values into the cache
at [start_pos, start_pos + seqlen) and attends over [0, start_pos + seqlen).
"""
from __future__ import annotations

from tinygrad import Tensor, Variable
from tinygrad.nn import Embedding, LayerNorm, Linear


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


class FeedForward:
    """GPT-2's MLP: dim -> hidden_dim, gelu, -> dim."""

    def __init__(self, dim: int, hidden_dim: int):
        self.c_fc = Linear(dim, hidden_dim)
        self.c_proj = Linear(hidden_dim, dim)

    def __call__(self, x: Tensor) -> Tensor:
        return self.c_proj(self.c_fc(x).gelu())


class TransformerBlock:
    """Pre-norm block: x + attn(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self, dim: int, n_heads: int, norm_eps: float, max_context: int = 1024):
        self.attn = Attention(dim, n_heads, max_context)
        self.mlp = FeedForward(dim, 4 * dim)
        self.ln_1 = LayerNorm(dim, norm_eps)
        self.ln_2 = LayerNorm(dim, norm_eps)

    def __call__(self, x: Tensor, start_pos: Variable | int, mask: Tensor | None) -> Tensor:
        h = x + self.attn(self.ln_1(x), start_pos, mask)
        return h + self.mlp(self.ln_2(h))


class Transformer:
    """GPT-2: token and position embeddings, n_layers blocks, a final LayerNorm and the vocabulary head.

    model(tokens, start_pos, temperature) takes (batch, seqlen) token ids at position start_pos and returns the next
    token of each row: the most likely one (temperature 0) or one sampled from softmax(logits / temperature)."""

    def __init__(self, dim: int, n_heads: int, n_layers: int, norm_eps: float, vocab_size: int,
                 max_seq_len: int = 1024):
        self.vocab_size, self.max_seq_len = vocab_size, max_seq_len
        self.wte = Embedding(vocab_size, dim)
        self.wpe = Embedding(max_seq_len, dim)
        self.h = [TransformerBlock(dim, n_heads, norm_eps, max_seq_len) for _ in range(n_layers)]
        self.ln_f = LayerNorm(dim, norm_eps)
        self.lm_head = Linear(dim, vocab_size, bias=False)

    def logits(self, tokens: Tensor, start_pos: Variable | int) -> Tensor:
        """The next-token logits at every position of `tokens`: (batch, seqlen, vocab_size)."""
        seqlen = tokens.shape[1]
        if isinstance(start_pos, Variable) and seqlen > 1:
            start_pos = start_pos.unbind()[1]  # a prompt needs a mask, built at a known position
        pos = self.wpe.weight.shrink(((start_pos, start_pos + seqlen), None))
        h = self.wte(tokens) + pos.reshape(1, seqlen, -1)
        mask = None
        if seqlen > 1:
            mask = Tensor.full((1, 1, seqlen, start_pos + seqlen), float("-inf")).triu(start_pos + 1)
        for block in self.h:
            h = block(h, start_pos, mask)
        return self.lm_head(self.ln_f(h))

    def __call__(self, tokens: Tensor, start_pos: Variable | int, temperature: float = 0.0) -> Tensor:
        last = self.logits(tokens, start_pos)[:, -1, :]
        if temperature < 1e-6:
            return last.argmax(-1)
        return (last / temperature).softmax().multinomial()
