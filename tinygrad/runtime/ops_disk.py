"""The DISK device: a file's bytes, memory-mapped, as buffers that other devices copy from.

`Device["DISK:/path/to/file"]` maps that file read-only. Its buffers are zero-copy memoryview slices of the map, so
loading a checkpoint costs nothing until a tensor is copied (`.to(device)`, `.numpy()`), and then only that tensor's
pages are read. DISK is storage, not a compute device: ops on DISK tensors run on the default device (see
`Device.storage`), and a kernel scheduled on DISK raises `DiskComputeError` naming the fix.

NOTE: a DISK device never writes the file unless the caller opened it for writing, explicitly, with
`Device["DISK:/path"].open_for_writing()`. A file the user handed to a loader (`safe_load`, `torch_load`,
`gguf_load`) is theirs: a copy onto it (`.to("DISK:...")`), an `assign` into one of its tensors or any other write
raises `DiskReadOnlyError` (a PermissionError) and leaves the file as it was. Checkpoints are written by `safe_save`
(plain file I/O, a new file renamed over the old one).

Once opened for writing, writes (`copyin`: `.to("DISK:...")` writes the file's first bytes, `t.assign(x)` writes
x's bytes over DISK tensor t's range of the file) go to the file with `os.pwrite` and are seen through the shared
map; they only land in bytes the file already has. The map never grows or creates a file.
"""
from __future__ import annotations

import errno
import mmap
import os
import weakref

import numpy as np

from tinygrad.device import Allocator, BufferOptions
from tinygrad.helpers import defer_interrupt, guard_finalizers

COMPUTE_MESSAGE = "DISK tensors can't be computed on; move them with .to(device)"


class DiskComputeError(RuntimeError):
    """A kernel was asked to run on a DISK device (which only stores bytes)."""


class DiskReadOnlyError(PermissionError):
    """A write to a DISK device that was not opened for writing (see the module docstring)."""


def read_only_message(dname: str) -> str:
    return (f"{dname} is read-only: tinygrad doesn't write into a file it was handed (a checkpoint keeps its bytes). "
            "Move the tensor to a device first (.to(device)) and save with safe_save, or open the file for writing "
            f"explicitly with Device[{dname!r}].open_for_writing()")


def _address(mv: memoryview) -> int:
    """The memory address of a (possibly read-only) buffer's first byte."""
    return np.frombuffer(mv, dtype=np.uint8).__array_interface__["data"][0]


def _still_mapped(mv: memoryview, dname: str) -> memoryview:
    """`mv`, after checking that the file under its map still holds all of its bytes. Reading a page of a map past
    the end of a file truncated since it was mapped kills the process with SIGBUS; this raises instead. (A file
    truncated while the read is in progress can still do it: the check narrows the window, it can't close it.)"""
    mm = mv.obj
    if isinstance(mm, mmap.mmap) and len(mv):
        with memoryview(mm) as whole:
            end = _address(mv) - _address(whole) + len(mv)
        size = mm.size()  # the size of the mapped file now (fstat of the map's own descriptor)
        if size < end:
            raise OSError(errno.EIO, f"{dname}: the file was truncated to {size} bytes after it was mapped, and this "
                                     f"tensor's bytes end at {end}: load it again")
    return mv


class DiskAllocator(Allocator):
    """Buffers of a DISK device: memoryview slices of its file's map. `alloc(n)` is the file's first n bytes."""
    # a mapped file is not device memory
    counts_memory = False

    def __init__(self, device: DiskDevice):
        self.device = device

    def _alloc(self, size: int, options: BufferOptions | None):
        mv = self.device.map()
        if size > len(mv):
            raise ValueError(f"can't map {size} bytes of {self.device.dname}: the file has {len(mv)} bytes (a DISK "
                             f"buffer is a view of bytes the file already has; {COMPUTE_MESSAGE})")
        return mv[:size]

    def as_buffer(self, src: memoryview, size: int | None = None) -> memoryview:
        # zero-copy: the caller reads the mapped file's pages directly
        return _still_mapped(src, self.device.dname)

    def copyout(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = _still_mapped(src, self.device.dname)

    def copyin(self, dest: memoryview, src: memoryview) -> None:
        # NOTE: every write to a DISK buffer passes here: the last guard of a file nobody opened for writing
        if not self.device.writable:
            raise DiskReadOnlyError(read_only_message(self.device.dname))
        if len(src) != len(dest):
            raise ValueError(f"{self.device.dname}: writing {len(src)} bytes into a buffer of {len(dest)}")
        # the map is read-only; the write goes to the file, and the shared map shows it
        self.device.pwrite(src, self.device.offset_of(dest))


class DiskDevice:
    """A file seen as one device; see the module docstring. Device names are "DISK:<path>"."""

    def __init__(self, device: str):
        path = device[len("DISK:"):] if device.startswith("DISK:") else ""
        if not path:
            raise ValueError(f"bad device {device!r}: a DISK device names a file, as DISK:/path/to/file")
        self.dname, self.path = device, path
        self.allocator = DiskAllocator(self)
        # the current map, and the (inode, size, mtime) of the file it maps
        self._mv: memoryview | None = None
        self._key: tuple | None = None
        self._fd_rw: int | None = None
        # (st_dev, st_ino) of the file each live map was made from: a write lands only in the file a buffer maps
        self._idents: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # set only by open_for_writing: see the module docstring
        self.writable = False

    def open_for_writing(self) -> DiskDevice:
        """Allow writes into this file (copies onto this device, `assign` into its tensors): the explicit step a
        caller takes to change a file in place. Raises PermissionError when the file can't be opened for writing."""
        self._open_rw()
        self.writable = True
        return self

    def map(self) -> memoryview:
        """A read-only memoryview of the whole file, mapped anew when the file changed since the last map.

        Buffers made from an older map keep that map (and so the old file's pages) alive: a file replaced on disk
        (as `safe_save` replaces one) doesn't change tensors already loaded from it."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise FileNotFoundError(f"{self.dname}: can't open {self.path!r}: {e.strerror}") from None
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if self._mv is not None and key == self._key:
            return self._mv
        if st.st_size == 0:
            # mmap refuses empty files; an empty file is simply no bytes
            mv = memoryview(b"")
        else:
            with open(self.path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._idents[mm] = key[:2]
            mv = memoryview(mm)
        self._mv, self._key = mv, key
        self._close_rw()
        return mv

    def offset_of(self, mv: memoryview) -> int:
        """Where buffer `mv` (a slice of a map of this device's file) starts in the file, checked to be the file the
        path names now and to hold all of mv's bytes (a write never extends a file)."""
        mm = mv.obj
        ident = self._idents.get(mm) if isinstance(mm, mmap.mmap) else None
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise FileNotFoundError(f"{self.dname}: can't open {self.path!r}: {e.strerror}") from None
        if ident is None or ident != (st.st_dev, st.st_ino):
            raise RuntimeError(f"{self.dname}: this buffer is not part of the file's current map (the file was "
                               "replaced since it was loaded)")
        with memoryview(mm) as whole:
            offset = _address(mv) - _address(whole)
        if not 0 <= offset <= st.st_size - len(mv):
            raise OSError(errno.EIO, f"{self.dname}: the file has {st.st_size} bytes, a write of {len(mv)} at "
                                     f"{offset} doesn't fit (truncated since it was loaded?)")
        return offset

    def _open_rw(self) -> int:
        if self._fd_rw is None:
            try:
                self._fd_rw = os.open(self.path, os.O_WRONLY)
            except OSError as e:
                raise PermissionError(f"{self.dname}: can't open {self.path!r} for writing: {e.strerror}") from None
        return self._fd_rw

    def pwrite(self, data: memoryview, offset: int) -> None:
        if not self.writable:
            raise DiskReadOnlyError(read_only_message(self.dname))
        fd = self._open_rw()
        done = 0
        while done < len(data):
            done += os.pwrite(fd, data[done:], offset + done)

    def _close_rw(self) -> None:
        if getattr(self, "_fd_rw", None) is not None:
            os.close(self._fd_rw)
            self._fd_rw = None

    def __del__(self):
        try:
            self._close_rw()
        except KeyboardInterrupt:
            defer_interrupt()

    def synchronize(self) -> None:
        """Nothing is ever queued on a DISK device."""

    # ---- the compiled-device parts a DISK device doesn't have: the engine asks for them to run a kernel ----
    @property
    def linearizer_opts(self):
        raise DiskComputeError(f"{COMPUTE_MESSAGE} (a kernel was scheduled on {self.dname})")

    @property
    def compiler(self):
        raise DiskComputeError(f"{COMPUTE_MESSAGE} (a kernel was scheduled on {self.dname})")

    @property
    def renderer(self):
        raise DiskComputeError(f"{COMPUTE_MESSAGE} (a kernel was scheduled on {self.dname})")

    @property
    def runtime(self):
        raise DiskComputeError(f"{COMPUTE_MESSAGE} (a kernel was scheduled on {self.dname})")


guard_finalizers(DiskDevice.__del__)
