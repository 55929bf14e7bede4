"""Tensor-core kernels (the TC Opt, codegen/tensor_cores.py): which kernels take them, and their results, checked by
running the rendered CUDA on the host (test_gpu_codegen's harness, with mma.sync emulated across each warp's threads)
against numpy and against the same kernel without tensor cores."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_gpu_codegen import Kernel, _run, pytestmark  # noqa: F401 - pytestmark: the harness needs g++

from tinygrad import Tensor, dtypes
from tinygrad.codegen.gpu_dims import CUDA_GLOBAL_MAX, CUDA_LOCAL_MAX
from tinygrad.codegen.heuristic_gpu import TC_PREFERENCE
from tinygrad.codegen.kernel import LinearizerOptions, Opt, OptOps
from tinygrad.codegen.linearizer import Linearizer
from tinygrad.codegen.program import TensorMapSpec
from tinygrad.codegen.tensor_cores import SIMT_CONFIGS, TC_CONFIGS, smem_bytes
from tinygrad.codegen.uops import UOps
from tinygrad.engine.schedule import create_schedule_with_vars
from tinygrad.helpers import Context
from tinygrad.ops import BufferOps
from tinygrad.renderer.cuda import CUDARenderer

TC = LinearizerOptions("CUDA", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                       global_max=CUDA_GLOBAL_MAX, local_max=CUDA_LOCAL_MAX, tensor_cores=("m16n8k16", "cp.async"))
SYNC = LinearizerOptions("CUDA", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                         global_max=CUDA_GLOBAL_MAX, local_max=CUDA_LOCAL_MAX, tensor_cores=("m16n8k16",))
# the configs by tile: small ones keep the emulated warps few
SMALL = TC_CONFIGS.index(next(c for c in TC_CONFIGS if (c.bm, c.bn, c.wm, c.wn) == (32, 32, 1, 1)))
MID = TC_CONFIGS.index(next(c for c in TC_CONFIGS if (c.bm, c.bn, c.wm, c.wn) == (64, 64, 2, 2)))
TALL = TC_CONFIGS.index(next(c for c in TC_CONFIGS if (c.bm, c.bn, c.wm, c.wn) == (64, 32, 2, 1)))


def _h(*shape, seed=0, dtype=np.float16):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(dtype)


def _t(a: np.ndarray, dtype=None) -> Tensor:
    return Tensor(a, dtype=dtype).realize()


def _check(got: np.ndarray, want: np.ndarray, half_out: bool = True):
    tol = 2e-2 if half_out else 1e-3
    np.testing.assert_allclose(got.astype(np.float32).reshape(want.shape), want, rtol=tol, atol=tol)


def test_heuristic_puts_half_matmuls_on_tensor_cores_and_nothing_else():
    a, b = _t(_h(256, 128)), _t(_h(128, 256, seed=1))
    assert Kernel(a @ b, lopts=TC).lin.applied_opts[0].op is OptOps.TC
    assert Kernel(a @ b).lin.tc is None  # a device without tensor cores
    # sizes no tile divides take tensor cores too
    assert Kernel(_t(_h(250, 40)) @ _t(_h(40, 257)), lopts=TC).lin.tc is not None
    # float operands: a block tile of FMAs (SMEM); a sum with no product, a matrix-vector product: the kernel's
    # usual optimisations
    f32 = Kernel(_t(_h(256, 128, dtype=np.float32)) @ _t(_h(128, 256, dtype=np.float32)), lopts=TC)
    assert [o.op for o in f32.lin.applied_opts] == [OptOps.SMEM] and f32.lin.tc.simt
    red = Kernel(_t(_h(256, 128)).float().sum(axis=1), lopts=TC)
    mv = Kernel(_t(_h(1, 128)) @ _t(_h(128, 4096)), lopts=TC)
    few = Kernel(_t(_h(4, 128)) @ _t(_h(128, 4096)), lopts=TC)  # 4 rows: 28 of every 32 would be padding
    for k in (red, mv, few):
        assert k.lin.tc is None and not any(o.op is OptOps.TC for o in k.lin.applied_opts)


def test_tc_opt_rules():
    a, b = _t(_h(64, 64)), _t(_h(64, 64, seed=1))
    k = Kernel(a @ b, opts=[Opt(OptOps.TC, 0, SMALL)], lopts=TC)
    assert k.lin.local_size == (32, 1, 1) and k.lin.global_size == (2, 2, 1)
    # a slice of BK=32 is two steps of 16, each a 2x4 grid of 16x8 tiles
    assert sum(u.uop is UOps.WMMA for u in k.lin.uops) == 2 * 2 * 4
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in k.src
    lin = Linearizer(k.si.ast, TC)
    lin.apply_opt(Opt(OptOps.TC, 0, SMALL))
    with pytest.raises(ValueError, match="TC or SMEM"):
        lin.apply_opt(Opt(OptOps.UPCAST, 0, 2))
    lin = Linearizer(k.si.ast, TC)
    lin.apply_opt(Opt(OptOps.UPCAST, 0, 2))
    with pytest.raises(ValueError, match="only Opt"):
        lin.apply_opt(Opt(OptOps.TC, 0, SMALL))
    with pytest.raises(ValueError, match="no tensor-core config"):
        Linearizer(k.si.ast, TC).apply_opt(Opt(OptOps.TC, 0, len(TC_CONFIGS)))
    with pytest.raises(ValueError, match="no tensor cores"):
        Linearizer(k.si.ast, Kernel(a @ b).lin.opts).apply_opt(Opt(OptOps.TC, 0, SMALL))
    assert all(smem_bytes(c) <= 48 * 1024 or c not in TC_CONFIGS[:1] for c in TC_CONFIGS)


def test_tensor_core_kernels_match_numpy_over_layouts_and_tails():
    m, n, k = 64, 64, 96
    a, b, w, bias = _h(m, k), _h(k, n, seed=1), _h(n, k, seed=2), _h(n, seed=3)
    af, bf, wf, biasf = (x.astype(np.float32) for x in (a, b, w, bias))
    ta, tb, tw, tbias = _t(a), _t(b), _t(w), _t(bias)
    at = _t(np.ascontiguousarray(a.T)).T  # A stored K-major: its slices are copied along M
    cases = [
        (ta @ tb, af @ bf, MID, True),
        (ta @ tw.T, af @ wf.T, SMALL, True),  # x @ W.T: both operands contiguous along K
        (at @ tb, af @ bf, TALL, True),
        ((ta @ tb + tbias).relu(), np.maximum(af @ bf + biasf, 0), SMALL, True),
        (ta.float() @ tb.float() if False else (ta @ tb).float() * 2, af @ bf * 2, SMALL, True),
        (ta.dot(tb, acc_dtype=dtypes.float32).cast(dtypes.float32), af @ bf, SMALL, True),
    ]
    kernels = [Kernel(t, opts=[Opt(OptOps.TC, 0, cfg)], lopts=TC) for t, _, cfg, _ in cases]
    assert all(kern.lin.tc is not None for kern in kernels)
    plain = [Kernel(t, opts=[]) for t, _, _, _ in cases]
    outs = _run(kernels + plain)
    for (_, want, _, half_out), got, ref in zip(cases, outs[:len(cases)], outs[len(cases):]):
        _check(got, want, half_out)
        _check(got, ref.astype(np.float32).reshape(want.shape), half_out)


def test_batched_and_bfloat16_and_masked_operands():
    a, b = _h(3, 32, 64), _h(3, 64, 32, seed=1)
    bf_a, bf_b = _h(32, 64, seed=4).astype(np.float32), _h(64, 64, seed=5).astype(np.float32)
    padded = _h(32, 50, seed=6)  # padded to K=64 with zeros: a mask inside the staged slices
    pb = _h(64, 32, seed=7)
    cases = [
        (_t(a) @ _t(b), np.einsum("bmk,bkn->bmn", a.astype(np.float32), b.astype(np.float32))),
        (_t(bf_a, dtypes.bfloat16) @ _t(bf_b, dtypes.bfloat16), None),
        (_t(padded).pad(((0, 0), (7, 7))) @ _t(pb), np.pad(padded, ((0, 0), (7, 7))).astype(np.float32) @ pb),
    ]
    kernels = [Kernel(t, opts=[Opt(OptOps.TC, 0, SMALL)], lopts=TC) for t, _ in cases]
    assert kernels[0].lin.global_size == (1, 1, 3)
    outs = _run(kernels)
    _check(outs[0], cases[0][1])
    def bits(x):  # float32 -> bfloat16 by truncation, as the values were made
        return (np.frombuffer(x.astype(np.float32).tobytes(), np.uint32) & 0xFFFF0000).view(np.float32)
    want_bf = bits(bf_a).reshape(bf_a.shape) @ bits(bf_b).reshape(bf_b.shape)
    # the harness's output array for bfloat16 is float64 (numpy has no bfloat16): its first bytes hold the result
    got_bf = (outs[1].view(np.uint16)[:want_bf.size].astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(got_bf.reshape(want_bf.shape), want_bf, rtol=2e-2, atol=5e-2)
    _check(outs[2], cases[2][1])


def test_async_copies_where_operands_allow_them():
    a, b = _t(_h(64, 64)), _t(_h(64, 64, seed=1))
    asy = Kernel(a @ b, opts=[Opt(OptOps.TC, 0, SMALL)], lopts=TC)
    assert asy.lin.tc.asynchronous and asy.lin.tc.stages == TC_CONFIGS[SMALL].stages > 2
    assert sum(u.uop is UOps.ASYNC_COMMIT for u in asy.lin.uops) == TC_CONFIGS[SMALL].stages
    assert "cp.async.cg.shared.global" in asy.src
    # no cp.async on the device, an operand with a mask, an operand at an offset of 3 elements: registers
    sync = Kernel(a @ b, opts=[Opt(OptOps.TC, 0, SMALL)], lopts=SYNC)
    masked = Kernel(_t(_h(64, 50)).pad(((0, 0), (7, 7))) @ b, opts=[Opt(OptOps.TC, 0, SMALL)], lopts=TC)
    shifted = Kernel(_t(_h(64, 67))[:, 3:] @ b, opts=[Opt(OptOps.TC, 0, SMALL)], lopts=TC)
    for k in (sync, masked, shifted):
        assert not k.lin.tc.asynchronous and k.lin.tc.stages == 2
        assert not any(u.uop in (UOps.COPY_ASYNC, UOps.ASYNC_WAIT) for u in k.lin.uops)


@settings(max_examples=8, deadline=None)
@given(mt=st.integers(1, 3), nt=st.integers(1, 3), kt=st.integers(1, 5), cfg=st.sampled_from([SMALL, TALL]),
       asy=st.booleans(), seed=st.integers(0, 100))
def test_random_shapes_match_the_plain_kernel(mt, nt, kt, cfg, asy, seed):
    c = TC_CONFIGS[cfg]
    a, b = _h(mt * c.bm, kt * c.bk, seed=seed), _h(kt * c.bk, nt * c.bn, seed=seed + 1)
    tc = Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, cfg)], lopts=TC if asy else SYNC)
    plain = Kernel(_t(a) @ _t(b), opts=[])
    assert tc.lin.tc.asynchronous == asy
    got, ref = _run([tc, plain])
    _check(got, ref.astype(np.float32).reshape(got.shape))
    _check(got, a.astype(np.float32) @ b.astype(np.float32))


def test_tiles_past_48kb_take_dynamic_shared_memory():
    # 128x256x32 in 3 stages: 72 KB of staged slices, 8 warps, on a device that lets a block have 227 KB
    big = TC_CONFIGS.index(next(c for c in TC_CONFIGS if (c.bm, c.bn, c.bk, c.stages) == (128, 256, 32, 3)))
    assert smem_bytes(TC_CONFIGS[big]) > 48 * 1024
    a, b = _h(128, 96), _h(96, 264, seed=1)  # N a multiple of a chunk (cp.async), not of the tile
    with pytest.raises(ValueError, match="more shared memory than the device gives"):
        Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, big)], lopts=TC)
    wide = dataclasses.replace(TC, shared_max=227 * 1024)
    k = Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, big)], lopts=wide)
    assert k.lin.tc.asynchronous and k.lin.tc.stages == 3 and k.lin.local_size == (256, 1, 1)
    assert k.spec.dynamic_shared == smem_bytes(TC_CONFIGS[big]) and k.src.count("__shared__") == 1
    small = Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, SMALL)], lopts=wide)
    assert small.spec.dynamic_shared == 0  # what fits 48 KB stays static
    got, = _run([k])
    _check(got, a.astype(np.float32) @ b.astype(np.float32))
    # the heuristic's first choices: wgmma on TMA where the device has both, wgmma on cp.async where it has no TMA,
    # then a 64 KB mma.sync tile where it gives a block that much, else the 48 KB one
    x, y = _t(_h(2048, 64)), _t(_h(64, 2048, seed=1))
    hopper = dataclasses.replace(wide, tensor_cores=wide.tensor_cores + ("wgmma",))
    tma = dataclasses.replace(wide, tensor_cores=wide.tensor_cores + ("wgmma", "tma"))
    pick = [TC_CONFIGS[Kernel(x @ y, lopts=lo).lin.applied_opts[0].amt] for lo in (tma, hopper, wide, TC)]
    assert pick[0].tma and pick[0] == TC_CONFIGS[TC_PREFERENCE[0]]
    assert pick[1] == next(TC_CONFIGS[i] for i in TC_PREFERENCE if TC_CONFIGS[i].wgmma and not TC_CONFIGS[i].tma)
    assert not pick[2].wgmma and smem_bytes(pick[2]) > 48 * 1024 and smem_bytes(pick[3]) <= 48 * 1024


HOPPER = dataclasses.replace(TC, tensor_cores=("m16n8k16", "cp.async", "wgmma"), shared_max=227 * 1024)


def _wgmma_config(bm, bn, stages):
    return TC_CONFIGS.index(next(c for c in TC_CONFIGS if c.wgmma and (c.bm, c.bn, c.stages) == (bm, bn, stages)))


def test_wgmma_slices_match_numpy_for_both_layouts_of_b_and_partial_tiles():
    # B staged N-major (x @ y, y row-major: 64-column atoms) and K-major (x @ w.T); sizes no tile divides
    a, b, w = _h(192, 96), _h(96, 136, seed=1), _h(200, 96, seed=2)
    cfg = _wgmma_config(128, 128, 3)
    nmaj = Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, cfg)], lopts=HOPPER)
    kmaj = Kernel(_t(a) @ _t(w).T, opts=[Opt(OptOps.TC, 0, _wgmma_config(64, 256, 4))], lopts=HOPPER)
    assert nmaj.lin.local_size == (256, 1, 1) and not nmaj.lin.tc.b_along_k and kmaj.lin.tc.b_along_k
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in nmaj.src and "fence.proxy.async" in nmaj.src
    bf = Kernel(_t(a.astype(np.float32), dtypes.bfloat16) @ _t(b.astype(np.float32), dtypes.bfloat16),
                opts=[Opt(OptOps.TC, 0, cfg)], lopts=HOPPER)
    got_n, got_k, got_bf = _run([nmaj, kmaj, bf])
    af = a.astype(np.float32)
    _check(got_n, af @ b.astype(np.float32))
    _check(got_k, af @ w.astype(np.float32).T)
    want_bf = af @ b.astype(np.float32)
    got_bf = (got_bf.view(np.uint16)[:want_bf.size].astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(got_bf.reshape(want_bf.shape), want_bf, rtol=2e-2, atol=5e-2)
    # not on a device without it, nor where A is not contiguous along K
    with pytest.raises(ValueError, match="no wgmma"):
        Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, cfg)], lopts=dataclasses.replace(TC, shared_max=227 * 1024))
    with pytest.raises(ValueError, match="A contiguous along K"):
        Kernel(_t(np.ascontiguousarray(a.T)).T @ _t(b), opts=[Opt(OptOps.TC, 0, cfg)], lopts=HOPPER)


TMA = dataclasses.replace(HOPPER, tensor_cores=HOPPER.tensor_cores + ("tma",))


def _tma_config(cluster, bm=128, bn=256, stages=4, producer=False):
    return TC_CONFIGS.index(next(c for c in TC_CONFIGS if c.tma == cluster and (c.bm, c.bn, c.stages, c.producer) ==
                                 (bm, bn, stages, producer)))


def test_tma_slices_match_numpy_for_both_layouts_of_b_and_partial_tiles():
    # slices copied by TMA (the host emulates the copies and mbarriers): more steps of K than stages, so stages are
    # refilled once every warp has freed them; M, N and K no tile divides (the boxes read zeros past the ends)
    a, b, w = _h(200, 576), _h(576, 136, seed=1), _h(136, 576, seed=2)
    nmaj = Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, _tma_config(1))], lopts=TMA)
    kmaj = Kernel(_t(a) @ _t(w).T, opts=[Opt(OptOps.TC, 0, _tma_config(1))], lopts=TMA)
    body = nmaj.src.split("extern")[-1]
    assert "tg_tma_produce<4, 8192, 16384, false, 4, 1>" in body and "tg_cp_async16(" not in body
    # the tensor maps: A (K, M) in 64 x 128 boxes; B (N, K) in 64-column atoms, or (K, N) in 64 x 256 boxes
    assert nmaj.spec.tensor_maps == (TensorMapSpec(1, 0, 2, (576, 200), (1152,), (64, 128), 128),
                                     TensorMapSpec(2, 0, 2, (136, 576), (272,), (64, 64), 128))
    assert kmaj.spec.tensor_maps[1] == TensorMapSpec(2, 0, 2, (576, 136), (1152,), (64, 256), 128)
    assert "const __grid_constant__ tg_tmap tmap_b)" in nmaj.src
    # a producer warp (the block's last) copying every step, the others only multiplying
    prod = Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, _tma_config(1, producer=True))], lopts=TMA)
    assert prod.lin.local_size == (288, 1, 1) and "if (lidx0 >= 256) { tg_tma_producer<4, 8192, 16384" in prod.src
    got_n, got_k, got_p = _run([nmaj, kmaj, prod])
    af = a.astype(np.float32)
    _check(got_n, af @ b.astype(np.float32))
    _check(got_k, af @ w.astype(np.float32).T)
    _check(got_p, af @ b.astype(np.float32))


@settings(max_examples=3, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 24), kmajor=st.booleans(), producer=st.booleans(),
       seed=st.integers(0, 99))
def test_tma_random_shapes_match_the_plain_kernel(m, n, k, kmajor, producer, seed):
    # sizes in 16-byte chunks (TMA's strides are multiples of 16 bytes), no tile dividing them; against the same
    # kernel without tensor cores
    a, b = _h(8 * m, 8 * k, seed=seed), _h(8 * n, 8 * k, seed=seed + 1)
    t = _t(a) @ (_t(b).T if kmajor else _t(np.ascontiguousarray(b.T)))
    tma = Kernel(t, opts=[Opt(OptOps.TC, 0, _tma_config(1, producer=producer))], lopts=TMA)
    plain = Kernel(t, opts=[], lopts=TMA)
    assert tma.lin.tc.b_along_k == kmajor and "tg_tma_wait" in tma.src
    got, want = _run([tma, plain])
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-2)


def test_tma_clusters_share_b_and_the_plan_rules():
    # two blocks along M a cluster, each copying half of B's slice into both (multicast); rendered for the device
    # only (the host runs one block at a time)
    a, b = _h(256, 128), _h(128, 256, seed=1)
    k = Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, _tma_config(2))], lopts=TMA)
    assert "__cluster_dims__(1, 2, 1)" in k.src and "multicast::cluster" in k.src
    assert "tg_tma_init<4, 2>(tc_bar, 16, lidx0)" in k.src and "tg_tma_exit<2>()" in k.src
    # K-major B: each block's box is half of B's rows
    kk = Kernel(_t(a) @ _t(_h(256, 128, seed=2)).T, opts=[Opt(OptOps.TC, 0, _tma_config(2))], lopts=TMA)
    assert (kk.spec.tensor_maps[1].box, kk.spec.tensor_maps[1].swizzle) == ((64, 128), 128)
    # refused: an odd number of row tiles for a cluster of 2, a batch, a device without TMA, a view with an offset
    # TMA can take (and one it can't: not 16-byte aligned, which cp.async refuses too)
    with pytest.raises(ValueError, match="multiple of 2 row tiles"):
        Kernel(_t(_h(128, 128)) @ _t(b), opts=[Opt(OptOps.TC, 0, _tma_config(2))], lopts=TMA)
    with pytest.raises(ValueError, match="no batch dims"):
        Kernel(_t(_h(2, 128, 128)) @ _t(_h(2, 128, 256)), opts=[Opt(OptOps.TC, 0, _tma_config(1))], lopts=TMA)
    with pytest.raises(ValueError, match="no TMA"):
        Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, _tma_config(1))], lopts=HOPPER)
    big = _h(264, 128)
    sub = Kernel(_t(big)[8:] @ _t(b), opts=[Opt(OptOps.TC, 0, _tma_config(1))], lopts=TMA)
    assert (sub.spec.tensor_maps[0].offset, sub.spec.tensor_maps[0].elem, sub.spec.tensor_maps[0].dims) == \
        (8 * 128 * 2, 2, (128, 256))
    got, = _run([sub])
    _check(got, big[8:].astype(np.float32) @ b.astype(np.float32))


@pytest.mark.parametrize("lopts", [TC, SYNC])
def test_partial_tiles_of_whole_chunks_copy_asynchronously(lopts):
    # sizes that are multiples of a 16-byte chunk (8 halves) but of no tile: chunks wholly inside or past the end
    a, b, w = _h(48, 40), _h(40, 56, seed=1), _h(56, 40, seed=2)
    kernels = [Kernel(_t(a) @ _t(b), opts=[Opt(OptOps.TC, 0, SMALL)], lopts=lopts),
               Kernel(_t(a) @ _t(w).T, opts=[Opt(OptOps.TC, 0, SMALL)], lopts=lopts)]
    assert [k.lin.tc.asynchronous for k in kernels] == [lopts is TC] * 2
    for got, want in zip(_run(kernels), (a.astype(np.float32) @ b.astype(np.float32),
                                         a.astype(np.float32) @ w.astype(np.float32).T)):
        _check(got, want)
    f32 = [_h(24, 36, dtype=np.float32), _h(36, 20, seed=3, dtype=np.float32)]
    (got,) = _run([Kernel(_t(np.ascontiguousarray(f32[0].T)).T @ _t(f32[1]), opts=[Opt(OptOps.SMEM, 0, S_SMALL)],
                          lopts=lopts)])
    np.testing.assert_allclose(got.reshape(24, 20), f32[0] @ f32[1], rtol=1e-4, atol=1e-4)


@settings(max_examples=8, deadline=None)
@given(m=st.integers(2, 70), n=st.integers(2, 70), k=st.integers(2, 80), cfg=st.sampled_from([SMALL, TALL]),
       asy=st.booleans(), bias=st.booleans(), seed=st.integers(0, 100))
def test_sizes_no_tile_divides(m, n, k, cfg, asy, bias, seed):
    # the last tiles read zeros past the end of M, N and K, and store (and load the tail's inputs) nowhere there
    a, b, c = _h(m, k, seed=seed), _h(k, n, seed=seed + 1), _h(n, seed=seed + 2)
    out = _t(a) @ _t(b)
    if bias:
        out = (out + _t(c)).relu()
    tc = Kernel(out, opts=[Opt(OptOps.TC, 0, cfg)], lopts=TC if asy else SYNC)
    want = a.astype(np.float32) @ b.astype(np.float32)
    if bias:
        want = np.maximum(want + c.astype(np.float32), 0)
    (got,) = _run([tc])
    _check(got, want)


# --- SMEM: float32 block tiles staged in shared memory, FMAs from there ---------------------------------------------
S_SMALL = SIMT_CONFIGS.index(next(c for c in SIMT_CONFIGS if (c.bm, c.bn) == (32, 32)))
S_MID = SIMT_CONFIGS.index(next(c for c in SIMT_CONFIGS if (c.bm, c.bn, c.stages) == (64, 64, 2)))


def test_smem_float32_matmuls_match_numpy_over_layouts_and_tails():
    m, n, k = 64, 64, 48
    f = lambda *shape, seed=0: _h(*shape, seed=seed, dtype=np.float32)  # noqa: E731
    a, b, w, bias = f(m, k), f(k, n, seed=1), f(n, k, seed=2), f(n, seed=3)
    ta, tb, tw, tbias = _t(a), _t(b), _t(w), _t(bias)
    at, bt = _t(np.ascontiguousarray(a.T)).T, _t(np.ascontiguousarray(b))  # A stored K-major: copied asynchronously
    cases = [
        (ta @ tb, a @ b, S_MID),
        (ta @ tw.T, a @ w.T, S_SMALL),
        (at @ bt, a @ b, S_SMALL),
        ((ta @ tb + tbias).relu(), np.maximum(a @ b + bias, 0), S_SMALL),
        (_t(f(50, 37)) @ _t(f(37, 45, seed=4)), f(50, 37) @ f(37, 45, seed=4), S_SMALL),  # no tile divides them
    ]
    kernels = [Kernel(t, opts=[Opt(OptOps.SMEM, 0, cfg)], lopts=TC) for t, _, cfg in cases]
    assert all(kern.lin.tc is not None and kern.lin.tc.simt for kern in kernels)
    assert kernels[2].lin.tc.asynchronous and not kernels[0].lin.tc.asynchronous
    outs = _run(kernels)
    for (_, want, _), got in zip(cases, outs):
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def test_smem_opt_rules():
    a, b = _t(_h(64, 64, dtype=np.float32)), _t(_h(64, 64, seed=1, dtype=np.float32))
    ast = Kernel(a @ b, opts=[]).si.ast
    with pytest.raises(ValueError, match="product"):  # half operands: the reduce is over a cast
        Linearizer(Kernel(_t(_h(64, 64)) @ _t(_h(64, 64)), opts=[]).si.ast, TC).apply_opt(Opt(OptOps.SMEM, 0, 0))
    with pytest.raises(ValueError, match="no SMEM config"):
        Linearizer(ast, TC).apply_opt(Opt(OptOps.SMEM, 0, len(SIMT_CONFIGS)))
    lin = Linearizer(ast, TC).apply_opt(Opt(OptOps.SMEM, 0, S_MID))
    with pytest.raises(ValueError, match="TC or SMEM"):
        lin.apply_opt(Opt(OptOps.UNROLL, 2, 2))


# ---- convolutions (the other reduced dims loop around K's pipeline) and TF32 ----
TF32 = dataclasses.replace(TC, tensor_cores=TC.tensor_cores + ("tf32",))


def _conv_ref(x: np.ndarray, w: np.ndarray, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """conv2d in float64 by explicit loops over the filter taps (numpy has none)."""
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, cout, oh, ow))
    per = cout // groups
    for g in range(groups):
        xs, ws = xp[:, g * cg:(g + 1) * cg], w[g * per:(g + 1) * per].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                r, c = i * dilation, j * dilation
                patch = xs[:, :, r:r + stride * oh:stride, c:c + stride * ow:stride]
                out[:, g * per:(g + 1) * per] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out


CONVS = [((2, 16, 6, 33), (32, 16, 3, 3), {"padding": 1}), ((2, 16, 6, 33), (32, 16, 3, 3), {}),
         ((1, 16, 9, 17), (32, 16, 3, 3), {"stride": 2, "padding": 1}),
         ((2, 16, 7, 34), (32, 16, 3, 3), {"dilation": 2, "padding": 2}),
         ((2, 32, 5, 32), (32, 8, 3, 3), {"padding": 1, "groups": 4}), ((1, 24, 4, 40), (40, 24, 1, 1), {})]


def test_convolutions_run_on_tensor_cores():
    # every filter tap restages K's (the input channels') slices; the input is staged along its columns (its view
    # can't say so by strides: a padded window), the weights along K
    ks, wants = [], []
    for xs, ws, kw in CONVS:
        x, w = _h(*xs), _h(*ws, seed=1)
        conv = _t(x).conv2d(_t(w), **kw)
        for cfg in (SMALL, TALL):
            k = Kernel(conv, opts=[Opt(OptOps.TC, 0, cfg)], lopts=TC)
            assert k.lin.tc is not None and len(k.lin.tc.outer) == (0 if ws[2] == 1 else 2)
            ks.append(k)
            wants.append(_conv_ref(x, w, **kw))
    assert not ks[0].lin.tc.b_along_k and ks[0].lin.tc.a_along_k
    # the padded window is read a thread an element (neighbouring threads, neighbouring columns) and staged an
    # element at a time; the weights, gathered along K, in chunks of 8
    src, chunk = ks[0].src, "tg_vec<unsigned short, 8>*)"
    assert "tc_b[" in src and f"{chunk}(tc_b" not in src and f"{chunk}(tc_a" in src
    for got, want in zip(_run(ks), wants):
        _check(got, want.astype(np.float32))


def test_convolution_tiles_follow_the_outputs_they_fill():
    # 64 channels by 56 columns: a 64 x 64 tile (88% real outputs), not 128 x 128 (22%); a square matmul keeps its
    # preferred tile; float32 convolutions keep the plain tiles (SMEM restaging every tap measured slower)
    conv = Kernel(_t(_h(8, 64, 56, 56)).conv2d(_t(_h(64, 64, 3, 3, seed=1)), padding=1), lopts=TC)
    cfg = TC_CONFIGS[conv.lin.applied_opts[0].amt]
    assert conv.lin.applied_opts[0].op is OptOps.TC and (cfg.bm, cfg.bn) == (64, 64)
    mm = Kernel(_t(_h(2048, 64)) @ _t(_h(64, 2048, seed=1)), lopts=TC)
    assert [(TC_CONFIGS[o.amt].bm, TC_CONFIGS[o.amt].bn) for o in mm.lin.applied_opts] == [(128, 128)]
    f32 = Kernel(_t(_h(2, 16, 32, 32, dtype=np.float32)).conv2d(_t(_h(32, 16, 3, 3, seed=1, dtype=np.float32))),
                 lopts=TC)
    assert f32.lin.tc is None
    # on TF32 the 32 x 64 tile comes first (BEAM's pick on the H100), as it fills as well as 64 x 64
    tf32 = Kernel(_t(_h(8, 64, 56, 56, dtype=np.float32)).conv2d(_t(_h(64, 64, 3, 3, seed=1, dtype=np.float32)),
                                                                  padding=1), lopts=TF32)
    cfg = TC_CONFIGS[tf32.lin.applied_opts[0].amt]
    assert tf32.lin.tc.tc.name == "m16n8k8_tf32" and (cfg.bm, cfg.bn) == (32, 64)


def test_tf32_matmuls_and_convolutions():
    # float32 operands on m16n8k8 TF32 where the device offers it: each input keeps 10 mantissa bits (the host
    # emulation drops the other 13, as the tensor cores do), so about 1e-3 of the result's scale
    f = lambda *shape, seed=0: _h(*shape, seed=seed, dtype=np.float32)  # noqa: E731
    a, b, w = f(64, 96), f(96, 40, seed=1), f(40, 96, seed=2)
    cases = [(_t(a) @ _t(b), a.astype(np.float64) @ b, cfg) for cfg in (SMALL, TALL)]
    cases.append((_t(a[:, :40]) @ _t(b[:40]), a[:, :40].astype(np.float64) @ b[:40], SMALL))  # K: one partial slice
    cases.append((_t(a) @ _t(w).T, a.astype(np.float64) @ w.T, SMALL))  # both along K: copied asynchronously
    for (xs, ws, kw), cfg in zip(CONVS[:3], (SMALL, MID, TALL)):
        x, wt = f(*xs), f(*ws, seed=1)
        cases.append((_t(x).conv2d(_t(wt), **kw), _conv_ref(x, wt, **kw), cfg))
    ks = [Kernel(t, opts=[Opt(OptOps.TC, 0, cfg)], lopts=TF32) for t, _, cfg in cases]
    assert all(k.lin.tc.tc.name == "m16n8k8_tf32" and k.lin.tc.a_along_k for k in ks)
    # a @ b: B staged N-major, its fragments read a float at a time; a @ w.T: K-major, by ldmatrix; both copied
    # asynchronously; the convolutions' padded windows are read through registers
    assert not ks[0].lin.tc.b_along_k and ks[3].lin.tc.b_along_k
    assert ks[0].lin.tc.asynchronous and ks[3].lin.tc.asynchronous and not ks[4].lin.tc.asynchronous
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ks[0].src
    for got, (_, want, _) in zip(_run(ks), cases):
        err = np.abs(got.reshape(want.shape) - want).max() / np.abs(want).max()
        assert 1e-5 < err < 3e-3  # not float32's exactness: the inputs were rounded
    # without the knob's kind, float32 matmuls keep SMEM
    assert Kernel(_t(a) @ _t(b), lopts=TC).lin.tc.simt


@settings(max_examples=6, deadline=None)
@given(n=st.integers(1, 2), cin=st.sampled_from([3, 8, 20]), cout=st.sampled_from([8, 24, 33]), h=st.integers(3, 9),
       w=st.integers(5, 40), k=st.integers(1, 3), stride=st.integers(1, 2), padding=st.integers(0, 2),
       dilation=st.integers(1, 2), cfg=st.sampled_from([SMALL, TALL]), tf32=st.booleans(), seed=st.integers(0, 99))
def test_random_convolutions_match_the_reference(n, cin, cout, h, w, k, stride, padding, dilation, cfg, tf32, seed):
    # odd channel counts (K and M no tile divides), outputs narrower than a tile, strides, dilations and padding;
    # float32 on TF32 or half on m16n8k16
    if (h + 2 * padding - dilation * (k - 1) - 1) < 0 or (w + 2 * padding - dilation * (k - 1) - 1) < 0:
        return
    dt = np.float32 if tf32 else np.float16
    x, wt = _h(n, cin, h, w, seed=seed, dtype=dt), _h(cout, cin, k, k, seed=seed + 1, dtype=dt)
    kern = Kernel(_t(x).conv2d(_t(wt), stride=stride, padding=padding, dilation=dilation),
                  opts=[Opt(OptOps.TC, 0, cfg)], lopts=TF32 if tf32 else TC)
    want = _conv_ref(x, wt, stride=stride, padding=padding, dilation=dilation)
    got = _run([kern])[0].astype(np.float64).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=3e-2 if not tf32 else 5e-3, atol=3e-2 if not tf32 else 5e-3)


# ---- merged M and N (the TC Opt's axis bits): convolutions whose output rows are narrower than a tile ----
def _torch_conv(x: np.ndarray, w: np.ndarray, dy: np.ndarray | None = None, **kw):
    """torch's conv2d in float64 (CPU), and with `dy` its input and weight gradients."""
    torch = pytest.importorskip("torch")
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    tw = torch.tensor(w.astype(np.float64), requires_grad=True)
    out = torch.nn.functional.conv2d(tx, tw, **kw)
    if dy is None:
        return out.detach().numpy()
    out.backward(torch.tensor(dy.astype(np.float64)))
    return tx.grad.numpy(), tw.grad.numpy()


NARROW = [((2, 16, 7, 7), (32, 16, 3, 3), {"padding": 1}), ((3, 24, 14, 14), (40, 24, 1, 1), {}),
          ((2, 16, 9, 9), (33, 16, 3, 3), {"stride": 2, "padding": 1}), ((4, 20, 6, 6), (48, 20, 1, 1), {"stride": 2})]


@pytest.mark.parametrize("tf32", [False, True])
def test_narrow_convolutions_merge_output_dims_into_n_and_taps_into_k(tf32):
    # 7-, 14- and 3-wide output rows: N alone would be narrower than a tile (these ran SIMT), so N spans batch x OH x
    # OW, indexed through the merged row in the staged slices and the stores; odd channels, strides and padding
    dt, lopts = (np.float32, TF32) if tf32 else (np.float16, TC)
    ks, wants = [], []
    for xs, ws, kw in NARROW:
        x, w = _h(*xs, dtype=dt), _h(*ws, seed=1, dtype=dt)
        k = Kernel(_t(x).conv2d(_t(w), **kw), lopts=lopts)
        # (the 3x3s' 16 channels, shorter than a slice, merge with the taps into K as well: axis 5)
        assert k.lin.applied_opts[0].op is OptOps.TC and k.lin.applied_opts[0].axis == (1 if ws[2] == 1 else 5)
        assert k.lin.tc.n_dims == (0, 3, 4) and not k.lin.tc.batch
        ks.append(k)
        wants.append(_torch_conv(x, w, **kw))
        # a forced small tile too: several tiles along N, the last one partly past its end
        ks.append(Kernel(_t(x).conv2d(_t(w), **kw), opts=[Opt(OptOps.TC, 1, SMALL)], lopts=lopts))
        wants.append(wants[-1])
    # a stem: 3 channels by 7 x 7 taps merged into K (147; one tap's 3 channels would fill a tenth of a slice)
    x, w = _h(2, 3, 20, 20, dtype=dt), _h(32, 3, 7, 7, seed=1, dtype=dt)
    stem = Kernel(_t(x).conv2d(_t(w), stride=2, padding=3), lopts=lopts)
    assert stem.lin.applied_opts[0].axis == 5 and stem.lin.tc.k_dims == (5, 6, 7) and not stem.lin.tc.outer
    ks.append(stem)
    wants.append(_torch_conv(x, w, stride=2, padding=3))
    tol = 5e-3 if tf32 else 3e-2
    for got, want in zip(_run(ks), wants):
        np.testing.assert_allclose(got.astype(np.float64).reshape(want.shape), want, rtol=tol, atol=tol)


def _kernel_of(si, noopt: bool = False) -> Kernel:
    """A Kernel for one schedule item (a gradient's kernels are several): the heuristic's opts, or none."""
    k = Kernel.__new__(Kernel)
    k.si, k.lin = si, Linearizer(si.ast, TC)
    with Context(NOOPT=int(noopt)):
        k.lin.linearize()
    k.spec = CUDARenderer(k.lin.name, k.lin.uops)
    k.src = k.spec.src
    return k


def _grad_kernels(x: np.ndarray, w: np.ndarray, dy: np.ndarray, which: str, **kw) -> list:
    """The kernels of x's or w's gradient (`which`), the forward's inputs and dy realized."""
    tx, tw = Tensor(x, requires_grad=True).realize(), Tensor(w, requires_grad=True).realize()
    tx.conv2d(tw, **kw).backward(_t(dy))
    grad = (tx if which == "x" else tw).grad
    return [_kernel_of(si) for si in create_schedule_with_vars([grad.lazydata])[0] if si.ast[0].op is BufferOps.STORE]


def test_convolution_gradients_take_tensor_cores():
    # weight gradients (few outputs, each a sum over batch x OH x OW, which went to the renderer's block-per-output
    # reduction or ran SIMT) and input gradients (the 1x1's one kernel; the 3x3's product of dy and the weights
    # for every tap before the windows are summed, with N channels x taps and M batch x OH x OW) on tensor cores,
    # against torch's gradients (the 3x3's product against the same kernel without tensor cores)
    cases = [((2, 16, 7, 7), (40, 16, 3, 3), {"padding": 1}),
             ((2, 16, 9, 9), (33, 16, 3, 3), {"stride": 2, "padding": 1}), ((3, 40, 6, 6), (36, 40, 1, 1), {})]
    for xs, ws, kw in cases:
        x, w = _h(*xs), _h(*ws, seed=1)
        dy = _h(*_torch_conv(x, w, **kw).shape, seed=2)
        want_dx, want_dw = _torch_conv(x, w, dy, **kw)
        (dw,) = _grad_kernels(x, w, dy, "w", **kw)
        dx = _grad_kernels(x, w, dy, "x", **kw)[0]
        assert dw.lin.tc is not None and dx.lin.tc is not None
        got_dw, got_dx = _run([dw, dx])
        np.testing.assert_allclose(got_dw.astype(np.float64).reshape(want_dw.shape), want_dw, rtol=3e-2, atol=5e-2)
        if ws[2] == 1:
            np.testing.assert_allclose(got_dx.astype(np.float64).reshape(want_dx.shape), want_dx, rtol=3e-2,
                                       atol=3e-2)
            continue
        assert dx.lin.tc.m_dims and dx.lin.tc.n_dims
        ref = _run([_kernel_of(dx.si, noopt=True)])[0]
        np.testing.assert_allclose(got_dx.astype(np.float32), ref.astype(np.float32), rtol=2e-2, atol=2e-2)
