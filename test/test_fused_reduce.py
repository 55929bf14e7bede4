"""Row-wise reduction chains (softmax, log_softmax, layernorm, rmsnorm, logsumexp, cross-entropy) as one kernel each.

The oracle is PyTorch on the CPU, forward and backward, over odd row lengths, leading dims, keepdim, fp32 and fp16;
the kernel count of each forward's schedule is 1 (the scheduler fuses reduce -> elementwise -> reduce over the same
rows into one kernel, engine/fuse_rows.py), and the fused kernels also render valid CUDA that runs on the host
emulation of test/unit/test_gpu_codegen.py."""
import numpy as np
import pytest
import torch

from tinygrad import Tensor, dtypes
from tinygrad.nn import RMSNorm
from tinygrad.ops import BufferOps

ROWS = (1, 3, 17, 1000, 4097)


def _kernels(t: Tensor) -> int:
    return sum(1 for si in t.schedule() if si.ast[0].op is BufferOps.STORE)


def _rmsnorm_torch(x, keepdim=False):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6)


def _rmsnorm_tiny(x, keepdim=False):
    return RMSNorm(x.shape[-1])._norm(x)


# name -> (torch function, tinygrad function); each takes (x, keepdim)
OPS = {
    "softmax": (lambda x, k: torch.softmax(x, -1), lambda x, k: x.softmax(-1)),
    "log_softmax": (lambda x, k: torch.log_softmax(x, -1), lambda x, k: x.log_softmax(-1)),
    "layernorm": (lambda x, k: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5),
                  lambda x, k: x.layernorm(-1, eps=1e-5)),
    "rmsnorm": (_rmsnorm_torch, _rmsnorm_tiny),
    "logsumexp": (lambda x, k: torch.logsumexp(x, -1, keepdim=k), lambda x, k: x.logsumexp(-1, keepdim=k)),
}


def _check(name, shape, dtype=np.float32, keepdim=False, atol=1e-5, rtol=1e-4, seed=0):
    torch_fn, tiny_fn = OPS[name]
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(shape) * 3).astype(dtype)
    tx = torch.tensor(a.astype(np.float32), requires_grad=True)
    want = torch_fn(tx, keepdim)
    x = Tensor(a, requires_grad=True)
    out = tiny_fn(x, keepdim)
    assert tuple(out.shape) == tuple(want.shape)
    assert _kernels(out) == 1, f"{name} {shape}: {_kernels(out)} kernels"
    np.testing.assert_allclose(out.numpy().astype(np.float32), want.detach().numpy(), atol=atol, rtol=rtol)
    up = rng.uniform(-1, 1, size=tuple(want.shape)).astype(np.float32)
    (want * torch.tensor(up)).sum().backward()
    (out * Tensor(up.astype(dtype))).sum().backward()
    np.testing.assert_allclose(x.grad.numpy().astype(np.float32), tx.grad.numpy(), atol=atol * 10, rtol=rtol * 10)


@pytest.mark.parametrize("n", ROWS)
@pytest.mark.parametrize("name", sorted(OPS))
def test_row_lengths_fp32(name, n):
    _check(name, (5, n))


@pytest.mark.parametrize("name", sorted(OPS))
def test_leading_dims_fp32(name):
    _check(name, (2, 3, 17))
    _check(name, (17,))


@pytest.mark.parametrize("name", sorted(OPS))
def test_fp16(name):
    # fp16 inputs compute in fp16 (softmax's float dtype is the input's): half-precision tolerances
    _check(name, (4, 1000), dtype=np.float16, atol=2e-2, rtol=2e-2)
    _check(name, (3, 17), dtype=np.float16, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp_keepdim(keepdim):
    _check("logsumexp", (6, 17), keepdim=keepdim)
    _check("logsumexp", (2, 3, 1000), keepdim=keepdim)


@pytest.mark.parametrize("n", (3, 17, 1000))
def test_cross_entropy(n):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((7, n)).astype(np.float32)
    y = rng.integers(0, n, size=(7,))
    tx = torch.tensor(a, requires_grad=True)
    want = torch.nn.functional.cross_entropy(tx, torch.tensor(y), reduction="none")
    x = Tensor(a, requires_grad=True)
    out = x.cross_entropy(Tensor(y.astype(np.int32)), reduction="none")
    assert _kernels(out) == 1
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), atol=1e-5, rtol=1e-4)
    want.sum().backward()
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-5, rtol=1e-4)
    # the mean over the batch reduces other rows: the sum of the losses and the count of the labels kept are two more
    # kernels (independent reductions of the same rows are not a chain)
    assert _kernels(Tensor(a).cross_entropy(Tensor(y.astype(np.int32)))) == 3


def test_a_reduce_that_is_an_output_keeps_its_buffer():
    a = np.random.default_rng(2).standard_normal((4, 9)).astype(np.float32)
    x = Tensor(a)
    m = x.max(-1, keepdim=True)
    e = (x - m).exp()
    e2 = e / e.sum(-1, keepdim=True)
    Tensor.realize(m, e2)
    np.testing.assert_allclose(m.numpy(), a.max(-1, keepdims=True))
    np.testing.assert_allclose(e2.numpy(), torch.softmax(torch.tensor(a), -1).numpy(), atol=1e-6, rtol=1e-5)


def test_chain_over_a_middle_axis():
    a = np.random.default_rng(3).standard_normal((3, 17, 5)).astype(np.float32)
    out = Tensor(a).softmax(1)
    assert _kernels(out) == 1
    np.testing.assert_allclose(out.numpy(), torch.softmax(torch.tensor(a), 1).numpy(), atol=1e-6, rtol=1e-5)


def test_fused_chains_render_cuda_that_runs_on_the_host():
    from test.unit.test_gpu_codegen import Kernel, _run, _t
    rng = np.random.default_rng(4)
    a = rng.standard_normal((37, 53)).astype(np.float32)
    cases = [
        (_t(a).softmax(-1), torch.softmax(torch.tensor(a), -1).numpy()),
        (_t(a).log_softmax(-1), torch.log_softmax(torch.tensor(a), -1).numpy()),
        (_t(a).layernorm(-1), torch.nn.functional.layer_norm(torch.tensor(a), (53,)).numpy()),
        (_t(a).logsumexp(-1), torch.logsumexp(torch.tensor(a), -1).numpy()),
    ]
    # rows that a power of two divides: the block's threads split each row (GROUP), combining through shared memory
    b = rng.standard_normal((5, 1024)).astype(np.float32)
    cases += [
        (_t(b).softmax(-1), torch.softmax(torch.tensor(b), -1).numpy()),
        (_t(b).layernorm(-1), torch.nn.functional.layer_norm(torch.tensor(b), (1024,)).numpy()),
        (_t(b).logsumexp(-1), torch.logsumexp(torch.tensor(b), -1).numpy()),
        (_t(b).argmax(-1), torch.argmax(torch.tensor(b), -1).numpy()),
    ]
    kernels = [Kernel(t) for t, _ in cases]
    assert [k.lin.group for k in kernels] == [1] * 4 + [64] * 4
    for (_, want), got, k in zip(cases, _run(kernels), kernels):
        np.testing.assert_allclose(got.reshape(want.shape), want, atol=1e-5, rtol=1e-4, err_msg=k.src)


def test_half_dtype_is_kept():
    out = Tensor(np.ones((2, 5), np.float16)).softmax()
    assert out.dtype == dtypes.float16
    np.testing.assert_allclose(out.numpy(), np.full((2, 5), 0.2, np.float16))


def test_row_kernels_under_opts_match_the_plain_kernel():
    from test.unit.test_kernel_opts import AVX2, THREADED, check
    from tinygrad.codegen.kernel import Opt, OptOps
    a = np.random.default_rng(5).standard_normal((6, 64)).astype(np.float32)

    def h(x):  # C kernels, run on the host whatever the default device is (CUDA=1 included)
        return Tensor(x, device="CLANG")
    for fn in (lambda t: t.softmax(-1), lambda t: t.layernorm(-1), lambda t: t.logsumexp(-1),
               lambda t: RMSNorm(64)._norm(t)):
        check(fn(h(a)), rtol=1e-4, atol=1e-5)
        check(fn(h(a)), lopts=AVX2, rtol=1e-4, atol=1e-5)
        check(fn(h(a)), opts=[Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.VECTORIZE, 1, 8), Opt(OptOps.UNROLL, 1, 2)],
              rtol=1e-4, atol=1e-5)
        check(fn(h(a)), opts=[Opt(OptOps.THREAD, 0, 2), Opt(OptOps.UNROLL, 1, 4)], lopts=THREADED,
              rtol=1e-4, atol=1e-5)
    # a padded max would read the padding: refused; a chain of sums pads
    with pytest.raises(ValueError, match="not a sum"):
        check(h(a[:, :63]).softmax(-1), opts=[Opt(OptOps.PADTO, 1, 8)])
    check(RMSNorm(63)._norm(h(a[:, :63])), opts=[Opt(OptOps.PADTO, 1, 8), Opt(OptOps.VECTORIZE, 1, 8)],
          rtol=1e-4, atol=1e-5)


def test_grouped_row_kernels_on_the_host_emulation():
    from test.unit.test_gpu_codegen import Kernel, _run, _t
    from tinygrad.codegen.kernel import Opt, OptOps
    b = np.random.default_rng(6).standard_normal((7, 96)).astype(np.float32)
    want = torch.softmax(torch.tensor(b), -1).numpy()
    configs = [[Opt(OptOps.GROUPTOP, 1, 8)], [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 1, 32)],
               [Opt(OptOps.NOLOCALS, 0, 0)], []]
    kernels = [Kernel(_t(b).softmax(-1), opts=o) for o in configs]
    for got, k in zip(_run(kernels), kernels):
        np.testing.assert_allclose(got.reshape(want.shape), want, atol=1e-6, rtol=1e-5, err_msg=k.src)


@pytest.mark.parametrize("shape", [(3, 1000), (2, 1001), (2, 4097), (1, 50257), (2, 3, 1001), (5, 4096), (7, 128)])
def test_rows_of_any_length_take_a_block_of_threads_on_the_host_emulation(shape):
    # a row takes 32 to 256 threads, neighbours in a warp, their partials folded in a tree in shared memory; rows the
    # group does not divide are padded (the padded terms of max and of sum(exp(x - max)) read as the reduction's
    # identity); float32 rows of 4096 read 16-byte vectors
    from test.unit.test_gpu_codegen import Kernel, _run, _t
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(shape) * 3).astype(np.float32)
    h = a.astype(np.float16)
    ta, th = torch.tensor(a), torch.tensor(h.astype(np.float32))
    n = shape[-1]
    cases = [
        (_t(a).softmax(-1), torch.softmax(ta, -1), 1e-5),
        (_t(a).log_softmax(-1), torch.log_softmax(ta, -1), 1e-5),
        (_t(a).layernorm(-1), torch.nn.functional.layer_norm(ta, (n,)), 1e-4),
        (_t(a).logsumexp(-1), torch.logsumexp(ta, -1), 1e-5),
        (RMSNorm(n)._norm(_t(a)), _rmsnorm_torch(ta), 1e-4),
        (_t(a).argmax(-1), torch.argmax(ta, -1), 0),
        (_t(h).softmax(-1), torch.softmax(th, -1), 2e-3),
        (_t(h).layernorm(-1), torch.nn.functional.layer_norm(th, (n,)), 2e-2),
    ]
    kernels = [Kernel(t) for t, _, _ in cases]
    assert all(k.lin.group in (32, 64, 128, 256) and k.lin.local_size[0] == k.lin.group for k in kernels), \
        [k.lin.local_size for k in kernels]
    assert ("tg_vload<float, 4>" in kernels[0].src) == (n == 4096)
    for (_, want, tol), got, k in zip(cases, _run(kernels), kernels):
        want = want.numpy()
        np.testing.assert_allclose(got.reshape(want.shape).astype(np.float32), want, atol=tol, rtol=tol,
                                   err_msg=k.src)


@pytest.mark.parametrize("n", [1000, 4097, 128])
def test_backward_row_kernels_on_the_host_emulation(n):
    # a gradient's last kernel (its row chain) as CUDA source, run on the host after the earlier kernels ran on CLANG:
    # a padded row's terms are guarded even where they look like zeros, since 0 - 0/0 (a masked mean's count) is NaN
    from test.unit.test_gpu_codegen import Kernel, _run
    from tinygrad.engine.realize import run_schedule
    from tinygrad.engine.schedule import create_schedule_with_vars
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((3, n)) * 3).astype(np.float32)
    up = rng.uniform(-1, 1, (3, n)).astype(np.float32)
    fns = {"layernorm": (lambda t: t.layernorm(-1), lambda t: torch.nn.functional.layer_norm(t, (n,))),
           "softmax": (lambda t: t.softmax(-1), lambda t: torch.softmax(t, -1)),
           "rmsnorm": (lambda t: RMSNorm(n)._norm(t), _rmsnorm_torch)}
    for name, (tiny_fn, torch_fn) in fns.items():
        x = Tensor(a, device="CLANG", requires_grad=True)
        (tiny_fn(x) * Tensor(up, device="CLANG")).sum().backward()
        items, var_vals = create_schedule_with_vars([x.grad.lazydata])
        run_schedule(items[:-1], var_vals)
        k = Kernel(x.grad)
        got = _run([k])[0]
        tx = torch.tensor(a, requires_grad=True)
        (torch_fn(tx) * torch.tensor(up)).sum().backward()
        np.testing.assert_allclose(got.reshape(a.shape), tx.grad.numpy(), atol=1e-5, rtol=1e-4, err_msg=name)
