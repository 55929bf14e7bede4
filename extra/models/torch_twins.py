"""PyTorch twins of the tinygrad models under extra/models, for extra/bench_models.py: the same architecture, written
as a PyTorch user writes it (torch.nn layers, F.scaled_dot_product_attention), with the same parameter names, so
that `load_weights(twin, weights)` gives it exactly the tinygrad model's weights.

Each twin takes the tinygrad model's config: ResNetTwin (extra.models.resnet), GPT2Twin (extra.models.gpt2),
BertTwin (extra.models.bert, without padding masks: the benchmark runs full sequences) and DecoderLayerTwin
(extra.models.llama). Importing this module imports torch.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - PyTorch's own spelling
from torch import nn

from extra.models.bert import BertConfig
from extra.models.gpt2 import GPT2Config
from extra.models.llama import LayerConfig
from extra.models.resnet import EXPANSION, ResNetConfig


def load_weights(module: nn.Module, weights: dict[str, np.ndarray]) -> nn.Module:
    """Copy `weights` (a tinygrad model's state dict as numpy arrays) into `module` by name, every entry of its
    state dict: each is reshaped and cast to the twin's own shape and dtype (tinygrad keeps BatchNorm's
    num_batches_tracked as a float of shape (1,), PyTorch as a 0-d long)."""
    own = module.state_dict()
    if own.keys() != weights.keys():
        raise KeyError(f"twin and model differ: only in the twin {sorted(own.keys() - weights.keys())[:3]}, only in "
                       f"the model {sorted(weights.keys() - own.keys())[:3]}")
    state = {k: torch.from_numpy(np.ascontiguousarray(weights[k])).reshape(v.shape).to(v.dtype) for k, v in own.items()}
    module.load_state_dict(state, strict=True)
    return module


# ---- ResNet ----

class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * EXPANSION
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)) \
            if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNetTwin(nn.Module):
    def __init__(self, cfg: ResNetConfig):
        super().__init__()
        self.conv1 = nn.Conv2d(3, cfg.width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(cfg.width)
        cin = cfg.width
        for i, n_blocks in enumerate(cfg.layers):
            width = cfg.width * 2 ** i
            blocks = []
            for j in range(n_blocks):
                blocks.append(Bottleneck(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = width * EXPANSION
            self.add_module(f"layer{i + 1}", nn.Sequential(*blocks))
        self.n_stages = len(cfg.layers)
        self.fc = nn.Linear(cin, cfg.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        for i in range(self.n_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(x.mean(dim=(2, 3)))


# ---- GPT-2 ----

class GPT2Attention(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).reshape(b, t, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(out.transpose(1, 2).reshape(b, t, d))


class GPT2MLP(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Twin(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


# ---- BERT ----

class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)  # noqa: N815 - the checkpoint's name

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        seq = ids.shape[1]
        x = self.word_embeddings(ids) + self.position_embeddings.weight[:seq] + self.token_type_embeddings.weight[0]
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.heads = cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (lin(x).reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for lin in (self.query, self.key, self.value))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)


class BertSelfOutput(nn.Module):
    def __init__(self, cfg: BertConfig, in_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)  # noqa: N815 - the checkpoint's name

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(h) + residual)


class BertAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.approximate = "none" if cfg.hidden_act == "gelu" else "tanh"
        if cfg.hidden_act not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"the twin has no {cfg.hidden_act!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x), approximate=self.approximate)


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertSelfOutput(cfg, cfg.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_hidden_layers))


class BertTwin(nn.Module):
    """Token ids (B, T) -> the last hidden states (B, T, hidden); every token attended (no padding mask)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = BertEncoder(cfg)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(ids)
        for layer in self.encoder.layer:
            x = layer(x)
        return x


# ---- a Llama decoder layer ----

class RMSNorm(nn.Module):
    """As Hugging Face's LlamaRMSNorm: normalised in float32, cast back, then scaled."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = x.float()
    return (xf * cos + torch.cat((-xf[..., half:], xf[..., :half]), dim=-1) * sin).to(x.dtype)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: LayerConfig):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg, (b, t, _) = self.cfg, x.shape
        hd, rep = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
        q = self.q_proj(x).reshape(b, t, cfg.n_heads, hd).transpose(1, 2)
        k = self.k_proj(x).reshape(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        v = self.v_proj(x).reshape(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        inv_freq = torch.exp(torch.arange(hd // 2, device=x.device, dtype=torch.float32) *
                             (-2.0 * math.log(cfg.rope_theta) / hd))
        angles = torch.arange(t, device=x.device, dtype=torch.float32)[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        # Hugging Face's repeat_kv: each key/value head copied for the query heads it serves
        k = k[:, :, None].expand(b, cfg.n_kv_heads, rep, t, hd).reshape(b, cfg.n_heads, t, hd)
        v = v[:, :, None].expand(b, cfg.n_kv_heads, rep, t, hd).reshape(b, cfg.n_heads, t, hd)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, cfg.n_heads * hd))


class LlamaMLP(nn.Module):
    def __init__(self, cfg: LayerConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.down_proj = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayerTwin(nn.Module):
    def __init__(self, cfg: LayerConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = LlamaMLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


__all__ = ["load_weights", "ResNetTwin", "GPT2Twin", "BertTwin", "DecoderLayerTwin"]
