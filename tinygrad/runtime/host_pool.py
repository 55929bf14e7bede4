"""The thread pool of threaded CLANG kernels built by gcc: include/host_pool.h, compiled by the host compiler into a
shared object that provides the GNU OpenMP entry points the kernels call, loaded with RTLD_GLOBAL before the first
threaded kernel so the kernels bind to it instead of libgomp (the pool's header says why: libgomp's barrier waits for
a worker that a busy machine has put aside, and its idle workers spin for long).

`load_pool(threads)` returns the loaded library, or None where it can't be used (not Linux, the build fails, or
TG_HOST_POOL=0, the default): threaded kernels then run on libgomp. The built object is kept in the disk cache, keyed
by the source and the compiler.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import pathlib
import sys
import tempfile

from tinygrad.diskcache import diskcache_get, diskcache_put
from tinygrad.helpers import getenv

_SOURCE = pathlib.Path(__file__).parent / "include" / "host_pool.h"
# the kernels' references carry libgomp's symbol versions; the pool defines the same ones so they bind to it
_VERSIONS = ("OMP_1.0 { global: omp_get_thread_num; omp_get_num_threads; omp_get_max_threads; omp_set_num_threads;"
             " local: *; };\nGOMP_4.0 { global: GOMP_parallel; } OMP_1.0;\n")


def _build(cc: str, src: str) -> bytes | None:
    from tinygrad.runtime.host_cc import run_cc
    with tempfile.TemporaryDirectory(prefix="tinygrad-pool-") as tmp:
        script, out = os.path.join(tmp, "pool.map"), os.path.join(tmp, "pool.so")
        with open(script, "w") as f:
            f.write(_VERSIONS)
        proc = run_cc(cc, ["-pthread", f"-Wl,--version-script={script}"], src, out)
        if proc.returncode != 0:
            return None
        with open(out, "rb") as f:
            return f.read()


def load_pool(cc: str, threads: int, fingerprint: str) -> ctypes.CDLL | None:
    """The pool loaded for good (RTLD_GLOBAL) with `threads` threads, or None where it can't be used. `fingerprint`
    names the compiler's flags and the host CPU (-march=native builds are per CPU), as kernels' cache keys do."""
    if not sys.platform.startswith("linux") or not getenv("TG_HOST_POOL", 0):
        return None
    src = _SOURCE.read_text()
    key = hashlib.sha256(f"{fingerprint}\0{src}".encode()).hexdigest()
    image = diskcache_get("host_pool", key)
    if image is None:
        image = _build(cc, src)
        if image is None:
            return None
        diskcache_put("host_pool", key, image)
    # a memfd, not a file: nothing to clean up. NOTE: it stays open for good, as the pool stays loaded: glibc knows a
    # loaded object by its path, so "/proc/self/fd/N" must not come to name another file (runtimes/cpu/host_os.cpp)
    fd = os.memfd_create("tinygrad-host-pool")
    try:
        view = memoryview(image)
        while view:
            view = view[os.write(fd, view):]
        lib = ctypes.CDLL(f"/proc/self/fd/{fd}", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        os.close(fd)
        return None
    lib.omp_set_num_threads(threads)
    return lib
