"""DLPack both ways: tinygrad tensors read by torch and numpy without a copy, and theirs by tinygrad.

Shared memory is checked by writing through one side and reading the other; lifetime by dropping the producer and
reading the consumer after a collection; leaks by the count of exports waiting for a deleter and the producer's
refcount. The CUDA tests need a GPU (CUDA=1 on a GPU machine) and torch built with CUDA; they skip otherwise.
"""
import gc
import sys
import unittest

import numpy as np

from tinygrad import Tensor, TinyJit, dtypes
from tinygrad.device import Device
from tinygrad.dlpack import live_exports

try:
    import torch
except ImportError:  # pragma: no cover - torch is in the test environment
    torch = None

TORCH_DTYPES = {} if torch is None else {
    dtypes.bool: torch.bool, dtypes.int8: torch.int8, dtypes.int16: torch.int16, dtypes.int32: torch.int32,
    dtypes.int64: torch.int64, dtypes.uint8: torch.uint8, dtypes.uint16: torch.uint16, dtypes.uint32: torch.uint32,
    dtypes.uint64: torch.uint64, dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16,
    dtypes.float32: torch.float32, dtypes.float64: torch.float64}


def _has_cuda() -> bool:
    if torch is None or not torch.cuda.is_available():
        return False
    try:
        from tinygrad.device import Device
        Device["CUDA"]
    except Exception:
        return False
    return True


class _OnTheHost(unittest.TestCase):
    """numpy and a CPU torch read host memory only: these tests make their tensors on the host (CLANG) whatever the
    default device is (CUDA=1 on a GPU machine runs this file too)."""
    def setUp(self):
        self._default, Device.DEFAULT = Device.DEFAULT, "CLANG"

    def tearDown(self):
        Device.DEFAULT = self._default


class TestExport(_OnTheHost):
    def tearDown(self):
        super().tearDown()
        gc.collect()
        self.assertEqual(live_exports(), 0, "an exported tensor was never released")

    def test_numpy_shares_memory(self):
        t = (Tensor([1.0, 2.0, 3.0]) * 2).realize()
        a = np.from_dlpack(t)
        np.testing.assert_equal(a, [2, 4, 6])
        a[0] = 100
        self.assertEqual(t.tolist(), [100, 4, 6])
        # tinygrad's in-place write is seen by numpy
        t.assign(Tensor([7.0, 8.0, 9.0])).realize()
        if t.lazydata.base.realized is not None and np.from_dlpack(t).ctypes.data == a.ctypes.data:
            np.testing.assert_equal(a, [7, 8, 9])

    def test_torch_shares_memory(self):
        t = Tensor.arange(6).reshape(2, 3).cast(dtypes.float32).realize()
        x = torch.from_dlpack(t)
        self.assertEqual(tuple(x.shape), (2, 3))
        x[1, 2] = -1
        self.assertEqual(t.numpy()[1, 2], -1)
        self.assertEqual(x.data_ptr(), torch.from_dlpack(t).data_ptr())

    def test_lazy_is_realized(self):
        t = Tensor([1, 2, 3]) + 1
        np.testing.assert_equal(np.from_dlpack(t), [2, 3, 4])
        np.testing.assert_equal(np.from_dlpack(Tensor.ones(2, 2)), np.ones((2, 2)))

    def test_strided_views_are_exported_zero_copy(self):
        base = Tensor(np.arange(12, dtype=np.int32).reshape(3, 4)).to("CLANG").realize()
        a = np.from_dlpack(base.T)
        np.testing.assert_equal(a, np.arange(12).reshape(3, 4).T)
        s = np.from_dlpack(base[1:, 2:])
        np.testing.assert_equal(s, np.arange(12).reshape(3, 4)[1:, 2:])
        s[0, 0] = 99
        self.assertEqual(base.numpy()[1, 2], 99)

    def test_padded_view_is_refused(self):
        t = Tensor([0, 1, 2, 3]).realize().pad(((1, 1),))
        with self.assertRaisesRegex(BufferError, "contiguous"):
            np.from_dlpack(t)
        np.testing.assert_equal(np.from_dlpack(t.contiguous()), [0, 0, 1, 2, 3, 0])

    def test_consumer_outlives_producer(self):
        t = Tensor([5.0, 6.0, 7.0]).realize()
        x = torch.from_dlpack(t)
        del t
        gc.collect()
        # the memory would be reused by the allocator's cache if the export had not kept it
        junk = [(Tensor.rand(3) + 1).realize() for _ in range(8)]
        self.assertEqual(x.tolist(), [5.0, 6.0, 7.0])
        del junk

    def test_unconsumed_capsule_is_released(self):
        t = Tensor([1, 2]).realize()
        cap = t.__dlpack__()
        self.assertEqual(live_exports(), 1)
        del cap
        self.assertEqual(live_exports(), 0)
        cap = t.__dlpack__(max_version=(1, 0))
        self.assertIn("dltensor_versioned", repr(cap))
        del cap

    def test_many_exports_leak_nothing(self):
        t = Tensor.arange(1000).contiguous().realize()
        buf = t.lazydata.base.realized
        before = sys.getrefcount(buf)
        for _ in range(50):
            np.from_dlpack(t).sum()
            torch.from_dlpack(t).sum()
        gc.collect()
        self.assertEqual(live_exports(), 0)
        self.assertEqual(sys.getrefcount(buf), before)

    def test_copy_and_device(self):
        t = Tensor([1, 2, 3]).realize()
        a = np.from_dlpack(t, copy=True)
        a[0] = 50
        self.assertEqual(t.tolist(), [1, 2, 3])
        self.assertEqual(t.__dlpack_device__(), (1, 0))
        with self.assertRaises(BufferError):
            t.__dlpack__(stream=1)
        with self.assertRaises(BufferError):
            t.__dlpack__(dl_device=(2, 0))

    def test_cpu_device(self):
        # the CPU device's buffers are numpy arrays: their data pointer is exported
        t = Tensor([1.0, 2.0], device="CPU").realize()
        a = np.from_dlpack(t)
        a[1] = -3
        self.assertEqual(t.tolist(), [1.0, -3.0])

    def test_every_dtype_to_torch(self):
        for dt, tdt in TORCH_DTYPES.items():
            with self.subTest(dtype=dt):
                vals = [True, False, True] if dt == dtypes.bool else [1, 0, 3]
                t = Tensor(vals, dtype=dt).realize()
                x = torch.from_dlpack(t)
                self.assertEqual(x.dtype, tdt)
                self.assertEqual(x.tolist(), [bool(v) for v in vals] if dt == dtypes.bool else vals)
                x[1] = True if dt == dtypes.bool else 2
                self.assertEqual(t.tolist()[1], True if dt == dtypes.bool else 2)

    def test_every_numpy_dtype(self):
        for dt in TORCH_DTYPES:
            if dt.np is None:
                continue
            with self.subTest(dtype=dt):
                a = np.from_dlpack(Tensor([1, 0, 1], dtype=dt))
                self.assertEqual(a.dtype, dt.np)
                np.testing.assert_equal(a, np.array([1, 0, 1], dtype=dt.np))


class TestImport(_OnTheHost):
    def test_from_numpy_shares_memory(self):
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        t = Tensor.from_dlpack(a)
        self.assertEqual(t.shape, (2, 3))
        a[0, 0] = 42
        self.assertEqual(t.numpy()[0, 0], 42)
        self.assertEqual((t + 1).numpy()[0, 0], 43)
        # tinygrad's write lands in numpy's memory
        t.assign(Tensor.full((2, 3), 3.0)).realize()
        if t.lazydata.base.realized._buf.ctypes.data == a.ctypes.data:
            np.testing.assert_equal(a, np.full((2, 3), 3.0))

    def test_from_torch_shares_memory(self):
        x = torch.arange(8, dtype=torch.int32)
        t = Tensor.from_dlpack(x)
        x[3] = -7
        self.assertEqual(t.tolist()[3], -7)
        self.assertEqual((t * 2).tolist()[3], -14)

    def test_producer_kept_alive(self):
        x = torch.arange(1000, dtype=torch.float32)
        t = Tensor.from_dlpack(x)
        del x
        gc.collect()
        junk = [torch.full((1000,), -1.0) for _ in range(8)]  # would land in a freed block
        self.assertEqual(t.sum().item(), sum(range(1000)))
        del junk

    def test_release_calls_producer_deleter(self):
        # numpy's export holds a reference to the array until the deleter runs
        a = np.arange(4, dtype=np.float32)
        before = sys.getrefcount(a)
        t = Tensor.from_dlpack(a)
        self.assertGreater(sys.getrefcount(a), before)
        self.assertEqual((t + 1).tolist(), [1, 2, 3, 4])
        del t
        gc.collect()
        self.assertEqual(sys.getrefcount(a), before)

    def test_many_imports_leak_nothing(self):
        a = np.arange(100, dtype=np.int32)
        before = sys.getrefcount(a)
        for _ in range(50):
            Tensor.from_dlpack(a).sum().item()
        gc.collect()
        self.assertEqual(sys.getrefcount(a), before)

    def test_every_dtype_from_torch(self):
        for dt, tdt in TORCH_DTYPES.items():
            with self.subTest(dtype=dt):
                x = torch.tensor([1, 0, 1], dtype=tdt) if dt != dtypes.bool else torch.tensor([True, False, True])
                t = Tensor.from_dlpack(x)
                self.assertEqual(t.dtype, dt)
                self.assertEqual(t.tolist(), x.tolist())

    def test_permuted_layouts_are_shared(self):
        x = torch.arange(6, dtype=torch.float32).reshape(2, 3).T
        t = Tensor.from_dlpack(x)
        self.assertEqual(t.tolist(), x.tolist())
        x[2, 1] = -1
        self.assertEqual(t.numpy()[2, 1], -1)
        # channels-last: NHWC memory seen as NCHW
        y = torch.arange(24, dtype=torch.int32).reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last)
        self.assertEqual(Tensor.from_dlpack(y).tolist(), y.tolist())
        a = np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))
        self.assertEqual((Tensor.from_dlpack(a) + 0).tolist(), a.tolist())

    def test_gaps_are_refused(self):
        x = torch.arange(12).reshape(3, 4)[:, ::2]
        with self.assertRaisesRegex(BufferError, "contiguous"):
            Tensor.from_dlpack(x)
        self.assertEqual(Tensor.from_dlpack(x.contiguous()).tolist(), x.tolist())
        # a negative stride (numpy may refuse to export it itself)
        with self.assertRaises(BufferError):
            Tensor.from_dlpack(np.arange(4)[::-1])

    def test_readonly_numpy_is_copied(self):
        a = np.arange(3, dtype=np.int64)
        a.flags.writeable = False
        t = Tensor.from_dlpack(a)
        self.assertEqual(t.tolist(), [0, 1, 2])

    def test_jit_input(self):
        @TinyJit
        def f(x):
            return (x * 2).sum()
        arrays = [np.full(16, i, dtype=np.float32) for i in range(4)]
        self.assertEqual([f(Tensor.from_dlpack(a)).item() for a in arrays], [0.0, 32.0, 64.0, 96.0])

    def test_round_trip(self):
        t = Tensor([[1.5, 2.5]]).realize()
        back = Tensor.from_dlpack(torch.from_dlpack(t))
        back.assign(back * 2).realize()
        self.assertEqual(Tensor.from_dlpack(np.from_dlpack(t)).tolist(), t.tolist())
        gc.collect()

    def test_empty_and_scalar(self):
        self.assertEqual(Tensor.from_dlpack(np.zeros((0, 3), np.float32)).shape, (0, 3))
        self.assertEqual(Tensor.from_dlpack(np.full((), 2.5)).item(), 2.5)
        self.assertEqual(np.from_dlpack(Tensor(3.0)).item(), 3.0)


@unittest.skipUnless(_has_cuda(), "needs a CUDA GPU, tinygrad's CUDA runtime and torch with CUDA")
class TestCUDA(unittest.TestCase):
    def test_torch_reads_tinygrad(self):
        t = (Tensor.arange(1 << 16, device="CUDA").cast(dtypes.float32) * 2).realize()
        x = torch.from_dlpack(t)
        self.assertEqual(x.device.type, "cuda")
        self.assertEqual(t.__dlpack_device__(), (2, 0))
        self.assertEqual(float(x[-1]), 2.0 * ((1 << 16) - 1))
        x.mul_(0.5)
        torch.cuda.synchronize()
        self.assertEqual(t.numpy()[-1], (1 << 16) - 1)

    def test_tinygrad_reads_torch(self):
        x = torch.arange(1 << 16, device="cuda", dtype=torch.float32)
        x.add_(1)  # queued on torch's stream: the handshake orders it before tinygrad's read
        t = Tensor.from_dlpack(x)
        self.assertEqual(t.device, "CUDA")
        self.assertEqual((t * 2).numpy()[-1], 2.0 * (1 << 16))
        x[0] = -5
        torch.cuda.synchronize()
        self.assertEqual(t.numpy()[0], -5)
        del x
        gc.collect()
        self.assertEqual(t.numpy()[1], 2)

    def test_misaligned_slice_is_refused(self):
        x = torch.arange(9, device="cuda", dtype=torch.float32)
        with self.assertRaisesRegex(BufferError, "aligned"):
            Tensor.from_dlpack(x[1:])
        self.assertEqual(Tensor.from_dlpack(x[1:].clone()).tolist(), list(range(1, 9)))

    def test_every_dtype(self):
        for dt, tdt in TORCH_DTYPES.items():
            with self.subTest(dtype=dt):
                t = Tensor([1, 0, 1], dtype=dt, device="CUDA").realize()
                self.assertEqual(torch.from_dlpack(t).cpu().tolist(), torch.tensor([1, 0, 1]).to(tdt).tolist())
                back = Tensor.from_dlpack(torch.tensor([1, 0, 1], dtype=tdt, device="cuda"))
                self.assertEqual(back.dtype, dt)
                self.assertEqual(back.tolist(), [1, 0, 1] if dt != dtypes.bool else [True, False, True])

    def test_streams(self):
        t = Tensor.ones(1024, device="CUDA").realize()
        s = torch.cuda.Stream()
        x = torch.from_dlpack(t.__dlpack__(stream=s.cuda_stream))
        with torch.cuda.stream(s):
            self.assertEqual(float(x.sum()), 1024.0)
        # -1: no synchronisation asked for; legacy and per-thread default streams
        for stream in (-1, 1, 2):
            self.assertEqual(torch.from_dlpack(t.__dlpack__(stream=stream)).shape, (1024,))
        with self.assertRaises(BufferError):
            t.__dlpack__(stream=0)


if __name__ == "__main__":
    unittest.main()
