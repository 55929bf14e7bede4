"""Attention as one kernel (engine/fuse_attention.py, codegen/attention.py) against PyTorch's CPU SDPA: odd sequence
lengths, head dims, GQA, causal and padding masks, fp16 and fp32, the hand-written pattern, backward, and the CUDA
source run on the host emulation."""
import numpy as np
import pytest
import torch

from tinygrad import Tensor, dtypes
from tinygrad.codegen.attention import is_attention, parse
from tinygrad.codegen.attention_gpu import split_threads
from tinygrad.engine.schedule import create_schedule
from tinygrad.helpers import Context

F = torch.nn.functional


def _rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _kernels(out: Tensor):
    return [si for si in create_schedule(out.lazydata.lbs) if si.ast[0].op.name == "STORE"]


def _expand_kv(t: Tensor, groups: int) -> Tensor:
    """GQA: each kv head read by `groups` query heads, through an expand (no copy)."""
    b, h, s, d = t.shape
    return t.reshape(b, h, 1, s, d).expand(b, h, groups, s, d).reshape(b, h * groups, s, d)


def _check(sq, sk, d, dv=None, hq=2, hkv=2, causal=False, mask=None, dtype=np.float32, batch=1, tol=None,
           fused=True):
    dv = dv or d
    qn, kn, vn = _rand((batch, hq, sq, d), 1, dtype), _rand((batch, hkv, sk, d), 2, dtype), \
        _rand((batch, hkv, sk, dv), 3, dtype)
    q, k, v = Tensor(qn), _expand_kv(Tensor(kn), hq // hkv), _expand_kv(Tensor(vn), hq // hkv)
    m = Tensor(mask) if mask is not None else None
    out = q.scaled_dot_product_attention(k, v, attn_mask=m, is_causal=causal)
    kernels = _kernels(out)
    assert not fused or len(kernels) == 1 and is_attention(kernels[0].ast), [si.ast[0].src[0].op for si in kernels]
    # the causal mask is known: the kernel visits no key past the query row
    assert not fused or parse(kernels[0].ast).causal == causal
    tq, tk, tv = (torch.tensor(a.astype(np.float32)) for a in (qn, kn, vn))
    tk, tv = tk.repeat_interleave(hq // hkv, 1), tv.repeat_interleave(hq // hkv, 1)
    tm = torch.tensor(mask) if mask is not None else None
    want = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=causal).numpy()
    got = out.numpy().astype(np.float32)
    tol = tol or (2e-3 if dtype == np.float16 else 2e-5)
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("sq", [7, 65, 129])
@pytest.mark.parametrize("causal", [False, True])
def test_sequence_lengths(sq, causal):
    _check(sq, sq, 64, causal=causal)


def test_one_query():
    _check(1, 65, 64)
    _check(1, 1, 64, fused=False)  # a softmax over one key folds away: no attention kernel to make, still right


@pytest.mark.parametrize("d", [64, 80, 128])
def test_head_dims(d):
    _check(33, 33, d, causal=True)


def test_long_keys_and_decode():
    _check(5, 1000, 64, hq=1, hkv=1)
    _check(1, 1000, 64, hq=2, hkv=2)


def test_gqa_8_2():
    _check(17, 17, 64, hq=8, hkv=2, causal=True)


def test_bool_padding_mask():
    keep = np.ones((1, 1, 19, 23), dtype=bool)
    keep[..., 17:] = False  # padding keys
    _check(19, 23, 64, mask=keep)


def test_additive_mask():
    add = _rand((1, 2, 19, 23), 9) * 2
    _check(19, 23, 64, mask=add)


@pytest.mark.parametrize("causal", [False, True])
def test_fp16(causal):
    _check(65, 65, 64, causal=causal, dtype=np.float16, tol=5e-3)


def test_hand_written_pattern():
    qn, kn, vn = _rand((2, 3, 13, 64), 4), _rand((2, 3, 13, 64), 5), _rand((2, 3, 13, 64), 6)
    q, k, v = Tensor(qn), Tensor(kn), Tensor(vn)
    out = (q @ k.transpose(-2, -1) * 0.125).softmax(-1) @ v
    kernels = _kernels(out)
    assert len(kernels) == 1 and is_attention(kernels[0].ast)
    want = torch.softmax(torch.tensor(qn) @ torch.tensor(kn).transpose(-2, -1) * 0.125, -1) @ torch.tensor(vn)
    np.testing.assert_allclose(out.numpy(), want.numpy(), atol=2e-5, rtol=2e-5)


def test_dropout_in_training_falls_back():
    q, k, v = (Tensor(_rand((1, 2, 9, 16), s)) for s in (1, 2, 3))
    with Tensor.train():
        out = q.scaled_dot_product_attention(k, v, dropout_p=0.5)
        assert not any(is_attention(si.ast) for si in _kernels(out))


def test_off_switch_keeps_three_kernels():
    q, k, v = (Tensor(_rand((1, 2, 9, 16), s)) for s in (1, 2, 3))
    with Context(FLASH_ATTENTION=0):
        kernels = _kernels(q.scaled_dot_product_attention(k, v))
    assert len(kernels) == 3 and not any(is_attention(si.ast) for si in kernels)
    # eager runs replay a structure's cached schedule: the knob is part of its key
    from tinygrad.helpers import GlobalCounters
    counts = []
    for flash in (1, 0, 1):
        with Context(FLASH_ATTENTION=flash):
            before = GlobalCounters.kernel_count
            q.scaled_dot_product_attention(k, v).realize()
            counts.append(GlobalCounters.kernel_count - before)
    assert counts == [1, 3, 1], counts


def test_backward_still_works():
    qn, kn, vn = _rand((1, 2, 11, 16), 1), _rand((1, 2, 11, 16), 2), _rand((1, 2, 11, 16), 3)
    q, k, v = (Tensor(a, requires_grad=True) for a in (qn, kn, vn))
    out = q.scaled_dot_product_attention(k, v, is_causal=True)
    (out * out).sum().backward()
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (qn, kn, vn))
    tout = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    (tout * tout).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), atol=2e-5, rtol=2e-5)
    for a, b in ((q, tq), (k, tk), (v, tv)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=1e-4, rtol=1e-4)


# a warp's xor shuffle on the host: each lane leaves its value in the warp's slots and, after a barrier of the block
# (every thread of the block calls it at the same point), takes its partner's
_SHUFFLE_EMU = r"""
static float tg_shfl_slots[32][32];
template <class T> static T __shfl_xor_sync(unsigned, T v, int m) {
  unsigned l, w = tg_warp_lane(&l);
  tg_shfl_slots[w][l] = v;
  __syncthreads();
  T o = tg_shfl_slots[w][l ^ m];
  __syncthreads();
  return o;
}
"""


class _CudaAttention:
    """The attention kernel of `out` rendered for CUDA, in the shape test_gpu_codegen's host runner takes (si, lin,
    spec, src, launch)."""

    def __init__(self, out: Tensor, tensor_cores: tuple = ()):
        import dataclasses

        from test.unit.test_gpu_codegen import CUDA
        from tinygrad.codegen.attention import AttentionKernel
        from tinygrad.engine.realize import run_schedule
        from tinygrad.renderer.cuda import CUDARenderer
        items = create_schedule(out.lazydata.lbs)
        run_schedule(items[:-1])  # the inputs (copies of numpy arrays) on the host
        self.si = items[-1]
        assert is_attention(self.si.ast)
        lopts = dataclasses.replace(CUDA, tensor_cores=tensor_cores) if tensor_cores else CUDA
        self.lin = AttentionKernel(self.si.ast, lopts).linearize()
        self.spec = CUDARenderer(self.lin.name, self.lin.uops)
        self.src = self.spec.src
        if "__shfl_xor_sync" in self.src:
            # (after the harness's tensor-core emulation, whose warp and lane it uses)
            self.src = self.src.replace('extern "C" __global__', _SHUFFLE_EMU + 'extern "C" __global__', 1)

    def launch(self, var_vals):
        return tuple(self.lin.global_size), tuple(self.lin.local_size)


@pytest.mark.parametrize("case", ["plain", "causal", "gqa_fp16", "padding", "decode", "decode_d80_causal", "tiled",
                                  "tiled_causal_fp16", "tiled_d80_padding"])
def test_cuda_source_on_the_host_emulation(case, monkeypatch):
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to run rendered kernels on the host")
    from test.unit.test_gpu_codegen import _run
    dtype = np.float16 if case == "gqa_fp16" else np.float32
    import tinygrad.codegen.attention_gpu as attention_gpu
    sq, sk, hq, hkv = {"plain": (65, 65, 2, 2), "causal": (129, 129, 2, 2), "gqa_fp16": (33, 33, 8, 2),
                       "padding": (19, 23, 2, 2), "decode": (1, 1000, 4, 4), "decode_d80_causal": (3, 300, 2, 2),
                       "tiled": (65, 40, 64, 64), "tiled_causal_fp16": (130, 130, 4, 2),
                       "tiled_d80_padding": (64, 45, 2, 2)}[case]
    if case.startswith("tiled"):
        # a block of query rows of one head, its keys and values staged by tiles in shared memory (a GPU's kernel
        # for many rows: fewer rows here, so the host runs it fast)
        monkeypatch.setattr(attention_gpu, "SPLIT_ROWS", 64)
    if "fp16" in case:
        dtype = np.float16
    d = 80 if "d80" in case else 64
    qn, kn, vn = _rand((1, hq, sq, d), 1, dtype), _rand((1, hkv, sk, d), 2, dtype), _rand((1, hkv, sk, d), 3, dtype)
    keep = None
    if "padding" in case:
        keep = np.ones((1, 1, sq, sk), dtype=bool)
        keep[..., 20:] = False
    q, k, v = Tensor(qn), _expand_kv(Tensor(kn), hq // hkv), _expand_kv(Tensor(vn), hq // hkv)
    out = q.scaled_dot_product_attention(k, v, attn_mask=Tensor(keep) if keep is not None else None,
                                         is_causal="causal" in case)
    kern = _CudaAttention(out)
    # few rows with many keys: a block a row, its threads sharing the keys (flash-decoding inside a block); else a
    # thread a row
    split = split_threads(hq * sq, sk, d)
    if case.startswith("tiled"):
        assert split == 1 and kern.lin.local_size == (64, 1, 1) and kern.lin.global_size[1] == hq, kern.lin.global_size
        assert "__syncthreads" in kern.src
    else:
        assert split == (64 if sk >= 128 else 1)
        assert kern.lin.local_size == ((1, split, 1) if split > 1 else (min(64, hq * sq), 1, 1)), kern.lin.local_size
    got = _run([kern])[0].reshape(1, hq, sq, d).astype(np.float32)
    tq, tk, tv = (torch.tensor(a.astype(np.float32)) for a in (qn, kn, vn))
    tk, tv = tk.repeat_interleave(hq // hkv, 1), tv.repeat_interleave(hq // hkv, 1)
    want = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(keep) if keep is not None else None,
                                          is_causal="causal" in case).numpy()
    tol = 5e-3 if dtype == np.float16 else 2e-5
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


def test_model_layout_bf16_and_broadcast_padding_mask():
    # q, k, v as models make them: (B, S, H, D) projections transposed to (B, H, S, D); a (B, 1, 1, Sk) padding mask
    b, s, h, d = 2, 21, 4, 32
    qn, kn, vn = (_rand((b, s, h, d), seed) for seed in (11, 12, 13))
    keep = np.ones((b, 1, 1, s), dtype=bool)
    keep[1, ..., 15:] = False
    for dt, tol in ((dtypes.float32, 2e-5), (dtypes.bfloat16, 3e-2)):
        q, k, v = (Tensor(a).cast(dt).transpose(1, 2) for a in (qn, kn, vn))
        out = q.scaled_dot_product_attention(k, v, attn_mask=Tensor(keep))
        kernels = _kernels(out)
        assert len(kernels) == 1 and is_attention(kernels[-1].ast)
        tq, tk, tv = (torch.tensor(a).to(torch.bfloat16 if dt == dtypes.bfloat16 else torch.float32).float()
                      .transpose(1, 2) for a in (qn, kn, vn))
        want = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(keep)).numpy()
        np.testing.assert_allclose(out.cast(dtypes.float32).numpy(), want, atol=tol, rtol=tol)


def test_more_queries_than_keys_causal():
    _check(40, 24, 64, causal=True)
    _check(24, 40, 64, causal=True)


def test_two_attentions_in_one_schedule_and_weights_kept_when_read():
    qn, kn, vn = _rand((1, 2, 17, 32), 1), _rand((1, 2, 17, 32), 2), _rand((1, 2, 17, 32), 3)
    q, k, v = Tensor(qn), Tensor(kn), Tensor(vn)
    first = q.scaled_dot_product_attention(k, v, is_causal=True)
    second = first.scaled_dot_product_attention(first, first)
    kernels = _kernels(second)
    assert len(kernels) == 2 and all(is_attention(si.ast) for si in kernels)
    tq, tk, tv = (torch.tensor(a) for a in (qn, kn, vn))
    tfirst = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    np.testing.assert_allclose(second.numpy(), F.scaled_dot_product_attention(tfirst, tfirst, tfirst).numpy(),
                               atol=2e-5, rtol=2e-5)
    # the softmax's weights asked for too: they are stored, and the product reads them (three kernels)
    w = (q @ k.transpose(-2, -1)).softmax(-1)
    out = w @ v
    items = create_schedule([out.lazydata, w.lazydata])
    assert not any(is_attention(si.ast) for si in items)


@pytest.mark.parametrize("case", ["d64", "d64_sync", "causal_odd", "gqa_d128_causal", "bf16_padding", "padding",
                                  "long_keys", "additive", "hand_written", "fused_casts", "d80"])
def test_tensor_cores_on_the_host_emulation(case):
    """codegen/attention_tc.py: both products on mma.sync (emulated), the softmax on the accumulators."""
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to run rendered kernels on the host")
    from test.unit.test_gpu_codegen import _run
    sq, sk, d, hq, hkv = {"d64": (64, 64, 64, 2, 2), "d64_sync": (64, 64, 64, 2, 2), "fused_casts": (65, 65, 64, 2, 2),
                          "d80": (33, 90, 80, 2, 2),
                          "causal_odd": (129, 129, 64, 1, 1),
                          "gqa_d128_causal": (65, 65, 128, 8, 2), "bf16_padding": (40, 70, 64, 2, 2),
                          "padding": (40, 70, 64, 2, 2),
                          "long_keys": (17, 1000, 64, 1, 1), "additive": (33, 47, 64, 2, 2),
                          "hand_written": (20, 20, 64, 2, 2)}[case]
    causal = "causal" in case
    dt = dtypes.bfloat16 if "bf16" in case else dtypes.float16
    qn, kn, vn = _rand((1, hq, sq, d), 1), _rand((1, hkv, sk, d), 2), _rand((1, hkv, sk, d), 3)
    if dt == dtypes.float16 and case != "fused_casts":
        # half buffers: k and v staged 16 bytes at a time (cp.async where the device has it)
        q, k, v = (Tensor(a.astype(np.float16)) for a in (qn, kn, vn))
    else:
        q, k, v = (Tensor(a).cast(dt) for a in (qn, kn, vn))
    k, v = _expand_kv(k, hq // hkv), _expand_kv(v, hq // hkv)
    mask = None
    if "padding" in case:
        mask = np.ones((1, 1, sq, sk), dtype=bool)
        mask[..., 50:] = False
    elif case == "additive":
        mask = _rand((1, hq, sq, sk), 9).astype(np.float16)
    if case == "hand_written":
        out = (q @ k.transpose(-2, -1) * 0.125).softmax(-1) @ v
    else:
        out = q.scaled_dot_product_attention(k, v, attn_mask=Tensor(mask) if mask is not None else None,
                                             is_causal=causal)
    # (the host harness reads float32 and half outputs)
    tcs = ("m16n8k16",) if case == "d64_sync" else ("m16n8k16", "cp.async")
    kern = _CudaAttention(out.cast(dtypes.float32) if dt == dtypes.bfloat16 else out, tensor_cores=tcs)
    assert kern.lin.local_size == (128, 1, 1) and "mma.sync" in kern.src and "ldmatrix" in kern.src
    # (GQA by expand and reshape is two views whose index the 16-byte chunks do not see through: element by element)
    assert ("tg_cp_async_wait<1>" in kern.src) == (dt == dtypes.float16 and hq == hkv and
                                                   case not in ("d64_sync", "fused_casts"))
    got = _run([kern])[0].reshape(1, hq, sq, d).astype(np.float32)
    # the oracle on the same rounded inputs
    tq, tk, tv = (torch.tensor(t.cast(dtypes.float32).numpy()) for t in (Tensor(qn).cast(dt), Tensor(kn).cast(dt),
                                                                        Tensor(vn).cast(dt)))
    tk, tv = tk.repeat_interleave(hq // hkv, 1), tv.repeat_interleave(hq // hkv, 1)
    tm = torch.tensor(mask.astype(np.float32) if mask is not None and mask.dtype != bool else mask) \
        if mask is not None else None
    scale = 0.125 if case == "hand_written" else None
    want = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=causal, scale=scale).numpy()
    # P rounds to 16 bits before its product (as flash attention's kernels do)
    tol = 3e-2 if dt == dtypes.bfloat16 else 4e-3
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


def test_which_attention_takes_tensor_cores():
    """mma.sync where q, k and v are all half (or all bfloat16), the head dims multiples of 16 and there are 16 query
    rows or more; the SIMT kernels elsewhere (float32, d 72, decode) and on devices without m16n8k16."""
    import dataclasses

    from test.unit.test_gpu_codegen import CUDA
    from tinygrad.codegen.attention import AttentionKernel
    from tinygrad.codegen.uops import UOps
    tc = dataclasses.replace(CUDA, tensor_cores=("m16n8k16", "cp.async"))

    def wmma(sq, sk, d, dt, lopts=tc):
        q, k, v = Tensor.empty(1, 2, sq, d, dtype=dt), Tensor.empty(1, 2, sk, d, dtype=dt), \
            Tensor.empty(1, 2, sk, d, dtype=dt)
        si = [x for x in _kernels(q.scaled_dot_product_attention(k, v)) if is_attention(x.ast)][0]
        return any(u.uop is UOps.WMMA for u in AttentionKernel(si.ast, lopts).linearize().uops)
    assert wmma(64, 64, 64, dtypes.float16) and wmma(16, 300, 128, dtypes.bfloat16)
    assert not wmma(64, 64, 72, dtypes.float16) and not wmma(64, 64, 64, dtypes.float32)
    assert not wmma(8, 300, 64, dtypes.float16) and not wmma(64, 64, 64, dtypes.float16, CUDA)
