"""docs/adding_a_device.md's recipe, run as written: its ops_toy.py, copied out of the page into a temporary folder,
becomes a working device (ops, copies to and from other devices, TinyJit through the native graph, selection by
environment) with no edit anywhere else."""
import pathlib
import re

import numpy as np
import pytest

import tinygrad.runtime
from tinygrad import Device, Tensor, TinyJit
from tinygrad.engine import realize

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adding_a_device.md"


def recipe() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    module = [b for b in blocks if "class ToyDevice" in b]
    assert len(module) == 1, "docs/adding_a_device.md lost its ops_toy.py recipe"
    return module[0]


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "ops_toy.py").write_text(recipe())
    monkeypatch.setattr(tinygrad.runtime, "__path__", [*tinygrad.runtime.__path__, str(tmp_path)])
    yield
    for key in [k for k in Device._opened if k.startswith("TOY")]:
        del Device._opened[key]
    for key in [k for k in realize.method_cache if k[0].startswith("TOY")]:
        del realize.method_cache[key]


def test_the_module_is_the_registration(toy, monkeypatch):
    assert "TOY" in Device.KNOWN and "CLANG" in Device.KNOWN
    monkeypatch.setattr(Device, "_default", None)
    for name in Device.KNOWN:  # CUDA=1 and the like from the calling shell
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOY", "1")
    assert Device.DEFAULT == "TOY"


def test_ops_and_copies_match_the_cpu(toy):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = Tensor(a, device="TOY")
    y = ((x * 2 + 1).relu() @ x.T).sum(axis=1)
    assert y.device == "TOY"
    np.testing.assert_allclose(y.numpy(), (np.maximum(a * 2 + 1, 0) @ a.T).sum(axis=1), rtol=1e-6)
    z = y.to("CLANG").to("TOY").to("CPU")
    np.testing.assert_allclose(z.numpy(), y.numpy())


def test_tinyjit_replays_through_the_native_graph(toy):
    from tinygrad.runtime.graph import NativeGraph

    @TinyJit
    def f(x, y):
        return ((x + y) * x).sum(axis=0).realize()

    for i in range(4):
        a = np.random.default_rng(i).standard_normal((4, 5)).astype(np.float32)
        b = np.full((4, 5), i, np.float32)
        out = f(Tensor(a, device="TOY"), Tensor(b, device="TOY"))
        np.testing.assert_allclose(out.numpy(), ((a + b) * a).sum(axis=0), rtol=1e-5)
    assert isinstance(f.graph, NativeGraph)


def test_unknown_device_names_the_known_ones():
    with pytest.raises(RuntimeError, match="unknown device NOPE: known devices are .*CLANG"):
        Device["NOPE"]
