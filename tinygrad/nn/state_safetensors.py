"""safetensors: an 8-byte little-endian header length N, N bytes of JSON, then the tensors' bytes.

The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the bytes after
the header) and may hold "__metadata__", a dict of str to str.

>>> import tempfile, os
>>> from tinygrad import Tensor
>>> fn = os.path.join(tempfile.mkdtemp(), "w.safetensors")
>>> safe_save({"w": Tensor([[1.0, 2.0]])}, fn)
>>> safe_load(fn)["w"].numpy().tolist()
[[1.0, 2.0]]
"""
from __future__ import annotations

import json
import os
import struct
from typing import Any

from tinygrad.device import Device
from tinygrad.dtype import dtypes
from tinygrad.helpers import all_int, prod
from tinygrad.nn.state_file import CheckpointBytes, CheckpointError
from tinygrad.tensor import Tensor

safe_dtypes = {"BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16,
               "U16": dtypes.uint16, "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64,
               "U64": dtypes.uint64, "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32,
               "F64": dtypes.float64}
inverse_safe_dtypes = {v: k for k, v in safe_dtypes.items()}

# the reference implementation refuses headers over 100 MB; a bigger one is a corrupt length, not a real header
MAX_HEADER = 100 * 1024 * 1024


def _header(src: CheckpointBytes) -> tuple[int, dict[str, Any]]:
    if len(src) < 8:
        raise CheckpointError(f"{src.name}: not a safetensors file: {len(src)} bytes, shorter than the 8-byte header "
                              "length")
    (json_len,) = struct.unpack_from("<Q", src.mv, 0)
    if json_len > MAX_HEADER or 8 + json_len > len(src):
        raise CheckpointError(f"{src.name}: safetensors header of {json_len} bytes doesn't fit in the file's "
                              f"{len(src)} bytes (truncated or not a safetensors file)")
    try:
        header = json.loads(bytes(src.mv[8:8 + json_len]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"{src.name}: safetensors header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{src.name}: safetensors header must be a JSON object, got {type(header).__name__}")
    return json_len, header


def _check_entry(src: CheckpointBytes, name: str, info: Any, data_len: int) -> tuple[Any, tuple[int, ...], int]:
    """(dtype, shape, byte offset in the data) of header entry `name`, validated against the file."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise CheckpointError(f"{src.name}: safetensors entry {name!r} needs dtype, shape and data_offsets, "
                              f"got {info!r:.200}")
    dtype = safe_dtypes.get(info["dtype"]) if isinstance(info["dtype"], str) else None
    if dtype is None:
        raise CheckpointError(f"{src.name}: tensor {name!r} has unsupported dtype {info['dtype']!r:.50}; supported: "
                              f"{', '.join(safe_dtypes)}")
    shape, offs = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise CheckpointError(f"{src.name}: tensor {name!r} has a bad shape {shape!r:.200}")
    if not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs) or \
            not 0 <= offs[0] <= offs[1] <= data_len:
        raise CheckpointError(f"{src.name}: tensor {name!r} has data_offsets {offs!r:.100} outside the "
                              f"{data_len} data bytes")
    if offs[1] - offs[0] != prod(shape) * dtype.itemsize:
        raise CheckpointError(f"{src.name}: tensor {name!r} of shape {tuple(shape)} and dtype {info['dtype']} "
                              f"needs {prod(shape) * dtype.itemsize} bytes, its data_offsets give {offs[1] - offs[0]}")
    return dtype, tuple(shape), offs[0]


def safe_load_metadata(fn: str | os.PathLike | Tensor) -> tuple[Tensor, int, dict[str, Any]]:
    """(the file as a uint8 Tensor, the JSON header's length, the parsed header) of a safetensors file.

    For a path, the Tensor is a zero-copy view of the file on its DISK device."""
    src = CheckpointBytes(fn)
    json_len, header = _header(src)
    whole = fn if isinstance(fn, Tensor) else src.raw(0, len(src), "the file")
    return whole, json_len, header


def safe_load(fn: str | os.PathLike | Tensor) -> dict[str, Tensor]:
    """The tensors of a safetensors file, by name. Lazy: a path's tensors are zero-copy views on the DISK device, read
    when used (`.numpy()`, or `.to(device)` to compute with them)."""
    src = CheckpointBytes(fn)
    json_len, header = _header(src)
    start, data_len = 8 + json_len, len(src) - 8 - json_len
    meta = header.get("__metadata__")
    if meta is not None and not isinstance(meta, dict):
        raise CheckpointError(f"{src.name}: __metadata__ must be a JSON object, got {type(meta).__name__}")
    ret = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, off = _check_entry(src, name, info, data_len)
        ret[name] = src.tensor(start + off, dtype, shape, f"tensor {name!r}")
    return ret


def _tensor_bytes(name: str, t: Tensor) -> memoryview:
    """`t`'s bytes laid out contiguously (realizing it; a tensor on DISK is copied off it first if it is a view)."""
    if not all_int(t.shape):
        raise ValueError(f"safe_save: tensor {name!r} has a symbolic shape {t.shape}")
    if t.numel() == 0:
        return memoryview(b"")
    if isinstance(t.device, tuple):
        t = t.to(t.device[0])  # a tensor on several devices is saved whole: gathered first
    lb = t.lazydata
    if lb.realized is not None:
        return lb.realized.as_buffer()
    if t.device.startswith("DISK:"):
        t = t.to(Device.DEFAULT)
    return t.contiguous().realize().lazydata.base.realized.as_buffer()


def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` (name -> Tensor) to safetensors file `fn`, with optional str -> str `metadata`.

    The file is written under a temporary name and renamed over `fn`, so tensors still loaded from an older `fn`
    keep their (mapped) bytes."""
    if not isinstance(tensors, dict):
        raise TypeError(f"safe_save takes a dict of name -> Tensor, not {type(tensors).__name__}")
    for k, v in tensors.items():
        if not isinstance(k, str) or k == "__metadata__":
            raise ValueError(f"safe_save: bad tensor name {k!r} (names are str, and __metadata__ is reserved)")
        if not isinstance(v, Tensor):
            raise TypeError(f"safe_save: {k!r} is a {type(v).__name__}, not a Tensor")
        if v.dtype not in inverse_safe_dtypes:
            raise TypeError(f"safe_save: tensor {k!r} has dtype {v.dtype}, which safetensors can't store")
    if metadata is not None and (not isinstance(metadata, dict) or
                                 not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise TypeError("safe_save: metadata must be a dict of str -> str")
    # the data is laid out widest dtype first, so every tensor starts aligned to its itemsize (the header is padded
    # to 8); the header keeps the caller's order, which safe_load gives back
    order = sorted(tensors, key=lambda k: -tensors[k].dtype.itemsize)
    datas = [_tensor_bytes(k, tensors[k]) for k in order]
    offsets, pos = {}, 0
    for k, d in zip(order, datas):
        offsets[k] = [pos, pos + len(d)]
        pos += len(d)
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    for k, v in tensors.items():
        header[k] = {"dtype": inverse_safe_dtypes[v.dtype], "shape": list(v.shape), "data_offsets": offsets[k]}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    path = os.fspath(fn)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for d in datas:
                f.write(d)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)

