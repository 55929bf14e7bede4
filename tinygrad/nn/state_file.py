"""A checkpoint file's bytes, and tensors over byte ranges of it: what the safetensors, torch and GGUF loaders share.

A path is memory-mapped through the DISK device: each tensor made from it is a realized LazyBuffer base on
"DISK:<path>" whose buffer is a zero-copy slice of the map, so nothing is read until a tensor is used. A Tensor
source (tinygrad 0.9's loaders also take the file as a uint8 Tensor) is read the same way when it lives on a DISK
device, and otherwise copied to the host once; its tensors then come out on its own device.
"""
from __future__ import annotations

import errno
import mmap
import os
import weakref
import zlib

import numpy as np

from tinygrad.device import Buffer, Device
from tinygrad.dtype import DType, dtypes
from tinygrad.helpers import prod
from tinygrad.lazy import LazyBuffer
from tinygrad.ops import LoadOps
from tinygrad.tensor import Tensor


class CheckpointError(ValueError):
    """A checkpoint file is malformed, truncated or uses something this loader does not support."""


class CheckpointChangedError(OSError):
    """A mapped checkpoint file was truncated or rewritten after it was loaded (see CheckpointBytes.check_unchanged)."""


# bytes a pread takes at a time (a checksum of a whole table never holds more than this of it)
READ_CHUNK = 8 << 20


def _contiguous_range(t: Tensor) -> tuple[int, int] | None:
    """(first element, element count) in its base's buffer when `t` reads one contiguous range of it, else None."""
    st = t.lazydata.st
    if len(st.views) != 1:
        return None
    v = st.views[0]
    if v.mask is not None or not all(isinstance(x, int) for x in (*v.shape, *v.strides, v.offset)):
        return None
    expected, acc = [], 1
    for s in reversed(v.shape):
        expected.append(0 if s == 1 else acc)
        acc *= s
    if any(s != 1 and st_ != e for s, st_, e in zip(v.shape, v.strides, reversed(expected))):
        return None
    return v.offset, prod(v.shape)


def _realized(device: str, shape: tuple[int, ...], dtype: DType, opaque) -> Tensor:
    """A tensor whose (already realized) buffer on `device` is `opaque`."""
    lb = LazyBuffer.loadop(LoadOps.EMPTY, tuple(shape), dtype, device)
    lb.buffer = Buffer(device, prod(shape), dtype, opaque=opaque)
    return Tensor(lb, device=device)


def _stat_key(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class CheckpointBytes:
    """The bytes of one checkpoint (`mv`, read-only) and a factory of tensors over ranges of them (`tensor`)."""

    def __init__(self, src: str | os.PathLike | Tensor):
        if isinstance(src, Tensor):
            self._from_tensor(src)
        elif isinstance(src, (str, os.PathLike)):
            path = os.path.abspath(os.fspath(src))
            if not os.path.isfile(path):
                raise FileNotFoundError(f"checkpoint {path!r} is not a file (or doesn't exist)")
            self.name, self.device, self.disk = path, f"DISK:{path}", True
            self.mv: memoryview = Device[self.device].map()
            self._stat_key = _stat_key(path)
            # a descriptor of the same file for `read`: pread past the end of a truncated file is a short read, where
            # a read through the map is a SIGBUS
            self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            weakref.finalize(self, os.close, self._fd)
        else:
            raise TypeError(f"a checkpoint is a file path or a uint8 Tensor of the file, not {type(src).__name__}")

    def read(self, start: int, length: int) -> bytes:
        """A copy of bytes start..start+length, read from the file itself (pread), never through the map, so a
        file truncated or shortened meanwhile raises CheckpointChangedError where a mapped read would be a SIGBUS."""
        fd = getattr(self, "_fd", None)
        if fd is None:
            return bytes(self.mv[start:start + length])
        out = bytearray()
        while len(out) < length:
            piece = os.pread(fd, min(length - len(out), READ_CHUNK), start + len(out))
            if not piece:
                raise CheckpointChangedError(errno.EIO, f"{self.name}: the file was truncated after it was loaded "
                                                        f"(bytes up to {start + length} are read from it): put it "
                                                        "back or load it again")
            out += piece
        return bytes(out)

    def digest(self, start: int, length: int) -> int:
        """A checksum of bytes start..start+length, read from the file a chunk at a time (see read)."""
        crc = 0
        for at in range(start, start + length, READ_CHUNK):
            crc = zlib.crc32(self.read(at, min(READ_CHUNK, start + length - at)), crc)
        return crc

    def check_unchanged(self, start: int, length: int, digest: int) -> None:
        """Raise CheckpointChangedError unless bytes start..start+length of the mapped file are still there and, if
        the file was written since it was loaded, still have checksum `digest` (a file put back as it was passes).

        NOTE: for code that reads the map directly long after loading (a server's embedding rows): a read of a
        mapped page past the end of a truncated file kills the process with SIGBUS, which Python can't catch, so the
        size is checked first. A file replaced by a rename leaves the map on the old file, which stays whole."""
        mm = getattr(self.mv, "obj", None) if self.disk else None
        if not isinstance(mm, mmap.mmap):
            return
        size = mm.size()  # the mapped file's size now (fstat of the map's own descriptor)
        if size < start + length:
            raise CheckpointChangedError(errno.EIO, f"{self.name}: the file was truncated to {size} bytes after it "
                                                    f"was loaded (bytes up to {start + length} are read from it): "
                                                    "put it back or load it again")
        key = _stat_key(self.name)
        if key == self._stat_key or key is None or key[:2] != self._stat_key[:2]:
            return  # unchanged, or the path now names another file while the map keeps the old one
        if self.digest(start, length) != digest:
            raise CheckpointChangedError(errno.EIO, f"{self.name}: the file was rewritten after it was loaded: put "
                                                    "it back or load it again")
        self._stat_key = key  # written, but these bytes are as they were

    def release_pages(self, start: int = 0, length: int | None = None) -> None:
        """Let the OS drop the mapped file's pages from memory (a read-only map: the next access reads them from the
        file again), for a caller that has copied what it keeps: all of them, or the whole pages inside bytes
        start..start+length. Nothing for bytes not mapped from a file."""
        mm = getattr(self.mv, "obj", None) if self.disk else None
        if not (isinstance(mm, mmap.mmap) and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED")):
            return
        if length is None:
            mm.madvise(mmap.MADV_DONTNEED)
            return
        # only pages wholly inside the range: a page shared with a neighbour's bytes may still be in use
        lo = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
        hi = (start + length) // mmap.PAGESIZE * mmap.PAGESIZE
        if hi > lo:
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    @classmethod
    def in_memory(cls, data: bytes, name: str, device: str | None = None) -> CheckpointBytes:
        """Bytes already read into host memory (a compressed archive member): its tensors are copied to `device`."""
        self = cls.__new__(cls)
        self.name, self.device, self.disk = name, Device.canonicalize(device), False
        self.mv = memoryview(data)
        return self

    def _from_tensor(self, t: Tensor) -> None:
        if isinstance(t.device, tuple):
            t = t.to(t.device[0])  # on several devices: the bytes of the whole tensor, gathered
        self.name, self.device = f"<Tensor on {t.device}>", t.device
        self.disk = t.device.startswith("DISK:")
        if not self.disk:
            # one host copy of the bytes; the tensors made from it are copies again, on the source's device
            self.mv = memoryview(t.contiguous().realize().lazydata.base.realized.as_buffer().tobytes()) \
                if t.numel() else memoryview(b"")
            return
        rng = _contiguous_range(t)
        if rng is None:
            raise CheckpointError(f"{self.name}: a DISK tensor of a checkpoint must be one contiguous range of its "
                                  "file")
        base = t.lazydata.base
        if base.realized is None:
            if base.op is not LoadOps.EMPTY:
                raise CheckpointError(f"{self.name}: this DISK tensor is computed, not a view of its file")
            # Tensor.empty(n, device="DISK:...") maps the file's first n bytes when realized
            Tensor(base, device=t.device).realize()
        isz = base.dtype.itemsize
        self.mv = base.realized.as_buffer()[rng[0] * isz:(rng[0] + rng[1]) * isz]

    def __len__(self) -> int:
        return len(self.mv)

    def check_range(self, offset: int, nbytes: int, what: str) -> None:
        if not (isinstance(offset, int) and isinstance(nbytes, int)) or offset < 0 or nbytes < 0 or \
                offset + nbytes > len(self.mv):
            raise CheckpointError(f"{self.name}: {what} spans bytes [{offset}, {offset}+{nbytes}) but the file has "
                                  f"{len(self.mv)} bytes (truncated or corrupt)")

    def tensor(self, offset: int, dtype: DType, shape: tuple[int, ...], what: str = "a tensor") -> Tensor:
        """The `prod(shape)` elements of `dtype` at byte `offset`, as a tensor of `shape` (zero-copy on DISK)."""
        numel = prod(shape)
        nbytes = numel * dtype.itemsize
        self.check_range(offset, nbytes, what)
        data = self.mv[offset:offset + nbytes]
        if self.disk:
            return _realized(self.device, shape, dtype, data)
        # a host copy of the bytes as a CPU buffer (its memory is a numpy byte array, so any dtype, bfloat16 too,
        # is carried bit for bit), then copied to the source's device
        return _realized("CPU", shape, dtype, np.frombuffer(data, dtype=np.uint8).copy()).to(self.device)

    def raw(self, offset: int, nbytes: int, what: str = "a tensor") -> Tensor:
        """Bytes [offset, offset+nbytes) as a 1-D uint8 tensor."""
        return self.tensor(offset, dtypes.uint8, (nbytes,), what)
