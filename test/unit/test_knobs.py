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
            used |= set(re.findall(r"""(?:getenv|ContextVar)\(\s*["'](\w+)["']""", path.read_text()))
    assert used, "found no getenv calls at all"
    assert used <= set(KNOBS), f"undeclared knobs: {used - set(KNOBS)}"


def test_docs_list_every_knob_with_its_default():
    doc = (ROOT / "docs" / "env.md").read_text()
    for name in KNOBS:
        assert re.search(rf"^\| `{name}` \|", doc, re.M), f"{name} missing from docs/env.md"


def test_undeclared_knob_is_refused():
    with pytest.raises(KeyError, match="not declared"):
        getenv("NOT_A_REAL_KNOB")


def test_context_sets_and_restores(monkeypatch):
    debug = ContextVar("DEBUG", 0)
    before = debug.value
    with Context(DEBUG=5):
        assert debug.value == 5
    assert debug.value == before
    with pytest.raises(KeyError, match="unknown context variable"):
        Context(NOT_A_VAR=1)


def test_getenv_converts_to_the_default_type(monkeypatch):
    monkeypatch.setenv("BEAM", "3")
    assert getenv("BEAM") == 3
    monkeypatch.setenv("CC", "gcc-12")
    assert getenv("CC") == "gcc-12"
