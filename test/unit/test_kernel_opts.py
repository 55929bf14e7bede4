"""Kernel optimisations (UPCAST, UNROLL, VECTORIZE): what the heuristic chooses for representative shapes, and
optimised kernels run against the same kernel without optimisations (bit for bit where nothing is reduced) and
against numpy."""
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad.mlops as F
from tinygrad import Tensor
from tinygrad.codegen.kernel import LinearizerOptions, Opt, OptOps
from tinygrad.codegen.linearizer import Linearizer
from tinygrad.codegen.opt import choose_opts
from tinygrad.codegen.uops import UOps
from tinygrad.dtype import dtypes
from tinygrad.engine.realize import run_schedule
from tinygrad.engine.schedule import create_schedule_with_vars
from tinygrad.helpers import Context
from tinygrad.ops import ReduceOps
from tinygrad.renderer.cstyle import ClangRenderer
from tinygrad.runtime.ops_clang import ClangCompiler, ClangProgram, host_renderer
from tinygrad.shape.symbolic import Variable


@pytest.fixture(autouse=True, scope="module")
def _on_clang():
    # these kernels are compiled and run as C whatever the default device is (CUDA=1 included)
    from tinygrad import Device
    prev, Device.DEFAULT = Device.DEFAULT, "CLANG"
    yield
    Device.DEFAULT = prev

# fixed device descriptions, so the choices do not depend on the host's vector width (any x86_64 runs both)
AVX512 = LinearizerOptions("CLANG", has_local=False, has_shared=False, supports_upcast=True,
                           max_vector_bytes=64, vector_registers=32)
THREADED = LinearizerOptions("CLANG", has_local=False, has_shared=False, supports_upcast=True,
                             max_vector_bytes=64, vector_registers=32, threads=2)
AVX2 = LinearizerOptions("CLANG", has_local=False, has_shared=False, supports_upcast=True,
                         max_vector_bytes=32, vector_registers=16)
PLAIN = LinearizerOptions("CLANG", has_local=False, has_shared=False)
# the host C renderer's vectors of narrow ints, loaded whole and converted to float vectors (codegen/uops.py)
NARROW = LinearizerOptions("CLANG", has_local=False, has_shared=False, supports_upcast=True,
                           max_vector_bytes=64, vector_registers=32, narrow_vectors=True)
NARROW_AVX2 = LinearizerOptions("CLANG", has_local=False, has_shared=False, supports_upcast=True,
                                max_vector_bytes=32, vector_registers=16, narrow_vectors=True)
# and their integer arithmetic on whole vectors (the host C renderer's)
INT_VECS = LinearizerOptions("CLANG", has_local=False, has_shared=False, supports_upcast=True,
                             max_vector_bytes=32, vector_registers=16, narrow_vectors=True, int_vectors=True)
V, U, R = OptOps.VECTORIZE, OptOps.UPCAST, OptOps.UNROLL
RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32) -> Tensor:
    return Tensor(RNG.uniform(-2, 2, shape).astype(dtype)).realize()


def last_kernel(t: Tensor):
    """The schedule item of `t`'s last kernel, with everything before it run, and the variable values."""
    sched, var_vals = create_schedule_with_vars([t.lazydata])
    run_schedule(sched[:-1], var_vals)
    return sched[-1], var_vals


def lin_for(si, lopts=AVX512, opts=None) -> Linearizer:
    lin = Linearizer(si.ast, lopts)
    for o in opts or ():
        lin.apply_opt(o)
    return lin.linearize()


def run(si, var_vals, lopts=AVX512, opts=None) -> tuple[np.ndarray, Linearizer]:
    """Linearize (heuristic opts unless `opts`), render, compile and run the kernel; its output and linearizer."""
    lin = lin_for(si, lopts, opts)
    # the renderer for the host compiler: half kernels need its own spelling of half (native or in software)
    src = host_renderer()(lin.name, lin.uops).src
    prg = ClangProgram(lin.name, ClangCompiler().compile(src))
    for b in si.bufs:
        b.ensure_allocated()
    out = si.bufs[0]
    out.copyin(memoryview(bytearray(out.nbytes)))
    prg(*[b._buf for b in si.bufs], vals=[var_vals[v] for v in lin.vars])
    return out.numpy(), lin


def check(t, opts=None, lopts=AVX512, exact=None, rtol=1e-5, atol=1e-5) -> Linearizer:
    """Run the last kernel of Tensor `t` (or a (schedule item, var_vals) pair) plain and optimised; compare.
    Kernels without a reduce must match bit for bit."""
    si, var_vals = last_kernel(t) if isinstance(t, Tensor) else t
    want, plain = run(si, var_vals, PLAIN)
    assert not plain.applied_opts
    got, lin = run(si, var_vals, lopts, opts)
    if exact is None:
        exact = lin.reduceop is None
    if exact:
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    return lin


def opts_of(t: Tensor, lopts=AVX512) -> list[Opt]:
    si, _ = last_kernel(t)
    return choose_opts(Linearizer(si.ast, lopts))


def kinds(lin) -> set:
    return {u.uop for u in lin.uops}


# ---- what the heuristic chooses ----

def test_matmul_tiles_outputs_and_vectorizes_the_contiguous_reduce_axis():
    # x @ w.T with both operands contiguous along K: vectors along K, a register tile of outputs
    x, w = rand(64, 784), rand(256, 784)
    for lopts, width in ((AVX512, 16), (AVX2, 8)):
        got = opts_of(x @ w.T, lopts)
        assert Opt(V, 2, width) in got
        tile = [o for o in got if o.op is U]
        assert {o.axis for o in tile} == {0, 1}
        # one vector accumulator per output of the tile, all of them in registers
        assert np.prod([o.amt for o in tile]) <= lopts.vector_registers - 4


def test_weight_gradient_vectorizes_the_contiguous_output_axis():
    g, x = rand(64, 256), rand(64, 784)
    got = opts_of(g.T @ x)
    assert Opt(V, 1, 16) in got, "the output and x are contiguous along axis 1"
    assert any(o.op is U and o.axis == 0 for o in got), "rows of the tile reuse each vector of x"


def test_elementwise_vectorizes_the_last_axis_with_few_copies():
    got = opts_of(rand(256, 784) * 2 + rand(784))
    assert got[0] == Opt(V, 1, 16)
    assert np.prod([o.amt for o in got[1:]]) <= 4


def test_small_kernels_and_plain_devices_get_no_opts():
    assert opts_of(rand(4, 6).sum(axis=1)) == []
    si, _ = last_kernel(rand(256, 784) + 1)
    for lopts in (PLAIN, LinearizerOptions("GPU")):
        lin = lin_for(si, lopts)
        assert lin.applied_opts == [] and UOps.VECTORIZE not in kinds(lin)
        assert all(u.dtype is None or u.dtype.count == 1 for u in lin.uops)
    with Context(NOOPT=1):
        assert lin_for(si, AVX512).applied_opts == []


def test_a_kernel_no_tile_fits_gets_the_untiled_plan(monkeypatch):
    # issue 30: a GPT-2 training step crashed unpacking the best of no candidates for a (2, 64, 128) SUM whose body
    # was past the limit even untiled; such a kernel gets no opts and runs plain (the limit is lowered to 0 here)
    import tinygrad.codegen.opt as opt_mod
    x = rand(2, 64, 128)
    si, var_vals = last_kernel((x * 2 + 1).sum(axis=1))
    assert choose_opts(Linearizer(si.ast, AVX512)) != []
    monkeypatch.setattr(opt_mod, "MAX_BODY", 0)
    lin = Linearizer(si.ast, AVX512)
    assert lin.full_shape == (2, 64, 128) and lin.reduceop.op is ReduceOps.SUM
    assert choose_opts(lin) == []
    got, lin = run(si, var_vals)
    assert lin.applied_opts == []
    np.testing.assert_allclose(got.reshape(2, 128), (x.numpy() * 2 + 1).sum(axis=1), rtol=1e-5, atol=1e-4)


def test_opts_keep_the_kernel_name():
    si, _ = last_kernel(rand(64, 784) @ rand(784, 32))
    assert lin_for(si, PLAIN).name == lin_for(si, AVX512).name == "r_64_32_784"


def test_symbolic_dims_are_never_upcast():
    a = rand(48, 64).reshape(Variable("n", 1, 64).bind(48), 64)
    lin = check(a.sum(axis=0) * 2)
    assert lin.applied_opts and all(isinstance(lin.full_shape[o.axis], int) for o in lin.applied_opts)


def test_apply_opt_rejects_what_does_not_fit():
    si, _ = last_kernel(rand(24, 40).sum(axis=1))
    for bad, msg in [(Opt(U, 5, 2), "no axis"), (Opt(U, 0, 5), "does not divide"), (Opt(U, 1, 2), "UNROLL"),
                     (Opt(R, 0, 2), "UPCAST"), (Opt(V, 1, 5), "power of two")]:
        with pytest.raises(ValueError, match=msg):
            Linearizer(si.ast, AVX512).apply_opt(bad)
    lin = Linearizer(si.ast, AVX512).apply_opt(Opt(V, 1, 8))
    with pytest.raises(ValueError, match="already"):
        lin.apply_opt(Opt(V, 0, 4))
    with pytest.raises(TypeError):
        lin.apply_opt((U, 0, 2))
    lin.linearize()
    with pytest.raises(RuntimeError, match="before linearize"):
        lin.apply_opt(Opt(U, 0, 2))
    sis, _ = last_kernel(rand(24, 40).reshape(Variable("n", 1, 64).bind(24), 40).sum(axis=1))
    with pytest.raises(ValueError, match="symbolic"):
        Linearizer(sis.ast, AVX512).apply_opt(Opt(U, 0, 2))


# ---- optimised kernels against plain ones and numpy ----

def test_matmul_results_match_numpy():
    xs, ws = RNG.uniform(-1, 1, (64, 784)).astype(np.float32), RNG.uniform(-1, 1, (256, 784)).astype(np.float32)
    # 784-long sums in a different order: results agree to float32 rounding of the partial sums
    lin = check(Tensor(xs) @ Tensor(ws).T, atol=1e-4)
    si, var_vals = last_kernel(Tensor(xs) @ Tensor(ws).T)
    got, _ = run(si, var_vals)
    np.testing.assert_allclose(got.reshape(64, 256), xs.astype(np.float64) @ ws.T.astype(np.float64), rtol=1e-4,
                               atol=1e-4)
    assert UOps.VECTORIZE in kinds(lin) or any(u.dtype is not None and u.dtype.count > 1 for u in lin.uops)


@pytest.mark.parametrize("opts", [None, [Opt(U, 0, 5), Opt(U, 1, 7), Opt(R, 2, 7)], [Opt(U, 1, 21)],
                                  [Opt(U, 0, 35), Opt(R, 2, 49)], [Opt(U, 0, 7), Opt(R, 2, 0)]])
def test_matmul_of_odd_sizes(opts):
    # 35 x 49 @ 49 x 21: tiles of 5 and 7 and whole dims (amt 0: all that is left)
    check(rand(35, 49) @ rand(49, 21), opts)


@pytest.mark.parametrize("opts", [None, [Opt(V, 1, 4), Opt(U, 1, 2), Opt(U, 0, 5)], [Opt(V, 2, 8), Opt(U, 0, 5)],
                                  [Opt(V, 0, 4), Opt(U, 1, 3)]])
def test_vectorized_matmul_of_odd_sizes(opts):
    # 20 x 56 @ 56 x 24: vectors along the output's columns, along the reduction, along the output's rows
    check(rand(20, 56) @ rand(56, 24), opts)


def test_prime_sizes_and_whole_dim_upcasts():
    a, b = rand(37, 53), rand(53, 29)
    check(a @ b)
    check(a @ b, [Opt(U, 1, 29), Opt(R, 2, 53)])
    check(a.sum(axis=1), [Opt(U, 0, 37)])


def test_reduce_over_size_one_and_over_everything():
    a = rand(16, 1, 64)
    check((a * 2).sum(axis=1), [Opt(V, 2, 16), Opt(U, 0, 4)])
    # 1024 values of both signs summed in another order: the float32 error is relative to the magnitudes summed
    # (about 800), not to the small total
    check(a.sum(), [Opt(V, 2, 16), Opt(R, 0, 4)], atol=1e-4)
    big = rand(4096, 64)
    si, var_vals = last_kernel(big.sum())
    got, lin = run(si, var_vals)
    assert any(o.op is V for o in lin.applied_opts)
    # 262144 float32 additions in 16 lanes: the error stays at float32 rounding of the magnitudes summed
    vals = big.numpy().astype(np.float64)
    assert abs(got[0] - vals.sum()) <= 1e-7 * np.abs(vals).sum()


def test_broadcast_inputs_and_outputs():
    col, row = rand(64, 1), rand(1, 64)
    check(col + row, [Opt(V, 1, 16), Opt(U, 0, 4)])
    # vectors along axis 0: the column is contiguous there, the row is one value for all lanes, the store scatters
    check(col * row, [Opt(V, 0, 8)])
    check((col * row).sum(axis=0), [Opt(V, 0, 8), Opt(U, 1, 4)])
    check((col * row).sum(axis=1), [Opt(V, 1, 16), Opt(U, 0, 2)])


def test_masked_padded_and_flipped_inputs():
    a = rand(32, 56)
    padded = a.pad(((0, 0), (4, 4)))
    check(padded * 3, [Opt(V, 1, 16)])     # the mask is the same for whole vectors: gated vector loads
    check(a.pad(((0, 0), (3, 5))) * 3, [Opt(V, 1, 16)])   # the mask splits vectors: lane by lane
    check(padded.sum(axis=1), [Opt(V, 1, 16), Opt(U, 0, 4)])
    check(a.pad(((1, 1), (0, 0))).sum(axis=0), [Opt(V, 1, 8), Opt(R, 0, 2)])
    check(a.flip(1) + 1, [Opt(V, 1, 8)])
    check(a.flip(1) @ rand(56, 16), [Opt(V, 1, 16), Opt(U, 0, 4)])
    check(a.T.contiguous(), [Opt(V, 0, 8), Opt(U, 1, 4)])
    check(a[::2, ::2] * 2, [Opt(V, 1, 4)])


def test_consts_iota_and_where():
    check(Tensor.arange(4096).reshape(64, 64) * 2, [Opt(V, 1, 16)])
    a = rand(64, 64)
    check((a > 0).where(a, a * 0.5), [Opt(V, 1, 16), Opt(U, 0, 2)])
    check(Tensor.ones(60, 64).pad(((2, 2), (0, 0))) + a, [Opt(V, 0, 16)])


def test_relu_max_keeps_nan_and_signed_zero_bits():
    vals = RNG.uniform(-1, 1, (64, 64)).astype(np.float32)
    vals[3, 5], vals[7, 8], vals[9, 9], vals[10, 10] = np.nan, -0.0, np.inf, -np.inf
    a = Tensor(vals).realize()
    check(a.relu(), [Opt(V, 1, 16)])
    check(a.maximum(a.flip(1)), [Opt(V, 1, 16), Opt(U, 0, 2)])
    lin = check(a.max(axis=1), [Opt(V, 1, 16), Opt(U, 0, 4)], exact=True)
    assert lin.reduceop is not None
    check(a.max(axis=0), [Opt(V, 1, 16), Opt(R, 0, 4)], exact=True)


def test_prod_and_mean():
    a = Tensor(RNG.uniform(0.9, 1.1, (32, 64)).astype(np.float32)).realize()
    check(a.prod(axis=1), [Opt(V, 1, 16), Opt(U, 0, 4)], rtol=1e-5)
    check(a.mean(axis=0), [Opt(V, 1, 16), Opt(R, 0, 4)])


def test_int_dtypes_are_exact():
    a = Tensor(RNG.integers(-50, 50, (48, 64)).astype(np.int32)).realize()
    b = Tensor(RNG.integers(-50, 50, (64, 32)).astype(np.int32)).realize()
    check(a @ b, [Opt(V, 1, 8), Opt(U, 0, 4)], exact=True)
    check(a.sum(axis=1), [Opt(V, 1, 16), Opt(U, 0, 4)], exact=True)
    check((a * 3 - 7) // 2, [Opt(V, 1, 16)])
    c = Tensor(RNG.integers(0, 255, (64, 64)).astype(np.uint8)).realize()
    check(c + c, [Opt(V, 1, 16), Opt(U, 0, 2)])
    check(c.max(axis=0), [Opt(V, 1, 16)], exact=True)


def test_half_and_double():
    h = Tensor(RNG.uniform(-1, 1, (32, 64)).astype(np.float16)).realize()
    check(h * h + 1, [Opt(V, 1, 16)])
    check(h.sum(axis=1), [Opt(V, 1, 16), Opt(U, 0, 4)], rtol=2e-3, atol=2e-3)
    d = Tensor(RNG.uniform(-1, 1, (32, 64))).cast(dtypes.float64).realize()
    lin = check(d @ d.T, [Opt(V, 1, 8), Opt(U, 0, 4)], rtol=1e-12, atol=1e-12)
    assert any(u.dtype == dtypes.float64.vec(8) for u in lin.uops)
    check(d.exp(), [Opt(V, 1, 8)])


def test_symbolic_shapes():
    a = rand(40, 64).reshape(Variable("n", 1, 64).bind(40), 64)
    check(a * 2 + 1, [Opt(V, 1, 16)])
    check(a.sum(axis=0), [Opt(V, 1, 16)])
    check(a.sum(axis=1), [Opt(V, 1, 16)])
    check(a.sum(axis=1))


def test_elementwise_after_a_reduce_and_softmax():
    a = rand(64, 128)
    check((a.sum(axis=1) * 0.1).exp(), [Opt(V, 1, 16), Opt(U, 0, 8)])
    check(a.softmax(axis=1))
    check(a.softmax(axis=0))
    check(a.log_softmax(axis=1))


def test_conv2d():
    x, w = rand(2, 8, 12, 12), rand(16, 8, 3, 3)
    lin = check(x.conv2d(w), rtol=1e-4, atol=1e-4)
    assert lin.applied_opts


def test_rendered_vectors():
    si, var_vals = last_kernel(rand(64, 784) @ rand(256, 784).T)
    lin = lin_for(si, AVX2)
    src = ClangRenderer(lin.name, lin.uops).src
    assert "typedef float float_v8 __attribute__((vector_size(32)" in src
    loads = [u for u in lin.uops if u.uop is UOps.LOAD and u.dtype.count == 8]
    assert loads, "contiguous rows are read as whole vectors"
    accs = [u for u in lin.uops if u.uop is UOps.DEFINE_ACC]
    assert accs and all(u.dtype == dtypes.float32.vec(8) for u in accs)


def test_loop_order_reads_the_big_operand_once():
    # w (256 x 784) is 4x bigger than x: the loop over x's rows goes outside so each block of w is reused
    si, _ = last_kernel(rand(64, 784) @ rand(256, 784).T)
    lin = lin_for(si)
    assert lin.loop_order == [0, 1]
    si, _ = last_kernel(rand(64, 256).T @ rand(64, 784))
    lin = lin_for(si, opts=[Opt(V, 1, 16), Opt(U, 0, 4), Opt(U, 1, 7)])
    assert lin.loop_order == [1, 0]


def test_large_kernels_split_their_outer_loop_across_threads():
    x, w = rand(64, 784), rand(256, 784)
    si, var_vals = last_kernel(x @ w.T)
    lin = lin_for(si, THREADED)
    assert lin.threads == 2
    loops = [u for u in lin.uops if u.uop is UOps.LOOP]
    assert loops[0].arg == 2 and all(u.arg is None for u in loops[1:])
    assert ClangRenderer(lin.name, lin.uops).src.count("#pragma omp parallel for num_threads(2)") == 1
    serial, _ = run(si, var_vals, AVX512)
    threaded, _ = run(si, var_vals, THREADED)
    # each thread computes whole outputs, in the same order as one thread would
    np.testing.assert_array_equal(threaded, serial)
    assert lin_for(si, AVX512).threads == 1
    small, _ = last_kernel(rand(64, 64) @ rand(64, 64))
    assert lin_for(small, THREADED).threads == 1, "too small to be worth a second thread"


def test_threads_follow_the_cost_not_the_element_count():
    # as many elements, far more work an element: exp is worth a second thread where an add is not
    for t, threads in ((rand(64, 2048).exp(), 2), (rand(64, 2048) + 1, 1)):
        si, var_vals = last_kernel(t)
        assert lin_for(si, THREADED).threads == threads
        check((si, var_vals), lopts=THREADED)


def test_a_forked_child_runs_threaded_kernels_serially():
    import os
    import time
    si, var_vals = last_kernel(rand(64, 784) @ rand(256, 784).T)
    want, _ = run(si, var_vals, THREADED)
    pid = os.fork()
    if pid == 0:
        # the OpenMP worker threads were not forked: the child must not wait for them
        got, _ = run(si, var_vals, THREADED)
        os._exit(0 if np.array_equal(got, want) else 1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung in a threaded kernel")


# ---- random kernels and random optimisations against the plain kernel ----

@st.composite
def kernels(draw):
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24]), min_size=2, max_size=3)))
    kind = draw(st.sampled_from(["ew", "sum", "max", "matmul", "pad"]))
    return shape, kind, draw(st.integers(0, 2 ** 16)), draw(st.data())


@settings(max_examples=25, deadline=None)
@given(kernels())
def test_random_opts_match_plain_kernels(case):
    shape, kind, seed, data = case
    rng = np.random.default_rng(seed)
    # an elementwise op on top, so even a reduce over size-1 dims leaves a kernel to run
    a = Tensor(rng.uniform(-2, 2, shape).astype(np.float32)).realize() * 1.5
    if kind == "ew":
        t = a * 2 + a.flip(len(shape) - 1)
    elif kind == "sum":
        t = a.sum(axis=data.draw(st.integers(0, len(shape) - 1)))
    elif kind == "max":
        t = a.max(axis=len(shape) - 1)
    elif kind == "matmul":
        t = a @ Tensor(rng.uniform(-2, 2, (shape[-1], 8)).astype(np.float32))
    else:
        t = a.pad(((1, 2),) + ((0, 0),) * (len(shape) - 1)).sum(axis=0)
    si, var_vals = last_kernel(t)
    lin = Linearizer(si.ast, AVX512)
    full, red = lin.full_shape, lin.reduce_axes
    opts = []
    for _ in range(data.draw(st.integers(1, 3))):
        axis = data.draw(st.integers(0, len(full) - 1))
        left = full[axis] // lin.upcasts[axis]
        divs = [d for d in (2, 3, 4, 8) if left % d == 0]
        if not divs:
            continue
        amt = data.draw(st.sampled_from(divs))
        if lin.vector_axis == -1 and amt in (2, 4, 8) and data.draw(st.booleans()):
            op = V
        else:
            op = R if axis in red else U
        lin.apply_opt(Opt(op, axis, amt))
        opts.append(Opt(op, axis, amt))
    check((si, var_vals), opts, exact=kind in ("ew", "max"), rtol=1e-5, atol=1e-5)


def test_thread_is_an_opt_the_heuristic_shows_and_a_search_can_set():
    x, w = rand(64, 784), rand(256, 784)
    si, var_vals = last_kernel(x @ w.T)
    lin = lin_for(si, THREADED)
    # the heuristic's OpenMP split is one of its Opts (DEBUG=2 shows it with the others)
    assert [o for o in lin.applied_opts if o.op is OptOps.THREAD] == [Opt(OptOps.THREAD, lin.thread_axis, 2)]
    # set by hand on either output dim: that dim's loop becomes the outermost, split across the threads
    for axis in (0, 1):
        manual = lin_for(si, THREADED, [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.THREAD, axis, 2)])
        assert manual.loop_order[0] == axis and manual.threads == 2
        loops = [u for u in manual.uops if u.uop is UOps.LOOP]
        assert loops[0].arg == 2
        got, _ = run(si, var_vals, THREADED, [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.THREAD, axis, 2)])
        want, _ = run(si, var_vals, PLAIN)
        # another order of the 784 additions: the plain kernel's one accumulator sums in blocks
        # (codegen/accumulate.py), the tile's accumulators do not
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-4)
    bad = [Opt(OptOps.THREAD, 2, 2),   # a reduced dim
           Opt(OptOps.THREAD, 0, 4)]   # more threads than the device's 2
    for o in bad:
        with pytest.raises(ValueError):
            Linearizer(si.ast, THREADED).apply_opt(o)
    with pytest.raises(ValueError):
        Linearizer(si.ast, AVX512).apply_opt(Opt(OptOps.THREAD, 0, 2))  # a device with one thread


# ---- narrow vectors: int8 (and other narrow int) buffers read as vectors and converted whole ----

NARROW_INTS = (np.int8, np.uint8, np.int16, np.uint16, np.int32)


def ints(shape, dtype, rng=RNG, limit: int = 1 << 20) -> Tensor:
    """Random ints of `dtype` within +-limit (2**20 by default: every one exactly a float32)."""
    info = np.iinfo(dtype)
    lo, hi = max(int(info.min), -limit), min(int(info.max), limit)
    return Tensor(rng.integers(lo, hi, shape, endpoint=True).astype(dtype)).realize()


def grouped_matvec(x: Tensor, q: Tensor, d: Tensor, m: Tensor | None = None) -> Tensor:
    """A quantized matrix-vector product as the LLM's Linear writes it: a scale (and offset) per group."""
    out, inner = q.shape
    g = d.shape[1]
    w = q.cast(dtypes.float32).reshape(out, g, inner // g) * d.reshape(out, g, 1)
    if m is not None:
        w = w - m.reshape(out, g, 1)
    return (x.reshape(x.shape[0], 1, g, inner // g) * w).sum((-2, -1))


def vector_uops(lin, uop) -> set:
    return {u.dtype for u in lin.uops if u.uop is uop and u.dtype is not None and u.dtype.count > 1}


@pytest.mark.parametrize("dtype", NARROW_INTS)
def test_narrow_int_loads_are_vectors_converted_whole(dtype):
    q, f = ints((48, 64), dtype), rand(48, 64)
    dt = dtypes.from_np(np.dtype(dtype))
    # elementwise: every lane's conversion is exact where the scalar one is, so bit for bit
    lin = check(q.cast(dtypes.float32) * f, [Opt(V, 1, 16), Opt(U, 0, 2)], lopts=NARROW)
    assert dt.vec(16) in vector_uops(lin, UOps.LOAD)
    assert dtypes.float32.vec(16) in vector_uops(lin, UOps.CAST)
    # narrow ints are extended to int32 before the conversion (what gcc 12 does well)
    assert (dtypes.int32.vec(16) in vector_uops(lin, UOps.CAST)) == (dt.itemsize < 4)
    # sums in another order: small values, so float32 rounding of the partial sums stays below atol
    small = ints((48, 64), dtype, limit=100)
    check((small.cast(dtypes.float32) * f).sum(axis=1), [Opt(V, 1, 16), Opt(U, 0, 4)], lopts=NARROW, atol=1e-3)
    check(small.cast(dtypes.float32).sum(axis=0), [Opt(V, 1, 8), Opt(R, 0, 4)], lopts=NARROW_AVX2, atol=1e-3)


def test_narrow_ints_to_double_and_in_int_arithmetic():
    q = ints((32, 64), np.int8)
    lin = check(q.cast(dtypes.float64) * 0.5, [Opt(V, 1, 8)], lopts=NARROW)
    assert dtypes.float64.vec(8) in vector_uops(lin, UOps.CAST)
    # float vectors convert whole too
    lin = check(rand(32, 64).cast(dtypes.float64) * 3, [Opt(V, 1, 8)], lopts=NARROW)
    assert dtypes.float64.vec(8) in vector_uops(lin, UOps.CAST)
    # int8 arithmetic stays lane by lane (no int vector ALU): the vector load's lanes are taken apart
    lin = check(q + q, [Opt(V, 1, 16)], lopts=NARROW)
    assert dtypes.int8.vec(16) in vector_uops(lin, UOps.LOAD) and UOps.GEP in kinds(lin)
    check((q * 3).cast(dtypes.float32).sum(axis=1), [Opt(V, 1, 16), Opt(U, 0, 2)], lopts=NARROW)
    u = ints((32, 64), np.uint8)
    check(u.cast(dtypes.int32).sum(axis=1), [Opt(V, 1, 16)], lopts=NARROW, exact=True)


@pytest.mark.parametrize("dtype", NARROW_INTS)
def test_narrow_int_arithmetic_on_whole_vectors(dtype):
    # under int_vectors, adds, muls, subs, shifts, masks, ors and xors of narrow ints are vector ops, each lane
    # wrapping as the scalar op of its dtype does: bit for bit the plain kernel's, overflow included
    q, r = ints((32, 64), dtype, limit=1 << 30), ints((32, 64), dtype, limit=1 << 30)
    dt = dtypes.from_np(np.dtype(dtype))
    shift = Tensor.full((32, 64), 3, dtype=dt).contiguous().realize()
    for t in (q + r, q * r, q - r * 3, (q >> 2) & 7, (q << 3) | r, q ^ r, F.ShiftRight.apply(q, shift)):
        lin = check(t, [Opt(V, 1, 8)], lopts=INT_VECS)
        # (the result is stored lane by lane: narrow vectors are never stored whole)
        assert any(u.uop is UOps.ALU and u.dtype == dt.vec(8) for u in lin.uops)
    # bytes widened to int32 whole, fields taken apart there, converted whole: a quantized block's nibbles
    u = ints((64, 32), np.uint8)
    w = u.cast(dtypes.int32)
    nib = (w & 15).cast(dtypes.float32) - ((w >> 4) & 15).cast(dtypes.float32)
    lin = check((nib * rand(64, 32)).sum(axis=1), [Opt(V, 1, 8)], lopts=INT_VECS, atol=1e-4)
    assert dtypes.int32.vec(8) in vector_uops(lin, UOps.CAST) and dtypes.int32.vec(8) in vector_uops(lin, UOps.ALU)
    # a bitcast between narrow vectors of one size is one vector bitcast
    lin = check(u.bitcast(dtypes.int8).cast(dtypes.float32) * 2, [Opt(V, 1, 8)], lopts=INT_VECS)
    assert dtypes.int8.vec(8) in vector_uops(lin, UOps.BITCAST)


def test_masked_narrow_loads():
    q = ints((32, 64), np.int8)
    # a mask along the rows holds for whole vectors along the columns: gated vector loads with a vector of int8
    # zeros in the others
    lin = check(q.pad(((2, 2), (0, 0))).cast(dtypes.float32) * 3, [Opt(V, 1, 16)], lopts=NARROW)
    assert any(u.uop is UOps.LOAD and u.dtype == dtypes.int8.vec(16) and len(u.vin) == 4 for u in lin.uops)
    # a mask that splits vectors: lane by lane
    check(q.pad(((0, 0), (3, 5))).cast(dtypes.float32) * 3, [Opt(V, 1, 8)], lopts=NARROW)
    check(q.flip(1).cast(dtypes.float32).sum(axis=1), [Opt(V, 1, 16), Opt(U, 0, 4)], lopts=NARROW)


def test_devices_without_narrow_vectors_get_none():
    # a device that does not opt in (the CUDA renderer) sees int8 lane by lane, as before
    si, var_vals = last_kernel(ints((48, 64), np.int8).cast(dtypes.float32) * 2)
    lin = lin_for(si, AVX512, [Opt(V, 1, 16)])
    assert not vector_uops(lin, UOps.CAST) and dtypes.int8.vec(16) not in vector_uops(lin, UOps.LOAD)


def test_quantized_matvec_vectorizes_along_the_group():
    rng = np.random.default_rng(1)
    q, d = ints((512, 256), np.int8, rng), rand(512, 8)
    x = rand(1, 256)
    got = opts_of(grouped_matvec(x, q, d), NARROW)
    # vectors along the 32 values of a group (one scale each), a tile of output rows sharing x
    assert Opt(V, 3, 16) in got and any(o.op is U and o.axis == 1 for o in got)
    si, var_vals = last_kernel(grouped_matvec(x, q, d))
    out, lin = run(si, var_vals, NARROW)
    assert dtypes.int8.vec(16) in vector_uops(lin, UOps.LOAD)
    want = x.numpy() @ (q.numpy().astype(np.float32).reshape(512, 8, 32) * d.numpy()[:, :, None]).reshape(512, 256).T
    np.testing.assert_allclose(out.reshape(1, 512), want, rtol=1e-4, atol=1e-3)
    # with offsets (Q4_K) and a few rows of x (a prefill chunk)
    check(grouped_matvec(rand(4, 256), ints((64, 256), np.int8, rng), rand(64, 16), rand(64, 16)), lopts=NARROW,
          rtol=1e-4, atol=1e-3)


def test_a_scale_indexed_by_division_is_one_load_a_vector():
    # the flat form of a quantized weight: the scale's index is k // 32, the same for all 16 lanes of a vector along
    # k, which the model counts as one scalar load (as the linearizer makes it), not 16
    rng = np.random.default_rng(3)
    q, d, x = ints((256, 256), np.int8, rng), rand(256, 8), rand(1, 256)
    w = (q.cast(dtypes.float32).reshape(256, 8, 32) * d.reshape(256, 8, 1)).reshape(256, 256)
    si, var_vals = last_kernel(x @ w.T)
    opts = choose_opts(Linearizer(si.ast, NARROW))
    assert Opt(V, 2, 16) in opts and any(o.op is U and o.axis == 1 and o.amt >= 8 for o in opts)
    lin = check((si, var_vals), lopts=NARROW, rtol=1e-4, atol=1e-3)
    # one scalar load of the scale per row of the tile (buffer 2: out, x, scales, values)
    scale_loads = [u for u in lin.uops if u.uop is UOps.LOAD and u.vin[0].arg[0] == 2]
    assert len(scale_loads) == lin.upcasts[1] and all(u.dtype == dtypes.float32 for u in scale_loads)



def test_values_a_step_reuses_fit_the_registers():
    # 256 rows of 20 groups of 32 int8 (160 KB: cached, not streamed): a tile of rows shares x, and each row's scale
    # is used by every unrolled step along its group; accumulators, scales and x vectors together stay within the
    # 32 registers (16 rows unrolled twice took 34 and gcc spilled the accumulators every step, 1.8x slower)
    rng = np.random.default_rng(5)
    t = grouped_matvec(rand(1, 640), ints((256, 640), np.int8, rng), rand(256, 20))
    got = opts_of(t, NARROW)
    rows = math.prod(o.amt for o in got if o.op is U and o.axis == 1)
    steps = math.prod(o.amt for o in got if o.op is R)  # vectors of one group (axis 3) and groups (axis 2) a step
    assert Opt(V, 3, 16) in got
    assert rows + (rows if steps > 1 else 0) + steps <= NARROW.vector_registers - 2
    check(t, lopts=NARROW, rtol=1e-4, atol=1e-3)


def test_a_streamed_matrix_is_read_a_row_at_a_time():
    # 2048 x 640 int8 (1.3 MB) that no two outputs share is streamed from memory: one row a step, its groups
    # unrolled, not a tile of rows side by side (2.4x faster for the 262,144-row output projection of an LLM)
    rng = np.random.default_rng(6)
    q, d = ints((2048, 640), np.int8, rng), rand(2048, 20)
    got = opts_of(grouped_matvec(rand(1, 640), q, d), NARROW)
    assert not any(o.op is U for o in got) and any(o.op is R for o in got)
    # sums of 640 products of int8 by numbers up to 2: thousands, summed in another order than the plain kernel's
    check(grouped_matvec(rand(1, 640), q, d), lopts=NARROW, rtol=1e-4, atol=2e-2)
    # a few rows of x share the matrix: a tile of them reuses each row of it, and is still taken
    assert any(o.op is U and o.axis == 0 for o in opts_of(grouped_matvec(rand(8, 640), q, d), NARROW))

@st.composite
def narrow_kernels(draw):
    dtype = draw(st.sampled_from(NARROW_INTS))
    rows, cols = draw(st.sampled_from([1, 3, 4, 8])), draw(st.sampled_from([8, 16, 32, 48, 64]))
    kind = draw(st.sampled_from(["ew", "sum", "matvec", "pad"]))
    return dtype, rows, cols, kind, draw(st.integers(0, 2 ** 16)), draw(st.data())


@settings(max_examples=25, deadline=None)
@given(narrow_kernels())
def test_random_narrow_kernels_match_plain_kernels(case):
    dtype, rows, cols, kind, seed, data = case
    rng = np.random.default_rng(seed)
    q = ints((rows, cols), dtype, rng, limit=100)
    f = Tensor(rng.uniform(-2, 2, (rows, cols)).astype(np.float32)).realize()
    if kind == "ew":
        t = q.cast(dtypes.float32) * f + 1
    elif kind == "sum":
        t = (q.cast(dtypes.float32) * f).sum(axis=data.draw(st.integers(0, 1)))
    elif kind == "matvec":
        t = grouped_matvec(Tensor(rng.uniform(-1, 1, (2, cols)).astype(np.float32)), q,
                           Tensor(rng.uniform(0, 1, (rows, cols // 8)).astype(np.float32)))
    else:
        t = q.pad(((0, 0), (8, 8))).cast(dtypes.float32) * 2
    si, var_vals = last_kernel(t)
    lin = Linearizer(si.ast, NARROW)
    full = lin.full_shape
    vec_axes = [a for a in range(len(full)) if full[a] % 2 == 0]
    opts = []
    if vec_axes:
        axis = data.draw(st.sampled_from(vec_axes))
        width = data.draw(st.sampled_from([w for w in (2, 4, 8, 16) if full[axis] % w == 0]))
        opts.append(Opt(V, axis, width))
        lin.apply_opt(opts[-1])
    axis = data.draw(st.integers(0, len(full) - 1))
    left = full[axis] // lin.upcasts[axis]
    if left % 2 == 0:
        opts.append(Opt(R if axis in lin.reduce_axes else U, axis, 2))
    check((si, var_vals), opts, lopts=NARROW, exact=kind in ("ew", "pad"), rtol=1e-4, atol=1e-3)


def test_narrow_vector_kernels_agree_with_every_c_compiler(tmp_path):
    # the kernels compile with whichever compiler the machine has: each one found here builds the same kernel, and
    # they agree with the plain kernel
    import shutil

    from tinygrad.runtime.host_cc import run_cc
    compilers = {os.path.realpath(p) for p in map(shutil.which, ("gcc", "clang", "clang-14", "cc")) if p}
    rng = np.random.default_rng(2)
    si, var_vals = last_kernel(grouped_matvec(rand(2, 128), ints((64, 128), np.int8, rng), rand(64, 4)))
    want, _ = run(si, var_vals, PLAIN)
    lin = lin_for(si, NARROW, [Opt(V, 3, 16), Opt(U, 1, 4), Opt(R, 3, 2)])
    src = ClangRenderer(lin.name, lin.uops).src
    assert "__builtin_convertvector" in src and "tg_reg_signed_char_v16" in src
    for i, cc in enumerate(sorted(compilers)):
        out = tmp_path / f"k{i}.so"
        proc = run_cc(cc, [], src, str(out))
        assert proc.returncode == 0, f"{cc}: {proc.stderr.decode()}"
        prg = ClangProgram(lin.name, out.read_bytes())
        res = si.bufs[0]
        res.copyin(memoryview(bytearray(res.nbytes)))
        prg(*[b._buf for b in si.bufs])
        np.testing.assert_allclose(res.numpy(), want, rtol=1e-5, atol=1e-2, err_msg=cc)


def test_padto_lets_tiles_divide_odd_sizes():
    P = OptOps.PADTO
    # an output dim of 17 padded to 24, upcast by 8; a reduced dim of 50 padded to 64, unrolled by 16; both together
    a, b, c = rand(17, 50), rand(50, 17), rand(17, 33)
    lin = check(a @ b, [Opt(P, 1, 8), Opt(U, 1, 8)])
    assert lin.full_shape[1] == 24
    check(a @ b, [Opt(P, 2, 16), Opt(R, 2, 16)])
    check(a @ b, [Opt(P, 0, 4), Opt(P, 2, 32), Opt(U, 0, 4), Opt(R, 2, 8)])
    check((c.exp() + 1) * 2, [Opt(P, 1, 8), Opt(U, 1, 8)], exact=True)
    check(a.relu().sum(axis=1), [Opt(P, 1, 64)])  # where(x > 0, x, 0): 0 where every leaf is 0
    check((a + 1).sum(axis=1), [Opt(P, 1, 64)])  # constants read 0 past the end too: 0 + 0
    si, _ = last_kernel(a.exp().sum(axis=1))
    with pytest.raises(ValueError, match="padded terms"):
        Linearizer(si.ast, AVX512).apply_opt(Opt(P, 1, 64))  # exp(0) = 1 past the end: the sum would change
    with pytest.raises(ValueError, match="multiple of 5 already"):
        Linearizer(si.ast, AVX512).apply_opt(Opt(P, 1, 5))


def _exp2_inputs() -> np.ndarray:
    special = [0, -0.0, 1, -1, 0.5, 127, 127.99, 128, 128.5, 1e4, -126, -126.5, -140, -149, -149.5, -150, -151, -1e4,
               np.inf, -np.inf, np.nan, 1e-8, 3.4e38, -3.4e38]
    rng = np.random.default_rng(7)
    x = np.concatenate([np.array(special, np.float32), rng.uniform(-160, 140, 4096).astype(np.float32),
                        rng.uniform(-1, 1, 4096).astype(np.float32)])
    return x[:len(x) // 16 * 16]


@np.errstate(over="ignore", invalid="ignore")
def _assert_exp2(got: np.ndarray, x: np.ndarray, who: str = ""):
    want = np.exp2(x.astype(np.float64))
    want32 = want.astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want32)), who
    ok = ~np.isnan(want32)
    # within 1.2 units in the last place of the float32 result (subnormals by their fixed spacing): the polynomial's
    # own bound, its steps rounded one by one (libm's exp2f is within 1)
    ulps = np.abs(got[ok].astype(np.float64) - want[ok]) / np.spacing(np.maximum(np.abs(want32[ok]), 2 ** -126))
    assert np.all((ulps <= 1.2) | (got[ok] == want32[ok])), f"{who}: {np.nanmax(ulps)} ulp"


def test_exp2_on_float_vectors_is_computed_whole_to_one_ulp(tmp_path):
    # a libm call per lane made softmax's exp the kernel's whole cost; the vector exp2 (renderer/cstyle.py) is within
    # 1.2 ulp of the exact value everywhere, inf, NaN, overflow and subnormal results included, with every compiler
    import shutil

    from tinygrad.runtime.host_cc import run_cc
    x = _exp2_inputs()
    _assert_exp2(Tensor(x).exp2().numpy(), x)
    si, var_vals = last_kernel(Tensor(x).exp2())
    vmath = LinearizerOptions("CLANG", has_local=False, has_shared=False, supports_upcast=True, max_vector_bytes=64,
                              vector_registers=32, vector_math=True)
    lin = lin_for(si, vmath, [Opt(V, 0, 16)])
    src = ClangRenderer(lin.name, lin.uops).src
    assert "tg_exp2_float_v16(" in src.split("void ")[-1] and "__builtin_exp2f" not in src
    compilers = {os.path.realpath(p) for p in map(shutil.which, ("gcc", "clang", "clang-14", "clang-19", "cc")) if p}
    for i, cc in enumerate(sorted(compilers)):
        out = tmp_path / f"k{i}.so"
        proc = run_cc(cc, [], src, str(out))
        assert proc.returncode == 0, f"{cc}: {proc.stderr.decode()}"
        res = si.bufs[0]
        res.copyin(memoryview(bytearray(res.nbytes)))
        ClangProgram(lin.name, out.read_bytes())(*[b._buf for b in si.bufs])
        _assert_exp2(res.numpy(), x, cc)
    # softmax's exp is one vector op a step
    si, _ = last_kernel(rand(64, 256).softmax(-1))
    lin = lin_for(si, vmath)
    assert "tg_exp2_float_v" in ClangRenderer(lin.name, lin.uops).src
    lin = lin_for(si, AVX512)  # a device without vector math: a call a lane
    assert "__builtin_exp2f" in ClangRenderer(lin.name, lin.uops).src
