"""The test doubles of the C++ runtimes (test/native), built on first use and loaded into the test process.

They are never part of the package: the runtime modules offer seams only (`_cuda.use_driver_library`,
`_cuda.nvrtc_load`, `_cpu.set_host_os`), and the doubles plug in through them. The build goes to build/test-native
with cmake (and ninja where available), from the environment the tests run in; it is skipped when no source changed
since the last one, so after the first run it costs a hash of a few files.

    T = fake_cuda()             # the fake driver's inspection API: T.launches(), T.calls("cuMemAlloc"), ...
    install_fake_metal()        # the fake Objective-C runtime and Metal: fake_metal().live_objects(), ...
    install_fake_cuda(device_count=2)
    ...
    uninstall_fake_cuda()
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import hashlib
import importlib.util
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "test" / "native"
BUILD = ROOT / "build" / "test-native"
MODULE = "tinygrad_test_doubles"
# what the doubles are compiled from: their own folder and the runtime headers they implement
_INPUTS = [SOURCE, ROOT / "runtimes" / "cuda" / "cuda_api.h", ROOT / "runtimes" / "cuda" / "nccl_api.h",
           ROOT / "runtimes" / "cpu" / "host_os.h", ROOT / "runtimes" / "amd" / "amd_os.h",
           ROOT / "runtimes" / "amd" / "kfd_abi.h"]


def _tool(name: str) -> str | None:
    """A build tool from PATH, or installed next to this Python (a venv's bin/ that is not activated)."""
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else None


def _fingerprint() -> str:
    h = hashlib.sha256(f"{sys.executable}\n{sys.version}\n".encode())
    for item in _INPUTS:
        for path in sorted(item.rglob("*")) if item.is_dir() else [item]:
            if path.is_file():
                h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _library() -> Path | None:
    found = sorted(BUILD.glob(f"{MODULE}{sysconfig.get_config_var('EXT_SUFFIX')}"))
    return found[0] if found else None


@functools.cache
def build() -> Path:
    """Builds the doubles if any source changed since the last build; returns the path of the module. Parallel test
    processes (pytest-xdist) take turns: one builds, the others wait and then find the build done."""
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _build_locked()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build_locked() -> Path:
    stamp = BUILD / "sources.sha256"
    fingerprint = _fingerprint()
    lib = _library()
    if lib is not None and stamp.exists() and stamp.read_text() == fingerprint:
        return lib
    cmake = _tool("cmake")
    if cmake is None:
        raise RuntimeError("building test/native needs cmake: pip install '.[test]' installs it")
    configure = [cmake, "-S", str(SOURCE), "-B", str(BUILD), f"-DPython_EXECUTABLE={sys.executable}",
                 "-DCMAKE_BUILD_TYPE=Debug"]  # Debug: the quickest to compile; the doubles need no speed
    ninja = _tool("ninja")
    if ninja is not None and not (BUILD / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    for cmd in (configure, [cmake, "--build", str(BUILD)]):
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            log = out.stdout[-4000:] + out.stderr[-4000:]
            raise RuntimeError(f"building test/native failed: {' '.join(cmd)}\n{log}")
    lib = _library()
    if lib is None:
        raise RuntimeError(f"building test/native made no {MODULE} module in {BUILD}")
    stamp.write_text(fingerprint)
    return lib


@functools.cache
def doubles():
    """The tinygrad_test_doubles module (built first if needed)."""
    path = build()
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_cuda():
    """The fake CUDA driver's configuration and inspection API (test/native/fake_driver.h)."""
    return doubles().fake_cuda


def install_fake_cuda(**config) -> None:
    """A fresh fake machine (`config`: device_count, driver_version, memory_bytes, compute_capability, param_info,
    tensor_map), loaded by the CUDA runtime as its driver and its NVRTC, by path, the way it loads libcuda.so.1 and
    libnvrtc."""
    from tinygrad.runtime import _cuda
    fake_cuda().install(**config)
    path = str(build())
    _cuda.use_driver_library(path)
    _cuda.nvrtc_unload()
    _cuda.nvrtc_load([path])


def uninstall_fake_cuda() -> None:
    """Back to libcuda.so.1 and no NVRTC loaded. Devices of the fake are collected first, while it still answers."""
    from tinygrad.runtime import _cuda
    gc.collect()
    fake_cuda().uninstall()
    _cuda.use_driver_library(None)
    _cuda.nvrtc_unload()


def fake_kfd():
    """The fake KFD's configuration and inspection API (test/native/fake_kfd.h): stats(), fail_next(nr, errno),
    hang(on)."""
    return doubles().fake_kfd


_kfd_table = 0  # the fake KFD's OS table while it is installed, else 0


def forget_amd_devices() -> None:
    """Drops every AMD device and whatever holds one (compiled kernels, schedule plans), so that none opened on one
    machine (a fake, or the real KFD) is used on the next: each device keeps the OS table and KFD it was opened
    with."""
    from tinygrad.device import Device
    from tinygrad.engine import realize
    from tinygrad.engine.plan import clear_plans
    for name in [d for d in list(Device._opened) if d.split(":")[0] == "AMD"]:
        Device._opened.pop(name)
    for key in [k for k in realize.method_cache if str(k[0]).split(":")[0] == "AMD"]:
        del realize.method_cache[key]
    clear_plans()  # cached schedule plans hold their kernels too
    gc.collect()


def install_fake_kfd(gpus=("gfx1100",)) -> None:
    """A fresh fake machine with these GPU models, served to the AMD runtime through its OS table, and the host-twin
    compiler in place of clang (test/amd_twin.py), so AMD devices opened from now on run on the host. Devices opened
    before (on an earlier fake, or the real KFD) are forgotten first."""
    global _kfd_table
    from amd_twin import TwinCompiler

    from tinygrad.runtime import _amd, ops_amd
    forget_amd_devices()
    _kfd_table = fake_kfd().install(list(gpus))
    _amd.set_os(_kfd_table)
    ops_amd.AMDDevice.compiler_class = TwinCompiler
    found = [g["gfx"] for g in _amd.discover()]
    if found != list(gpus):  # the runtime must see the fake, whatever was installed or opened before
        raise RuntimeError(f"the AMD runtime discovers {found} after installing a fake KFD with {list(gpus)}")


def uninstall_fake_kfd() -> None:
    """Back to the real OS calls and the real compiler. Devices of the fake are forgotten first."""
    global _kfd_table
    from tinygrad.runtime import _amd, ops_amd
    from tinygrad.runtime.compiler_amd import AMDCompiler
    forget_amd_devices()
    _amd.set_os(0)
    _kfd_table = 0
    fake_kfd().uninstall()
    ops_amd.AMDDevice.compiler_class = AMDCompiler


@contextlib.contextmanager
def real_amd_os():
    """The AMD runtime's real OS calls for the block, then the fake KFD again if it was installed (a test of the
    runtime without a KFD must not leave the tests after it, in the same process, on the real /dev/kfd)."""
    from tinygrad.runtime import _amd
    _amd.set_os(0)
    try:
        yield
    finally:
        _amd.set_os(_kfd_table)


def fake_metal():
    """The fake Objective-C runtime and Metal's configuration and inspection API (test/native/fake_objc.h)."""
    return doubles().fake_metal


def install_fake_metal(**config) -> bool:
    """A fresh fake GPU loaded by the Metal runtime in place of libobjc and Metal; its kernels are built for the host
    by the C++ compiler (`config`: max_threads, memory_bytes). False, installing nothing, without x86-64 Linux and
    g++ (the fake's objc_msgSend is x86-64 assembly)."""
    import platform
    compiler = shutil.which("g++")
    if compiler is None or platform.machine() != "x86_64" or sys.platform != "linux":
        return False
    from tinygrad.runtime import _metal
    fake_metal().install(compiler, str(SOURCE / "msl_host.h"), str(BUILD / "msl-cache"), **config)
    path = str(build())
    _metal.use_libraries(path, path)
    return True


def uninstall_fake_metal() -> None:
    """Back to Apple's libraries. Devices of the fake are collected first, while it still answers."""
    from tinygrad.runtime import _metal
    gc.collect()
    fake_metal().uninstall()
    _metal.use_libraries(None)


def install_fault_host_os():
    """Routes the CPU runtime's OS calls through the fault injector (wrapping the real ones); returns its API:
    fail_next_alloc(n), fail_next_load(n)."""
    from tinygrad.runtime import _cpu
    faults = doubles().fault_host_os
    _cpu.set_host_os(faults.table(_cpu.real_host_os()))
    return faults


def uninstall_fault_host_os() -> None:
    from tinygrad.runtime import _cpu
    _cpu.set_host_os(0)
