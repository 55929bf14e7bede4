"""extra/examples/train_cnn.py: the digits CNN reaches its accuracy, deterministically, and the script's output
and exit status are what CI reads. Skips without scikit-learn (the data ships inside it)."""
import io
import os
import sys

import numpy as np
import pytest

pytest.importorskip("sklearn")
# `pytest test/` puts only test/ on sys.path; extra/ lives in the repository root
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from extra.examples import train_cnn  # noqa: E402


def test_split_is_fixed_and_disjoint():
    x_tr, y_tr, x_te, y_te = train_cnn.load_data(seed=0)
    assert x_tr.shape == (1437, 1, 8, 8) and x_te.shape == (360, 1, 8, 8) and x_tr.dtype == np.float32
    assert 0.0 <= x_tr.min() and x_tr.max() <= 1.0
    assert set(np.unique(y_te)) == set(range(10))
    again = train_cnn.load_data(seed=0)
    np.testing.assert_array_equal(again[2], x_te)
    # no test image is also a training image (as rows of pixels; the digits set has a few exact duplicates)
    train_rows = {r.tobytes() for r in x_tr.reshape(len(x_tr), -1)}
    assert sum(r.tobytes() in train_rows for r in x_te.reshape(len(x_te), -1)) <= 3


def test_trains_to_97_percent_and_main_reports_it(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_cnn.py", "--quiet"])
    assert train_cnn.main() == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("test accuracy: ") and out[-1].endswith("%")
    acc = float(out[-1].removeprefix("test accuracy: ").removesuffix("%"))
    assert acc >= 97.0
    # the same seed gives the same run: a second model reaches exactly the same accuracy
    _, acc2 = train_cnn.train(epochs=8, batch=64, lr=3e-3, seed=0, progress=False)
    assert f"{acc2 * 100:.2f}" == f"{acc:.2f}"


def test_exit_status_is_1_below_the_threshold(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_cnn.py", "--quiet", "--epochs", "1", "--min-accuracy", "1.01"])
    assert train_cnn.main() == 1
    assert "below the required" in capsys.readouterr().err


def test_progress_bar_redraws_one_line():
    buf = io.StringIO()
    bar = train_cnn.ProgressBar(4, "epoch 1/2", width=8, stream=buf)
    bar.update(1, 2.5, 64)
    bar.update(4, 0.125, 256)
    bar.close()
    text = buf.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and "\n" not in text[:-1]
    last = text.split("\r")[-1]
    assert last.startswith("epoch 1/2 [########] 4/4 loss 0.1250 ") and last.rstrip().endswith("samples/s")
