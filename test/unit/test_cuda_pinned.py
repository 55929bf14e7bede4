"""Page-locked host buffers of the CUDA runtime (_cuda.HostBuffer, copyin_pinned, copyout_pinned) without a GPU,
against the fake driver of test/native (see test_cuda_runtime.py). The fake runs a copy only when something waits
for it, so a pinned copy that returned before its stream was synchronised would leave its bytes unwritten here.
test/test_cuda_device.py runs the same roundtrip on a GPU."""
import gc

import native_doubles
import numpy as np
import pytest
from native_doubles import install_fake_cuda, uninstall_fake_cuda

from tinygrad.runtime import _cuda


@pytest.fixture
def fake():
    install_fake_cuda()
    yield native_doubles.fake_cuda()
    uninstall_fake_cuda()


@pytest.fixture
def dev(fake):
    return _cuda.Device(0)


def calls(fake, prefix: str) -> list:
    return fake.calls(prefix)


def filled(hb: _cuda.HostBuffer, seed: int = 0) -> np.ndarray:
    data = np.random.default_rng(seed).integers(0, 256, hb.nbytes, dtype=np.uint8)
    np.frombuffer(hb, dtype=np.uint8)[:] = data
    return data


def test_host_buffer_is_portable_pinned_memory_viewed_in_place(fake, dev):
    hb = _cuda.HostBuffer(dev, 100)
    assert [c[1] for c in calls(fake, "cuMemHostAlloc")] == [(100, 1)]  # CU_MEMHOSTALLOC_PORTABLE
    assert (hb.nbytes, hb.device, hb.freed) == (100, "CUDA", False) and fake.pinned_allocations() == 1
    mv = memoryview(hb)
    assert (mv.nbytes, len(mv), mv.format, mv.readonly, mv.ndim) == (100, 100, "B", False, 1)
    mv[3] = 7
    arr = np.frombuffer(hb, dtype=np.uint8)
    assert arr.flags.writeable and arr.__array_interface__["data"][0] == hb.ptr and arr[3] == 7
    arr[4] = 9
    assert mv[4] == 9, "both views are the pinned memory itself, not copies"


def test_roundtrip_through_the_device_is_one_dma_each_way(fake, dev):
    src, dst = _cuda.HostBuffer(dev, 4096), _cuda.HostBuffer(dev, 4096)
    buf = _cuda.DeviceBuffer(dev, 4096)
    data = filled(src)
    fake.clear_records()
    _cuda.copyin_pinned(buf, src, 4096)
    assert fake.pending_ops() == 0 and fake.read(buf.ptr, 4096) == data.tobytes(), "done when it returns"
    _cuda.copyout_pinned(dst, buf, 4096)
    np.testing.assert_array_equal(np.frombuffer(dst, dtype=np.uint8), data)
    names = [c[0] for c in fake.calls() if c[0].startswith(("cuMemcpy", "cuStreamSynchronize", "cuEvent"))]
    assert names == ["cuMemcpyHtoDAsync", "cuStreamSynchronize", "cuMemcpyDtoHAsync", "cuStreamSynchronize"]
    (h2d,), (d2h,) = calls(fake, "cuMemcpyHtoDAsync"), calls(fake, "cuMemcpyDtoHAsync")
    assert h2d[1] == (buf.ptr, src.ptr, 4096, h2d[1][3], 1), "straight from the caller's pinned memory"
    assert d2h[1] == (dst.ptr, buf.ptr, 4096, d2h[1][3], 1)
    stream = h2d[1][3]
    assert d2h[1][3] == stream and [c[1] for c in calls(fake, "cuStreamSynchronize")] == [(stream,), (stream,)]
    assert dev.pinned_staging_slots == 0, "the staging ring is not involved"


def test_partial_copies_touch_only_the_first_nbytes(fake, dev):
    hb = _cuda.HostBuffer(dev, 64)
    buf = _cuda.DeviceBuffer(dev, 128)
    _cuda.copyin(buf, bytes([0xEE]) * 128)
    data = filled(hb, seed=1)
    _cuda.copyin_pinned(buf, hb, 10)
    assert fake.read(buf.ptr, 128) == data[:10].tobytes() + bytes([0xEE]) * 118
    np.frombuffer(hb, dtype=np.uint8)[:] = 0
    _cuda.copyout_pinned(hb, buf, 12)
    assert bytes(memoryview(hb)) == data[:10].tobytes() + bytes([0xEE, 0xEE]) + bytes(52)


def test_pinned_copies_are_ordered_after_queued_work(fake, dev):
    buf = _cuda.DeviceBuffer(dev, 256)
    _cuda.copyin(buf, bytes(range(256)))  # staged: its DMA is still queued when copyin returns
    assert fake.pending_ops() > 0
    hb = _cuda.HostBuffer(dev, 256)
    _cuda.copyout_pinned(hb, buf, 256)
    assert bytes(memoryview(hb)) == bytes(range(256))


def test_a_host_buffer_serves_every_gpu():
    install_fake_cuda(device_count=2)
    try:
        d0, d1 = _cuda.Device(0), _cuda.Device(1)
        hb = _cuda.HostBuffer(d0, 32)
        buf = _cuda.DeviceBuffer(d1, 32)
        data = filled(hb)
        _cuda.copyin_pinned(buf, hb, 32)  # on d1's stream, with d1's context current
        np.frombuffer(hb, dtype=np.uint8)[:] = 0
        _cuda.copyout_pinned(hb, buf, 32)
        np.testing.assert_array_equal(np.frombuffer(hb, dtype=np.uint8), data)
        assert all(c[1][-1] == 1 for c in native_doubles.fake_cuda().calls("cuMemcpy"))
    finally:
        uninstall_fake_cuda()


@pytest.mark.parametrize("host, device, nbytes", [(64, 100, 65), (100, 64, 65), (64, 64, 1 << 40)])
def test_sizes_that_do_not_fit_name_both_buffers(fake, dev, host, device, nbytes):
    hb, buf = _cuda.HostBuffer(dev, host), _cuda.DeviceBuffer(dev, device)
    fake.clear_records()
    expected = f"copying {nbytes} bytes .* the pinned host buffer has {host} bytes and the device buffer {device} bytes"
    with pytest.raises(ValueError, match=expected) as e:
        _cuda.copyin_pinned(buf, hb, nbytes)
    assert "from pinned host memory to the device" in str(e.value)
    with pytest.raises(ValueError, match=expected) as e:
        _cuda.copyout_pinned(hb, buf, nbytes)
    assert "from the device to pinned host memory" in str(e.value)
    assert not calls(fake, "cuMemcpy"), "refused before anything was queued"


def test_zero_bytes(fake, dev):
    hb, buf = _cuda.HostBuffer(dev, 0), _cuda.DeviceBuffer(dev, 0)
    assert hb.ptr != 0 and memoryview(hb).nbytes == 0 and np.frombuffer(hb, dtype=np.uint8).size == 0
    _cuda.copyin_pinned(buf, hb, 0)
    _cuda.copyout_pinned(hb, buf, 0)
    assert not calls(fake, "cuMemcpy")


@pytest.mark.parametrize("status, error", [("CUDA_ERROR_OUT_OF_MEMORY", MemoryError),
                                           ("CUDA_ERROR_INVALID_VALUE", RuntimeError)])
def test_pinning_failures_name_the_driver_error(fake, dev, status, error):
    fake.fail_next("cuMemHostAlloc", status)
    with pytest.raises(error, match=f"allocating 12345 bytes of pinned host memory.*{status}") as e:
        _cuda.HostBuffer(dev, 12345)
    assert (e.value.device, e.value.call, e.value.driver_error) == ("CUDA", "cuMemHostAlloc", status)
    assert fake.pinned_allocations() == 0
    assert _cuda.HostBuffer(dev, 16).nbytes == 16  # the process keeps working


def test_copy_failures_name_the_driver_error(fake, dev):
    hb, buf = _cuda.HostBuffer(dev, 8), _cuda.DeviceBuffer(dev, 8)
    fake.fail_next("cuMemcpyHtoDAsync", "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(RuntimeError, match="CUDA_ERROR_ILLEGAL_ADDRESS") as e:
        _cuda.copyin_pinned(buf, hb, 8)
    assert e.value.call == "cuMemcpyHtoDAsync_v2"
    fake.fail_next("cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(RuntimeError, match="CUDA_ERROR_ILLEGAL_ADDRESS") as e:
        _cuda.copyout_pinned(hb, buf, 8)
    assert e.value.call == "cuStreamSynchronize"
    dev.synchronize()  # the fake still holds the copy whose wait failed; let it finish before the memory goes
    hb.free()  # nothing stays in use after the failed copies
    buf.free()


def test_free_unpins_once_and_refuses_while_viewed(fake, dev):
    hb = _cuda.HostBuffer(dev, 32)
    ptr = hb.ptr
    view = memoryview(hb)
    with pytest.raises(BufferError, match="pinned host buffer of 32 bytes: it has 1 live user"):
        hb.free()
    view.release()
    hb.free()
    hb.free()  # idempotent
    assert hb.freed and fake.pinned_allocations() == 0
    assert [c[1] for c in calls(fake, "cuMemFreeHost")] == [(ptr,)]
    for use in (lambda: hb.ptr, lambda: memoryview(hb), lambda: _cuda.copyin_pinned(_cuda.DeviceBuffer(dev, 32), hb, 1),
                lambda: _cuda.copyout_pinned(hb, _cuda.DeviceBuffer(dev, 32), 1)):
        with pytest.raises(ValueError, match="pinned host buffer of 32 bytes was freed"):
            use()


def test_freed_device_buffer_is_refused(fake, dev):
    hb, buf = _cuda.HostBuffer(dev, 8), _cuda.DeviceBuffer(dev, 8)
    buf.free()
    with pytest.raises(ValueError, match="was freed"):
        _cuda.copyin_pinned(buf, hb, 8)


def test_collected_buffer_is_unpinned(fake, dev):
    hb = _cuda.HostBuffer(dev, 32)
    arr = np.frombuffer(hb, dtype=np.uint8)
    del hb
    gc.collect()
    assert fake.pinned_allocations() == 1, "a numpy array still views the memory"
    del arr
    gc.collect()
    assert fake.pinned_allocations() == 0 and len(calls(fake, "cuMemFreeHost")) == 1
