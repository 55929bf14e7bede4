"""`python -m tinygrad.benchmark`: its rows run on a host device, beside PyTorch's, as a table and as JSON; a row
that fails is reported with its reason and the others still run."""
import json
import os
import subprocess
import sys

import pytest

from tinygrad.benchmark import numpy_rows, tinygrad_rows, torch_rows
from tinygrad.benchmark.runner import available, run, table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_rows_on_a_host_device_beside_pytorch():
    pytest.importorskip("torch")
    res = run(["CLANG"], only=["launch latency, host", "add fp32", "matmul fp32 small", "compile one kernel",
                               "host->device pinned"])
    rows = res["CLANG"]
    for name in ("launch latency, host", "add fp32", "matmul fp32 small", "compile one kernel"):
        assert rows[name]["tinygrad"] > 0, rows[name]
    assert rows["add fp32"]["torch"] > 0 and rows["matmul fp32 small"]["unit"] == "GFLOP/s"
    # numpy beside them on a host device, where it has the row
    assert rows["matmul fp32 small"]["numpy"] > 0 and rows["launch latency, host"]["numpy"] is None
    # pinned memory means nothing on a host device: said, not measured
    assert rows["host->device pinned"]["tinygrad"] is None and "host" in rows["host->device pinned"]["error"]
    text = table(res)
    assert "add fp32" in text and "GB/s" in text and "PyTorch" in text and "numpy" in text


def test_every_row_has_a_pytorch_twin_or_none_by_name():
    names = [r[0] for r in tinygrad_rows.ROWS]
    assert len(names) == len(set(names))
    assert set(torch_rows.ROWS) <= set(names) and set(numpy_rows.ROWS) <= set(names)


def test_a_failing_row_is_reported_and_the_rest_run(monkeypatch):
    def broken(device, sizes):
        raise RuntimeError("the driver said no")
    rows = [("broken row", "us", broken)] + [r for r in tinygrad_rows.ROWS if r[0] == "launch latency, host"]
    monkeypatch.setattr(tinygrad_rows, "ROWS", rows)
    res = run(["CLANG"], with_torch=False)["CLANG"]
    assert res["broken row"]["error"] == "RuntimeError: the driver said no" and res["broken row"]["tinygrad"] is None
    assert res["launch latency, host"]["tinygrad"] > 0


def test_json_from_the_command_line():
    out = subprocess.run([sys.executable, "-m", "tinygrad.benchmark", "--device", "CLANG", "--json", "--no-torch",
                          "--row", "add fp32", "--row", "jit replay per kernel"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(res["CLANG"]) == {"add fp32", "jit replay per kernel"}
    assert res["CLANG"]["add fp32"]["unit"] == "GB/s" and res["CLANG"]["add fp32"]["tinygrad"] > 0
    assert res["CLANG"]["add fp32"]["torch"] is None


def test_a_device_that_does_not_open_is_skipped(capsys):
    assert available(["NOSUCHDEVICE", "CLANG"]) == ["CLANG"]
    assert "skipping NOSUCHDEVICE" in capsys.readouterr().err
