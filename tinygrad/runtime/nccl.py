"""NCCL for the CUDA runtime: loading the library, one communicator per tuple of GPUs, and the runner that queues a
collective on the devices' streams.

NCCLRunner calls the C++ Communicator (runtimes/cuda/nccl.h): each device's NCCL call is queued on that device's
stream, in one NCCL group, so it is ordered with the kernels and copies around it without any host synchronisation.
Under TinyJit a capture spanning several CUDA GPUs is replayed as one CUDA graph (graph_cuda.CUDAMultiGraph): the
kernels are kernel nodes, and the NCCL group is captured from the devices' streams into a child graph of it, so a
data-parallel step is one cuGraphLaunch with the collectives inside.

NOTE: a captured NCCL call has its buffer addresses fixed. Every replay compares them with the buffers bound for that
call, and captures the collective again (a fresh NCCL group on capturing streams, swapped into the instantiated
graph) before the launch when one moved; a collective over buffers the JIT keeps (gradients) is captured once.
Captures the graph can't hold (copies from the host, other devices) and CUDA_MULTIGRAPH=0 replay item by item,
issuing each collective again on the devices' streams in order with the captured kernels.

NCCL is loaded on first use: NCCL_LIBRARY if set, else libnccl.so.2 from the loader's search path, else the one in
the nvidia-nccl wheel (site-packages/nvidia/nccl/lib, as PyTorch installs it).

The collectives themselves (lazy graph nodes the scheduler turns into NCCLRunners) are built above the runtimes, in
tinygrad/collectives_nccl.py: a runtime never imports the lazy graph.
"""
from __future__ import annotations

import atexit
import glob
import os
import sys
import time

from tinygrad.device import Device
from tinygrad.dtype import dtypes
from tinygrad.helpers import DEBUG, getenv
from tinygrad.runtime import _cuda

__all__ = ["NCCLRunner", "available", "communicator", "load", "nccl_candidates", "nccl_dtype", "reset"]

# tinygrad's dtypes that NCCL has a type for (its ncclDataType_t names, as the C++ side takes them)
_DTYPES = {dtypes.int8: "int8", dtypes.uint8: "uint8", dtypes.int32: "int32", dtypes.uint32: "uint32",
           dtypes.int64: "int64", dtypes.uint64: "uint64", dtypes.float16: "float16", dtypes.bfloat16: "bfloat16",
           dtypes.float32: "float32", dtypes.float64: "float64"}


def nccl_dtype(dtype) -> str | None:
    """NCCL's name for `dtype`, or None when NCCL has no such type (bool, int16, ...)."""
    return _DTYPES.get(dtype)


def nccl_candidates() -> list[str]:
    """Where NCCL is looked for: NCCL_LIBRARY alone if set; else libnccl.so.2 (the loader's search path), then the
    nvidia-nccl wheel's folder on sys.path (PyTorch's wheels depend on it)."""
    path = getenv("NCCL_LIBRARY")
    if path:
        return [path]
    found = []
    for site in sys.path:
        for sub in ("nvidia/nccl/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"):
            found += sorted(glob.glob(os.path.join(site, sub, "libnccl.so*")))
    return ["libnccl.so.2"] + [p for p in dict.fromkeys(found) if os.path.isfile(p)]


_load_error: str | None = None
_loaded: str | None = None


def load() -> str:
    """Loads NCCL (once); returns what loaded. RuntimeError naming NCCL and every place tried when it can't."""
    global _loaded
    if _loaded is None:
        _loaded = _cuda.nccl_load(nccl_candidates())
    return _loaded


def available() -> bool:
    """Whether NCCL loads; the reason it does not is kept and printed once at DEBUG >= 1. Asked for every
    collective built, so a load is not tried again once it worked."""
    global _load_error
    if _loaded is not None:
        return True
    try:
        load()
        return True
    except RuntimeError as e:
        if _load_error is None and DEBUG >= 1:
            print(f"NCCL unavailable, CUDA collectives use the ring of copies: {e}")
        _load_error = str(e)
        return False


# device tuple -> its communicator: NCCL communicators take hundreds of milliseconds to make, so they are kept
_comms: dict[tuple[str, ...], object] = {}


def communicator(devices: tuple[str, ...]):
    """The NCCL communicator over `devices` (CUDA device names, rank r = devices[r]), made on first use."""
    comm = _comms.get(devices)
    if comm is None:
        load()
        comm = _comms[devices] = _cuda.Communicator([Device[d].native for d in devices])
    return comm


def reset() -> None:
    """Forget the communicators (and the loaded NCCL), e.g. when tests switch to another fake machine."""
    global _load_error, _loaded
    _comms.clear()
    _cuda.nccl_unload()
    _load_error, _loaded = None, None


# NOTE: communicators are destroyed while the interpreter (and NCCL's threads) still run, not by module teardown
atexit.register(_comms.clear)


class NCCLRunner:
    """Runs one collective: `bufs` are the devices' outputs, then their inputs, in device order. A Runner by its
    interface (engine/realize.py: `runner(bufs, var_vals, wait)`, `dname`, `display_name`), not by subclassing:
    the runtimes sit below the engine."""
    graph_kind = "collective"  # CUDAMultiGraph (graph_cuda.py) captures it into its CUDA graph

    def __init__(self, kind: str, op: str | None, devices: tuple[str, ...], count: int, dtype):
        self.kind, self.op, self.devices, self.count, self.dtype = kind, op, devices, count, dtype
        self.dname = devices[0]
        self.display_name = f"nccl {kind} {count}x{dtype.name} on {len(devices)}"

    def __call__(self, bufs: list, var_vals: dict, wait: bool = False) -> float | None:
        n = len(self.devices)
        outs, ins = [b._buf for b in bufs[:n]], [b._buf for b in bufs[n:]]
        comm = communicator(self.devices)
        st = time.perf_counter()
        if self.kind == "all_gather":
            comm.all_gather(ins, outs, self.count, _DTYPES[self.dtype])
        else:
            getattr(comm, self.kind)(ins, outs, self.count, _DTYPES[self.dtype], self.op)
        if wait or DEBUG >= 2:
            for d in self.devices:
                Device[d].synchronize()
        return time.perf_counter() - st
