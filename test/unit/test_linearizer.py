"""The linearizer: the uops a kernel lowers to, and the kernels they render to, run and checked against numpy."""
import numpy as np

from tinygrad import Tensor
from tinygrad.codegen.linearizer import Linearizer
from tinygrad.codegen.uops import UOps
from tinygrad.engine.schedule import create_schedule
from tinygrad.ops import BinaryOps
from tinygrad.runtime.ops_clang import ClangCompiler


def linearize(t: Tensor) -> Linearizer:
    sched = create_schedule([t.lazydata])
    return Linearizer(sched[-1].ast, ClangCompiler.linearizer_opts).linearize()


def kinds(lin):
    return [u.uop for u in lin.uops]


def test_scalar_add_has_no_loops():
    lin = linearize(Tensor(2.0).realize() + Tensor(3.0).realize().exp())  # realized constants are not folded
    k = kinds(lin)
    assert UOps.LOOP not in k and k[-1] is UOps.STORE
    assert k.count(UOps.DEFINE_GLOBAL) == 1


def test_elementwise_loops_once_per_dim_and_closes_them():
    a = Tensor(np.ones((3, 5), np.float32)).realize()
    lin = linearize(a * 2)
    k = kinds(lin)
    assert k.count(UOps.LOOP) == 2 and k.count(UOps.ENDLOOP) == 2
    assert k.index(UOps.STORE) < len(k) - 2, "the store happens inside the loops"


def test_reduce_uses_an_accumulator_and_phi():
    a = Tensor(np.ones((4, 6), np.float32)).realize()
    lin = linearize(a.sum(axis=1))
    k = kinds(lin)
    assert UOps.DEFINE_ACC in k and UOps.PHI in k
    phi = next(u for u in lin.uops if u.uop is UOps.PHI)
    assert phi.vin[1].arg is BinaryOps.ADD
    # output loop, then the accumulator, then the reduce loop inside it
    loops = [i for i, u in enumerate(k) if u is UOps.LOOP]
    assert len(loops) == 2 and loops[0] < k.index(UOps.DEFINE_ACC) < loops[1] < k.index(UOps.PHI)


def test_cse_reuses_identical_uops():
    a = Tensor(np.ones(8, np.float32)).realize()
    lin = linearize(a * a + a * a)
    assert sum(1 for u in lin.uops if u.uop is UOps.LOAD) == 1
    assert sum(1 for u in lin.uops if u.uop is UOps.ALU and u.arg is BinaryOps.MUL) == 1


def test_masked_load_is_gated():
    a = Tensor(np.arange(4, dtype=np.float32)).realize()
    lin = linearize(a.pad(((1, 1),)) + 1)
    loads = [u for u in lin.uops if u.uop is UOps.LOAD]
    assert len(loads) == 1 and len(loads[0].vin) == 4, "a padded load carries its validity and the fill value"


def test_kernels_render_run_and_match_numpy():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7,)).astype(np.float32)
    tx, ty = Tensor(x), Tensor(y)
    np.testing.assert_allclose(((tx * ty).sum(axis=1) / 7).numpy(), (x * y).sum(axis=1) / 7, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tx.max(axis=0).numpy(), x.max(axis=0))
    np.testing.assert_allclose(tx.permute(1, 0)[::2, 1:4].numpy(), x.T[::2, 1:4])
    np.testing.assert_allclose(tx.flip(0).pad(((1, 2), (0, 1))).numpy(), np.pad(x[::-1], ((1, 2), (0, 1))))


def test_the_reduce_input_is_not_reloaded_after_the_reduce():
    a = Tensor(np.ones((4, 6), np.float32)).realize()
    lin = linearize(a.sum(axis=1) * 2)
    k = kinds(lin)
    last_endloop = len(k) - 1 - k[::-1].index(UOps.ENDLOOP)
    reduce_end = max(i for i, u in enumerate(lin.uops) if u.uop is UOps.ENDLOOP and i != last_endloop)
    assert UOps.LOAD not in k[reduce_end:], "the summed buffer is only read inside the reduce loop"


def test_upcast_tiles_hold_one_accumulator_per_output():
    from tinygrad.codegen.kernel import Opt, OptOps
    a = Tensor(np.ones((8, 6), np.float32)).realize()
    sched = create_schedule([a.sum(axis=1).lazydata])
    lin = Linearizer(sched[-1].ast, ClangCompiler.linearizer_opts).apply_opt(Opt(OptOps.UPCAST, 0, 4)).linearize()
    assert lin.applied_opts == [Opt(OptOps.UPCAST, 0, 4)]
    assert kinds(lin).count(UOps.DEFINE_ACC) == 4 and kinds(lin).count(UOps.STORE) == 4
    outer = next(u for u in lin.uops if u.uop is UOps.LOOP)
    assert outer.vin[1].arg == 2, "8 rows in steps of 4"
