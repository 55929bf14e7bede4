"""extra/bench_models.py at its tiny sizes (--small) on the CPU: every model's tinygrad output or training losses
agree with its PyTorch twin's from the same weights, and the table and the JSON have every row.

One run of the script serves every test here (module fixture: about 15 CPU-seconds with the kernel cache warm,
45 cold, as it compiles some 300 small kernels). Without torch the
run is tinygrad's side alone, and the agreement tests skip. The torch.compile side compiles C++ on the CPU (a minute
or more), so its test runs only with BENCH_MODELS_COMPILE=1.
"""
import contextlib
import io
import json
import os

import pytest

from extra import bench_models as bm
from extra.models.resnet import ResNet, ResNetConfig
from tinygrad import GlobalCounters, Tensor
from tinygrad.nn.state import get_state_dict

try:
    import torch
except ImportError:
    torch = None

KEYS = [row.key for row in bm.ROWS]
# how far tinygrad may be from PyTorch eager, relative to the largest value compared: fp16 outputs round at about
# 1e-3 of their size, and the differences add up over layers; fp32 losses agree to float32 rounding
TOLERANCE = {"float16": 2e-2, "float32": 1e-4}


def _run(argv: list[str], path: str) -> tuple[list, str, dict]:
    """main(argv) with its stdout captured and its JSON written to `path`, PyTorch on one thread (its thread pool
    crawls on a shared 2-core machine); returns the results, the printed text and the JSON."""
    threads = torch.get_num_threads() if torch is not None else None
    out = io.StringIO()
    try:
        if torch is not None:
            torch.set_num_threads(1)
        with contextlib.redirect_stdout(out):
            results = bm.main([*argv, "--json", path])
        with open(path) as f:
            data = json.load(f)
    finally:
        if threads is not None:
            torch.set_num_threads(threads)
    return results, out.getvalue(), data


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    argv = ["--device", "CLANG", "--small", "--no-compile", "--iters", "1", "--rounds", "1", "--round-s", "0"]
    return _run(argv + (["--no-torch"] if torch is None else []), str(tmp_path_factory.mktemp("bench") / "r.json"))


def test_table_and_json_have_every_row(small_run):
    results, text, data = small_run
    assert [r.key for r in results] == KEYS
    assert [r["key"] for r in data["rows"]] == KEYS
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("model "))
    for col in ("tinygrad ms", "eager ms", "compile ms", "x eager", "x compile", "peak GB"):
        assert col in lines[at]
    table_rows = {line.split()[0]: line for line in lines[at + 1:at + 1 + len(KEYS)]}
    assert sorted(table_rows) == sorted(KEYS)
    for r in data["rows"]:
        tiny = r["sides"]["tinygrad"]
        assert "error" not in tiny, tiny
        assert tiny["ms"] > 0 and r["tinygrad_throughput"] > 0
        # tinygrad's peak counts at least the weights it holds
        assert tiny["peak_bytes"] > 0
        if torch is not None:
            assert r["sides"]["eager"]["ms"] > 0 and r["ratio_eager"] > 0
            assert r["ratio_compile"] is None and "compile" not in r["sides"]


@pytest.mark.parametrize("key", KEYS)
def test_tinygrad_agrees_with_pytorch(small_run, key):
    if torch is None:
        pytest.skip("torch is not installed")
    res = next(r for r in small_run[0] if r.key == key)
    assert res.max_diff is not None, res.sides
    assert res.max_diff <= TOLERANCE[res.dtype] * max(1.0, res.max_ref), (res.max_diff, res.max_ref)
    row = next(r for r in bm.ROWS if r.key == key)
    if row.train:
        # a training row compares the loss of each of the first steps: the optimizer's update is checked too
        assert len(res.losses["tinygrad"]) == len(res.losses["eager"]) == bm.CHECK_STEPS
        assert res.losses["tinygrad"][1] != res.losses["tinygrad"][0]


def test_resnet50_has_torchvisions_parameters():
    # 25,557,032 trainable parameters, as torchvision's resnet50; BatchNorm statistics are not parameters
    sd = get_state_dict(ResNet(ResNetConfig()))
    stats = ("running_mean", "running_var", "num_batches_tracked")
    assert sum(t.numel() for k, t in sd.items() if not k.endswith(stats)) == 25_557_032
    assert "layer4.0.downsample.0.weight" in sd and "layer4.1.downsample.0.weight" not in sd


def test_peak_memory_sees_a_freed_buffer():
    with bm.PeakMemory() as mem:
        before = GlobalCounters.mem_used
        t = (Tensor.ones(1000, 250).contiguous() + 1).realize()
        del t
        assert mem.peak - before >= 1000 * 250 * 4
        assert GlobalCounters.mem_used < mem.peak


@pytest.mark.skipif(os.environ.get("BENCH_MODELS_COMPILE") != "1", reason="BENCH_MODELS_COMPILE=1: torch.compile "
                    "builds C++ on the CPU (minutes)")
def test_torch_compile_side(tmp_path):
    if torch is None:
        pytest.skip("torch is not installed")
    results, _, data = _run(["--device", "CLANG", "--small", "--models", "llama_layer", "--iters", "1",
                             "--rounds", "1", "--round-s", "0"], str(tmp_path / "r.json"))
    res = results[0]
    assert "ms" in res.sides["compile"], res.sides["compile"]
    assert res.max_diff_compile is not None and res.max_diff_compile <= TOLERANCE[res.dtype] * max(1.0, res.max_ref)
    assert data["rows"][0]["ratio_compile"] > 0



@pytest.mark.parametrize("group", bm.MODELS)
def test_full_size_twins_take_the_weights(group):
    # at the full sizes the GPU run uses, every tinygrad weight has a twin parameter of the same name and shape
    # (the twin built on the meta device: no memory, no initialisation; tinygrad's weights stay lazy)
    if torch is None:
        pytest.skip("torch is not installed")
    from extra.models import torch_twins
    s = bm.FULL
    model, cfg, twin = {"resnet50": (ResNet, s.resnet, "ResNetTwin"), "bert": (bm.Bert, s.bert, "BertTwin"),
                        "gpt2": (bm.GPT2, s.gpt2, "GPT2Twin"),
                        "llama_layer": (bm.DecoderLayer, s.llama, "DecoderLayerTwin")}[group]
    with torch.device("meta"):
        theirs = {k: tuple(v.shape) for k, v in getattr(torch_twins, twin)(cfg).state_dict().items()}
    ours = {k: tuple(t.shape) for k, t in get_state_dict(model(cfg)).items()}
    assert ours.keys() == theirs.keys()
    # BatchNorm's step count is (1,) here and 0-d in PyTorch; load_weights reshapes it
    assert {k: v for k, v in ours.items() if not k.endswith("num_batches_tracked")} == \
        {k: v for k, v in theirs.items() if not k.endswith("num_batches_tracked")}
