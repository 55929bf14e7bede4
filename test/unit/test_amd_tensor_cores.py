"""RDNA3 WMMA through the TC Opt on the AMD device (codegen/tensor_cores.py, TensorCore frag "lane"), run on the fake
KFD whose host twins execute v_wmma with its lane semantics (test/native/hip_twin.h): tensor-core kernels against
the same kernel without optimisations and against numpy, over layouts, sizes no tile divides, batches and
bfloat16; which targets are offered WMMA; and a gfx1100 code object of a TC kernel, disassembled."""
import os
import shutil
import subprocess
import tempfile

import native_doubles
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opts_on_device import tc_matches_plain

from tinygrad.codegen.kernel import Opt, OptOps
from tinygrad.codegen.tensor_cores import TC_CONFIGS

GPUS = ("gfx1100", "gfx90a", "gfx942")
# configs by tile: the small ones keep the twin's fibers few
SMALL = TC_CONFIGS.index(next(c for c in TC_CONFIGS if (c.bm, c.bn, c.wm, c.wn) == (32, 32, 1, 1)))
TALL = TC_CONFIGS.index(next(c for c in TC_CONFIGS if (c.bm, c.bn, c.wm, c.wn) == (64, 32, 2, 1)))
MID = TC_CONFIGS.index(next(c for c in TC_CONFIGS if (c.bm, c.bn, c.wm, c.wn) == (64, 64, 2, 2)))


@pytest.fixture(scope="module")
def kfd():
    if os.environ.get("AMD", "") not in ("", "0"):
        pytest.skip("AMD=1 runs the session on its own fake machine")
    if shutil.which("g++") is None:
        pytest.skip("host twins need g++")
    native_doubles.install_fake_kfd(GPUS)
    yield native_doubles.fake_kfd()
    native_doubles.uninstall_fake_kfd()


def _h(*shape, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(np.float16)


def _t(x, dtype=None, device="AMD"):
    from tinygrad import Tensor
    return Tensor(x, dtype=dtype, device=device).realize()


def _tc_vs_plain(t, cfg: int, want: np.ndarray, cpu=None, tol: float = 2e-2):
    return tc_matches_plain(t, cfg, "lane", want, cpu, tol)


def test_wmma_is_offered_on_gfx11_only(kfd):
    from tinygrad import Device
    from tinygrad.runtime.ops_amd import amd_tensor_cores
    assert [Device[f"AMD:{i}"].arch for i in range(3)] == list(GPUS)
    assert Device["AMD"].linearizer_opts.tensor_cores == ("wmma_gfx11",)
    # CDNA (gfx90a, gfx942) has MFMA, another instruction with another layout: no tensor cores
    assert Device["AMD:1"].linearizer_opts.tensor_cores == () and Device["AMD:2"].linearizer_opts.tensor_cores == ()
    assert amd_tensor_cores("gfx1103") == ("wmma_gfx11",) and amd_tensor_cores("gfx1200") == ()


def test_heuristic_puts_half_matmuls_on_wmma(kfd):
    from tinygrad import Device
    from tinygrad.codegen.heuristic_gpu import tensor_core_opt
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule_with_vars
    for dev, want in (("AMD", OptOps.TC), ("AMD:1", None)):
        t = _t(_h(256, 128), device=dev) @ _t(_h(128, 256, seed=1), device=dev)
        si = create_schedule_with_vars([t.lazydata])[0][-1]
        lin = Linearizer(si.ast, Device[dev].linearizer_opts)
        opt = tensor_core_opt(lin) if Device[dev].linearizer_opts.tensor_cores else None
        assert (opt.op if opt is not None else None) == want
    # the whole path: the engine's own choice, checked against numpy
    a, b = _h(96, 64), _h(64, 80, seed=1)
    np.testing.assert_allclose((_t(a) @ _t(b)).numpy().astype(np.float32), a.astype(np.float32) @ b.astype(np.float32),
                               rtol=2e-2, atol=2e-2)


def test_layouts_tails_and_epilogues_match(kfd):
    m, n, k = 64, 64, 96
    a, b, w, bias = _h(m, k), _h(k, n, seed=1), _h(n, k, seed=2), _h(n, seed=3)
    af, bf, wf, biasf = (x.astype(np.float32) for x in (a, b, w, bias))
    at = _t(np.ascontiguousarray(a.T)).T  # A stored K-major: staged with M contiguous, read element by element
    bt = _t(np.ascontiguousarray(b.T)).T
    _tc_vs_plain(_t(a) @ _t(b), MID, af @ bf)
    _tc_vs_plain(_t(a) @ _t(w).T, SMALL, af @ wf.T)
    _tc_vs_plain(at @ _t(b), TALL, af @ bf)
    _tc_vs_plain(at @ bt, SMALL, af @ bf)
    _tc_vs_plain((_t(a) @ _t(b) + _t(bias)).relu(), SMALL, np.maximum(af @ bf + biasf, 0))


def test_batched_bfloat16_and_masked_operands(kfd):
    from tinygrad import dtypes
    a, b = _h(3, 32, 64), _h(3, 64, 48, seed=1)
    lin = _tc_vs_plain(_t(a) @ _t(b), SMALL, np.einsum("bmk,bkn->bmn", a.astype(np.float32), b.astype(np.float32)))
    assert lin.global_size == (2, 1, 3)
    x, y = _h(40, 64, seed=4).astype(np.float32), _h(64, 72, seed=5).astype(np.float32)

    def bits(v):  # float32 -> bfloat16 by truncation, as Tensor.cast does not: the values are made exact first
        return (np.frombuffer(v.tobytes(), np.uint32) & 0xFFFF0000).view(np.float32).reshape(v.shape)
    x, y = bits(x), bits(y)
    lin = _tc_vs_plain(_t(x, dtypes.bfloat16) @ _t(y, dtypes.bfloat16), SMALL, x @ y, tol=5e-2,
                       cpu=_t(x, dtypes.bfloat16, "CPU") @ _t(y, dtypes.bfloat16, "CPU"))
    assert lin.tc.tc.name == "wmma_bf16_gfx11"
    padded, pb = _h(32, 50, seed=6), _h(64, 32, seed=7)  # K padded to 64 with zeros: a mask inside the slices
    _tc_vs_plain(_t(padded).pad(((0, 0), (7, 7))) @ _t(pb), SMALL,
                 np.pad(padded, ((0, 0), (7, 7))).astype(np.float32) @ pb.astype(np.float32))


@settings(max_examples=6, deadline=None)
@given(m=st.integers(2, 80), n=st.integers(2, 80), k=st.integers(2, 90), batch=st.integers(1, 2),
       cfg=st.sampled_from([SMALL, TALL]), seed=st.integers(0, 100))
def test_random_shapes_match_the_plain_kernel_and_the_cpu(kfd, m, n, k, batch, cfg, seed):
    a, b = _h(batch, m, k, seed=seed), _h(batch, k, n, seed=seed + 1)
    _tc_vs_plain(_t(a) @ _t(b), cfg, np.einsum("bmk,bkn->bmn", a.astype(np.float32), b.astype(np.float32)),
                 cpu=_t(a, device="CPU") @ _t(b, device="CPU"))


def test_gfx1100_code_object_of_a_tc_kernel_has_v_wmma():
    from test_amd_render import _clang

    from tinygrad import Tensor, dtypes
    from tinygrad.codegen.kernel import LinearizerOptions
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule_with_vars
    from tinygrad.renderer.hip import hip_renderer
    from tinygrad.runtime import _amd
    from tinygrad.runtime.compiler_amd import AMDCompiler
    from tinygrad.runtime.ops_amd import amd_tensor_cores
    _clang()
    a, b = Tensor.empty(128, 64, dtype=dtypes.half).realize(), Tensor.empty(64, 128, dtype=dtypes.half).realize()
    si = create_schedule_with_vars([(a @ b).lazydata])[0][-1]
    for arch in ("gfx1100", "gfx90a"):
        opts = LinearizerOptions("AMD", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                                 shared_max=64 * 1024, tensor_cores=amd_tensor_cores(arch))
        lin = Linearizer(si.ast, opts)
        if arch != "gfx1100":
            with pytest.raises(ValueError, match="no tensor cores"):
                lin.apply_opt(Opt(OptOps.TC, 0, MID))
            continue
        lin.apply_opt(Opt(OptOps.TC, 0, MID))
        lin.linearize()
        image = AMDCompiler(arch).code_object(hip_renderer(32)(lin.name, lin.uops).src)
        co = _amd.parse_code_object(image)
        assert co["gfx"] == "gfx1100" and len(co["kernels"]) == 1
        kern = co["kernels"][0]
        assert kern["wave32"] and kern["kernarg_size"] == 24 and kern["private_segment_fixed_size"] == 0
        # two stages of a 64x32 slice of A and of B, 16-bit elements
        assert kern["group_segment_fixed_size"] == 2 * 2 * (64 * 32 + 64 * 32)
        objdump = shutil.which("llvm-objdump-19") or shutil.which("llvm-objdump")
        if objdump is None:
            pytest.skip("no llvm-objdump to disassemble with")
        with tempfile.NamedTemporaryFile(suffix=".co") as f:
            f.write(image)
            f.flush()
            dis = subprocess.run([objdump, "-d", "--mcpu=gfx1100", f.name], capture_output=True, text=True).stdout
        # a 32x32 tile a wavefront is 2x2 WMMAs, a slice of BK=32 two k16 steps
        assert dis.count("v_wmma_f32_16x16x16_f16") >= 2 * 2 * 2
        assert "ds_load_b128" in dis  # fragments read from LDS by 16-byte loads, not element by element
