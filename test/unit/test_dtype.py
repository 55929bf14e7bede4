"""dtypes and the promotion lattice, checked against PyTorch's promotion where the two agree by design."""
import itertools

import numpy as np
import pytest

from tinygrad.dtype import DTYPES_DICT, dtypes, least_upper_dtype, least_upper_float, to_dtype

torch = pytest.importorskip("torch")

TORCH = {"bool": torch.bool, "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32,
         "int64": torch.int64, "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
         "float64": torch.float64}


@pytest.mark.parametrize("a,b", list(itertools.combinations_with_replacement(sorted(TORCH), 2)))
def test_promotion_matches_torch(a, b):
    if {a, b} == {"float16", "bfloat16"}:
        pytest.skip("torch promotes half+bfloat16 to float32 as well; checked below")
    got = least_upper_dtype(DTYPES_DICT[a], DTYPES_DICT[b])
    want = torch.promote_types(TORCH[a], TORCH[b])
    assert TORCH[[k for k, v in DTYPES_DICT.items() if v == got][0]] == want


def test_special_promotions():
    assert least_upper_dtype(dtypes.float16, dtypes.bfloat16) == dtypes.float32
    assert least_upper_dtype(dtypes.uint64, dtypes.int64) == dtypes.float16  # as tinygrad 0.9: no common int
    assert least_upper_float(dtypes.int32) == dtypes.float32
    assert least_upper_float(dtypes.half) == dtypes.half


def test_names_sizes_and_predicates():
    assert repr(dtypes.float32) == "dtypes.float" and repr(dtypes.uint8) == "dtypes.uchar"
    assert [d.itemsize for d in (dtypes.bool, dtypes.int16, dtypes.float, dtypes.double)] == [1, 2, 4, 8]
    assert dtypes.is_float(dtypes.bfloat16) and not dtypes.is_float(dtypes.int8)
    assert dtypes.is_unsigned(dtypes.uint32) and not dtypes.is_unsigned(dtypes.int32)
    assert dtypes.from_np(np.float16) == dtypes.half and dtypes.from_py(1.5) == dtypes.float
    assert dtypes.from_py([1, 2.0]) == dtypes.float and dtypes.from_py([True]) == dtypes.bool
    assert dtypes.min(dtypes.int8) == -128 and dtypes.max(dtypes.uint16) == 65535
    assert to_dtype("float16") == dtypes.half
    with pytest.raises(TypeError):
        to_dtype("float7")
