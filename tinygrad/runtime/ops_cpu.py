"""The CPU device: buffers are numpy arrays (host data enters the graph here, then is COPYed to its device).

Kernels on CPU are the CLANG device's C kernels, called on the numpy arrays' memory.
"""
from __future__ import annotations

import numpy as np

from tinygrad.device import Allocator, BufferOptions, Compiled
from tinygrad.runtime import _cpu
from tinygrad.runtime.graph import NativeGraph
from tinygrad.runtime.ops_clang import ClangCompiler, ClangProgram, host_renderer


class NumpyAllocator(Allocator):
    """Host memory as numpy arrays; `as_buffer` is a zero-copy view of their bytes."""

    def _alloc(self, size: int, options: BufferOptions | None):
        return np.empty(size, dtype=np.uint8)

    def as_buffer(self, src: np.ndarray, size: int | None = None) -> memoryview:
        return memoryview(np.ascontiguousarray(src).reshape(-1).view(np.uint8))

    def copyin(self, dest: np.ndarray, src: memoryview) -> None:
        dest.reshape(-1).view(np.uint8)[:] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dest: memoryview, src: np.ndarray) -> None:
        np.frombuffer(dest, dtype=np.uint8)[:] = src.reshape(-1).view(np.uint8)


class CPUDevice(Compiled):
    def __init__(self, device: str):
        super().__init__(device, NumpyAllocator(), ClangCompiler(), ClangProgram, host_renderer(), graph=NativeGraph)
        self.native = _cpu.Device()
