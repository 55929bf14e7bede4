"""A checkpoint the user handed to tinygrad is never written: new tensors made for its DISK device (an optimizer's
state, constants, `*_like`, results of ops) live on the default device, and a write into it raises
DiskReadOnlyError. Each case checks the file is byte for byte what safe_save wrote, and loads."""
import numpy as np
import pytest

from tinygrad import Device, Tensor, dtypes, nn
from tinygrad.nn.state import safe_load, safe_save
from tinygrad.runtime.ops_disk import DiskReadOnlyError

W = np.arange(12, dtype=np.float32).reshape(3, 4)
B = np.ones(4, np.float32)


@pytest.fixture
def ckpt(tmp_path):
    path = tmp_path / "ck.safetensors"
    safe_save({"w": Tensor(W), "b": Tensor(B)}, path)
    before = path.read_bytes()
    yield path, safe_load(path)
    assert path.read_bytes() == before, "the checkpoint was written"
    again = safe_load(path)
    np.testing.assert_array_equal(again["w"].numpy(), W)
    np.testing.assert_array_equal(again["b"].numpy(), B)


@pytest.mark.parametrize("opt", ["SGD", "SGD_momentum", "Adam", "AdamW", "LAMB"])
def test_an_optimizer_over_loaded_tensors_keeps_its_state_off_the_file(ckpt, opt):
    _, loaded = ckpt
    params = list(loaded.values())
    make = {"SGD": lambda: nn.optim.SGD(params, lr=0.1), "SGD_momentum": lambda: nn.optim.SGD(params, 0.1, 0.9),
            "Adam": lambda: nn.optim.Adam(params, lr=0.1), "AdamW": lambda: nn.optim.AdamW(params),
            "LAMB": lambda: nn.optim.LAMB(params)}[opt]
    o = make()
    assert o.lr.device == Device.DEFAULT
    o.zero_grad()
    # a step would write the parameters: the file is read-only, and says so
    with Tensor.train():
        loss = (params[0].sum() + params[1].sum())
        loss.backward()
        with pytest.raises(DiskReadOnlyError, match="read-only"):
            o.step()


@pytest.mark.parametrize("make", [
    lambda t: Tensor.zeros_like(t), lambda t: t.ones_like(), lambda t: t.full_like(3.0), lambda t: t.rand_like(),
    lambda t: t.randn_like(), lambda t: Tensor.zeros(3, device=t.device), lambda t: Tensor.ones(2, 2, device=t.device),
    lambda t: Tensor([1.0, 2.0], device=t.device), lambda t: Tensor(np.ones(5, np.float32), device=t.device),
    lambda t: Tensor(b"\x01\x02", device=t.device), lambda t: Tensor.arange(4, device=t.device),
    lambda t: Tensor.full((2,), 7, device=t.device), lambda t: Tensor.eye(3, device=t.device),
    lambda t: Tensor.rand(3, device=t.device),
], ids=["zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "zeros", "ones", "list", "numpy", "bytes",
        "arange", "full_int", "eye", "rand"])
def test_new_tensors_for_a_disk_device_go_to_the_default_device(ckpt, make):
    _, loaded = ckpt
    out = make(loaded["w"]).realize()
    assert out.device == Device.DEFAULT
    out.numpy()


@pytest.mark.parametrize("op", [
    lambda w, b: w + 1, lambda w, b: 2 * w, lambda w, b: w + b, lambda w, b: w @ w.T, lambda w, b: w.sum(),
    lambda w, b: w.max(axis=0), lambda w, b: w.cast(dtypes.float16), lambda w, b: w.T.contiguous(),
    lambda w, b: w.relu().exp(), lambda w, b: Tensor.cat(w, w), lambda w, b: w + Tensor.ones(3, 4),
    lambda w, b: Tensor.ones(3, 4) * w, lambda w, b: (w > 3).where(w, 0.0),
], ids=["add_const", "rmul", "broadcast_add", "matmul", "sum", "max", "cast", "transpose", "unary", "cat",
        "with_default", "default_with", "where"])
def test_ops_on_disk_tensors_run_on_the_default_device(ckpt, op):
    _, loaded = ckpt
    w, b = loaded["w"], loaded["b"]
    out = op(w, b)
    assert out.device == Device.DEFAULT
    want = op(Tensor(W), Tensor(B)).numpy()
    np.testing.assert_allclose(out.numpy(), want)


@pytest.mark.parametrize("write", [
    lambda w: w.assign(Tensor.ones(3, 4)), lambda w: w.assign(w.full_like(7.0)), lambda w: w.assign(W + 1),
    lambda w: w[0].assign(Tensor.zeros(4)), lambda w: w.__setitem__(0, 5.0),
    lambda w: Tensor.ones(3, 4).to(w.device).realize(), lambda w: Tensor(W).to(w.device).realize(),
    lambda w: Tensor.empty(3, 4, device=w.device).assign(Tensor.zeros(3, 4)).realize(),
], ids=["assign", "assign_like", "assign_numpy", "assign_row", "setitem", "to_disk_const", "to_disk", "empty_assign"])
def test_writes_into_a_loaded_file_raise(ckpt, write):
    _, loaded = ckpt
    with pytest.raises(DiskReadOnlyError, match=r"read-only.*open_for_writing"):
        write(loaded["w"])
    # the tensor still reads the file
    np.testing.assert_array_equal(loaded["w"].numpy(), W)


def test_the_allocator_refuses_writes_itself(ckpt):
    # the last guard, below the Tensor API
    path, loaded = ckpt
    buf = loaded["w"].lazydata.base.realized
    with pytest.raises(DiskReadOnlyError):
        buf.copyin(memoryview(bytearray(buf.nbytes)))


def test_a_file_opened_for_writing_is_written_in_place(tmp_path):
    path = tmp_path / "ck.safetensors"
    safe_save({"w": Tensor(W)}, path)
    loaded = safe_load(path)
    dev = Device[loaded["w"].device]
    dev.open_for_writing()
    try:
        loaded["w"][1].assign(Tensor([10.0, 11.0, 12.0, 13.0]))
        loaded["w"][2].assign(Tensor.full((4,), -1.0))
        want = W.copy()
        want[1], want[2] = [10, 11, 12, 13], -1
        np.testing.assert_array_equal(safe_load(path)["w"].numpy(), want)
    finally:
        dev.writable = False
    with pytest.raises(DiskReadOnlyError):
        loaded["w"][0].assign(Tensor.zeros(4))


def test_open_for_writing_a_read_only_file_says_why(tmp_path):
    import os
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(16))
    os.chmod(path, 0o444)
    if os.access(path, os.W_OK):
        pytest.skip("running as a user who can write any file (root)")
    with pytest.raises(PermissionError, match="for writing"):
        Device[f"DISK:{path}"].open_for_writing()
