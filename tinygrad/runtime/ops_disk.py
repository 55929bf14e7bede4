"""The DISK device: a file's bytes, memory-mapped, as buffers that other devices copy from.

`Device["DISK:/path/to/file"]` maps that file read-only. Its buffers are zero-copy memoryview slices of the map, so
loading a checkpoint costs nothing until a tensor is copied (`.to(device)`, `.numpy()`), and then only that tensor's
pages are read. DISK is storage, not a compute device: kernels can't run on it, and asking for one raises
`DiskComputeError` naming the fix.

Writes (`copyin`, reached by `.to("DISK:...")`) go to the file with `os.pwrite` and are seen through the shared map;
they only land in bytes the file already has. The map never grows or creates a file: checkpoint writers use plain
file I/O.
"""
from __future__ import annotations

import errno
import mmap
import os

import numpy as np

from tinygrad.device import Allocator, BufferOptions
from tinygrad.helpers import defer_interrupt, guard_finalizers

COMPUTE_MESSAGE = "DISK tensors can't be computed on; move them with .to(device)"


class DiskComputeError(RuntimeError):
    """A kernel was asked to run on a DISK device (which only stores bytes)."""


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
        # the map is read-only; the write goes to the file, and the shared map shows it
        offset = self.device.offset_of(dest)
        self.device.pwrite(src, offset)


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
                mv = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        self._mv, self._key = mv, key
        self._close_rw()
        return mv

    def offset_of(self, mv: memoryview) -> int:
        """Where buffer `mv` (a slice of this device's current map) starts in the file."""
        base = self.map()
        offset = _address(mv) - _address(base) if len(mv) and len(base) else 0
        if not 0 <= offset <= len(base) - len(mv):
            raise RuntimeError(f"{self.dname}: this buffer is not part of the file's current map (the file changed "
                               "since it was loaded)")
        return offset

    def pwrite(self, data: memoryview, offset: int) -> None:
        if self._fd_rw is None:
            try:
                self._fd_rw = os.open(self.path, os.O_WRONLY)
            except OSError as e:
                raise PermissionError(f"{self.dname}: can't open {self.path!r} for writing: {e.strerror}") from None
        done = 0
        while done < len(data):
            done += os.pwrite(self._fd_rw, data[done:], offset + done)

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
