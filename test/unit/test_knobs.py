"""Every environment knob is declared once (helpers.KNOBS) and documented with its default in docs/env.md."""
import pathlib
import re

import pytest

from tinygrad.helpers import KNOBS, Context, ContextVar, getenv

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_getenv_call_names_a_declared_knob():
    used = set()
    for path in (ROOT / "tinygrad").rglob("*.py*"):
        if path.suffix in (".py", ".pyx"):
            used |= set(re.findall(r"""(?:getenv|ContextVar|os\.environ\.get|os\.getenv)\(\s*["'](\w+)["']""",
                                   path.read_text()))
    assert used, "found no getenv calls at all"
    assert used <= set(KNOBS), f"undeclared knobs: {used - set(KNOBS)}"


def test_docs_list_every_knob_with_its_default():
    doc = (ROOT / "docs" / "env.md").read_text()
    for name in KNOBS:
        assert re.search(rf"^\| `{name}` \|", doc, re.M), f"{name} missing from docs/env.md"


def test_any_name_is_read_with_the_default_given(monkeypatch):
    # scripts written for tinygrad 0.9 read their own variables through getenv
    assert getenv("NOT_A_REAL_KNOB") == 0 and getenv("NOT_A_REAL_KNOB", 32) == 32
    monkeypatch.setenv("NOT_A_REAL_KNOB", "64")
    assert getenv("NOT_A_REAL_KNOB", 32) == 64 and getenv("NOT_A_REAL_KNOB", "x") == "64"
    monkeypatch.setenv("NOT_A_REAL_KNOB", "lots")
    with pytest.raises(ValueError, match="NOT_A_REAL_KNOB='lots' is not a int"):
        getenv("NOT_A_REAL_KNOB", 32)


def test_every_device_module_is_a_selection_knob():
    from tinygrad.device import Device
    from tinygrad.helpers import DEVICE_KNOB
    assert DEVICE_KNOB in KNOBS
    doc = (ROOT / "docs" / "env.md").read_text()
    for name in Device.KNOWN:
        assert f"{name}=1" in doc or f"{name} (" in doc or f", {name}" in doc, f"device {name} not named in docs/env.md"


def test_context_sets_and_restores(monkeypatch):
    debug = ContextVar("DEBUG", 0)
    before = debug.value
    with Context(DEBUG=5):
        assert debug.value == 5
    assert debug.value == before
    with pytest.raises(KeyError, match="unknown context variable"):
        Context(NOT_A_VAR=1)


def test_getenv_converts_to_the_default_type(monkeypatch):
    monkeypatch.setenv("CACHELEVEL", "1")
    assert getenv("CACHELEVEL") == 1
    monkeypatch.setenv("CC", "gcc-12")
    assert getenv("CC") == "gcc-12"
