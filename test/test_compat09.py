"""Names and behaviours that code written for tinygrad 0.9 relies on: its imports, its error classes, its indexing."""
import os
import pathlib

import numpy as np
import pytest

from tinygrad import Tensor


def test_helpers_names_of_0_9():
    from tinygrad.helpers import CI, IMAGE, THREEFRY, Profiling, fetch, get_child, merge_dicts, partition, temp
    assert isinstance(CI, bool) and IMAGE.value == 0 and THREEFRY.value == 0
    assert temp("x.bin").endswith("x.bin") and pathlib.Path(temp("x.bin")).parent.is_dir()
    assert partition([1, 2, 3, 4], lambda x: x % 2 == 0) == ([2, 4], [1, 3])
    assert merge_dicts([{"a": 1}, {"b": 2}, {"a": 1}]) == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="'a' has two values"):
        merge_dicts([{"a": 1}, {"a": 2}])
    assert get_child({"layers": [{"w": 5}]}, "layers.0.w") == 5
    assert callable(fetch)
    with Profiling(enabled=False):
        pass


def test_fetch_never_overwrites_an_existing_file(tmp_path):
    from tinygrad.helpers import fetch
    mine = tmp_path / "weights.bin"
    mine.write_bytes(b"mine")
    # an existing file is used as it is: no download, no overwrite (the URL is never opened)
    assert fetch("http://127.0.0.1:9/never", name=mine) == mine
    assert mine.read_bytes() == b"mine"


def test_profiling_prints_a_profile(capsys):
    from tinygrad.helpers import Profiling
    with Profiling(frac=0.5):
        sum(range(1000))
    assert "function calls" in capsys.readouterr().out


def test_image_dtype_imports_and_is_refused_by_tensors():
    from tinygrad.dtype import ImageDType, dtypes
    img = dtypes.imageh((4, 4, 4))
    assert isinstance(img, ImageDType) and img.shape == (4, 4, 4) and img != dtypes.imagef((4, 4, 4))
    with pytest.raises(NotImplementedError, match="image dtypes"):
        Tensor.zeros(4, dtype=img)


def test_lazybuffer_lbs_and_shapetracker_view():
    from tinygrad.shape.shapetracker import ShapeTracker, View
    from tinygrad.shape.view import View as ViewItself
    t = Tensor([1.0, 2.0])
    assert t.lazydata.lbs == [t.lazydata]
    assert View is ViewItself and isinstance(ShapeTracker.from_shape((2, 3)).views[0], View)


@pytest.mark.parametrize("bad", [
    lambda: Tensor.ones(2, 3).reshape(4, 4),
    lambda: Tensor.ones(2, 3).permute(0, 0),
    lambda: Tensor.ones(2, 3).expand(4, 4),
    lambda: Tensor.ones(2, 3) + Tensor.ones(4, 3),
    lambda: Tensor.ones(2, 3).shrink(((0, 5), (0, 3))),
])
def test_shape_errors_are_value_assertion_and_runtime_errors(bad):
    from tinygrad.errors import ArgumentError
    for cls in (ValueError, AssertionError, RuntimeError, ArgumentError):
        with pytest.raises(cls):
            bad()


def test_a_list_with_tensors_indexes_one_dim_per_item():
    a = Tensor(np.arange(12).reshape(3, 4))
    ref = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(a[[Tensor([0, 2]), Tensor([1, 3])]].numpy(), ref[[0, 2], [1, 3]])
    np.testing.assert_array_equal(a[[slice(None), Tensor([1])]].numpy(), ref[:, [1]])
    # a list of ints still indexes the first dim
    np.testing.assert_array_equal(a[[2, 0]].numpy(), ref[[2, 0]])


def test_pow_zero_is_a_constant():
    x = Tensor([np.nan, np.inf, -2.0, 0.0]).realize()
    y = x ** 0
    # no graph over x: a constant, which a consumer inlines
    assert y.lazydata.is_unrealized_const()
    np.testing.assert_array_equal(y.numpy(), [1, 1, 1, 1])


def test_getenv_reads_a_script_s_own_names(monkeypatch):
    from tinygrad.helpers import getenv
    monkeypatch.setenv("BS", "64")
    assert getenv("BS", 32) == 64 and os.environ["BS"] == "64"


def test_more_0_9_names():
    import ctypes

    from tinygrad import Timing, fetch, getenv  # noqa: F401 - importable from the package, as later 0.9s had them
    from tinygrad.dtype import INVERSE_DTYPES_DICT, dtypes
    from tinygrad.helpers import data64, data64_le, flat_mv, from_mv, getbits, i2u, mv_address, strip_parens, to_mv
    from tinygrad.mlops import Function as MlopsFunction
    from tinygrad.tensor import Function
    assert Function is MlopsFunction
    assert INVERSE_DTYPES_DICT[dtypes.float32] == "float32"
    assert strip_parens("(a+b)") == "a+b" and strip_parens("(a)+(b)") == "(a)+(b)"
    assert getbits(0b101100, 2, 3) == 0b11 and i2u(8, -1) == 255
    assert data64(0x1_0000_0002) == (1, 2) and data64_le(0x1_0000_0002) == (2, 1)
    buf = bytearray(b"abcd")
    mv = memoryview(buf)
    assert bytes(to_mv(mv_address(mv), 4)) == b"abcd" and from_mv(mv)[1] == b"b"
    assert flat_mv(memoryview(bytearray(8)).cast("I")).nbytes == 8
    assert ctypes.sizeof(from_mv(mv)) == 4
