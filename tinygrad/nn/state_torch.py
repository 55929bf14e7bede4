"""PyTorch checkpoints (.pt, .pth) read without torch.

Two layouts exist. The zip one (torch >= 1.6): `<archive>/data.pkl` holds the pickled object and each tensor
storage is a member `<archive>/data/<key>`, stored uncompressed and so mapped zero-copy. The legacy one
(`_use_new_zipfile_serialization=False`): five pickles in a row (magic number, protocol version, system info, the
object, the list of storage keys), then each storage as an int64 element count and its raw bytes.

Inside the pickle a tensor is `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` (or `_v3`, which
adds the dtype, for dtypes without a storage class); a storage is a persistent id ("storage", storage class, key,
location, element count). The unpickler resolves only those names, OrderedDict, torch.Size and the dtype names:
anything else in a checkpoint raises `CheckpointError` naming it, so loading a file never runs code from it.
"""
from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
from collections import OrderedDict
from typing import Any

from tinygrad.device import Device
from tinygrad.dtype import DType, dtypes
from tinygrad.helpers import prod
from tinygrad.nn.state_file import CheckpointBytes, CheckpointError
from tinygrad.tensor import Tensor

_STORAGE_DTYPES = {"FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
                   "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
                   "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8,
                   "BoolStorage": dtypes.bool}
_TORCH_DTYPES = {"float32": dtypes.float32, "float": dtypes.float32, "float64": dtypes.float64,
                 "double": dtypes.float64, "float16": dtypes.float16, "half": dtypes.float16,
                 "bfloat16": dtypes.bfloat16, "int64": dtypes.int64, "long": dtypes.int64, "int32": dtypes.int32,
                 "int": dtypes.int32, "int16": dtypes.int16, "short": dtypes.int16, "int8": dtypes.int8,
                 "uint8": dtypes.uint8, "bool": dtypes.bool, "uint16": dtypes.uint16, "uint32": dtypes.uint32,
                 "uint64": dtypes.uint64}
_REBUILDERS = ("_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter", "_rebuild_parameter_with_state")
LEGACY_MAGIC = 0x1950a86a20f9469cfc6c
LEGACY_PROTOCOL = 1001


class _StorageType:
    """What `torch.FloatStorage` & co. unpickle to: the element dtype (uint8 bytes for UntypedStorage)."""

    def __init__(self, name: str, dtype: DType):
        self.name, self.dtype = name, dtype


class _TorchDType:
    """What `torch.float32` & co. unpickle to."""

    def __init__(self, dtype: DType):
        self.dtype = dtype


class _Storage:
    """One storage of the checkpoint: `numel` elements of `dtype` at byte `offset` of `src` (once located)."""

    def __init__(self, key: str, dtype: DType, numel: int):
        self.key, self.dtype, self.numel = key, dtype, numel
        self.src: CheckpointBytes | None = None
        self.offset = 0

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


class _MemReader(io.RawIOBase):
    """A seekable binary file over a memoryview (no copy; reads never allocate more than what is left)."""

    def __init__(self, mv: memoryview):
        super().__init__()
        self.mv, self.pos = mv, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = max(0, pos + (0, self.pos, len(self.mv))[whence])
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = len(self.mv) if n is None or n < 0 else min(len(self.mv), self.pos + n)
        ret = bytes(self.mv[self.pos:end]) if end > self.pos else b""
        self.pos = max(self.pos, end)
        return ret

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def readline(self, size: int | None = -1) -> bytes:
        end = len(self.mv) if size is None or size < 0 else min(len(self.mv), self.pos + size)
        chunk = self.mv[self.pos:end]
        nl = bytes(chunk).find(b"\n") if len(chunk) else -1
        return self.read(len(chunk) if nl < 0 else nl + 1)


def _as_strided(flat: Tensor, size: tuple[int, ...], stride: tuple[int, ...]) -> Tensor:
    """The view of 1-D `flat` with `size` and `stride` (in elements, from flat[0]), from movement ops only."""
    dims = [i for i, s in enumerate(size) if s != 1]
    order = sorted(dims, key=lambda i: -stride[i])
    expected, acc = {}, 1
    for i in reversed(order):
        expected[i] = acc
        acc *= size[i]
    if all(stride[i] == expected[i] for i in dims):
        # a permutation of a contiguous layout (a transposed weight): reshape, then permute back
        x = flat.shrink(((0, acc),)).reshape(tuple(size[i] for i in order))
        return x.permute(tuple(order.index(i) for i in dims)).reshape(size)
    # any strides, even overlapping: dim by dim, a window of width w becomes s rows of the next width, row r starting
    # at r*stride (expand the window s times, pad each copy by stride, and read it back as s rows of w+stride)
    x, w = flat, flat.shape[0]
    for i in dims:
        s, st = size[i], stride[i]
        w_next = w - (s - 1) * st
        lead = x.shape[:-1]
        x = x.unsqueeze(-2).expand(*lead, s, w)
        if st:
            x = x.reshape(*lead, s * w).pad(tuple([None] * len(lead) + [(0, s * st)]))
            x = x.reshape(*lead, s, w + st).shrink(tuple([None] * (len(lead) + 1) + [(0, w_next)]))
        w = w_next
    return x.reshape(size)


class _Unpickler(pickle._Unpickler):
    """Resolves only what torch checkpoints use; tensors are built by `loader`.

    NOTE: this is the pure-Python unpickler on purpose. The C one trusts the file's numbers: a memo index of 10**9
    (one flipped byte) makes it allocate a 10**9-entry memo table, and a bytes length is allocated before it is
    read. Here the memo is a dict, reads never exceed what the file has, and BUILD (setting attributes) is only
    allowed on the OrderedDicts torch writes, never on the tensors this loader returns."""
    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, loader: _TorchLoader):
        super().__init__(file)
        self.loader = loader

    def _load_build(self) -> None:
        if len(self.stack) < 2 or type(self.stack[-2]) is not OrderedDict:
            target = type(self.stack[-2]).__name__ if len(self.stack) >= 2 else "nothing"
            raise CheckpointError(f"{self.loader.src.name}: the pickle sets attributes of {target}, which torch "
                                  "checkpoints never do")
        pickle._Unpickler.load_build(self)

    def _load_bytearray8(self) -> None:
        raise CheckpointError(f"{self.loader.src.name}: protocol 5 bytearrays don't appear in torch checkpoints")

    dispatch[pickle.BUILD[0]] = _load_build
    dispatch[pickle.BYTEARRAY8[0]] = _load_bytearray8

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name in _REBUILDERS:
            return getattr(self.loader, name)
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch" and name == "Size":
            return tuple  # a shape kept next to the weights
        if module in ("torch", "torch.storage") and name == "UntypedStorage":
            return _StorageType(name, dtypes.uint8)
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name, _STORAGE_DTYPES[name])
        if module == "torch" and name in _TORCH_DTYPES:
            return _TorchDType(_TORCH_DTYPES[name])
        if module == "torch" and name.endswith("Storage"):
            raise CheckpointError(f"{self.loader.src.name}: tensor storage torch.{name} has no tinygrad dtype")
        raise CheckpointError(f"{self.loader.src.name}: refusing to load {module}.{name} from the pickle: a torch "
                              "checkpoint may only hold tensors, storages, OrderedDicts, sizes and plain Python values")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"):
            raise CheckpointError(f"{self.loader.src.name}: unknown persistent id {pid!r:.100}")
        stype, key, numel = pid[1], pid[2], pid[4]
        if not isinstance(stype, _StorageType) or not isinstance(key, str) or type(numel) is not int or numel < 0:
            raise CheckpointError(f"{self.loader.src.name}: bad storage reference {pid!r:.100}")
        view = pid[5] if len(pid) == 6 else None
        return self.loader.storage(key, stype.dtype, numel, view)


class _TorchLoader:
    """Shared by both layouts: storages by key, and tensors rebuilt from them."""

    def __init__(self, src: CheckpointBytes):
        self.src = src
        self.storages: dict[str, _Storage] = {}

    def storage(self, key: str, dtype: DType, numel: int, view: Any) -> _Storage:
        st = self.storages.get(key)
        if st is None:
            st = self.storages[key] = _Storage(key, dtype, numel)
            self.locate(st)
        if view is None:
            return st
        # a legacy storage view: (view key, element offset, element count) into root storage `key`
        if not (isinstance(view, tuple) and len(view) == 3 and all(type(v) is int for v in view[1:])) or \
                view[1] < 0 or view[2] < 0 or view[1] + view[2] > st.numel:
            raise CheckpointError(f"{self.src.name}: bad storage view {view!r:.100} of storage {key!r}")
        sub = _Storage(f"{key}[{view[1]}:]", st.dtype, view[2])
        sub.src, sub.offset = st.src, st.offset + view[1] * st.dtype.itemsize
        return sub

    def locate(self, st: _Storage) -> None:
        raise NotImplementedError

    def load_from(self, reader: _MemReader) -> Any:
        """Unpickle the object at `reader`'s position and leave it just past that pickle; errors of any kind in the
        pickle are reported as CheckpointError."""
        try:
            # the unpickler reads exactly the bytes of one pickle (_MemReader has no peek to read ahead with)
            return _Unpickler(reader, self).load()
        except CheckpointError:
            raise
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError,
                struct.error, OverflowError, RecursionError, UnicodeDecodeError, MemoryError) as e:
            raise CheckpointError(f"{self.src.name}: malformed pickle in the checkpoint: {type(e).__name__}: "
                                  f"{e}"[:500]) from None

    # ---- the rebuild functions the pickle calls ----
    def _rebuild_tensor_v2(self, storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                           metadata=None) -> Tensor | None:
        if not isinstance(storage, _Storage):
            raise CheckpointError(f"{self.src.name}: a tensor's storage is a {type(storage).__name__}")
        return self.tensor(storage, storage.dtype, storage_offset, size, stride)

    def _rebuild_tensor_v3(self, storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype,
                           metadata=None) -> Tensor | None:
        if not isinstance(storage, _Storage) or not isinstance(dtype, _TorchDType):
            raise CheckpointError(f"{self.src.name}: bad tensor record (storage {type(storage).__name__}, dtype "
                                  f"{type(dtype).__name__})")
        return self.tensor(storage, dtype.dtype, storage_offset, size, stride)

    def _rebuild_parameter(self, data, requires_grad=False, backward_hooks=None, state=None) -> Tensor | None:
        if data is not None and not isinstance(data, Tensor):
            raise CheckpointError(f"{self.src.name}: a Parameter holds a {type(data).__name__}, not a tensor")
        return data

    _rebuild_parameter_with_state = _rebuild_parameter

    def tensor(self, storage: _Storage, dtype: DType, offset: Any, size: Any, stride: Any) -> Tensor | None:
        ok = type(offset) is int and offset >= 0 and isinstance(size, tuple) and isinstance(stride, tuple) and \
            len(size) == len(stride) and all(type(v) is int and v >= 0 for v in size + stride)
        if not ok:
            raise CheckpointError(f"{self.src.name}: bad tensor geometry: offset {offset!r:.50}, size {size!r:.100}, "
                                  f"stride {stride!r:.100}")
        if storage.src is None:
            return None  # a first pass over a legacy file: storages are placed later
        numel = prod(size)
        span = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if numel else 0
        if (offset + span) * dtype.itemsize > storage.nbytes:
            raise CheckpointError(f"{self.src.name}: a tensor of size {size} and stride {stride} at offset {offset} "
                                  f"reads past its storage {storage.key!r} of {storage.nbytes} bytes")
        start = storage.offset + offset * dtype.itemsize
        what = f"storage {storage.key!r}"
        contiguous, acc = True, 1
        for s, st in reversed(list(zip(size, stride))):
            contiguous &= s == 1 or st == acc
            acc *= s
        if contiguous or numel == 0:
            return storage.src.tensor(start, dtype, size, what)
        flat = storage.src.tensor(start, dtype, (span,), what)
        # DISK can't hold views other than ranges: the span is copied to the default device and viewed there
        return _as_strided(flat.to(Device.DEFAULT) if flat.device.startswith("DISK:") else flat, size, stride)


class _ZipLoader(_TorchLoader):
    def __init__(self, src: CheckpointBytes):
        super().__init__(src)
        try:
            self.zf = zipfile.ZipFile(_MemReader(src.mv))
            names = self.zf.namelist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError, struct.error,
                NotImplementedError, OverflowError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{src.name}: not a readable zip archive: {e}") from None
        pkl = [n for n in names if n == "data.pkl" or (n.endswith("/data.pkl") and n.count("/") == 1)]
        if len(pkl) != 1:
            raise CheckpointError(f"{src.name}: a torch zip checkpoint holds one <archive>/data.pkl, found {pkl[:4]}")
        self.prefix = pkl[0][:-len("data.pkl")]
        byteorder = self._member(f"{self.prefix}byteorder") if f"{self.prefix}byteorder" in names else b"little"
        if byteorder != b"little":
            raise CheckpointError(f"{src.name}: byteorder {byteorder!r:.20} checkpoints are not supported")
        self.data_pkl = self._member(pkl[0])

    def _member(self, name: str) -> bytes:
        try:
            return self.zf.read(name)
        except (zipfile.BadZipFile, ValueError, EOFError, OSError, struct.error, NotImplementedError, OverflowError,
                KeyError, RuntimeError) as e:
            raise CheckpointError(f"{self.src.name}: can't read archive member {name!r}: {e}") from None

    def locate(self, st: _Storage) -> None:
        name = f"{self.prefix}data/{st.key}"
        try:
            info = self.zf.getinfo(name)
        except KeyError:
            raise CheckpointError(f"{self.src.name}: storage {st.key!r} is missing from the archive") from None
        if info.file_size < st.nbytes:
            raise CheckpointError(f"{self.src.name}: storage {st.key!r} needs {st.nbytes} bytes, its member has "
                                  f"{info.file_size}")
        if info.compress_type != zipfile.ZIP_STORED:
            st.src = CheckpointBytes.in_memory(self._member(name), f"{self.src.name}:{name}")
            return
        # a stored member's bytes follow its local header: 30 fixed bytes, the name and an extra field
        hdr = info.header_offset
        self.src.check_range(hdr, 30, f"the local header of {name!r}")
        sig, name_len, extra_len = struct.unpack_from("<4s22xHH", self.src.mv, hdr)
        if sig != b"PK\x03\x04":
            raise CheckpointError(f"{self.src.name}: bad local header for archive member {name!r}")
        st.src, st.offset = self.src, hdr + 30 + name_len + extra_len
        self.src.check_range(st.offset, info.file_size, f"archive member {name!r}")


class _LegacyLoader(_TorchLoader):
    def locate(self, st: _Storage) -> None:
        pass  # placed after the object's pickle, once the storage list has been read

    def run(self) -> Any:
        reader = _MemReader(self.src.mv)
        header = []
        for _ in range(3):
            header.append(self.load_from(reader))
        if header[0] != LEGACY_MAGIC or header[1] != LEGACY_PROTOCOL:
            raise CheckpointError(f"{self.src.name}: not a legacy torch checkpoint (magic {header[0]!r:.30}, protocol "
                                  f"{header[1]!r:.30})")
        if not isinstance(header[2], dict) or header[2].get("little_endian") is not True:
            raise CheckpointError(f"{self.src.name}: only little-endian legacy checkpoints are supported")
        # pass 1 finds the storages; their bytes follow the key list after this pickle
        obj_start = reader.tell()
        self.load_from(reader)
        keys = self.load_from(reader)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise CheckpointError(f"{self.src.name}: bad storage key list in a legacy checkpoint")
        pos = reader.tell()
        for k in keys:
            st = self.storages.get(k)
            if st is None:
                raise CheckpointError(f"{self.src.name}: storage {k!r} is listed but no tensor uses it")
            self.src.check_range(pos, 8, f"the size of storage {k!r}")
            (numel,) = struct.unpack_from("<q", self.src.mv, pos)
            if numel != st.numel:
                raise CheckpointError(f"{self.src.name}: storage {k!r} has {numel} elements on disk, {st.numel} in "
                                      "the pickle")
            st.src, st.offset = self.src, pos + 8
            self.src.check_range(st.offset, st.nbytes, f"storage {k!r}")
            pos = st.offset + st.nbytes
        missing = [k for k, st in self.storages.items() if st.src is None]
        if missing:
            raise CheckpointError(f"{self.src.name}: storages {missing[:4]} are used but not in the file")
        # pass 2 builds the tensors
        reader.seek(obj_start)
        return self.load_from(reader)


def torch_load(fn: str | os.PathLike | Tensor) -> Any:
    """The object saved by `torch.save` in `fn` (usually a state dict of name -> Tensor), without importing torch.

    Tensors are zero-copy views on the file's DISK device; one saved as a non-contiguous view of its storage
    (a transposed weight) is copied to the default device and viewed there."""
    src = CheckpointBytes(fn)
    head = bytes(src.mv[:4])
    if head == b"PK\x03\x04":
        loader = _ZipLoader(src)
        return loader.load_from(_MemReader(memoryview(loader.data_pkl)))
    if head[:1] == b"\x80":
        return _LegacyLoader(src).run()
    raise CheckpointError(f"{src.name}: not a PyTorch checkpoint (neither a zip archive nor a legacy pickle; the "
                          "pre-1.0 tar layout is not supported)")
