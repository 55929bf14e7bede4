"""What every compiled runtime module (tinygrad.runtime._cpu, _cuda, _metal) offers, and what none of them may contain.

Every runtime binds one Python surface from csrc/pybind_runtime.h; the test doubles (fake CUDA driver and NVRTC,
fault-injecting HostOS) live in test/native and are never part of a shipped module.
"""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tinygrad.runtime import _cpu, _cuda, _metal

MODULES = {"_cpu": _cpu, "_cuda": _cuda, "_metal": _metal}
BUFFER_CLASS = {"_cpu": "HostBuffer", "_cuda": "DeviceBuffer", "_metal": "DeviceBuffer"}
SURFACE = {
    None: ["abi_version", "copyin", "copyout", "transfer", "Device", "Program", "Graph"],
    "Device": ["name", "load_program", "create_graph", "synchronize"],
    "Program": ["name", "device", "launch", "__call__"],
    "Graph": ["add", "set_arg", "set_dims", "__call__", "run", "__len__"],
}
# Defined dynamic symbols that would mean a test double was linked in: driver, NVRTC, Objective-C runtime and Metal
# entry points (a module exporting them could be loaded as a driver), and the doubles' own names.
DOUBLE_SYMBOL = re.compile(r"^(cu[A-Z]\w*|nvrtc[A-Z]\w*|objc_\w+|sel_\w+|MTL\w+|dispatch_\w+)$|"
                           r"fake|faultinjecting|fault_host_os|_testing", re.IGNORECASE)


@pytest.mark.parametrize("name", MODULES)
def test_every_runtime_module_offers_the_shared_surface(name):
    module = MODULES[name]
    assert module.abi_version() == _cpu.abi_version()
    for cls, attrs in SURFACE.items():
        owner = module if cls is None else getattr(module, cls)
        assert not [a for a in attrs if not hasattr(owner, a)], f"{name}.{cls or ''}"
    buffer = getattr(module, BUFFER_CLASS[name])
    assert all(hasattr(buffer, a) for a in ("ptr", "nbytes", "freed", "pinned", "device", "free"))


@pytest.mark.parametrize("name", MODULES)
def test_shipped_modules_carry_no_test_doubles(name):
    module = MODULES[name]
    assert not hasattr(module, "_testing")
    files = {Path(module.__file__)} | set(Path(module.__file__).parent.glob(f"{name}.*.so"))
    if shutil.which("nm") is None:
        pytest.skip("needs nm (binutils) to list the modules' symbols")
    for path in files:
        out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True)
        symbols = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
        assert symbols and not [s for s in symbols if DOUBLE_SYMBOL.search(s)], path
