"""Malformed checkpoints: every loader either loads a file or raises CheckpointError (a ValueError), and never reads
outside the file, whatever the bytes: truncated at every length, bytes flipped, absurd lengths, offsets and dims.

A load that succeeds is read back in full (each tensor's bytes must lie inside the file), so an unchecked range
would show up as a wrong-sized buffer or an error other than CheckpointError.
"""
import io
import json
import os
import struct
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinygrad import Device, Tensor, dtypes
from tinygrad.nn.state import CheckpointError, gguf_load, safe_load, torch_load

FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# reading a tensor back computes it: skip absurd (but lazily valid) ones, such as a huge expand of one element
MAX_READ = 1 << 16


def _leaves(obj):
    """Every Tensor in a loaded object (dicts, lists, tuples), iteratively."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, Tensor):
            yield o
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)


def _read_all(obj) -> None:
    for t in _leaves(obj):
        base = t.lazydata.base
        if t.device.startswith("DISK:"):
            # a DISK tensor is exactly its bytes of the file
            assert base.realized is not None and len(base.realized.as_buffer()) == base.buffer.nbytes
        if t.numel() <= MAX_READ:
            (t.to(Device.DEFAULT).cast(dtypes.float32) if t.dtype == dtypes.bfloat16 else t).numpy()


class Files:
    """Writes each candidate as a new file (a fresh inode replacing the last), so no loaded map sees it change."""

    def __init__(self, root, name):
        self.path, self.n = os.path.join(root, name), 0

    def put(self, data: bytes) -> str:
        self.n += 1
        tmp = f"{self.path}.{self.n}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)
        return self.path


def _check(loader, files: Files, data: bytes) -> None:
    try:
        out = loader(files.put(data))
    except CheckpointError:
        return
    _read_all(out)


def _flip(data: bytes, flips) -> bytes:
    b = bytearray(data)
    for pos, x in flips:
        b[pos % len(b)] ^= x
    return bytes(b)


FLIPS = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)), min_size=1, max_size=4)


# ---------------------------------------------------------------------------------------------------------------
# safetensors
def _safetensors(header: dict, data: bytes) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


SAFE = _safetensors({"__metadata__": {"a": "b"}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                     "i": {"dtype": "I8", "shape": [4], "data_offsets": [24, 28]},
                     "h": {"dtype": "BF16", "shape": [2], "data_offsets": [28, 32]}},
                    np.arange(6, dtype=np.float32).tobytes() + bytes(range(4)) + bytes([0, 0x3F, 0x80, 0xBF]))


@pytest.fixture
def files(tmp_path):
    return lambda name: Files(str(tmp_path), name)


def test_safetensors_valid_and_every_truncation(files):
    f = files("x.safetensors")
    out = safe_load(f.put(SAFE))
    np.testing.assert_array_equal(out["w"].numpy(), np.arange(6).reshape(2, 3))
    for n in range(len(SAFE)):
        with pytest.raises(CheckpointError):
            safe_load(f.put(SAFE[:n]))


@FUZZ
@given(flips=FLIPS)
def test_safetensors_flipped_bytes(files, flips):
    _check(safe_load, files("flip.safetensors"), _flip(SAFE, flips))


BIG = st.one_of(st.integers(-(1 << 70), 1 << 70), st.sampled_from([0, 1, 2**63 - 1, 2**64 - 1, -1, 2**31]))
SMALL_OR_BIG = st.one_of(st.integers(0, 8), st.integers(0, 8), BIG)
JUNK = st.one_of(BIG, st.floats(allow_nan=False), st.text(max_size=4), st.none(), st.booleans(),
                 st.lists(BIG, max_size=3))


@FUZZ
@given(dtype=st.one_of(st.sampled_from(["F32", "F16", "BF16", "U8", "BOOL", "I64"]), st.sampled_from(["U8", "F16"]),
                      st.sampled_from(["C64", "", "f32"]), JUNK),
       shape=st.one_of(st.lists(SMALL_OR_BIG, max_size=4), JUNK),
       offsets=st.one_of(st.lists(SMALL_OR_BIG, min_size=2, max_size=2), st.lists(BIG, max_size=3), JUNK),
       meta=st.sampled_from([None, None, None, {"a": "b"}, [1], "x", {"a": 1}]))
def test_safetensors_absurd_headers(files, dtype, shape, offsets, meta):
    header = {"t": {"dtype": dtype, "shape": shape, "data_offsets": offsets}}
    if meta is not None:
        header["__metadata__"] = meta
    _check(safe_load, files("absurd.safetensors"), _safetensors(header, bytes(64)))


@FUZZ
@given(json_len=st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1)))
def test_safetensors_absurd_header_length(files, json_len):
    _check(safe_load, files("len.safetensors"), struct.pack("<Q", json_len) + SAFE[8:])


# ---------------------------------------------------------------------------------------------------------------
# torch
def _torch_bytes(obj, zipped: bool) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=zipped)
    return buf.getvalue()


TORCH_OBJ = {"a": torch.arange(6.0).reshape(2, 3), "t": torch.arange(6, dtype=torch.int16).reshape(2, 3).T,
             "n": [torch.ones(2, dtype=torch.float16)]}
TORCH_ZIP, TORCH_LEGACY = _torch_bytes(TORCH_OBJ, True), _torch_bytes(TORCH_OBJ, False)


def _rezip(data_pkl: bytes) -> bytes:
    """The zip checkpoint with data.pkl replaced (valid CRCs, so the pickle itself is what gets fuzzed)."""
    src = zipfile.ZipFile(io.BytesIO(TORCH_ZIP))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info in src.infolist():
            z.writestr(info.filename, data_pkl if info.filename.endswith("data.pkl") else src.read(info))
    return out.getvalue()


DATA_PKL = zipfile.ZipFile(io.BytesIO(TORCH_ZIP)).read("archive/data.pkl")


@pytest.mark.parametrize("data", [TORCH_ZIP, TORCH_LEGACY], ids=["zip", "legacy"])
def test_torch_every_truncation(files, data):
    f = files("t.pt")
    out = torch_load(f.put(data))
    np.testing.assert_array_equal(out["t"].numpy(), TORCH_OBJ["t"].numpy())
    # every length from a Tensor of the bytes (the same parser, no file per length: a fresh mmap costs milliseconds
    # here), and every 16th from a file
    for n in range(len(data)):
        try:
            _read_all(torch_load(Tensor(data[:n], device="CPU")))
        except CheckpointError:
            pass
    for n in range(0, len(data), 16):
        _check(torch_load, f, data[:n])


@FUZZ
@given(flips=FLIPS)
def test_torch_legacy_flipped_bytes(files, flips):
    _check(torch_load, files("legacy.pt"), _flip(TORCH_LEGACY, flips))


@FUZZ
@given(flips=FLIPS)
def test_torch_zip_flipped_archive_bytes(files, flips):
    _check(torch_load, files("zip.pt"), _flip(TORCH_ZIP, flips))


@FUZZ
@given(flips=FLIPS, cut=st.integers(0, len(DATA_PKL)))
def test_torch_zip_fuzzed_pickle(files, flips, cut):
    _check(torch_load, files("pkl.pt"), _rezip(_flip(DATA_PKL, flips)[:max(cut, 1)]))


def _pickle_tensor(storage_cls, key, numel, offset, size, stride, rebuild="_rebuild_tensor_v2") -> bytes:
    """A data.pkl holding {"x": tensor} with the given (possibly absurd) geometry, written opcode by opcode."""
    def s(x: str) -> bytes:
        b = x.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    def ints(xs) -> bytes:
        return b"(" + b"".join(b"\x8a" + _long(x) for x in xs) + b"t"
    pid = b"(" + s("storage") + b"ctorch\n" + storage_cls.encode() + b"\n" + s(key) + s("cpu") + b"\x8a" + \
        _long(numel) + b"tQ"
    v3 = rebuild == "_rebuild_tensor_v3"
    args = b"(" + pid + b"\x8a" + _long(offset) + ints(size) + ints(stride) + b"\x89ccollections\nOrderedDict\n)R" + \
        (b"ctorch\nfloat32\n" if v3 else b"") + b"t"
    return b"\x80\x02}" + s("x") + b"ctorch._utils\n" + rebuild.encode() + b"\n" + args + b"Rs."


def _long(x: int) -> bytes:
    n = (x.bit_length() + 8) // 8 or 1
    return bytes([n]) + x.to_bytes(n, "little", signed=True)


GEOMETRY = st.integers(0, 3).flatmap(lambda n: st.tuples(st.lists(SMALL_OR_BIG, min_size=n, max_size=n),
                                                         st.lists(SMALL_OR_BIG, min_size=n, max_size=n)))


@FUZZ
@given(numel=st.one_of(st.sampled_from([6, 24]), st.sampled_from([0, 6, 12, 24]), st.integers(0, 64), BIG),
       offset=SMALL_OR_BIG, geometry=GEOMETRY,
       cls=st.sampled_from(["FloatStorage", "ByteStorage", "HalfStorage", "FloatStorage", "ComplexFloatStorage"]),
       rebuild=st.sampled_from(["_rebuild_tensor_v2", "_rebuild_tensor_v3"]))
def test_torch_absurd_tensor_geometry(files, numel, offset, geometry, cls, rebuild):
    size, stride = geometry
    _check(torch_load, files("geom.pt"), _rezip(_pickle_tensor(cls, "0", numel, offset, size, stride, rebuild)))


@settings(FUZZ, max_examples=40)
@given(offset=st.integers(0, 7), geometry=st.integers(0, 3).flatmap(
    lambda n: st.tuples(st.lists(st.integers(0, 4), min_size=n, max_size=n),
                        st.lists(st.integers(0, 4), min_size=n, max_size=n))))
def test_torch_strided_views_against_numpy(files, offset, geometry):
    """Any (size, stride, offset) over a 6-float storage: the view numpy's as_strided gives, or an error when it
    reads past the storage."""
    size, stride = geometry
    data = _rezip(_pickle_tensor("FloatStorage", "0", 6, offset, size, stride))
    storage = np.frombuffer(zipfile.ZipFile(io.BytesIO(data)).read("archive/data/0"), np.float32)
    span = 1 + sum((s - 1) * t for s, t in zip(size, stride)) if all(size) else 0
    if offset + span > 6:
        with pytest.raises(CheckpointError, match="reads past its storage"):
            torch_load(files("strided.pt").put(data))
        return
    want = np.lib.stride_tricks.as_strided(storage[offset:], size, [4 * t for t in stride])
    np.testing.assert_array_equal(torch_load(files("strided.pt").put(data))["x"].numpy(), want)


def test_torch_valid_handwritten_pickle(files):
    # the hand-written pickle is right: a transposed view of storage 0 (6 floats) loads as torch would give it
    out = torch_load(files("ok.pt").put(_rezip(_pickle_tensor("FloatStorage", "0", 6, 1, [2, 2], [1, 3]))))
    np.testing.assert_array_equal(out["x"].numpy(), [[1.0, 4.0], [2.0, 5.0]])


# ---------------------------------------------------------------------------------------------------------------
# GGUF
def _gstr(b: bytes, n: int | None = None) -> bytes:
    return struct.pack("<Q", len(b) if n is None else n) + b


def _gguf(n_tensors=None, n_kv=None, str_len=None, arr_type=None, arr_count=None, n_dims=None, dims=None,
          ttype=None, offset=None, version=None, alignment=None) -> bytes:
    """A small GGUF (one array key, one Q8_0 and one F32 tensor); any header field given replaces the valid one."""
    def pick(v, default):
        return default if v is None else v
    dims = pick(dims, (32, 2))
    kv = _gstr(b"general.alignment") + struct.pack("<II", 4, pick(alignment, 32))
    kv += _gstr(b"arr", str_len) + struct.pack("<IIQ", 9, pick(arr_type, 5), pick(arr_count, 3)) + \
        struct.pack("<3i", 1, 2, 3)
    infos = _gstr(b"q") + struct.pack("<I", pick(n_dims, len(dims))) + struct.pack(f"<{len(dims)}Q", *dims) + \
        struct.pack("<IQ", pick(ttype, 8), pick(offset, 0))
    infos += _gstr(b"f") + struct.pack("<I", 1) + struct.pack("<Q", 4) + struct.pack("<IQ", 0, 128)
    head = b"GGUF" + struct.pack("<IQQ", pick(version, 3), pick(n_tensors, 2), pick(n_kv, 2))
    out = head + kv + infos
    out += bytes(-len(out) % 32)
    blocks = np.random.default_rng(0).integers(0, 256, (2, 34), dtype=np.uint8)
    blocks[:, 0:2] = np.float16(0.5).reshape(1, 1).view(np.uint8)
    return out + blocks.tobytes() + bytes(128 - 68) + np.arange(4, dtype=np.float32).tobytes()


def test_gguf_valid_and_every_truncation(files):
    f = files("x.gguf")
    kv, ts = gguf_load(f.put(_gguf()))
    assert kv["arr"] == [1, 2, 3] and ts["q"].shape == (2, 32)
    np.testing.assert_array_equal(ts["f"].numpy(), [0, 1, 2, 3])
    data = _gguf()
    for n in range(len(data)):
        with pytest.raises(CheckpointError):
            gguf_load(f.put(data[:n]))


@FUZZ
@given(flips=FLIPS)
def test_gguf_flipped_bytes(files, flips):
    _check(gguf_load, files("flip.gguf"), _flip(_gguf(), flips))


U64 = st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 300), st.sampled_from([2**63, 2**64 - 1, 2**32]))
U32 = st.one_of(st.integers(0, 2**32 - 1), st.integers(0, 40))
GGUF_FIELDS = {"n_tensors": U64, "n_kv": U64, "str_len": U64, "arr_type": U32, "arr_count": U64, "n_dims": U32,
               "dims": st.lists(st.one_of(st.integers(0, 300), U64), max_size=5), "ttype": U32, "offset": U64,
               "version": U32, "alignment": U32}


@FUZZ
@given(overrides=st.dictionaries(st.sampled_from(sorted(GGUF_FIELDS)), st.just(None), min_size=1, max_size=2)
       .flatmap(lambda d: st.fixed_dictionaries({k: GGUF_FIELDS[k] for k in d})))
def test_gguf_absurd_headers(files, overrides):
    _check(gguf_load, files("absurd.gguf"), _gguf(**overrides))


def test_loaders_reject_other_formats(files):
    f = files("mixed.bin")
    for loader in (safe_load, torch_load, gguf_load):
        for data in (SAFE, TORCH_ZIP, TORCH_LEGACY, _gguf(), b"", b"\x80"):
            if (loader, data) in ((safe_load, SAFE), (torch_load, TORCH_ZIP), (torch_load, TORCH_LEGACY),
                                  (gguf_load, _gguf())):
                continue
            with pytest.raises(CheckpointError):
                loader(f.put(data))
