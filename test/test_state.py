"""tinygrad.nn.state: state dicts, the DISK device, and the safetensors, torch and GGUF loaders.

Oracles: PyTorch (torch.save writes the checkpoints, its tensors are the expected values), a safetensors file written
byte by byte here from the format spec, GGUF files from tinygrad.nn.state_gguf_write (and, where installed, from the
reference `gguf` package), and numpy dequantizers written from the GGUF spec.
"""
import collections
import io
import json
import mmap
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest
import torch

from tinygrad import Device, Tensor, dtypes
from tinygrad.errors import ArgumentError
from tinygrad.nn import Linear
from tinygrad.nn.state import (
    CheckpointError,
    get_parameters,
    get_state_dict,
    gguf_load,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
    torch_load,
)
from tinygrad.nn.state_gguf_write import write_gguf
from tinygrad.runtime.ops_disk import DiskComputeError, DiskReadOnlyError


def host(t: Tensor) -> np.ndarray:
    """A tensor's values in numpy (bfloat16 as float32), wherever it lives."""
    if t.dtype == dtypes.bfloat16:
        t = t.to(Device.DEFAULT).cast(dtypes.float32)
    return t.numpy()


def torch_host(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


# ---------------------------------------------------------------------------------------------------------------
# state dicts
class Block:
    def __init__(self):
        self.lin = Linear(3, 4)
        self.norms = [Tensor.ones(4), (Tensor.zeros(2), None)]
        self.extra = {"scale": Tensor([2.0]), 5: Tensor([1.0])}
        self.name = "not a tensor"


def test_get_state_dict_names_and_order():
    b = Block()
    sd = get_state_dict(b)
    assert list(sd) == ["lin.weight", "lin.bias", "norms.0", "norms.1.0", "extra.scale", "extra.5"]
    assert sd["lin.weight"] is b.lin.weight and sd["norms.1.0"] is b.norms[1][0]
    assert list(get_state_dict(b, prefix="model."))[0] == "model.lin.weight"
    assert list(get_state_dict([b.lin, {"x": b.lin.bias}])) == ["0.weight", "0.bias", "1.x"]


def test_get_state_dict_namedtuple_tied_and_cycles():
    Pair = collections.namedtuple("Pair", "left right")
    shared = Tensor.ones(2)
    m = Block()
    m.pair = Pair(shared, Tensor.zeros(1))
    m.tied = shared
    m.parent = m  # a cycle must not be followed forever
    m.lib = np  # nor a module
    sd = get_state_dict(m)
    assert sd["pair.left"] is shared and sd["tied"] is shared and "pair.right" in sd
    assert not any(k.startswith("parent.") for k in sd)
    params = get_parameters(m)
    assert len(params) == len({id(p) for p in params}) == len(sd) - 1
    assert params[0] is m.lin.weight


def test_get_state_dict_tensor_type():
    class MyTensor(Tensor):
        pass
    m = Block()
    m.special = MyTensor([1.0])
    assert list(get_state_dict(m, tensor_type=MyTensor)) == ["special"]


def test_load_state_dict_copies_moves_and_casts(tmp_path):
    src = {"lin.weight": np.arange(12, dtype=np.float32).reshape(4, 3), "lin.bias": np.ones(4, np.float32) / 3}
    fn = tmp_path / "m.safetensors"
    safe_save({k: Tensor(v) for k, v in src.items()}, fn)
    m = Block()
    m.lin.bias = Tensor.zeros(4, dtype=dtypes.float16).contiguous().realize()
    old_buf = m.lin.bias.lazydata.base.realized
    assert old_buf is not None
    sd = safe_load(fn)
    load_state_dict(m, sd, strict=False, verbose=False)
    assert m.lin.weight.device == Device.DEFAULT and m.lin.bias.dtype == dtypes.float16
    np.testing.assert_array_equal(m.lin.weight.numpy(), src["lin.weight"])
    np.testing.assert_array_equal(m.lin.bias.numpy(), src["lin.bias"].astype(np.float16))
    # a realized tensor is written in place (its buffer stays: what a captured TinyJit kernel reads)
    assert m.lin.bias.lazydata.base.realized is old_buf
    np.testing.assert_array_equal(m.norms[0].numpy(), np.ones(4))  # not in the state dict: untouched


def test_load_state_dict_strict_and_shapes():
    m = Block()
    good = {k: Tensor.zeros(*v.shape) for k, v in get_state_dict(m).items()}
    bad = dict(good)
    del bad["lin.bias"]
    bad["surprise"] = Tensor([1.0])
    with pytest.raises(KeyError, match=r"missing keys \['lin.bias'\], unexpected keys \['surprise'\]"):
        load_state_dict(m, bad, verbose=False)
    wrong = dict(good, **{"lin.weight": Tensor.zeros(3, 4)})
    with pytest.raises(ValueError, match=r"'lin.weight'.*\(4, 3\).*\(3, 4\)"):
        load_state_dict(m, wrong, verbose=False)
    with pytest.raises(TypeError, match="dict"):
        load_state_dict(m, [1, 2], verbose=False)


def test_load_state_dict_consume_and_verbose(capsys):
    m = Linear(2, 2)
    sd = {"weight": Tensor([[1.0, 2.0], [3.0, 4.0]]), "bias": Tensor([5.0, 6.0])}
    load_state_dict(m, sd, consume=True)
    assert sd == {} and "loaded 2 tensors" in capsys.readouterr().out
    np.testing.assert_array_equal(m.bias.numpy(), [5.0, 6.0])


# ---------------------------------------------------------------------------------------------------------------
# the DISK device
def test_disk_device_maps_copies_and_computes_elsewhere(tmp_path):
    fn = tmp_path / "raw.bin"
    data = np.arange(16, dtype=np.float32)
    fn.write_bytes(data.tobytes())
    dev = f"DISK:{fn}"
    assert Device[dev] is Device[dev] and Device.canonicalize(dev) == dev
    t = Tensor.empty(16, dtype=dtypes.float32, device=dev)
    np.testing.assert_array_equal(t.numpy(), data)
    np.testing.assert_array_equal((t.to(Device.DEFAULT) * 2).numpy(), data * 2)
    # views read through a copy: a contiguous range copies just its bytes, other views the whole tensor
    np.testing.assert_array_equal(t.reshape(4, 4).T.numpy(), data.reshape(4, 4).T)
    np.testing.assert_array_equal(t[3:7].numpy(), data[3:7])
    np.testing.assert_array_equal(t[2:4].bitcast(dtypes.int32).numpy(), data[2:4].view(np.int32))
    assert t[2:4].bitcast(dtypes.int32).device == dev  # a bitcast of a file's range is still a view of the file
    # ops on DISK tensors run on the default device, and their results live there
    for out, want in ((t + 1, data + 1), (1 + t, data + 1), (t * t, data * data), (t.cast(dtypes.int32), data),
                      (t.sum(), data.sum()), (t.reshape(4, 4).T.contiguous(), data.reshape(4, 4).T)):
        assert out.device == Device.DEFAULT
        np.testing.assert_array_equal(out.numpy(), want)
    # the engine's own guard: a kernel scheduled on DISK (only reachable below the Tensor API)
    for _ in range(2):
        # a second try raises again: the failed kernel's output was never allocated as if it had been computed
        with pytest.raises(DiskComputeError, match=r"DISK tensors can't be computed on; move them with \.to\(device\)"):
            Tensor(t.lazydata.cast(dtypes.int32), device=dev).realize()
    # a file is written only once it is opened for writing: copying onto it writes its existing first bytes
    with pytest.raises(DiskReadOnlyError, match="read-only"):
        Tensor(np.array([7.0, 8.0], np.float32)).to(dev).realize()
    assert fn.read_bytes() == data.tobytes()
    Device[dev].open_for_writing()
    try:
        Tensor(np.array([7.0, 8.0], np.float32)).to(dev).realize()
        np.testing.assert_array_equal(np.frombuffer(fn.read_bytes(), np.float32)[:3], [7.0, 8.0, 2.0])
        with pytest.raises(ValueError, match="file has 64 bytes"):
            Tensor(np.zeros(32, np.float32)).to(dev).realize()
        # assign writes over the tensor's own range, again and again
        t[4:6].assign(Tensor([40.0, 50.0]))
        t[5:7].assign(Tensor([55.0, 66.0]))
        np.testing.assert_array_equal(np.frombuffer(fn.read_bytes(), np.float32)[3:8], [3.0, 40.0, 55.0, 66.0, 7.0])
        with pytest.raises(ArgumentError, match="contiguous range"):
            t.reshape(4, 4)[:, 1].assign(Tensor.zeros(4))
        assert os.path.getsize(fn) == 64
    finally:
        Device[dev].writable = False
    with pytest.raises(ValueError, match="names a file"):
        Device["DISK"]


# ---------------------------------------------------------------------------------------------------------------
# safetensors
SAFE_DTYPES = [("F64", np.float64), ("F32", np.float32), ("F16", np.float16), ("I64", np.int64), ("I32", np.int32),
               ("I16", np.int16), ("I8", np.int8), ("U8", np.uint8), ("BOOL", np.bool_), ("U16", np.uint16),
               ("U32", np.uint32), ("U64", np.uint64)]


def write_safetensors(fn, arrays: dict, metadata=None, pad=0) -> None:
    """The format by hand: u64 header length, JSON header, then the data (in the given order)."""
    header, blobs, pos = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (code, arr) in arrays.items():
        raw = arr.tobytes()
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    h = json.dumps(header).encode() + b" " * pad
    with open(fn, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_safe_load_every_dtype_from_a_handwritten_file(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {}
    for code, npdt in SAFE_DTYPES:
        if npdt is np.bool_:
            arr = rng.integers(0, 2, (3, 2)).astype(np.bool_)
        elif np.issubdtype(npdt, np.integer):
            info = np.iinfo(npdt)
            arr = rng.integers(info.min, info.max, (3, 2), dtype=npdt, endpoint=True)
        else:
            arr = rng.standard_normal((3, 2)).astype(npdt)
        arrays[f"t_{code}"] = (code, arr)
    bf = torch.randn(5, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    arrays["t_BF16"] = ("BF16", bf.view(torch.int16).numpy())
    arrays["scalar"] = ("F32", np.array(2.5, np.float32))
    arrays["empty"] = ("F32", np.zeros((0, 7), np.float32))
    fn = tmp_path / "hand.safetensors"
    write_safetensors(fn, arrays, metadata={"who": "test"}, pad=5)
    out = safe_load(fn)
    assert list(out) == list(arrays)
    for name, (code, arr) in arrays.items():
        t = out[name]
        assert t.device == f"DISK:{fn}" and t.shape == arr.shape
        if code == "BF16":
            assert t.dtype == dtypes.bfloat16
            np.testing.assert_array_equal(host(t), bf.float().numpy())
        else:
            assert t.numpy().dtype == arr.dtype
            np.testing.assert_array_equal(t.numpy(), arr)  # .numpy() straight off the DISK tensor
    whole, json_len, header = safe_load_metadata(fn)
    assert whole.shape == (os.path.getsize(fn),) and whole.dtype == dtypes.uint8
    assert header["__metadata__"] == {"who": "test"} and json_len == struct.unpack("<Q", fn.read_bytes()[:8])[0]


def test_safe_load_is_lazy_and_zero_copy(tmp_path):
    fn = tmp_path / "lazy.safetensors"
    write_safetensors(fn, {"a": ("F32", np.arange(6, dtype=np.float32)), "b": ("I32", np.arange(3, dtype=np.int32))})
    t = safe_load(fn)["a"]
    buf = t.lazydata.base.realized
    assert buf is not None and buf.device == f"DISK:{fn}"
    # the buffer is a view of the map, not a copy: the tensor's bytes are the file's bytes at its offset
    mv = buf.as_buffer()
    assert isinstance(mv.obj, mmap.mmap) and bytes(mv) == np.arange(6, dtype=np.float32).tobytes()
    np.testing.assert_array_equal((t.to(Device.DEFAULT) + 1).numpy(), np.arange(6) + 1)
    np.testing.assert_array_equal((t + 1).numpy(), np.arange(6) + 1)  # computed on the default device


def test_safe_save_roundtrip_against_torch(tmp_path):
    g = torch.Generator().manual_seed(0)
    ref = {"w": torch.randn(4, 3, generator=g), "h": torch.randn(5, generator=g).half(),
           "bf": torch.randn(2, 2, generator=g).bfloat16(), "i": torch.arange(-3, 3), "b": torch.tensor([True, False]),
           "u8": torch.arange(250, 256, dtype=torch.uint8), "e": torch.zeros(0, 2)}
    ts = {k: Tensor(v.float().numpy()).cast(dtypes.bfloat16) if v.dtype == torch.bfloat16 else Tensor(v.numpy())
          for k, v in ref.items()}
    ts["w"] = ts["w"].T.T + 0  # an unrealized, computed tensor is realized to save it
    fn = tmp_path / "rt.safetensors"
    safe_save(ts, fn, metadata={"format": "pt"})
    out = safe_load(fn)
    assert list(out) == list(ref) and safe_load_metadata(fn)[2]["__metadata__"] == {"format": "pt"}
    for k, v in ref.items():
        assert out[k].shape == tuple(v.shape)
        np.testing.assert_array_equal(host(out[k]), torch_host(v))
    # every tensor starts aligned to its itemsize
    _, json_len, header = safe_load_metadata(fn)
    assert (8 + json_len) % 8 == 0
    for k, info in header.items():
        if k != "__metadata__":
            assert info["data_offsets"][0] % out[k].dtype.itemsize == 0
    # saving DISK tensors (loaded ones) works too
    safe_save(out, tmp_path / "again.safetensors")
    np.testing.assert_array_equal(safe_load(tmp_path / "again.safetensors")["w"].numpy(), ref["w"].numpy())


def test_safe_save_replaces_the_file_without_disturbing_loaded_tensors(tmp_path):
    fn = tmp_path / "x.safetensors"
    safe_save({"a": Tensor([1.0, 2.0])}, fn)
    old = safe_load(fn)["a"]
    safe_save({"a": Tensor([3.0, 4.0, 5.0]), "b": Tensor([1])}, fn)
    new = safe_load(fn)
    np.testing.assert_array_equal(old.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(new["a"].numpy(), [3.0, 4.0, 5.0])
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_safe_load_from_a_tensor(tmp_path):
    fn = tmp_path / "t.safetensors"
    safe_save({"a": Tensor([[1, 2], [3, 4]], dtype=dtypes.int16), "h": Tensor([0.5], dtype=dtypes.bfloat16)}, fn)
    on_device = Tensor(fn.read_bytes())  # the file's bytes on the default device
    out = safe_load(on_device)
    assert out["a"].device == Device.DEFAULT
    np.testing.assert_array_equal(out["a"].numpy(), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(host(out["h"]), [0.5])
    disk = Tensor.empty(os.path.getsize(fn), dtype=dtypes.uint8, device=f"disk:{fn}")
    np.testing.assert_array_equal(safe_load(disk)["a"].numpy(), [[1, 2], [3, 4]])
    assert safe_load_metadata(disk)[0] is disk


def test_safe_errors(tmp_path):
    with pytest.raises(TypeError, match="not a Tensor"):
        safe_save({"x": 1}, tmp_path / "bad.safetensors")
    with pytest.raises(ValueError, match="__metadata__"):
        safe_save({"__metadata__": Tensor([1.0])}, tmp_path / "bad.safetensors")
    with pytest.raises(TypeError, match="str -> str"):
        safe_save({"a": Tensor([1.0])}, tmp_path / "bad.safetensors", metadata={"n": 1})
    fn = tmp_path / "bad.safetensors"
    write_safetensors(fn, {"a": ("F32", np.zeros(2, np.float32))})
    header = json.dumps({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}).encode()
    fn.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(CheckpointError, match=r"'a' of shape \(3,\).*needs 12 bytes"):
        safe_load(fn)
    header = json.dumps({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}).encode()
    fn.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(CheckpointError, match="unsupported dtype 'C64'"):
        safe_load(fn)
    with pytest.raises(FileNotFoundError):
        safe_load(tmp_path / "missing.safetensors")


# ---------------------------------------------------------------------------------------------------------------
# torch checkpoints
def torch_reference():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 8, generator=g)
    return {
        "w": torch.randn(4, 5, generator=g), "transposed": torch.randn(4, 5, generator=g).T,
        "strided": base[1:4, ::2], "offset": base[2:], "permuted": torch.randn(2, 3, 4, generator=g).permute(2, 0, 1),
        "expanded": torch.randn(3, 1, generator=g).expand(3, 4), "f64": torch.randn(3, generator=g).double(),
        "f16": torch.randn(3, generator=g).half(), "bf16": torch.randn(3, generator=g).bfloat16(),
        "i64": torch.arange(-2, 2), "i32": torch.arange(3, dtype=torch.int32),
        "i16": torch.arange(3, dtype=torch.int16),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8), "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]), "u16": torch.tensor([1, 65535]).to(torch.uint16),
        "u32": torch.tensor([1, 2**32 - 1]).to(torch.uint32), "param": torch.nn.Parameter(torch.ones(2, 2)),
        "scalar": torch.tensor(3.5), "empty": torch.zeros(0, 3),
        "nested": {"list": [torch.ones(2), (torch.zeros(1), 7, "text")], "none": None},
    }


def assert_same(ours, ref, where="") -> None:
    if isinstance(ref, torch.Tensor):
        assert isinstance(ours, Tensor), where
        assert ours.shape == tuple(ref.shape), (where, ours.shape, ref.shape)
        np.testing.assert_array_equal(host(ours), torch_host(ref), err_msg=where)
    elif isinstance(ref, dict):
        assert list(ours) == list(ref), where
        for k in ref:
            assert_same(ours[k], ref[k], f"{where}.{k}")
    elif isinstance(ref, (list, tuple)):
        assert type(ours) is type(ref) and len(ours) == len(ref), where
        for i, (a, b) in enumerate(zip(ours, ref)):
            assert_same(a, b, f"{where}.{i}")
    else:
        assert ours == ref, where


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_torch_load_every_tensor(tmp_path, zipped):
    ref = torch_reference()
    fn = tmp_path / "ckpt.pt"
    torch.save(ref, fn, _use_new_zipfile_serialization=zipped)
    out = torch_load(fn)
    assert_same(out, ref)
    assert out["w"].device == f"DISK:{fn}" and out["transposed"].device == Device.DEFAULT


def test_torch_load_sizes_and_bool_views(tmp_path):
    flags = torch.tensor([[True, False, True], [False, False, True]])
    fn = tmp_path / "misc.pt"
    torch.save({"shape": torch.Size([2, 3]), "cols": flags[:, ::2], "t": flags.T}, fn)
    out = torch_load(fn)
    assert out["shape"] == (2, 3) and type(out["shape"]) is tuple
    np.testing.assert_array_equal(out["cols"].numpy(), flags[:, ::2].numpy())
    np.testing.assert_array_equal(out["t"].numpy(), flags.T.numpy())


def test_torch_load_module_state_dict_into_a_model(tmp_path):
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    fn = tmp_path / "seq.pth"
    torch.save(tm.state_dict(), fn)
    sd = torch_load(fn)
    assert isinstance(sd, collections.OrderedDict) and list(sd) == list(tm.state_dict())

    class Net:
        def __init__(self):
            self.layers = {"0": Linear(3, 4), "2": Linear(4, 2)}

        def __call__(self, x):
            return self.layers["2"](self.layers["0"](x).relu())
    net = Net()
    load_state_dict(net, {f"layers.{k}": v for k, v in sd.items()}, verbose=False)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(net(Tensor(x)).numpy(), tm(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def _zip_with_pickle(payload: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/version", "3\n")
    return buf.getvalue()


def test_torch_load_refuses_foreign_classes(tmp_path):
    fn = tmp_path / "evil.pt"
    marker = tmp_path / "pwned"
    evil = b"\x80\x02cos\nsystem\nX" + struct.pack("<I", len(f"touch {marker}")) + f"touch {marker}".encode() + \
        b"\x85R."
    fn.write_bytes(_zip_with_pickle(evil))
    with pytest.raises(CheckpointError, match=r"refusing to load os\.system"):
        torch_load(fn)
    assert not marker.exists()
    # a whole pickled module (not a state dict) names its class
    torch.save(torch.nn.Linear(2, 2), fn)
    with pytest.raises(CheckpointError, match=r"torch\.nn\.modules\.linear\.Linear"):
        torch_load(fn)
    torch.save({"c": torch.ones(2, dtype=torch.complex64)}, fn)
    with pytest.raises(CheckpointError, match="ComplexFloatStorage"):
        torch_load(fn)


def test_torch_load_from_a_tensor_and_compressed_members(tmp_path):
    ref = {"a": torch.arange(6.0).reshape(2, 3), "t": torch.arange(6.0).reshape(2, 3).T}
    buf = io.BytesIO()
    torch.save(ref, buf)
    assert_same(torch_load(Tensor(buf.getvalue())), ref)
    # storages compressed by another zip writer are read into memory instead of mapped
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info.filename, src.read(info))
    fn = tmp_path / "deflated.pt"
    fn.write_bytes(out.getvalue())
    assert_same(torch_load(fn), ref)


def test_torch_load_errors(tmp_path):
    fn = tmp_path / "x.pt"
    fn.write_bytes(b"hello world")
    with pytest.raises(CheckpointError, match="not a PyTorch checkpoint"):
        torch_load(fn)
    fn.write_bytes(_zip_with_pickle(pickle.dumps({"a": 1}, protocol=2)).replace(b"data.pkl", b"data.xyz"))
    with pytest.raises(CheckpointError, match="data.pkl"):
        torch_load(fn)
    # a storage referenced by the pickle but absent from the archive
    torch.save({"a": torch.ones(3)}, fn)
    z = zipfile.ZipFile(fn)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as w:
        for info in z.infolist():
            if "/data/" not in info.filename:
                w.writestr(info.filename, z.read(info))
    fn.write_bytes(out.getvalue())
    with pytest.raises(CheckpointError, match="storage '0' is missing"):
        torch_load(fn)


# ---------------------------------------------------------------------------------------------------------------
# GGUF: files from tinygrad.nn.state_gguf_write, dequantizers written from the spec
def _f16(raw: np.ndarray) -> np.ndarray:
    return raw.copy().view(np.float16).astype(np.float32)


def ref_q8_0(b):
    return _f16(b[:, 0:2]) * b[:, 2:34].view(np.int8).astype(np.float32)


def ref_q4_0(b):
    y = np.zeros((len(b), 32), np.float32)
    for j in range(16):
        y[:, j] = (b[:, 2 + j] & 15).astype(np.float32) - 8
        y[:, j + 16] = (b[:, 2 + j] >> 4).astype(np.float32) - 8
    return y * _f16(b[:, 0:2])


def ref_q4_1(b):
    y = np.zeros((len(b), 32), np.float32)
    for j in range(16):
        y[:, j], y[:, j + 16] = b[:, 4 + j] & 15, b[:, 4 + j] >> 4
    return y * _f16(b[:, 0:2]) + _f16(b[:, 2:4])


def _ref_q5(qh_bytes, qs):
    qh = qh_bytes.copy().view("<u4")[:, 0].astype(np.int64)
    y = np.zeros((len(qs), 32), np.float32)
    for j in range(16):
        y[:, j] = (qs[:, j] & 15) | (((qh >> j) & 1) << 4)
        y[:, j + 16] = (qs[:, j] >> 4) | (((qh >> (j + 16)) & 1) << 4)
    return y


def ref_q5_0(b):
    return (_ref_q5(b[:, 2:6], b[:, 6:22]) - 16) * _f16(b[:, 0:2])


def ref_q5_1(b):
    return _ref_q5(b[:, 4:8], b[:, 8:24]) * _f16(b[:, 0:2]) + _f16(b[:, 2:4])


def _scale_min_k4(j, q):
    if j < 4:
        return q[:, j] & 63, q[:, j + 4] & 63
    return (q[:, j + 4] & 15) | ((q[:, j - 4] >> 6) << 4), (q[:, j + 4] >> 4) | ((q[:, j] >> 6) << 4)


def ref_q4_k(b):
    d, dmin, sc, qs = _f16(b[:, 0:2]), _f16(b[:, 2:4]), b[:, 4:16], b[:, 16:144]
    y = np.zeros((len(b), 256), np.float32)
    for j in range(4):
        (s1, m1), (s2, m2) = _scale_min_k4(2 * j, sc), _scale_min_k4(2 * j + 1, sc)
        q = qs[:, 32 * j:32 * j + 32]
        y[:, 64 * j:64 * j + 32] = d * s1[:, None] * (q & 15) - dmin * m1[:, None]
        y[:, 64 * j + 32:64 * j + 64] = d * s2[:, None] * (q >> 4) - dmin * m2[:, None]
    return y


def ref_q5_k(b):
    d, dmin, sc, qh, qs = _f16(b[:, 0:2]), _f16(b[:, 2:4]), b[:, 4:16], b[:, 16:48], b[:, 48:176]
    y = np.zeros((len(b), 256), np.float32)
    for j in range(4):
        (s1, m1), (s2, m2) = _scale_min_k4(2 * j, sc), _scale_min_k4(2 * j + 1, sc)
        q = qs[:, 32 * j:32 * j + 32]
        lo = (q & 15) + 16 * ((qh >> (2 * j)) & 1)
        hi = (q >> 4) + 16 * ((qh >> (2 * j + 1)) & 1)
        y[:, 64 * j:64 * j + 32] = d * s1[:, None] * lo - dmin * m1[:, None]
        y[:, 64 * j + 32:64 * j + 64] = d * s2[:, None] * hi - dmin * m2[:, None]
    return y


def ref_q6_k(b):
    ql, qh, sc, d = b[:, 0:128], b[:, 128:192], b[:, 192:208].view(np.int8).astype(np.float32), _f16(b[:, 208:210])
    y = np.zeros((len(b), 256), np.float32)
    for half in range(2):
        lq, hq, s, o = ql[:, 64 * half:], qh[:, 32 * half:], sc[:, 8 * half:], 128 * half
        for li in range(32):
            i = li // 16
            q1 = ((lq[:, li] & 15) | (((hq[:, li] >> 0) & 3) << 4)).astype(np.float32) - 32
            q2 = ((lq[:, li + 32] & 15) | (((hq[:, li] >> 2) & 3) << 4)).astype(np.float32) - 32
            q3 = ((lq[:, li] >> 4) | (((hq[:, li] >> 4) & 3) << 4)).astype(np.float32) - 32
            q4 = ((lq[:, li + 32] >> 4) | (((hq[:, li] >> 6) & 3) << 4)).astype(np.float32) - 32
            y[:, o + li] = d[:, 0] * s[:, i] * q1
            y[:, o + li + 32] = d[:, 0] * s[:, i + 2] * q2
            y[:, o + li + 64] = d[:, 0] * s[:, i + 4] * q3
            y[:, o + li + 96] = d[:, 0] * s[:, i + 6] * q4
    return y


# ggml type: (block values, block bytes, byte ranges holding fp16 scales, numpy reference)
QUANTS = {"Q4_0": (2, 32, 18, [(0, 2)], ref_q4_0), "Q4_1": (3, 32, 20, [(0, 2), (2, 4)], ref_q4_1),
          "Q5_0": (6, 32, 22, [(0, 2)], ref_q5_0), "Q5_1": (7, 32, 24, [(0, 2), (2, 4)], ref_q5_1),
          "Q8_0": (8, 32, 34, [(0, 2)], ref_q8_0), "Q4_K": (12, 256, 144, [(0, 2), (2, 4)], ref_q4_k),
          "Q5_K": (13, 256, 176, [(0, 2), (2, 4)], ref_q5_k), "Q6_K": (14, 256, 210, [(208, 210)], ref_q6_k)}


def random_blocks(rng, n, block_bytes, scale_ranges):
    """Random block bytes (every bit pattern of the quants) with finite fp16 scales."""
    b = rng.integers(0, 256, (n, block_bytes), dtype=np.uint8)
    for lo, hi in scale_ranges:
        b[:, lo:hi] = rng.uniform(-2, 2, (n, 1)).astype(np.float16).view(np.uint8)
    return b


@pytest.mark.parametrize("version", [2, 3])
def test_gguf_metadata_and_plain_tensors(tmp_path, version):
    kv = [("general.architecture", 8, "llama"), ("u8", 0, 255), ("i8", 1, -128), ("u16", 2, 65535), ("i16", 3, -2),
          ("u32", 4, 2**32 - 1), ("i32", 5, -(2**31)), ("f32", 6, 1.5), ("bool", 7, True), ("u64", 10, 2**64 - 1),
          ("i64", 11, -(2**63)), ("f64", 12, 0.1), ("ints", 9, (5, [1, -2, 3])), ("strs", 9, (8, ["a", "é", ""])),
          ("nested", 9, (9, [(0, [1, 2]), (8, ["x"])])), ("bools", 9, (7, [True, False])), ("general.alignment", 4, 64)]
    rng = np.random.default_rng(0)
    plain = {"f32": (0, rng.standard_normal((3, 4)).astype(np.float32)),
             "f16": (1, rng.standard_normal((2, 5)).astype(np.float16)),
             "i8": (24, np.arange(-3, 3, dtype=np.int8)), "i16": (25, np.arange(4, dtype=np.int16).reshape(2, 2)),
             "i32": (26, np.arange(3, dtype=np.int32)), "i64": (27, np.array([-1, 2**40], np.int64)),
             "f64": (28, rng.standard_normal((2, 1, 3))), "bf16": (30, np.array([0x3F80, 0xC000], np.uint16))}
    tensors = [(k, list(reversed(a.shape)), t, a.tobytes()) for k, (t, a) in plain.items()]
    fn = tmp_path / "plain.gguf"
    fn.write_bytes(write_gguf(kv, tensors, version=version, alignment=64))
    meta, out = gguf_load(fn)
    assert meta == {"general.architecture": "llama", "u8": 255, "i8": -128, "u16": 65535, "i16": -2,
                    "u32": 2**32 - 1, "i32": -(2**31), "f32": 1.5, "bool": True, "u64": 2**64 - 1, "i64": -(2**63),
                    "f64": 0.1, "ints": [1, -2, 3], "strs": ["a", "é", ""], "nested": [[1, 2], ["x"]],
                    "bools": [True, False], "general.alignment": 64}
    for k, (_, arr) in plain.items():
        t = out[k]
        assert t.device == f"DISK:{fn}" and t.shape == arr.shape, k
        if k == "bf16":
            np.testing.assert_array_equal(host(t), [1.0, -2.0])
        else:
            np.testing.assert_array_equal(t.numpy(), arr)


def test_gguf_dequantizes_on_device_like_the_spec(tmp_path):
    rng = np.random.default_rng(1)
    tensors, refs = [], {}
    for name, (ttype, block, block_bytes, scales, ref) in QUANTS.items():
        rows = 3 if block == 32 else 2
        cols = 2 * block
        b = random_blocks(rng, rows * cols // block, block_bytes, scales)
        tensors.append((name, [cols, rows], ttype, b.tobytes()))
        refs[name] = ref(b).reshape(rows, cols)
    fn = tmp_path / "quants.gguf"
    fn.write_bytes(write_gguf([], tensors))
    _, out = gguf_load(fn)
    for name, want in refs.items():
        t = out[name]
        assert t.device == Device.DEFAULT and t.dtype == dtypes.float32 and t.shape == want.shape, name
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-6, atol=1e-6, err_msg=name)


def test_gguf_from_a_tensor_and_3d_shapes():
    rng = np.random.default_rng(2)
    b = random_blocks(rng, 4, 34, [(0, 2)])
    data = write_gguf([("k", 8, "v")], [("q", [32, 2, 2], 8, b.tobytes()), ("f", [2, 1, 3], 0, bytes(24))])
    meta, out = gguf_load(Tensor(data))
    assert meta == {"k": "v"} and out["f"].shape == (3, 1, 2) and out["q"].shape == (2, 2, 32)
    np.testing.assert_allclose(out["q"].numpy(), ref_q8_0(b).reshape(2, 2, 32), rtol=1e-6)


def test_gguf_optional_oracle_package():
    """Files from the reference `gguf` writer (skipped unless it is importable)."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tinygrad_oracle_{os.getpid()}.gguf")
    w = gguf.GGUFWriter(path, "llama")
    refs = {}
    for q in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q5_1):
        qd = gguf.quants.quantize(x, q)
        w.add_tensor(q.name, qd, raw_dtype=q)
        refs[q.name] = gguf.quants.dequantize(qd, q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    try:
        meta, out = gguf_load(path)
        assert meta["general.architecture"] == "llama"
        for k, v in refs.items():
            np.testing.assert_array_equal(out[k].numpy(), v)
    finally:
        os.remove(path)


def test_gguf_errors(tmp_path):
    fn = tmp_path / "bad.gguf"
    cases = [
        (b"GGML" + bytes(20), "not a GGUF file"),
        (write_gguf([], [], version=1), "version 1"),
        (write_gguf([("general.alignment", 4, 48)], []), "power of two"),
        (write_gguf([], [("t", [256], 16, bytes(66))]), r"type 16 \(IQ2_XXS\)"),
        (write_gguf([], [("t", [31], 2, bytes(18))]), "multiple of its block of 32"),
        (write_gguf([], [("t", [64], 0, bytes(64))])[:-100], "truncated"),
        (write_gguf([("a", 4, 1), ("a", 4, 2)], []), "appears twice"),
        (write_gguf([], [("t", [1, 1, 1, 1, 1], 0, bytes(4))]), "at most 4"),
    ]
    for data, msg in cases:
        fn.write_bytes(data)
        with pytest.raises(CheckpointError, match=msg):
            gguf_load(fn)


def test_released_pages_of_a_mapped_checkpoint_read_back_the_same(tmp_path):
    # dropping mapped pages (all, or the whole pages inside a range) only lets the OS re-read them from the file
    import mmap

    from tinygrad.nn.state_file import CheckpointBytes
    data = np.random.default_rng(0).integers(0, 256, 5 * mmap.PAGESIZE + 123, dtype=np.uint8)
    path = tmp_path / "blob.bin"
    path.write_bytes(data.tobytes())
    cb = CheckpointBytes(str(path))
    assert bytes(cb.mv) == data.tobytes()
    cb.release_pages(100, 3 * mmap.PAGESIZE)  # a range not on page bounds: only the pages wholly inside go
    cb.release_pages(0, 10)  # no whole page inside: nothing
    assert bytes(cb.mv[50:4 * mmap.PAGESIZE]) == data[50:4 * mmap.PAGESIZE].tobytes()
    cb.release_pages()
    assert bytes(cb.mv) == data.tobytes()
