"""Shared by every test under test/.

test/ is a package (test/__init__.py, so that `from test.helpers import ...` works), which means pytest puts the
repository root on sys.path rather than test/; this file appends test/ itself, so tests anywhere below still import
the helper that builds and loads the C++ test doubles: `import native_doubles` (test/native_doubles.py). Appended,
not prepended, so a module there never shadows a test module of the same name elsewhere.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.append(_HERE)


def pytest_sessionstart(session):
    """AMD=1 on a machine without /dev/kfd runs the suite on the fake KFD (test/native/fake_kfd.cpp): the AMD
    runtime's whole path, every kernel executed by its host twin, checked against the CPU like any device."""
    if os.environ.get("AMD", "") not in ("", "0") and not os.path.exists("/dev/kfd"):
        import native_doubles
        native_doubles.install_fake_kfd(tuple(os.environ.get("FAKE_KFD_GPUS", "gfx1100").split(",")))


def pytest_configure(config):
    """METAL=1 off macOS runs the suite on the fake Objective-C runtime and Metal of test/native (kernels rendered as
    MSL, built and run on the host), so the op tests check the Metal path against their oracles without a Mac."""
    if os.environ.get("METAL", "") not in ("", "0") and sys.platform != "darwin":
        import native_doubles
        if not native_doubles.install_fake_metal():
            raise RuntimeError("METAL=1 without a Mac needs the fake Objective-C runtime: x86-64 Linux and g++")


if os.environ.get("METAL", "") not in ("", "0"):
    import pytest

    @pytest.fixture(autouse=True)
    def _metal_rules_kept():
        """Under METAL=1 on the fake, every test ends with no Objective-C or Metal rule broken (over-releases,
        messages to freed objects, objects autoreleased with no pool, bad arguments: test/native/fake_objc.h)."""
        if sys.platform == "darwin":
            yield
            return
        import native_doubles
        before = len(native_doubles.fake_metal().violations())
        yield
        broken = native_doubles.fake_metal().violations()[before:]
        assert not broken, f"the Metal runtime broke Objective-C or Metal rules: {broken}"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        """Under METAL=1 a test of float64, which Metal does not have, is reported skipped, naming why."""
        outcome = yield
        report = outcome.get_result()
        exc = call.excinfo
        if report.failed and exc is not None and exc.errisinstance(NotImplementedError) and \
                "Metal has no double" in str(exc.value):
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, "Skipped: Metal has no float64")
