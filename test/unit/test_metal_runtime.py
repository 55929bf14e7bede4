"""The Metal runtime on a machine without Metal: the module imports, the device is known, and opening it raises a
RuntimeError naming the library it could not load; the runtime with the fake Objective-C runtime is
test_metal_fake.py's."""
import sys

import pytest

from tinygrad.runtime import _metal


@pytest.mark.skipif(sys.platform == "darwin", reason="a Mac has Metal")
def test_without_metal_opening_the_device_names_what_is_missing():
    from tinygrad import Device
    assert "METAL" in Device.KNOWN
    _metal.use_libraries(None)
    with pytest.raises(RuntimeError, match=r"\[METAL\] dlopen: Metal is not available: could not load "
                                           r"/usr/lib/libobjc\.A\.dylib"):
        _metal.Device()
    # remembered, and raised again the same way (the environment does not change under a process)
    with pytest.raises(RuntimeError, match="Metal is not available"):
        _metal.Device()


def test_a_library_without_the_entry_points_is_refused_by_name(tmp_path):
    import ctypes.util
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no C library to load in Metal's place")
    try:
        _metal.use_libraries(libc)
        with pytest.raises(RuntimeError, match=r"dlsym: .* has no objc_getClass \(objc_getClass not found\)"):
            _metal.Device()
    finally:
        _metal.use_libraries(None)
