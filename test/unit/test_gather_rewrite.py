"""The one-hot contraction of Embedding and Tensor.gather runs as a gather (codegen/gather.py): the kernel has no
reduce, reads one row an output, and gives the rows numpy's indexing gives (0 for an index out of range)."""
import unittest

import numpy as np

from tinygrad import Tensor, dtypes, nn
from tinygrad.codegen.gather import GatherBuffer
from tinygrad.engine.schedule import create_schedule
from tinygrad.ops import ReduceOps


def _kernels(t: Tensor):
    return [si for si in create_schedule([t.lazydata]) if si.ast and hasattr(si.ast[0].arg, "st")]


def _has_reduce(si) -> bool:
    return any(isinstance(op.op, ReduceOps) for root in si.ast for op in root.toposort())


def _gathers(si) -> int:
    return sum(isinstance(op.arg, GatherBuffer) for root in si.ast for op in root.toposort())


class TestGatherRewrite(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(0)

    def test_embedding_is_a_gather(self):
        e = nn.Embedding(37, 9)
        w = self.rng.standard_normal((37, 9)).astype(np.float32)
        e.weight = Tensor(w).realize()
        ids = self.rng.integers(0, 37, (3, 5)).astype(np.int32)
        out = e(Tensor(ids).realize())
        ks = _kernels(out)
        self.assertEqual(len(ks), 1)
        self.assertFalse(_has_reduce(ks[0]))
        self.assertEqual(_gathers(ks[0]), 1)
        np.testing.assert_array_equal(out.numpy(), w[ids])

    def test_out_of_range_reads_zero(self):
        e = nn.Embedding(10, 4)
        w = self.rng.standard_normal((10, 4)).astype(np.float32)
        e.weight = Tensor(w).realize()
        out = e(Tensor([[-1, 0, 9, 10, 2**31 - 1, -2**31]], dtype=dtypes.int32)).numpy()[0]
        np.testing.assert_array_equal(out[[1, 2]], w[[0, 9]])
        np.testing.assert_array_equal(out[[0, 3, 4, 5]], np.zeros((4, 4), np.float32))

    def test_int64_indices_past_int32_are_out_of_range(self):
        e = nn.Embedding(10, 3)
        w = self.rng.standard_normal((10, 3)).astype(np.float32)
        e.weight = Tensor(w).realize()
        ids = np.array([2**32 + 3, 3, 7], np.int64)
        out = e(Tensor(ids, dtype=dtypes.int64)).numpy()
        np.testing.assert_array_equal(out[0], np.zeros(3, np.float32))
        np.testing.assert_array_equal(out[1:], w[[3, 7]])

    def test_nan_in_another_row_stays_there(self):
        # the sum would multiply the inf row by 0 for every output (a NaN); a lookup reads only its row
        w = self.rng.standard_normal((6, 4)).astype(np.float32)
        w[5] = np.inf
        e = nn.Embedding(6, 4)
        e.weight = Tensor(w).realize()
        np.testing.assert_array_equal(e(Tensor([0, 1, 5])).numpy(), w[[0, 1, 5]])

    def test_half_and_fused_neighbours(self):
        w = self.rng.standard_normal((50, 16)).astype(np.float16)
        e = nn.Embedding(50, 16)
        e.weight = Tensor(w).realize()
        ids = self.rng.integers(0, 50, (2, 7)).astype(np.int32)
        pos = self.rng.standard_normal((7, 16)).astype(np.float16)
        out = (e(Tensor(ids)) + Tensor(pos)) * 2
        np.testing.assert_array_equal(out.numpy(), (w[ids] + pos) * 2)

    def test_gather_and_fancy_index(self):
        x = self.rng.standard_normal((6, 11)).astype(np.float32)
        ix = self.rng.integers(0, 11, (6, 4)).astype(np.int32)
        g = Tensor(x).gather(1, Tensor(ix))
        self.assertTrue(all(not _has_reduce(k) for k in _kernels(g)))
        np.testing.assert_array_equal(g.numpy(), np.take_along_axis(x, ix, 1))
        rows = self.rng.integers(0, 6, 9).astype(np.int32)
        np.testing.assert_array_equal(Tensor(x)[Tensor(rows)].numpy(), x[rows])

    def test_gradient_still_reaches_the_weight(self):
        w = self.rng.standard_normal((8, 3)).astype(np.float32)
        e = nn.Embedding(8, 3)
        e.weight = Tensor(w, requires_grad=True)
        ids = np.array([1, 1, 4, 7], np.int32)
        e(Tensor(ids)).sum().backward()
        want = np.zeros_like(w)
        np.add.at(want, ids, 1.0)
        np.testing.assert_array_equal(e.weight.grad.numpy(), want)

    def test_not_a_one_hot_keeps_its_reduce(self):
        # the compared value varies along the summed axis: no single term, not a gather
        a = Tensor(self.rng.integers(0, 5, (4, 5)).astype(np.int32))
        w = Tensor(self.rng.standard_normal((4, 5)).astype(np.float32))
        s = ((a == Tensor.arange(5)).cast(dtypes.float32) * w).sum(1)
        ks = _kernels(s)
        self.assertTrue(any(_has_reduce(k) for k in ks))
        np.testing.assert_allclose(s.numpy(), ((a.numpy() == np.arange(5)) * w.numpy()).sum(1), rtol=1e-6)
        # a float comparison (an index in a float tensor) is left alone too
        f = Tensor([1.0, 3.0])
        s2 = ((f.unsqueeze(-1) == Tensor.arange(4).cast(dtypes.float32)).cast(dtypes.float32) * Tensor.ones(4)).sum(1)
        self.assertTrue(any(_has_reduce(k) for k in _kernels(s2)))
        np.testing.assert_array_equal(s2.numpy(), [1.0, 1.0])


if __name__ == "__main__":
    unittest.main()
