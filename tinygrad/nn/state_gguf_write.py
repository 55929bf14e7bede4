"""Writing GGUF files (the layout state_gguf.py reads): for tests and for synthetic models of a real file's shapes.

`kv` is a list of (key, value type, value): the value types are GGUF's ids (U8 ... F64, STRING, ARRAY below); an
array's value is (element type, list of elements). `tensors` is a list of (name, dims innermost first, ggml type,
raw bytes): the bytes are written as given, so quantized blocks are the caller's to make (see GGML_TYPES in
state_gguf.py for their sizes).

    >>> data = write_gguf([("general.architecture", STRING, "llama")], [("w", [2], 0, bytes(8))])
    >>> data[:4], len(data) % 32
    (b'GGUF', 0)
"""
from __future__ import annotations

import os
import struct
from typing import Any, Iterator

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
               I64: "<q", F64: "<d"}

KV = list[tuple[str, int, Any]]
TensorSpec = list[tuple[str, list[int], int, bytes]]


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(vtype: int, v: Any) -> bytes:
    if vtype == STRING:
        return _string(v)
    if vtype == ARRAY:
        etype, items = v
        if etype in _SCALAR_FMT and etype != BOOL:
            # one pack call for a numeric array: a vocabulary's 262,144 scores would take a second item by item
            return struct.pack(f"<IQ{len(items)}{_SCALAR_FMT[etype][1]}", etype, len(items), *items)
        return struct.pack("<IQ", etype, len(items)) + b"".join(_value(etype, x) for x in items)
    return struct.pack(_SCALAR_FMT[vtype], v)


def gguf_chunks(kv: KV, tensors: TensorSpec, version: int = 3, alignment: int = 32) -> Iterator[bytes]:
    """A GGUF file's bytes in pieces (header, metadata, tensor infos, then each tensor's data, padded to
    `alignment`), so a large file is written without being joined in memory."""
    head = [b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))]
    head += [_string(key) + struct.pack("<I", vtype) + _value(vtype, v) for key, vtype, v in kv]
    pos = 0
    for name, dims, ttype, raw in tensors:
        head.append(_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ttype, pos))
        pos += -(-len(raw) // alignment) * alignment
    size = sum(map(len, head))
    yield b"".join(head) + bytes(-size % alignment)
    for _, _, _, raw in tensors:
        yield raw
        yield bytes(-len(raw) % alignment)


def write_gguf(kv: KV, tensors: TensorSpec, version: int = 3, alignment: int = 32) -> bytes:
    """A whole GGUF file as bytes (see the module docstring for `kv` and `tensors`)."""
    return b"".join(gguf_chunks(kv, tensors, version, alignment))


def save_gguf(path: str | os.PathLike, kv: KV, tensors: TensorSpec, alignment: int = 32) -> None:
    """Write a GGUF file to `path` piece by piece."""
    with open(path, "wb") as f:
        for chunk in gguf_chunks(kv, tensors, alignment=alignment):
            f.write(chunk)
