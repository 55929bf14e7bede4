"""A reduce read only through a cast to a narrower float stores the cast value (engine/schedule.pyx,
_store_narrowed_reduces): a half matmul's result is half in memory, as PyTorch keeps it, and its readers see the same
values they saw when the float32 sum was stored and cast as it was read."""
import unittest

import numpy as np

from tinygrad import Tensor, dtypes
from tinygrad.engine.schedule import create_schedule


def _out_dtypes(t: Tensor):
    return [si.bufs[0].dtype for si in create_schedule([t.lazydata]) if si.ast and hasattr(si.ast[0].arg, "st")]


class TestNarrowStore(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(0)
        self.a = rng.standard_normal((48, 40)).astype(np.float16)
        self.b = rng.standard_normal((40, 56)).astype(np.float16)
        self.c = rng.standard_normal((56, 24)).astype(np.float16)

    def _ref(self):
        # the first product's float32 sum rounded to half once, then the second product's float32 sum rounded
        ab = (self.a.astype(np.float32) @ self.b.astype(np.float32)).astype(np.float16)
        return ab, (ab.astype(np.float32) @ self.c.astype(np.float32)).astype(np.float16)

    def test_half_matmul_chain_stores_half(self):
        out = (Tensor(self.a) @ Tensor(self.b)) @ Tensor(self.c)
        self.assertEqual(_out_dtypes(out), [dtypes.half, dtypes.half])
        _, want = self._ref()
        # half ulps of the first product, summed in another order: within a few ulps of the largest values
        np.testing.assert_allclose(out.numpy().astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=0.25)

    def test_through_a_permute(self):
        ab = Tensor(self.a) @ Tensor(self.b)
        out = ab.reshape(48, 7, 8).permute(1, 0, 2).reshape(7, 384).sum(1)
        self.assertEqual(_out_dtypes(out)[0], dtypes.half)
        ref = self._ref()[0].astype(np.float32).reshape(48, 7, 8).transpose(1, 0, 2).reshape(7, 384).sum(1)
        np.testing.assert_allclose(out.numpy().astype(np.float32), ref, rtol=1e-2, atol=0.25)

    def test_float_reader_keeps_float(self):
        # the sum is also read as float32 (not through the cast): it stays float32, the cast is not stored
        s = (Tensor(self.a).cast(dtypes.float32) * 3).sum(1)
        out = s.cast(dtypes.half).reshape(48, 1).expand(48, 5).contiguous() + s.reshape(48, 1)
        self.assertIn(dtypes.float32, _out_dtypes(out))
        want = self.a.astype(np.float32).sum(1) * 3
        np.testing.assert_allclose(out.numpy()[:, 0], want.astype(np.float16).astype(np.float32) + want, rtol=1e-3)

    def test_requested_float_output_is_not_narrowed(self):
        s = (Tensor(self.a).cast(dtypes.float32)).sum(1)
        h = s.cast(dtypes.half)
        Tensor.realize(s, h)
        self.assertEqual(s.dtype, dtypes.float32)
        np.testing.assert_allclose(s.numpy(), self.a.astype(np.float32).sum(1), rtol=1e-5)

    def test_no_extra_kernel_when_the_reduce_fuses_forward(self):
        ab = Tensor(self.a) @ Tensor(self.b)
        out = (ab @ Tensor(self.c)) + ab.sum()
        self.assertEqual(len(_out_dtypes(out)), 3)


if __name__ == "__main__":
    unittest.main()
