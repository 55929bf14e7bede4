"""The scheduler: how many kernels known graphs become (the fusion rules of tinygrad/engine/schedule.pyx)."""
import numpy as np
import pytest

from tinygrad import Tensor
from tinygrad.engine.schedule import create_schedule
from tinygrad.ops import BufferOps, LoadOps, ReduceOps


def kernels(*tensors):
    sched = create_schedule([t.lazydata for t in tensors])
    return [si for si in sched if si.ast[0].op is BufferOps.STORE]


def realized(*shape):
    return Tensor(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)).realize()


def test_elementwise_chain_is_one_kernel():
    a, b, c = realized(4, 4), realized(4, 4), realized(4, 4)
    assert len(kernels(((a + b) * c).exp() - 1)) == 1


def test_broadcast_and_movement_fuse():
    a, b = realized(4, 1), realized(1, 4)
    assert len(kernels((a + b).permute(1, 0).reshape(16) * 2)) == 1


def test_reduce_with_elementwise_input_is_one_kernel():
    a, b = realized(8, 8), realized(8, 8)
    assert len(kernels((a * b).sum(axis=1))) == 1


def test_elementwise_after_reduce_fuses():
    a = realized(8, 8)
    assert len(kernels(a.sum() / 64 + 1)) == 1
    assert len(kernels(a.mean(axis=0))) == 1


def test_two_reduces_are_two_kernels():
    a = realized(8, 8)
    assert len(kernels(a.sum(axis=0) + a.max(axis=0))) == 2


def test_expanded_reduce_is_realized():
    a = realized(8, 8)
    # softmax: max, then exp-sum, then the division: the max and the sum are each read through an expand
    assert len(kernels(a.softmax())) == 3


def test_matmul_is_one_kernel():
    a, b = realized(4, 8), realized(8, 3)
    ks = kernels(a @ b)
    assert len(ks) == 1
    assert any(op.op is ReduceOps.SUM for op in ks[0].ast[0].toposort())


def test_constants_are_inlined():
    # realize() keeps a constant an operand: the kernel reading it inlines it, with no buffer of its own
    ks = kernels(Tensor(2.0).realize() + Tensor(3.0).realize().exp())
    assert len(ks) == 1 and len(ks[0].bufs) == 1


def test_constants_fold_without_a_kernel():
    x, i = Tensor([1.0, 2.0]).realize(), Tensor([1, 2]).realize()
    for t in (x * 1, x / 1, x - 0, i * 0, i + 0, Tensor(True).where(x, x * 2)):
        assert kernels(t) == []
    # not exact for floats: NaN * 0 is NaN and -0.0 + 0 is +0.0
    assert len(kernels(x * 0)) == 1 and len(kernels(x + 0)) == 1
    # constants alone fold to one constant (tinygrad 0.9's const folding); realize() of it stores it with one kernel
    # (the seed walkthrough's 2 + 3), and realized constants stay operands of the kernel that reads them
    assert kernels(Tensor(2.0) + Tensor(3.0)) == []
    assert len(kernels(Tensor(2.0).realize() + Tensor(3.0).realize())) == 1
    five = (Tensor(2.0) + Tensor(3.0)).realize()
    assert five.lazydata.base.realized is not None and five.item() == 5.0 and (i * 0).tolist() == [0, 0]


def test_copy_from_cpu_is_scheduled_before_its_consumer():
    t = Tensor([1.0, 2.0]) + 1
    sched = create_schedule([t.lazydata])
    assert [si.ast[0].op for si in sched] == [LoadOps.COPY, BufferOps.STORE]


def test_source_of_a_copy_is_realized():
    t = realized(4) * 2
    sched = create_schedule([t.to("CPU").lazydata])
    assert [si.ast[0].op for si in sched] == [BufferOps.STORE, LoadOps.COPY]


def test_padded_view_of_unsafe_op_is_realized():
    a = realized(4)
    # exp(0) = 1, so the padding must not be computed by the fused exp
    out = a.exp().pad(((2, 2),)) * 3
    assert len(kernels(out)) == 2
    np.testing.assert_allclose(out.numpy(), np.pad(np.exp(np.arange(4, dtype=np.float32)), 2) * 3, rtol=1e-6)


def test_padded_view_of_safe_op_fuses():
    a = realized(4)
    out = (a * 2 + 1).pad(((1, 1),)) * 3
    assert len(kernels(out)) == 1
    np.testing.assert_allclose(out.numpy(), np.pad(np.arange(4) * 2 + 1.0, 1) * 3)


def test_deep_graph_schedules_iteratively():
    # a 100,000-op graph: no recursion anywhere from Tensor to the AST
    x = realized(4)
    y = x
    for _ in range(100_000):
        y = y + 1
    ks = kernels(y)
    assert len(ks) == 1
    assert len(ks[0].ast[0].toposort()) > 100_000


@pytest.mark.parametrize("shape", [(0,), (3, 0)])
def test_zero_size_tensors(shape):
    t = Tensor.ones(*shape) + 1
    assert t.numpy().shape == shape
    assert Tensor.ones(*shape).sum().item() == 0


def test_iota_is_inlined_and_linear():
    # arange is an index computed in the kernel: no buffer, no reduce
    ks = kernels(Tensor.arange(1000) * 2)
    assert len(ks) == 1 and len(ks[0].bufs) == 1
    assert not any(op.op in ReduceOps for op in ks[0].ast[0].toposort())
    np.testing.assert_array_equal(Tensor.arange(3, 15, 4).reshape(3, 1).expand(3, 2).numpy(),
                                  np.arange(3, 15, 4).reshape(3, 1).repeat(2, 1))


def test_wide_graphs_are_split_into_kernels_the_runtime_can_launch():
    # host kernels take at most 64 arguments: a sum of 100 distinct buffers must not become one kernel
    arrs = [np.full(4, i, np.float32) for i in range(100)]
    ts = [Tensor(a).realize() for a in arrs]
    total = ts[0]
    for t in ts[1:]:
        total = total + t
    sched = create_schedule([total.lazydata])
    assert all(len(si.bufs) <= 49 for si in sched) and len(sched) > 1
    np.testing.assert_array_equal(total.numpy(), np.sum(arrs, axis=0))


def test_costly_results_read_by_a_matmul_are_stored_once():
    # exp fused into the matmul would be recomputed for every output column: it gets a kernel of its own
    a = Tensor(np.random.default_rng(0).standard_normal((8, 16), dtype=np.float32)).realize()
    b = Tensor(np.random.default_rng(1).standard_normal((16, 4), dtype=np.float32)).realize()
    sched = create_schedule([(a.exp() @ b).lazydata])
    assert len(sched) == 2
    cheap = create_schedule([((a * 2) @ b).lazydata])
    assert len(cheap) == 1
    np.testing.assert_allclose((a.exp() @ b).numpy(), np.exp(a.numpy()) @ b.numpy(), rtol=1e-5)


def test_reduce_feeding_a_stored_costly_result_is_one_kernel_with_it():
    # RMSNorm's factor 1/sqrt(mean(x^2) + eps), read by every element of a later reduction: the factor is stored
    # (a square root per element read would be computed again each time), and the mean fuses into the kernel that
    # stores it, where it was a kernel of its own before the root's
    rng = np.random.default_rng(0)
    x, h = (Tensor(rng.standard_normal((1, 64), dtype=np.float32)).realize() for _ in range(2))
    f = (x.square().mean(axis=-1, keepdim=True) + 1e-6).rsqrt()
    y = (h * f).sum(axis=-1)
    sched = kernels(y)
    assert len(sched) == 2 and all(any(op.op is ReduceOps.SUM for op in si.ast[0].toposort()) for si in sched)
    ref = (h.numpy() / np.sqrt((x.numpy() ** 2).mean(-1, keepdims=True) + 1e-6)).sum(-1)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5)
