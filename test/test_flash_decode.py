"""Decode attention with a symbolic key length (the LLM's jitted decode step: keys 0 .. start_pos, start_pos a bound
Variable) fused into one kernel (on a GPU flash-decoding's two): against the three unfused kernels and numpy, for
several bound lengths, GQA ratios, head dims, a sliding window and a tanh soft-cap, on the default device (the CPU;
a GPU with CUDA=1) and in the CUDA source run on the host emulation, and one TinyJit replayed at several positions."""
import math
import shutil

import numpy as np
import pytest

from tinygrad import Tensor, TinyJit
from tinygrad.codegen.attention import is_attention, parse, split_mode
from tinygrad.engine.schedule import create_schedule_with_vars
from tinygrad.helpers import Context
from tinygrad.shape.symbolic import Node, Variable

MAX_CTX = 4200


@pytest.fixture(autouse=True)
def _symbolic_on_cpu(monkeypatch):
    """The CPU keeps the three kernels for a symbolic key length by default (engine/fuse_attention.py says why):
    these tests check its fused lowering too."""
    import tinygrad.engine.fuse_attention as fuse
    monkeypatch.setattr(fuse, "SYMBOLIC_ON_CPU", True)
SCALE = 0.125


class _Cache:
    """A layer's key and value cache laid out as the model's (keys (ctx, kv_heads, d), values (kv_heads * d, ctx))
    and one query (1, heads, d)."""

    def __init__(self, kvh: int, rep: int, d: int, ctx: int = MAX_CTX, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.kvh, self.rep, self.d = kvh, rep, d
        self.kn = rng.standard_normal((ctx, kvh, d)).astype(np.float32)
        self.vn = rng.standard_normal((kvh * d, ctx)).astype(np.float32)
        self.qn = rng.standard_normal((1, kvh * rep, d)).astype(np.float32)
        self.ck, self.cv = Tensor(self.kn).realize(), Tensor(self.vn).realize()

    def attend(self, q: Tensor, start_pos, window=None, softcap=None) -> Tensor:
        """model.py's decode attention: scores of (kv_heads, rep, 1, end), the mask and soft-cap, softmax, values."""
        kvh, rep, d = self.kvh, self.rep, self.d
        end = start_pos + 1
        keys = self.ck[:end].permute(1, 2, 0).reshape(kvh, 1, d, end)
        scores = (q.reshape(1, kvh, rep, d).permute(1, 2, 0, 3) @ keys) * SCALE
        if softcap:
            scores = (scores * (1.0 / softcap)).tanh() * softcap
        if window:
            qpos = (Tensor.arange(1) + (Tensor(start_pos) if isinstance(start_pos, Node) else start_pos)).reshape(1, 1)
            keep = Tensor.arange(end).reshape(1, end) > qpos.contiguous().realize() - window
            scores = keep.reshape(1, 1, 1, end).where(scores, float("-inf"))
        probs = scores.softmax(-1).reshape(kvh, rep, 1, 1, end)
        return (probs * self.cv[:, :end].reshape(kvh, 1, 1, d, end)).sum(-1).reshape(1, kvh * rep * d)

    def numpy(self, pos: int, window=None, softcap=None) -> np.ndarray:
        kvh, rep, d, end = self.kvh, self.rep, self.d, pos + 1
        q = self.qn.reshape(kvh, rep, d)
        s = np.einsum("grd,jgd->grj", q.astype(np.float64), self.kn[:end].astype(np.float64)) * SCALE
        if softcap:
            s = np.tanh(s / softcap) * softcap
        if window:
            s[..., np.arange(end) <= pos - window] = -np.inf
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return np.einsum("grj,gdj->grd", p, self.vn[:, :end].reshape(kvh, d, end)).reshape(1, -1)


def _var(pos: int):
    return Variable("start_pos", 0, MAX_CTX - 2).bind(pos)


def _items(out: Tensor):
    sched, var_vals = create_schedule_with_vars([out.lazydata])
    return [si for si in sched if si.ast[0].op.name == "STORE"], var_vals


def _check(cache, pos, **kw):
    out = cache.attend(Tensor(cache.qn), _var(pos), **kw)
    items, _ = _items(out)
    fused = [si for si in items if is_attention(si.ast)]
    # one kernel, or on a GPU flash-decoding's two (the partials, then their combine)
    kinds = [split_mode(si.ast)[0] for si in fused]
    assert kinds in (["whole"], ["partial", "combine"]), [si.ast[0].src[0].op for si in items]
    assert isinstance(parse(fused[0].ast).sk, Node)
    got = out.numpy()
    with Context(FLASH_ATTENTION=0):
        ref = cache.attend(Tensor(cache.qn), _var(pos), **kw)
        assert not any(is_attention(si.ast) for si in _items(ref)[0])
        unfused = ref.numpy()
    np.testing.assert_allclose(got, unfused, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(got, cache.numpy(pos, **kw), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("pos", [0, 1, 6, 63, 512, 4099])
def test_symbolic_lengths(pos):
    _check(_Cache(2, 4, 64), pos)


@pytest.mark.parametrize("rep", [1, 3, 4, 8])
def test_gqa_ratios(rep):
    _check(_Cache(2, rep, 64), 70)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_head_dims(d):
    _check(_Cache(1, 4, d, ctx=600), 300)


def test_sliding_window_and_softcap():
    cache = _Cache(2, 2, 64, ctx=600)
    _check(cache, 300, window=64)
    _check(cache, 300, softcap=2.0)
    _check(cache, 40, window=64, softcap=2.0)  # (the window longer than the keys: every key seen)


def test_jit_replays_at_several_positions():
    cache = _Cache(2, 3, 64, ctx=600)

    def step(q, sp):
        return cache.attend(q, sp).realize()
    jit = TinyJit(step)
    q = Tensor(cache.qn).realize()
    for pos in (5, 9, 200, 17, 513, 300, 2):
        got = jit(q, _var(pos)).numpy()
        with Context(FLASH_ATTENTION=0):
            unfused = cache.attend(Tensor(cache.qn), _var(pos)).numpy()
        np.testing.assert_allclose(got, unfused, atol=2e-5, rtol=2e-5, err_msg=f"start_pos {pos}")
    assert jit.cnt >= 2


def test_cpu_keeps_three_kernels_by_default(monkeypatch):
    import tinygrad.engine.fuse_attention as fuse
    from tinygrad.device import Device
    monkeypatch.setattr(fuse, "SYMBOLIC_ON_CPU", False)
    cache = _Cache(1, 4, 64, ctx=300)
    items, _ = _items(cache.attend(Tensor(cache.qn), _var(100)))
    gpu = getattr(Device[Device.DEFAULT].linearizer_opts, "has_local", False)
    assert any(is_attention(si.ast) for si in items) == gpu


def test_many_query_rows_keep_three_kernels():
    """A long chunk with a symbolic key length (a prefill's) keeps the unfused kernels the prefill is tuned for."""
    kvh, rep, d, n = 2, 32, 64, 64
    ck = Tensor.empty(MAX_CTX, kvh, d)
    sp = _var(100)
    end = sp + n
    q = Tensor.empty(kvh, rep, n, d)
    scores = q @ ck[:end].permute(1, 2, 0).reshape(kvh, 1, d, end)
    out = scores.softmax(-1) @ ck[:end].permute(1, 0, 2).reshape(kvh, 1, end, d)
    assert not any(is_attention(si.ast) for si in _items(out)[0])


# ---- the CUDA source on the host (test/unit/test_gpu_codegen.py's harness) ----

def _attention_item(out: Tensor):
    """The fused item of `out`, its inputs computed (on the host)."""
    from tinygrad.engine.realize import run_schedule
    items, var_vals = create_schedule_with_vars([out.lazydata])
    run_schedule(items[:-1], var_vals)
    assert is_attention(items[-1].ast)
    return items[-1]


class _CudaDecode:
    """A schedule item's attention kernel rendered for CUDA, in the shape the host runner takes (si, lin, spec, src,
    launch)."""

    def __init__(self, si):
        from test.unit.test_gpu_codegen import CUDA
        from tinygrad.codegen.attention import AttentionKernel
        from tinygrad.renderer.cuda import CUDARenderer
        self.si = si
        self.lin = AttentionKernel(self.si.ast, CUDA).linearize()
        self.spec = CUDARenderer(self.lin.name, self.lin.uops)
        self.src = self.spec.src

    def launch(self, var_vals):
        from tinygrad.codegen.gpu_dims import resolve_launch
        return resolve_launch(self.lin.global_size, var_vals), resolve_launch(self.lin.local_size, var_vals)


@pytest.mark.parametrize("case", [(0, 2, 4, 64, {}), (1, 2, 4, 64, {}), (6, 1, 8, 128, {}), (64, 2, 1, 64, {}),
                                  (512, 1, 3, 256, {}), (4099, 1, 4, 64, {}), (300, 2, 2, 64, {"window": 64}),
                                  (200, 1, 4, 64, {"softcap": 3.0})])
def test_cuda_source_on_the_host_emulation(case):
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to run rendered kernels on the host")
    from tinygrad.device import Device
    if getattr(Device[Device.DEFAULT].linearizer_opts, "has_local", False):
        pytest.skip("the host emulation starts from the CPU's schedule (one fused item)")
    from test.unit.test_gpu_codegen import _run
    pos, kvh, rep, d, kw = case
    cache = _Cache(kvh, rep, d, ctx=max(1200, pos + 8))
    out = cache.attend(Tensor(cache.qn), Variable("start_pos", 0, MAX_CTX - 2).bind(pos), **kw)
    si = _attention_item(out)
    kern = _CudaDecode(si)
    assert [v.expr for v in kern.lin.vars] == ["start_pos"]
    var_vals = {v: pos for v in kern.lin.vars}
    got = _run([kern], var_vals)[0][:kvh * rep * d].reshape(1, -1)
    want = cache.numpy(pos, **kw)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
    assert math.isfinite(float(got.sum()))
    # flash-decoding (a GPU's schedule): the keys in chunks, a block each, then the combine
    from tinygrad.codegen.attention_gpu import KEYS_PER_CHUNK, decode_chunks
    from tinygrad.engine.fuse_attention import split_items
    plan = parse(si.ast)
    chunks = decode_chunks(kvh * rep, plan.sk_max)
    assert chunks == min(64, 512 // (kvh * rep))
    first, second = (_CudaDecode(x) for x in split_items(type(si), si.ast, si.bufs, si.lbs, plan, chunks))
    # (a chunk more each KEYS_PER_CHUNK keys: the launch's y follows the key length)
    count = chunks + (pos + 1 + KEYS_PER_CHUNK - 1) // KEYS_PER_CHUNK - 1
    assert first.launch(var_vals)[0] == (kvh * rep, count, 1) and second.lin.global_size == (kvh * rep, 1, 1)
    partials = _run([first], var_vals)[0]
    first.si.bufs[0].ensure_allocated()
    first.si.bufs[0].copyin(memoryview(partials))
    got = _run([second], var_vals)[0][:kvh * rep * d].reshape(1, -1)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
    if not kw:
        # the same two kernels at another position: another count of chunks, each of another length
        from test.unit.test_gpu_codegen import _compile
        fns = _compile([first, second])
        other = {v: 1100 for v in var_vals}
        first.si.bufs[0].copyin(memoryview(_run([first], other, fns[:1])[0]))
        got = _run([second], other, fns[1:])[0][:kvh * rep * d].reshape(1, -1)
        np.testing.assert_allclose(got, cache.numpy(1100), atol=2e-5, rtol=2e-5)
