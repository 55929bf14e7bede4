"""A decoder-only transformer built from a GGUF file's metadata alone: the llama (Llama 2 and 3.x, Mistral,
TinyLlama, SmolLM), qwen2, qwen3, gemma2, gemma3 and phi3 architectures, through a table of the few things in which
they differ (FAMILIES) and the numbers the metadata gives (Config): grouped-query attention at any ratio, RoPE with
normal or neox pairs, partial rotary, linear or YaRN scaling and llama 3's per-pair frequency factors, sliding-window
layers, soft-capping, tied or separate output embeddings, fused or separate q/k/v and gate/up matrices.

Weights stay quantized and are dequantized inside the kernels that read them (`Linear`). On the CPU most types keep
the file's own bits (linear.py says which and why); elsewhere Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K matrices
are split at load into planes, int8 values and a scale (and offset) per group of 16 or
32, so a matrix-vector product reads whole vectors of int8 and one scale a group. The 4- and 5-bit legacy types and
Q8_0 keep the file's fp16 scales (Q8_0 then takes exactly the file's bytes), Q4_K and Q6_K have float32 ones
(products fp16 can't hold); the 4- to 6-bit types take 8 bits a value. Other quantized types keep the file's blocks,
dequantized by Tensor ops in the kernel. The embedding table is read a row per token from the blocks of those rows only.

Memory: the file is memory-mapped; planes are made and copied to the device a few MB at a time, the file's pages of
each chunk let go once read, so loading holds about the planes and one chunk (Gemma 3 270M Q4_K_M: 253 MB of file,
291 MB of planes); what loading freed is given back to the OS at its end.

The KV cache holds every layer's keys, (positions, kv_heads, head_dim), and values, transposed as (kv_heads *
head_dim, positions), up to the context length; a step writes its positions and attends over those before it
(causal; sliding-window layers see only the last `window` positions).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinygrad.apps.llm.linear import PLANE_TYPES, Linear, _planes, plane_values
from tinygrad.dtype import dtypes
from tinygrad.helpers import trim_heap
from tinygrad.nn.state_gguf import GGUFTensor, dequantize, plain_values
from tinygrad.tensor import Tensor


@dataclass(frozen=True)
class Family:
    """What sets one architecture apart (the rest is the metadata's numbers). Facts from llama.cpp's model graphs
    (src/models/*.cpp) and llama_model_rope_type."""
    qk_norm: bool = False          # RMSNorm over each head of q and k before RoPE
    post_norms: bool = False       # RMSNorm on the attention and FFN outputs before the residual adds
    embed_scale: bool = False      # the embedding times sqrt(dim)
    gelu: bool = False             # GeGLU with tanh GELU (else SwiGLU)
    neox_rope: bool = True         # RoPE rotates dim i with dim i + rope_dims/2 (else the pairs 2i, 2i+1)
    sliding_every: int = 0         # layer i is global when i % sliding_every == sliding_every - 1 (0: all global)
    local_rope_base: float = 0.0   # RoPE base of the sliding-window layers (0: the file's), unless rope.freq_base_swa
    default_window: int = 0        # the sliding window where the metadata names none (0: no window)
    softcap: bool = False          # attention and final logit soft-capping, c * tanh(x / c), c from the metadata
    # the 27B models (this many layers) scale queries by 1/sqrt(dim / heads), not 1/sqrt(head_dim)
    wide_query_scale_layers: int = 0


FAMILIES = {
    "gemma2": Family(post_norms=True, embed_scale=True, gelu=True, sliding_every=2, default_window=4096,
                     softcap=True, wide_query_scale_layers=46),
    "gemma3": Family(qk_norm=True, post_norms=True, embed_scale=True, gelu=True, sliding_every=6,
                     local_rope_base=10000.0, wide_query_scale_layers=62),
    "llama": Family(neox_rope=False),
    "phi3": Family(),
    "qwen2": Family(),
    "qwen3": Family(qk_norm=True),
}


@dataclass(frozen=True)
class Rope:
    """How positions turn into angles (ggml's rope with YaRN): angle of pair i at position p is
    p * scale * base^(-2i/dims) / factors[i], blended toward the unscaled angle for the fast pairs under YaRN; cos and
    sin are multiplied by `mscale`. Dims past `dims` are not rotated (partial rotary)."""
    base: float
    dims: int
    scale: float = 1.0              # 1 / rope.scaling.factor (linear and YaRN)
    yarn: bool = False
    orig_context: int = 0           # rope.scaling.original_context_length (YaRN's correction range)
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attn_factor: float = 1.0        # rope.scaling.attn_factor
    factors: tuple[float, ...] | None = None  # rope_freqs.weight (llama 3.1's per-pair frequency divisors)

    def angles(self, positions: int) -> tuple[np.ndarray, float]:
        """The angles (positions, dims/2), float64, and the factor on cos and sin."""
        half = self.dims // 2
        freq = self.base ** (-2.0 * np.arange(half) / self.dims)
        if self.factors is not None:
            freq = freq / np.asarray(self.factors, np.float64)
        extrap = np.arange(positions, dtype=np.float64)[:, None] * freq[None, :]
        theta, mscale = extrap * self.scale, self.attn_factor
        if self.yarn:
            # ggml_rope_yarn_corr_dims: pairs rotating more than beta_fast (fewer than beta_slow) times over the
            # original context keep their unscaled angle (take the scaled one), a linear ramp between
            def corr(rot: float) -> float:
                return self.dims * math.log(self.orig_context / (rot * 2 * math.pi)) / (2 * math.log(self.base))
            lo, hi = max(0.0, math.floor(corr(self.beta_fast))), min(self.dims - 1.0, math.ceil(corr(self.beta_slow)))
            ramp = 1 - np.clip((np.arange(half) - lo) / max(0.001, hi - lo), 0, 1)
            theta = theta * (1 - ramp) + extrap * ramp
            # llama.cpp cancels its attn_factor's get_mscale against this: the net factor is ggml's own
            mscale *= 1.0 + 0.1 * math.log(1.0 / self.scale)
        return theta, mscale


@dataclass(frozen=True)
class Config:
    arch: str
    layers: int
    dim: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    rope_base: float
    window: int
    context: int
    vocab: int
    family: Family
    rope_dims: int = 0
    rope: Rope | None = None          # the global layers' RoPE
    local_rope: Rope | None = None    # the sliding-window layers'
    sliding: tuple[bool, ...] = ()    # per layer: attends over the last `window` positions only
    attn_scale: float = 0.0
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    rope_long_factors: tuple[float, ...] | None = None  # Phi-3's rope_factors_long

    @classmethod
    def from_gguf(cls, kv: dict, tensors: dict[str, GGUFTensor]) -> Config:
        arch = kv.get("general.architecture")
        if arch not in FAMILIES:
            raise ValueError(f"architecture {arch!r} is not supported (supported: {', '.join(FAMILIES)})")
        fam = FAMILIES[arch]

        def get(key, default=None):
            v = kv.get(f"{arch}.{key}", default)
            if v is None:
                raise ValueError(f"the GGUF metadata has no {arch}.{key}")
            return v
        dim, heads, layers = get("embedding_length"), get("attention.head_count"), get("block_count")
        kv_heads = get("attention.head_count_kv", heads)
        if heads % kv_heads:
            raise ValueError(f"{heads} attention heads can't share {kv_heads} key/value heads evenly")
        head_dim = get("attention.key_length", dim // heads)
        window = int(get("attention.sliding_window", fam.default_window))
        # which layers slide: the metadata's pattern (a period, or a flag per layer) or the family's period
        pattern = kv.get(f"{arch}.attention.sliding_window_pattern", fam.sliding_every)
        if isinstance(pattern, list):
            sliding = tuple(window > 0 and bool(x) for x in pattern[:layers])
        else:
            sliding = tuple(window > 0 and pattern > 0 and i % pattern < pattern - 1 for i in range(layers))
        base = float(get("rope.freq_base", 10000.0))
        rope_dims = int(get("rope.dimension_count", head_dim))
        kind = get("rope.scaling.type", "linear")
        if kind not in ("none", "linear", "yarn", "longrope"):
            raise ValueError(f"RoPE scaling {kind!r} is not supported (supported: none, linear, yarn, longrope)")
        factor = float(get("rope.scaling.factor", get("rope.scale_linear", 0.0)))
        scale = 1.0 / factor if factor and kind in ("linear", "yarn") else 1.0

        def factors(name: str) -> tuple[float, ...] | None:
            t = tensors.get(name)
            return tuple(float(x) for x in t.load().numpy()) if t is not None else None
        # per-pair frequency divisors: llama 3.1's rope_freqs, else Phi-3's long-context ones, short by default
        # (the long ones where the context used passes the original one, see for_context)
        freqs, long = factors("rope_freqs.weight"), factors("rope_factors_long.weight")
        rope = Rope(base, rope_dims, scale, kind == "yarn" and scale != 1.0,
                    int(get("rope.scaling.original_context_length", get("context_length"))),
                    attn_factor=float(get("rope.scaling.attn_factor", 1.0)),
                    factors=freqs or factors("rope_factors_short.weight"))
        # sliding-window layers have their own base (gemma2: the global one), and no scaling but gemma2's
        local_base = float(get("rope.freq_base_swa", fam.local_rope_base or base))
        local = dataclasses.replace(rope, base=local_base, scale=scale if arch == "gemma2" else 1.0)
        qscale = dim / heads if layers == fam.wide_query_scale_layers else head_dim
        return cls(arch, layers, dim, get("feed_forward_length"), heads, kv_heads, head_dim,
                   float(get("attention.layer_norm_rms_epsilon", 1e-6)), base, window, get("context_length"),
                   tensors["token_embd.weight"].shape[0], fam, rope_dims, rope, local, sliding,
                   1.0 / math.sqrt(qscale),
                   float(get("attn_logit_softcapping", 50.0)) if fam.softcap else 0.0,
                   float(kv.get(f"{arch}.final_logit_softcapping", 30.0 if fam.softcap else 0.0)),
                   long if freqs is None else None)

    def for_context(self, n: int) -> Config:
        """This config for a run of up to `n` positions: past the original context, RoPE takes the long-context
        factors where the file has them (llama.cpp's choice by its context size)."""
        if self.rope_long_factors is None or n <= self.rope.orig_context:
            return self
        long = self.rope_long_factors
        return dataclasses.replace(self, rope=dataclasses.replace(self.rope, factors=long),
                                   local_rope=dataclasses.replace(self.local_rope, factors=long))

    def is_global(self, layer: int) -> bool:
        return not self.sliding[layer] if self.sliding else True


# the prompt's chunk sizes, each one jitted prefill step
PREFILL_CHUNKS = (16, 64)
# smaller chunks only a caller asks for (forward's `chunk`): a server prefilling beside running streams fits a piece
# into what their inter-token gap leaves, which a 16-token chunk overruns on a slow CPU
FINE_CHUNKS = (4, 8)


def _split(y: Tensor, sizes: list[int]) -> list[Tensor]:
    """The outputs of a stacked Linear (n, sum(sizes)) as each matrix's (n, size)."""
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    return [y[:, a:a + n] for a, n in zip(starts, sizes)]


def _gelu(x: Tensor) -> Tensor:
    """GELU with the tanh approximation, as x * sigmoid(2z) (= x * (1 + tanh z) / 2): one exp2 and one division an
    element, where Tensor.gelu's tanh, exact near 0 through expm1, takes an exp2, a log2 and two divisions."""
    return x * ((2 * math.sqrt(2 / math.pi)) * (x + 0.044715 * x * x * x)).sigmoid()


def _rms(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return x * _rms_scale(x, eps) * w


def _rms_scale(x: Tensor, eps: float) -> Tensor:
    """RMSNorm's per-row factor, 1 / sqrt(mean(x^2) + eps), (..., 1): `_rms(x, w) == x * w * _rms_scale(x)`."""
    return (x.square().mean(axis=-1, keepdim=True) + eps).rsqrt()


NORMED_INPUT_ROWS = 16384


def _normed_linear(lin: Linear, x: Tensor, w: Tensor, eps: float) -> Tensor:
    """lin(_rms(x, w)), as lin(x * w) * _rms_scale(x): the norm's factor is one number a row, applied to the
    matrix-vector product's outputs in the kernel that makes them, so its square root is not computed again for
    every output reading the input (which would make the normed input a kernel of its own). A matrix of more than
    NORMED_INPUT_ROWS rows (a vocabulary's output projection) reads x * w made once instead: fused, the product is
    loaded and computed again for every row, which costs more than the kernel that makes it (measured on an H200:
    the 262,144-row projection of Gemma 3 270M took 196 us fused, 125 us reading x * w)."""
    if lin.shape[0] > NORMED_INPUT_ROWS:
        return lin((x * w).contiguous()) * _rms_scale(x, eps)
    return lin(x * w) * _rms_scale(x, eps)


def _rope_tables(rope: Rope, head_dim: int, positions: int, device: str, neox: bool) -> tuple[Tensor, Tensor]:
    """RoPE as x * C + swap(x) * S (see _rope): C and S for every position, (positions, head_dim), a step slicing
    its positions' rows. C is each pair's cos twice, S its -sin then sin; dims past rope.dims (not rotated) have C 1
    and S 0. Computed in float64 on the host, then float32."""
    theta, mscale = rope.angles(positions)
    cos, sin = np.cos(theta) * mscale, np.sin(theta) * mscale
    # neox pairs dim i with i + dims/2 (the two halves), the others 2i with 2i+1 (neighbours)
    if neox:
        c, s = np.concatenate([cos, cos], axis=1), np.concatenate([-sin, sin], axis=1)
    else:
        c = np.stack([cos, cos], axis=-1).reshape(positions, -1)
        s = np.stack([-sin, sin], axis=-1).reshape(positions, -1)
    rest = head_dim - rope.dims
    if rest:
        c = np.concatenate([c, np.ones((positions, rest))], axis=1)
        s = np.concatenate([s, np.zeros((positions, rest))], axis=1)
    return tuple(Tensor(t.astype(np.float32), device=device).realize() for t in (c, s))


def _rope(x: Tensor, c: Tensor, s: Tensor, neox: bool, dims: int) -> Tensor:
    """RoPE on x (T, heads, head_dim) with its positions' rows of the tables (T, head_dim): x * C + swap(x) * S,
    where swap exchanges the two members of each rotated pair, a flip of a size-2 dim (a view: the rotation is one
    elementwise kernel, where concatenating the rotated halves would pad them and store each half first). With
    partial rotary (dims < head_dim) the swapped part is padded with zeros over the dims S leaves alone."""
    t, h, d = x.shape
    r = x if dims == d else x[:, :, :dims]
    pairs = r.reshape(t, h, 2, dims // 2).flip(2) if neox else r.reshape(t, h, dims // 2, 2).flip(3)
    pairs = pairs.reshape(t, h, dims)
    if dims != d:
        pairs = pairs.pad((None, None, (0, d - dims)))
    return x * c.reshape(t, 1, d) + pairs * s.reshape(t, 1, d)


def _return_freed_memory(device: str) -> None:
    """Give back what loading freed but the process would keep: the device allocator's cached allocations (the
    chunks copied in while making planes, whose sizes the model's steps don't reuse) and the C heap's free pages
    (malloc keeps the numpy temporaries' memory for reuse otherwise, a few MB to tens of MB)."""
    from tinygrad.device import Device
    free_cache = getattr(Device[device].allocator, "free_cache", None)
    if free_cache is not None:
        free_cache()
    trim_heap()


class Transformer:
    """The model of a GGUF file (see the module docstring). `forward(ids, start_pos)` runs ids at positions
    start_pos.. and returns the logits of the last one; the KV cache keeps what came before."""

    def __init__(self, kv: dict, tensors: dict[str, GGUFTensor], device: str | None = None, max_context: int = 4096,
                 slots: int = 1):
        from tinygrad.device import Device
        self.device = device or Device.DEFAULT
        cfg = Config.from_gguf(kv, tensors)
        self.max_context = min(max_context, cfg.context)
        self.cfg = cfg = cfg.for_context(self.max_context)
        fam = cfg.family
        self.embd = tensors["token_embd.weight"]
        # the embedding rows are read from the mapped file for as long as the model runs: its checksum tells a file
        # rewritten since (or put back as it was) apart, see embed
        self._embd_digest = self.embd.src.digest(self.embd.where, self.embd.nbytes)
        # no output.weight: the output projection is the embedding table (tied)
        self.output = Linear(tensors.get("output.weight", self.embd), self.device)
        load = lambda name: tensors[name].load().to(self.device).cast(dtypes.float32).realize()  # noqa: E731
        self.output_norm = load("output_norm.weight")
        self.output_bias = load("output.bias") if "output.bias" in tensors else None
        q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.layers = []
        for i in range(cfg.layers):
            p = f"blk.{i}."
            layer: dict = {}
            # q, k and v (gate and up) read the same normed input: one matrix where the file fuses them (phi3's
            # attn_qkv, and its ffn_up holding gate then up), else stacked where their types allow, one kernel
            fusions = (("qkv", "attn_qkv", ("attn_q", "attn_k", "attn_v"), [q_dim, kv_dim, kv_dim]),
                       ("gate_up", "ffn_up", ("ffn_gate", "ffn_up"), [cfg.ffn, cfg.ffn]))
            for fused, file_fused, names, sizes in fusions:
                t = tensors.get(p + file_fused + ".weight")
                if t is not None and t.shape[0] == sum(sizes):
                    layer[fused], layer[fused + "_split"] = Linear(t, self.device), sizes
                    continue
                ts = [tensors[p + n + ".weight"] for n in names]
                both = Linear.stacked(ts, self.device)
                qk = Linear.stacked(ts[:2], self.device) if both is None and fused == "qkv" else None
                if both is not None:
                    layer[fused] = both
                    layer[fused + "_split"] = [t.shape[0] for t in ts]
                elif qk is not None:
                    # q and k of one type, v of another (Gemma 3's Q5_0, Q5_0, Q8_0): q and k stacked, two kernels
                    layer["qk"], layer["qk_split"] = qk, [t.shape[0] for t in ts[:2]]
                    layer["attn_v"] = Linear(ts[2], self.device)
                else:
                    layer.update({n: Linear(t, self.device) for n, t in zip(names, ts)})
            for n in ("attn_output", "ffn_down"):
                layer[n] = Linear(tensors[p + n + ".weight"], self.device)
            norms = ("attn_norm", "ffn_norm") + (("post_attention_norm", "post_ffw_norm") if fam.post_norms else ())
            for n in norms + (("attn_q_norm", "attn_k_norm") if fam.qk_norm else ()):
                layer[n] = load(p + n + ".weight")
            # biases wherever the file has them (qwen2's q, k and v; some llama files' too, or one fused)
            if p + "attn_qkv.bias" in tensors:
                layer["qkv_bias"] = load(p + "attn_qkv.bias")
            elif any(p + n + ".bias" in tensors for n in ("attn_q", "attn_k", "attn_v")):
                parts = [load(p + n + ".bias") if p + n + ".bias" in tensors else Tensor.zeros(m, device=self.device)
                         for n, m in zip(("attn_q", "attn_k", "attn_v"), (q_dim, kv_dim, kv_dim))]
                layer["qkv_bias"] = parts[0].cat(*parts[1:]).realize()
            if p + "attn_output.bias" in tensors:
                layer["attn_output_bias"] = load(p + "attn_output.bias")
            self.layers.append(layer)
        shape = (self.max_context, cfg.kv_heads, cfg.head_dim)
        # NOTE: allocated, not written: a step reads positions 0..end-1 only, each written before (a padded prefill
        # chunk writes its padding too), so memory pages of positions never reached are never touched (resident
        # memory grows with the context used, not the context allowed)
        # one KV cache per slot: a slot holds one sequence, and a batched step (forward_batch) advances several
        if slots < 1:
            raise ValueError(f"a model needs at least one sequence slot, got slots={slots}")
        # values stored transposed, (kv_heads * head_dim, positions): the weighted sum over positions then reads
        # each output's values contiguously, which the GPU spreads over a block per output however long the context
        # (with positions outermost, a thread per output walked them all one after another)
        vshape = (cfg.kv_heads * cfg.head_dim, self.max_context)
        self.caches = [[(Tensor.empty(*shape, device=self.device).realize(),
                         Tensor.empty(*vshape, device=self.device).realize()) for _ in range(cfg.layers)]
                       for _ in range(slots)]
        self.cache = self.caches[0]
        # the global layers' RoPE tables, and the sliding-window layers' where they differ
        self.rope = {True: _rope_tables(cfg.rope, cfg.head_dim, self.max_context, self.device, fam.neox_rope)}
        self.rope[False] = self.rope[True] if cfg.local_rope == cfg.rope else \
            _rope_tables(cfg.local_rope, cfg.head_dim, self.max_context, self.device, fam.neox_rope)
        # one decode step for every position: start_pos is a Variable, so TinyJit replays the same kernels; prefill
        # goes in chunks of PREFILL_CHUNKS tokens the same way (the last one padded), the logits from its last row.
        # Each slot has its own (their captures hold its cache's buffers), made at its first use.
        from tinygrad.shape.symbolic import Variable
        self.start_pos = Variable("start_pos", 1, max(1, self.max_context - 1))
        # a batched step's row b is at position row{b}_pos: its capture serves any sequences at any positions
        self._row_pos = [Variable(f"row{b}_pos", 1, max(1, self.max_context - 1)) for b in range(slots)]
        self._chunk_pos = {c: Variable(f"chunk_pos{c}", 0, self.max_context - c)
                           for c in sorted(FINE_CHUNKS + PREFILL_CHUNKS) if c <= self.max_context}
        # prefill_batch's part b at chunk_pos{c}_{b}: one capture a (parts, chunk) serves any slots at any positions
        self._part_pos = {c: [Variable(f"chunk_pos{c}_{b}", 0, self.max_context - c) for b in range(slots)]
                          for c in self._chunk_pos}
        self._jits: dict = {}
        self.batched_steps = 0  # forward_batch calls with more than one sequence (what a server's batching did)
        # every weight is copied out by now: the file's pages need not stay resident (embedding rows are read from
        # it again, a few pages a token)
        self.embd.src.release_pages()
        _return_freed_memory(self.device)

    def embed(self, ids: list[int]) -> np.ndarray:
        """The embedding rows of `ids` (n, dim) on the host, each dequantized from its own blocks, read from the file
        (for the types with planes on the host: a few rows of a 262,144-row table are not worth a kernel)."""
        cfg, t = self.cfg, self.embd
        if any(not 0 <= i < cfg.vocab for i in ids):
            raise ValueError(f"token ids must be below the vocabulary's {cfg.vocab}, got {ids}")
        # NOTE: a file truncated under the map would kill the process with SIGBUS on the read below: a clear
        # CheckpointChangedError for this request instead (and answers again once the file is back)
        t.src.check_unchanged(t.where, t.nbytes, self._embd_digest)
        # each row is read from the file itself (pread, not the map): a file cut short since the check above is a
        # CheckpointChangedError for this request, where a read through the map would be a SIGBUS
        vals, nbytes = t.block
        row_bytes = cfg.dim // vals * nbytes
        raw = [np.frombuffer(t.src.read(t.where + i * row_bytes, row_bytes), np.uint8) for i in ids]
        if t.ttype in PLANE_TYPES:
            rows = np.stack([plane_values(*_planes(t.ttype, r)).reshape(-1) for r in raw])
        elif not t.quantized:
            rows = np.stack([plain_values(t.ttype, r) for r in raw])
        else:
            rows = Tensor.stack(*[dequantize(t.ttype, Tensor(r, device=self.device), (cfg.dim,)) for r in raw],
                                dim=0).numpy()
        if cfg.family.embed_scale:
            rows = rows * np.float32(math.sqrt(cfg.dim))
        return rows.astype(np.float32)

    def _jit(self, key, fn):
        """The TinyJit of `key` (made at first use: a capture holds the buffers of the slots it was made for)."""
        from tinygrad.engine.jit import TinyJit
        if key not in self._jits:
            self._jits[key] = TinyJit(fn)
        return self._jits[key]

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < len(self.caches):
            raise ValueError(f"slot {slot} is not one of this model's {len(self.caches)} sequence slots")

    @property
    def prefill_chunks(self) -> list[int]:
        """Every chunk size `forward` can be asked to prefill in (its `chunk`), smallest first."""
        return list(self._chunk_pos)

    def forward(self, ids: list[int], start_pos: int, jit: bool = True, slot: int = 0,
                logits: bool = True, chunk: int | None = None) -> Tensor | None:
        """The logits (vocab,) after `ids` at positions start_pos.. of sequence slot `slot` (its KV cache holds the
        ones before). A single token after the first position runs the jitted decode step. With `logits` False only
        the cache is filled (a prompt prefilled in pieces needs the output projection after its last piece only).
        `chunk` (one of prefill_chunks) prefills in chunks of that size only, the last one padded."""
        n = len(ids)
        if chunk is not None and chunk not in self._chunk_pos:
            raise ValueError(f"chunk {chunk} is not one of this model's prefill chunks {self.prefill_chunks}")
        self._check_slot(slot)
        cache = self.caches[slot]
        if start_pos < 0 or start_pos + n > self.max_context:
            raise ValueError(f"positions {start_pos}..{start_pos + n - 1} are past the context of {self.max_context}")
        xs = self.embed(ids)
        if not jit:
            return self._head(self._layers(Tensor(xs, device=self.device), [(cache, start_pos, n)])[n - 1:n])
        if n == 1 and start_pos >= 1:
            step = self._jit(("decode", slot), lambda x, p: self._head(self._layers(x, [(cache, p, 1)])).realize())
            return step(Tensor(xs, device=self.device).realize(), self.start_pos.bind(start_pos))
        # prefill: whole chunks of the largest size that fits, then the smallest that covers the rest (padded with
        # zeros: positions past the prompt get keys that later steps overwrite before any query reaches them)
        chunks = [chunk] if chunk is not None else [c for c in self._chunk_pos if c in PREFILL_CHUNKS]
        pos, h = start_pos, None
        while pos < start_pos + n:
            left = start_pos + n - pos
            fits = [c for c in chunks if pos + c <= self.max_context]
            if not fits:  # the context's last few positions: one step of its own size
                x = Tensor(xs[pos - start_pos:], device=self.device)
                return self._head(self._layers(x, [(cache, pos, left)])[left - 1:left])
            whole = [c for c in fits if c <= left]
            c = max(whole) if whole else min(fits)
            part = xs[pos - start_pos:pos - start_pos + c]
            if len(part) < c:
                part = np.concatenate([part, np.zeros((c - len(part), part.shape[1]), np.float32)])
            fn = self._jit(("chunk", slot, c), lambda x, p, c=c: self._layers(x, [(cache, p, c)]).realize())
            h = fn(Tensor(part, device=self.device), self._chunk_pos[c].bind(pos))
            last = min(c, left) - 1
            pos += min(c, left)
        return self.head_at(h, last) if logits else None

    def forward_batch(self, tokens: list[int], positions: list[int], slots: list[int]) -> Tensor:
        """One decode step for several sequences at once: token `tokens[b]` at position `positions[b]` (>= 1) of
        slot `slots[b]` (distinct). Returns their logits (len(tokens), vocab). The matrix products read each weight
        once for all of them (what a step is bound by); attention reads each sequence's own cache. Jitted per row
        count: the rows' positions are Variables and their slots' caches are inputs of the capture, so one capture
        serves any `len(tokens)` sequences (at most as many captures as slots, however streams come and go)."""
        k = len(tokens)
        if not k or len(positions) != k or len(slots) != k or len(set(slots)) != k:
            raise ValueError(f"forward_batch takes as many tokens, positions and distinct slots, got {tokens}, "
                             f"{positions}, {slots}")
        for s, p in zip(slots, positions):
            self._check_slot(s)
            if not 1 <= p < self.max_context:
                raise ValueError(f"position {p} of slot {s} is outside 1..{self.max_context - 1}")
        if k > 1:
            self.batched_steps += 1
        fn = self._jit(("batch", k), self._batch_step)
        x = Tensor(self.embed(tokens), device=self.device).realize()
        # NOTE: the caches go in as arguments, not through self.caches[slot]: the JIT swaps a replay's input buffers
        # for the ones it is given, so the kernels captured for slots (0, 1) write and read slots (3, 5) next time
        caches = [self.caches[s] for s in slots]
        ps = [self._row_pos[b].bind(p) for b, p in enumerate(positions)]
        return fn(x, ps, caches).reshape(k, self.cfg.vocab)

    def prefill_batch(self, parts: list[tuple[list[int], int, int]], chunk: int) -> Tensor:
        """Prefills several sequences in one pass: part b is (ids, start_pos, slot) with at most `chunk` ids (one of
        prefill_chunks; padded to it), the slots distinct. The matrix products take every part's rows at once, so
        the weights are read once for all of them; attention reads each part's own cache. Returns the hidden states
        (len(parts) * chunk, dim): part b's last id is row b * chunk + len(ids) - 1 (its logits: head_at). Jitted
        per (len(parts), chunk), the positions Variables and the caches inputs, as forward_batch is."""
        g = len(parts)
        if chunk not in self._chunk_pos or not 0 < g <= len(self.caches) or len({slot for _, _, slot in parts}) != g:
            raise ValueError(f"prefill_batch takes 1..{len(self.caches)} parts of distinct slots and a chunk of "
                             f"{self.prefill_chunks}, got {len(parts)} parts and chunk {chunk}")
        x = np.zeros((g * chunk, self.cfg.dim), np.float32)
        for b, (ids, start, slot) in enumerate(parts):
            self._check_slot(slot)
            if not 0 < len(ids) <= chunk or start < 0 or start + chunk > self.max_context:
                raise ValueError(f"part {b}: {len(ids)} ids at {start} don't fit a chunk of {chunk} in the context")
            x[b * chunk:b * chunk + len(ids)] = self.embed(ids)
        fn = self._jit(("parts", g, chunk), lambda x, ps, caches, c=chunk:
                       self._layers(x, [(kv, p, c) for kv, p in zip(caches, ps)]).realize())
        ps = [self._part_pos[chunk][b].bind(start) for b, (_, start, _) in enumerate(parts)]
        return fn(Tensor(x, device=self.device), ps, [self.caches[slot] for _, _, slot in parts])

    def step_and_prefill(self, tokens: list[int], positions: list[int], slots: list[int],
                         part: tuple[list[int], int, int], chunk: int) -> tuple[Tensor, Tensor]:
        """forward_batch's decode step and prefill_batch's pass of one part (ids, start_pos, slot) in one pass: the
        step's rows and the chunk's go through the weights together, so the weights are read once for both (a
        server prefilling a prompt beside running streams then delays their tokens by the chunk's extra rows, not by
        a pass of its own). Returns the step's logits (len(tokens), vocab) and the pass's hidden states, the part's
        last id at row len(tokens) + len(ids) - 1 (its logits: head_at). Jitted per (len(tokens), chunk)."""
        k = len(tokens)
        ids, start, slot = part
        every = list(slots) + [slot]
        if not k or len(positions) != k or len(set(every)) != k + 1 or chunk not in self._chunk_pos:
            raise ValueError(f"step_and_prefill takes as many tokens, positions and distinct slots, a part of another "
                             f"slot and a chunk of {self.prefill_chunks}, got {tokens}, {positions}, {every}, {chunk}")
        for s in every:
            self._check_slot(s)
        for s, p in zip(slots, positions):
            if not 1 <= p < self.max_context:
                raise ValueError(f"position {p} of slot {s} is outside 1..{self.max_context - 1}")
        if not 0 < len(ids) <= chunk or start < 0 or start + chunk > self.max_context:
            raise ValueError(f"{len(ids)} ids at {start} don't fit a chunk of {chunk} in the context")
        x = np.zeros((k + chunk, self.cfg.dim), np.float32)
        x[:k] = self.embed(tokens)
        x[k:k + len(ids)] = self.embed(ids)

        def run(x, ps, caches, c=chunk, k=k):
            h = self._layers(x, [(cache, p, 1) for cache, p in zip(caches[:k], ps[:k])] + [(caches[k], ps[k], c)])
            return self._head(h[:k]).realize(), h.realize()
        fn = self._jit(("step+chunk", k, chunk), run)
        ps = [self._row_pos[b].bind(p) for b, p in enumerate(positions)] + [self._part_pos[chunk][0].bind(start)]
        logits, h = fn(Tensor(x, device=self.device), ps, [self.caches[s] for s in every])
        return logits.reshape(k, self.cfg.vocab), h

    def head_at(self, h: Tensor, row: int) -> Tensor:
        """The logits (vocab,) of row `row` of hidden states h. NOTE: valid until the next call (or forward's
        logits): the jitted head writes each call's into the same buffer."""
        head = self._jit("head", lambda h: self._head(h).realize())
        # the row goes through the host: a slice on the device is a kernel of its own for every row number
        return head(Tensor(h.numpy()[row:row + 1], device=self.device).realize())

    def _batch_step(self, x: Tensor, positions: list, caches: list) -> Tensor:
        """forward_batch's jitted step: row b of x is one token at positions[b] of the sequence whose per-layer
        (keys, values) are caches[b]."""
        return self._head(self._layers(x, [(c, p, 1) for c, p in zip(caches, positions)])).realize()

    def _head(self, h: Tensor) -> Tensor:
        """The logits of hidden states (k, dim): (vocab,) for one, else (k, vocab)."""
        logits = _normed_linear(self.output, h, self.output_norm, self.cfg.eps)
        if self.output_bias is not None:
            logits = logits + self.output_bias
        if self.cfg.final_softcap:
            logits = (logits * (1.0 / self.cfg.final_softcap)).tanh() * self.cfg.final_softcap
        return logits.reshape(self.cfg.vocab) if h.shape[0] == 1 else logits

    def _layers(self, x: Tensor, groups: list[tuple[list, Any, int]]) -> Tensor:
        """The layers on embeddings x (rows, dim): `groups` lists (cache, start_pos, n) for consecutive runs of rows,
        each n tokens of one sequence at positions start_pos.. (an int, or a bound Variable) whose slot's per-layer
        keys and values are `cache` (one of self.caches). The matrix products take every row at once; attention each
        group against its own cache. Returns the hidden states."""
        cfg, fam = self.cfg, self.cfg.family
        masks = [self._masks(start_pos, n) for _, start_pos, n in groups]
        rows = [sum(g[2] for g in groups[:k]) for k in range(len(groups))]
        for i, L in enumerate(self.layers):
            glob = cfg.is_global(i)
            qk = None
            n = x.shape[0]
            if "qkv" in L:
                qkv = _normed_linear(L["qkv"], x, L["attn_norm"], cfg.eps)
                if "qkv_bias" in L:
                    qkv = qkv + L["qkv_bias"]
                q, k, v = _split(qkv, L["qkv_split"])
                # q's heads then k's: one view of the stacked output
                qk = qkv[:, :(cfg.heads + cfg.kv_heads) * cfg.head_dim].reshape(n, cfg.heads + cfg.kv_heads, -1)
            elif "qk" in L:
                qkm = _normed_linear(L["qk"], x, L["attn_norm"], cfg.eps)
                v = _normed_linear(L["attn_v"], x, L["attn_norm"], cfg.eps)
                if "qkv_bias" in L:
                    qkm, v = qkm + L["qkv_bias"][:qkm.shape[1]], v + L["qkv_bias"][qkm.shape[1]:]
                q, k = _split(qkm, L["qk_split"])
                qk = qkm.reshape(n, cfg.heads + cfg.kv_heads, -1)
            else:
                q, k, v = (_normed_linear(L[m], x, L["attn_norm"], cfg.eps) for m in ("attn_q", "attn_k", "attn_v"))
                if "qkv_bias" in L:
                    bq, bk, bv = _split(L["qkv_bias"].reshape(1, -1), [q.shape[1], k.shape[1], v.shape[1]])
                    q, k, v = q + bq, k + bk, v + bv
            q = q.reshape(n, cfg.heads, cfg.head_dim)
            k = k.reshape(n, cfg.kv_heads, cfg.head_dim)
            v = v.reshape(n, cfg.kv_heads, cfg.head_dim)
            if fam.qk_norm:
                # every head's factor of q and k in one kernel, q's heads and k's side by side
                f = _rms_scale(qk if qk is not None else q.cat(k, dim=1), cfg.eps)
                q = q * f[:, :cfg.heads] * L["attn_q_norm"]
                k = k * f[:, cfg.heads:] * L["attn_k_norm"]
            outs = []
            for (cache, start_pos, m), first, mask in zip(groups, rows, masks):
                part = (lambda t: t) if len(groups) == 1 else (lambda t, a=first, m=m: t[a:a + m])  # noqa: E731
                outs.append(self._attend(glob, cache[i], start_pos, m, part(q), part(k), part(v), mask))
            att = outs[0] if len(outs) == 1 else outs[0].cat(*outs[1:], dim=0)
            a = L["attn_output"](att)
            if "attn_output_bias" in L:
                a = a + L["attn_output_bias"]
            if fam.post_norms:
                a = _rms(a, L["post_attention_norm"], cfg.eps)
            x = (x + a).realize()
            if "gate_up" in L:
                g, u = _split(_normed_linear(L["gate_up"], x, L["ffn_norm"], cfg.eps), L["gate_up_split"])
            else:
                g, u = (_normed_linear(L[m], x, L["ffn_norm"], cfg.eps) for m in ("ffn_gate", "ffn_up"))
            act = _gelu(g) if fam.gelu else g.silu()
            f = L["ffn_down"](act * u)
            if fam.post_norms:
                f = _rms(f, L["post_ffw_norm"], cfg.eps)
            x = (x + f).realize()
        return x

    def _masks(self, start_pos, n: int) -> tuple[Tensor | None, Tensor | None]:
        """The causal mask and the sliding window's over the cached positions 0..end-1 of queries at start_pos..,
        (n, end) (None: every position is seen)."""
        cfg = self.cfg
        end = start_pos + n
        # (made once: every layer's mask reads it, where each would otherwise compute the position again)
        qpos = (Tensor.arange(n, device=self.device) + (Tensor(start_pos, device=self.device)
                                                        if not isinstance(start_pos, int) else start_pos)).reshape(n, 1)
        qpos = qpos.contiguous().realize()
        kpos = Tensor.arange(end, device=self.device).reshape(1, end)
        # a single query (a decode step) sees every cached position: global layers need no mask then
        causal = kpos <= qpos if n > 1 else None
        sliding = (kpos > qpos - cfg.window) & (causal if causal is not None else True) if cfg.window else causal
        return causal, sliding

    def _attend(self, glob: bool, kv: tuple[Tensor, Tensor], start_pos, n: int, q: Tensor, k: Tensor, v: Tensor,
                masks: tuple[Tensor | None, Tensor | None]) -> Tensor:
        """One sequence's attention in one layer: RoPE on its q and k (n, heads, head_dim), k and v written to its
        slot's cache at start_pos.., then q against every cached position. Returns (n, heads * head_dim)."""
        cfg, fam = self.cfg, self.cfg.family
        end = start_pos + n
        c, sn = (t[start_pos:end] for t in self.rope[glob])
        q, k = _rope(q, c, sn, fam.neox_rope, cfg.rope_dims), _rope(k, c, sn, fam.neox_rope, cfg.rope_dims)
        # NOTE: q made once: fused into the scores, its norm and rotation would be computed again for every key
        q = q.contiguous()
        ck, cv = kv
        ck[start_pos:end].assign(k).realize()
        cv[:, start_pos:end].assign(v.reshape(n, cfg.kv_heads * cfg.head_dim).T).realize()
        # grouped-query attention: q's heads as (kv_heads, rep), each group of rep heads against its one kv head by
        # broadcasting. NOTE: never expand the cache to (end, heads, head_dim) by a reshape of (kv_heads, rep): that
        # merges a stride-0 dim with a strided one, which takes a second view whose index then needs a modulo by the
        # symbolic `end` (NotImplementedError for 9/3, 8/2...); with kv_heads 1 or rep 1 the merge was trivial
        kvh, rep, hd = cfg.kv_heads, cfg.heads // cfg.kv_heads, cfg.head_dim
        keys = ck[:end].permute(1, 2, 0).reshape(kvh, 1, hd, end)
        qg = q.reshape(n, kvh, rep, hd).permute(1, 2, 0, 3)  # (kv_heads, rep, n, head_dim)
        scores = (qg @ keys) * cfg.attn_scale  # (kv_heads, rep, n, end)
        if cfg.attn_softcap:
            scores = (scores * (1.0 / cfg.attn_softcap)).tanh() * cfg.attn_softcap
        mask = masks[0] if glob else masks[1]
        if mask is not None:
            scores = mask.reshape(1, 1, n, end).where(scores, float("-inf"))
        if n == 1:
            # a decode step: the product in the scores' row order (kv_heads, rep, 1, head_dim), which is already the
            # order attn_output reads; the three kernels then fuse into one (engine/fuse_attention.py), the key
            # length start_pos + 1 symbolic
            probs = scores.softmax(-1).reshape(kvh, rep, 1, 1, end)
            return (probs * cv[:, :end].reshape(kvh, 1, 1, hd, end)).sum(-1).reshape(1, cfg.heads * hd)
        # (n, kv_heads, rep, 1, end) times the values (kv_heads, 1, head_dim, end), summed over positions: the
        # kernel writes the rows in the order attn_output reads them, where a permute of (heads, n, head_dim) would
        # make its input a strided view
        probs = scores.softmax(-1).permute(2, 0, 1, 3).reshape(n, kvh, rep, 1, end)
        vals = cv[:, :end].reshape(1, kvh, 1, hd, end)
        return (probs * vals).sum(-1).reshape(n, cfg.heads * hd)
