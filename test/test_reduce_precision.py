"""Float32 sums and means of any length, against float64: a long sum accumulates in levels of blocks
(codegen/accumulate.py), so its error grows with the number of levels, not with the number of elements.

Before blocked accumulation a CPU sum kept one vector accumulator: each lane stopped growing at 2**24, so the sum
of 2**29 ones came out 268435456 and the mean of 2**26 N(5, 1) values was off by 1e-5.
"""
import math

import numpy as np
import pytest

from tinygrad import Tensor
from tinygrad.codegen.accumulate import SUM_BLOCK, needs_blocks, plan_blocks

EPS32 = float(np.finfo(np.float32).eps)


def _levels(n: int) -> int:
    """Accumulation levels of an n-element sum: blocks of SUM_BLOCK, and the lanes' and threads' folds."""
    return max(1, math.ceil(math.log(n, SUM_BLOCK))) + 2


def _tolerance(n: int) -> float:
    """A few ulp per level, relative to the sum of magnitudes."""
    return 4 * _levels(n) * EPS32


def _cycle_sum(n: int, period: int) -> tuple[Tensor, float]:
    """A tensor of n values computed in the kernel from each index (no memory behind it: sizes up to 2**31 cost
    nothing but time), ((i % period) + 0.5) / period in float32, and the exact float64 sum of those float32 values."""
    vals = ((np.arange(period, dtype=np.float32) + np.float32(0.5)) * np.float32(1.0 / period)).astype(np.float64)
    full, part = divmod(n, period)
    exact = full * math.fsum(vals) + math.fsum(vals[:part])
    t = ((Tensor.arange(n) % period).cast("float32") + 0.5) * (1.0 / period)
    return t, exact


def _most_additions(trips: list[int], per_step: int, plan: list[tuple[int, ...]]) -> int:
    """The most additions any accumulator of the planned loops takes (the loops walked innermost first)."""
    worst, count = 0, per_step
    for trip, sizes in reversed(list(zip(trips, plan))):
        units = list(sizes) + ([1] if sizes and sizes[-1] != 1 else [])
        if not units:
            count *= trip
            continue
        for i in reversed(range(len(units))):
            if i < len(sizes):
                # a level of accumulators starts in this piece's body: it took `count` additions
                worst, count = max(worst, count), 1
            count *= units[i - 1] // units[i] if i else -(-trip // units[0])
    return max(worst, count)


@pytest.mark.parametrize("trips,per_step", [([1 << 27], 1), ([2**31 - 1], 1), ([1 << 20], 32), ([1000, 3], 1),
                                            ([300, 300], 1), ([7, 1 << 22, 5], 4), ([255], 1), ([256], 1),
                                            ([257], 1), ([3, 4096], 64), ([1 << 31], 512)])
def test_plan_cuts_every_level_to_a_block(trips, per_step):
    plan = plan_blocks(trips, per_step)
    assert needs_blocks(trips, per_step) == any(plan)
    # no accumulator takes more than a block (more only where one step alone holds more additions)
    assert _most_additions(trips, per_step, plan) <= max(SUM_BLOCK, per_step)
    # and the blocks cover the loop: each piece's blocks are multiples of the next
    for sizes in plan:
        assert all(a % b == 0 and a > b for a, b in zip(sizes, sizes[1:]))


@pytest.mark.parametrize("n", [1 << 24, (1 << 24) + 1, 1 << 29])
def test_sum_of_ones_is_exact(n):
    # every partial sum of ones below 2**24 is exact, and so is the sum: n itself where float32 holds it
    assert Tensor.ones(n).contiguous().sum().item() == float(np.float32(n))


def test_sum_of_ones_past_int32_minus_one():
    # 2**31 - 1 (a prime: no dim of it splits) rounds to 2**31 in float32
    n = 2**31 - 1
    t = Tensor.arange(n) * 0 + 1.0
    assert t.sum().item() == float(np.float32(n))
    # and the last, short block is all there: counting the last 300 elements gives 300 (float32 spacing at 2**31
    # is 256, so the sum above would not see them missing)
    assert (Tensor.arange(n) >= n - 300).cast("float32").sum().item() == 300.0


@pytest.mark.parametrize("n,period", [(1000, 7), (1 << 20, 1000), ((1 << 26) + 3, 997), (1 << 31, 1009)])
def test_sum_of_computed_values_against_float64(n, period):
    t, exact = _cycle_sum(n, period)
    got = t.sum().item()
    assert abs(got - exact) <= _tolerance(n) * exact, (got, exact, abs(got - exact) / exact)


@pytest.mark.parametrize("n", [1 << 16, 1 << 22, 1 << 26])
def test_mean_of_random_normals_against_float64(n):
    x = np.random.default_rng(n).standard_normal(n, dtype=np.float32) + np.float32(5)
    exact_sum = x.astype(np.float64).sum()
    scale = np.abs(x).astype(np.float64).sum()
    t = Tensor(x)
    assert abs(t.sum().item() - exact_sum) <= _tolerance(n) * scale
    assert abs(t.mean().item() - exact_sum / n) <= _tolerance(n) * scale / n


def test_sums_along_one_axis_of_many():
    rng = np.random.default_rng(1)
    x = rng.random((1 << 20, 6), dtype=np.float32)
    exact = x.astype(np.float64)
    for axis in (0, 1):
        got = Tensor(x).sum(axis).numpy().astype(np.float64)
        want = exact.sum(axis)
        np.testing.assert_array_less(np.abs(got - want), _tolerance(x.shape[axis]) * want + 1e-30)
    y = rng.random((5, 1 << 19, 3), dtype=np.float32)
    got = Tensor(y).permute(2, 0, 1).sum((1, 2)).numpy().astype(np.float64)
    want = y.astype(np.float64).sum((0, 1))
    np.testing.assert_array_less(np.abs(got - want), _tolerance(5 << 19) * want)


def test_elementwise_before_a_long_sum():
    # the blocked loops take the fused elementwise part of the kernel with them
    x = np.random.default_rng(2).random(3 * (1 << 20) + 5, dtype=np.float32)
    got = (Tensor(x) * 2 + 1).exp().sum().item()
    want = np.exp(x.astype(np.float64) * 2 + 1).sum()
    assert abs(got - want) <= (_tolerance(x.size) + 4 * EPS32) * want


def _kernel(out: Tensor, opts):
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule
    return Linearizer(create_schedule([out.lazydata])[-1].ast, opts).linearize()


def test_short_sums_keep_their_kernel():
    # a reduction whose accumulators take at most SUM_BLOCK additions is lowered as before: one accumulator level
    from tinygrad.codegen.uops import UOps
    from tinygrad.runtime.ops_clang import ClangCompiler

    def accs(n):
        lin = _kernel(Tensor.empty(n, device="CLANG").sum(), ClangCompiler.linearizer_opts)
        return sum(1 for u in lin.uops if u.uop is UOps.DEFINE_ACC)
    assert accs(200) == 1
    assert accs(1 << 20) >= 2  # 2**20 additions over the lanes: at least one level of blocks
    # a max is exact in any order: no levels
    lin = _kernel(Tensor.empty(1 << 20, device="CLANG").max(), ClangCompiler.linearizer_opts)
    assert sum(1 for u in lin.uops if u.uop is UOps.DEFINE_ACC) == 1


def test_gpu_render_loop_blocks_each_threads_share():
    # a GPU's loop-only reduction is spread over its threads by the render loop, which folds each thread's partial
    # into its accumulator every SUM_BLOCK additions (checked here on the CUDA renderer's source, no GPU needed)
    from tinygrad.codegen.kernel import LinearizerOptions
    from tinygrad.renderer.cuda import CUDARenderer

    opts = LinearizerOptions("CUDA", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16)
    for out, blocked in [(Tensor.empty(1 << 24, device="CLANG").sum(), True),
                         (Tensor.empty(64, 1 << 18, device="CLANG").sum(1), True),
                         (Tensor.empty(1 << 24, device="CLANG").max(), False)]:
        lin = _kernel(out, opts)
        src = CUDARenderer(lin.name, lin.uops).src
        assert ("tg_blk" in src) == blocked, src
