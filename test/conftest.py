"""Shared by every test under test/.

Being here puts test/ on sys.path (pytest's default import mode), so tests anywhere below import the helper that
builds and loads the C++ test doubles: `import native_doubles` (test/native_doubles.py).
"""
import os


def pytest_sessionstart(session):
    """AMD=1 on a machine without /dev/kfd runs the suite on the fake KFD (test/native/fake_kfd.cpp): the AMD
    runtime's whole path, every kernel executed by its host twin, checked against the CPU like any device."""
    if os.environ.get("AMD", "") not in ("", "0") and not os.path.exists("/dev/kfd"):
        import native_doubles
        native_doubles.install_fake_kfd(tuple(os.environ.get("FAKE_KFD_GPUS", "gfx1100").split(",")))
