"""The Device registry, Buffers and allocators, and every backend checked against the CPU backend."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tinygrad import Device, Tensor, dtypes
from tinygrad.device import Buffer, MallocAllocator


def test_canonicalize_and_registry():
    assert Device.canonicalize("clang") == "CLANG" and Device.canonicalize("cpu:0") == "CPU"
    assert Device.canonicalize("cuda:1") == "CUDA:1"
    assert Device["clang"] is Device["CLANG"]
    with pytest.raises(RuntimeError, match="unknown device NOPE"):
        Device["NOPE"]


def test_default_is_selected_by_environment():
    code = "from tinygrad import Device, Tensor; print(Device.DEFAULT, (Tensor([1.0]) + 1).device)"
    for env, want in (({}, "CLANG CLANG"), ({"CPU": "1"}, "CPU CPU"), ({"CLANG": "1"}, "CLANG CLANG")):
        clean = {k: v for k, v in os.environ.items() if k not in ("CPU", "CLANG", "CUDA")}
        out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == want


def test_default_is_settable():
    old = Device.DEFAULT
    try:
        Device.DEFAULT = "cpu"
        assert Device.DEFAULT == "CPU" and Tensor([1, 2]).device == "CPU"
    finally:
        Device.DEFAULT = old


@pytest.mark.parametrize("device", ["CLANG", "CPU"])
def test_buffer_roundtrip(device):
    data = np.arange(10, dtype=np.int32)
    buf = Buffer(device, 10, dtypes.int32).copyin(memoryview(data))
    assert bytes(buf.as_buffer()) == data.tobytes()
    out = np.empty_like(data)
    buf.copyout(memoryview(out))
    np.testing.assert_array_equal(out, data)
    with pytest.raises(ValueError, match="bytes"):
        buf.copyin(memoryview(np.zeros(3, np.int32)))


def test_malloc_allocator_is_zero_copy():
    raw = MallocAllocator.alloc(16)
    view = MallocAllocator.as_buffer(raw)
    view[0] = 7
    out = bytearray(16)
    MallocAllocator.copyout(memoryview(out), raw)
    assert out[0] == 7
    with pytest.raises(ValueError):
        MallocAllocator.alloc(-1)


def _workload():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    out = ((ta @ tb).relu().exp() + ta.sum(axis=1, keepdim=True)).log_softmax()
    out.sum().backward()
    return out.numpy(), ta.grad.numpy(), tb.grad.numpy()


def test_clang_matches_the_cpu_backend():
    old = Device.DEFAULT
    try:
        results = {}
        for dev in ("CPU", "CLANG"):
            Device.DEFAULT = dev
            results[dev] = _workload()
    finally:
        Device.DEFAULT = old
    for got, want in zip(results["CLANG"], results["CPU"]):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_cross_device_copy():
    t = Tensor([1.5, 2.5], device="CPU")
    u = (t.to("CLANG") * 2).to("CPU")
    assert u.device == "CPU" and u.numpy().tolist() == [3.0, 5.0]
