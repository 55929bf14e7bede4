"""simdgroup_matrix through the TC Opt on the METAL device (codegen/tensor_cores.py, TensorCore frag "simdgroup"),
run on the fake Objective-C runtime whose host MSL implements the simdgroup types and calls with their SIMD-group
semantics (test/native/msl_host.h): tensor-core kernels against the same kernel without optimisations, the CPU
device and numpy, over layouts, sizes no tile divides, batches and epilogues; and which devices are offered it."""
import native_doubles
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opts_on_device import tc_matches_plain

from tinygrad.codegen.kernel import Opt, OptOps
from tinygrad.codegen.tensor_cores import TC_CONFIGS

SMALL = TC_CONFIGS.index(next(c for c in TC_CONFIGS if (c.bm, c.bn, c.wm, c.wn) == (32, 32, 1, 1)))
TALL = TC_CONFIGS.index(next(c for c in TC_CONFIGS if (c.bm, c.bn, c.wm, c.wn) == (64, 32, 2, 1)))
MID = TC_CONFIGS.index(next(c for c in TC_CONFIGS if (c.bm, c.bn, c.wm, c.wn) == (64, 64, 2, 2)))


@pytest.fixture(scope="module")
def metal():
    from tinygrad import Device
    if "METAL" in Device._opened:  # METAL=1: the session's own fake device
        yield Device["METAL"]
        return
    if not native_doubles.install_fake_metal():
        pytest.skip("the fake Objective-C runtime needs x86-64 Linux and g++")
    yield Device["METAL"]
    Device._opened.pop("METAL", None)
    native_doubles.uninstall_fake_metal()


def _h(*shape, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(np.float16)


def _t(x, device="METAL"):
    from tinygrad import Tensor
    return Tensor(x, device=device).realize()


def _tc_vs_plain(t, cfg: int, want: np.ndarray, cpu=None, tol: float = 2e-2):
    return tc_matches_plain(t, cfg, "simdgroup", want, cpu, tol)


def test_simdgroup_matrix_is_offered_and_chosen(metal):
    from tinygrad import dtypes
    from tinygrad.codegen.heuristic_gpu import tensor_core_opt
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule_with_vars
    assert metal.native.supports_simdgroup_matrix and metal.linearizer_opts.tensor_cores == ("simdgroup",)
    t = _t(_h(256, 128)) @ _t(_h(128, 256, seed=1))
    lin = Linearizer(create_schedule_with_vars([t.lazydata])[0][-1].ast, metal.linearizer_opts)
    opt = tensor_core_opt(lin)
    assert opt is not None and opt.op is OptOps.TC
    # 32 KB of threadgroup memory: two stages of a 128x128x32 tile and the read-back tiles do not fit
    with pytest.raises(ValueError, match="more shared memory"):
        Linearizer(lin.ast, metal.linearizer_opts).apply_opt(Opt(OptOps.TC, 0, 0))
    # bfloat16 is bits computed in float on Metal: no simdgroup_matrix for it
    bf = _t(_h(64, 64)).cast(dtypes.bfloat16).realize() @ _t(_h(64, 64, seed=1)).cast(dtypes.bfloat16).realize()
    lin = Linearizer(create_schedule_with_vars([bf.lazydata])[0][-1].ast, metal.linearizer_opts)
    with pytest.raises(ValueError, match="no tensor core of the device takes"):
        lin.apply_opt(Opt(OptOps.TC, 0, SMALL))
    # the whole path: the engine's own choice, checked against numpy
    a, b = _h(96, 64), _h(64, 80, seed=1)
    np.testing.assert_allclose((_t(a) @ _t(b)).numpy().astype(np.float32), a.astype(np.float32) @ b.astype(np.float32),
                               rtol=2e-2, atol=2e-2)


def test_layouts_tails_and_epilogues_match(metal):
    m, n, k = 64, 64, 96
    a, b, w, bias = _h(m, k), _h(k, n, seed=1), _h(n, k, seed=2), _h(n, seed=3)
    af, bf, wf, biasf = (x.astype(np.float32) for x in (a, b, w, bias))
    # both operands in both layouts: each slice read by simdgroup_load transposed or not
    at, bt = _t(np.ascontiguousarray(a.T)).T, _t(np.ascontiguousarray(b.T)).T
    _tc_vs_plain(_t(a) @ _t(b), MID, af @ bf)
    _tc_vs_plain(_t(a) @ _t(w).T, SMALL, af @ wf.T)
    _tc_vs_plain(at @ _t(b), TALL, af @ bf)
    _tc_vs_plain(at @ bt, SMALL, af @ bf)
    _tc_vs_plain((_t(a) @ _t(b) + _t(bias)).relu(), SMALL, np.maximum(af @ bf + biasf, 0))
    _tc_vs_plain((_t(a) @ _t(b)).float() * 2, SMALL, af @ bf * 2)


@settings(max_examples=6, deadline=None)
@given(m=st.integers(2, 80), n=st.integers(2, 80), k=st.integers(2, 90), batch=st.integers(1, 2),
       cfg=st.sampled_from([SMALL, TALL]), seed=st.integers(0, 100))
def test_random_shapes_match_the_plain_kernel_and_the_cpu(metal, m, n, k, batch, cfg, seed):
    a, b = _h(batch, m, k, seed=seed), _h(batch, k, n, seed=seed + 1)
    _tc_vs_plain(_t(a) @ _t(b), cfg, np.einsum("bmk,bkn->bmn", a.astype(np.float32), b.astype(np.float32)),
                 cpu=_t(a, "CPU") @ _t(b, "CPU"))
