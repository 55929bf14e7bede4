"""codegen/byte_pairs.py: a little-endian uint16 built from two byte loads is one 2-byte load on the C renderer."""
import numpy as np

from tinygrad import Tensor
from tinygrad.codegen.linearizer import Linearizer
from tinygrad.codegen.uops import UOps
from tinygrad.dtype import dtypes
from tinygrad.engine.schedule import create_schedule
from tinygrad.runtime.ops_clang import ClangCompiler


def _words(b: Tensor, at: int) -> Tensor:
    """The uint16 at byte `at` of each 5-byte row of `b`, as GGUF's fp16 scales are put together."""
    lo, hi = b[:, at:at + 1].cast(dtypes.uint16), b[:, at + 1:at + 2].cast(dtypes.uint16)
    return lo | (hi << 8)


def _uops(t: Tensor):
    ast = create_schedule([t.lazydata])[-1].ast
    return Linearizer(ast, ClangCompiler.linearizer_opts).linearize().uops


def test_a_byte_pair_is_one_two_byte_load_and_reads_the_same_word():
    raw = np.random.default_rng(0).integers(0, 256, (6, 5), dtype=np.uint8)
    for at in (0, 1, 3):  # odd offsets too: the 2-byte load has no alignment
        t = _words(Tensor(raw), at)
        uops = _uops(t)
        loads = [u for u in uops if u.uop is UOps.LOAD]
        assert [u.dtype for u in loads] == [dtypes.uint8.vec(2)], loads
        assert not any(u.uop is UOps.ALU and u.dtype == dtypes.uint16 for u in uops)
        want = raw[:, at].astype(np.uint16) | (raw[:, at + 1].astype(np.uint16) << 8)
        np.testing.assert_array_equal(t.numpy().reshape(-1), want)


def test_bytes_that_are_not_a_pair_stay_apart():
    """The high byte must follow the low one: bytes 2 and 0 (or a shift other than 8) are left as they are."""
    raw = np.random.default_rng(1).integers(0, 256, (6, 5), dtype=np.uint8)
    b = Tensor(raw)
    t = b[:, 2:3].cast(dtypes.uint16) | (b[:, 0:1].cast(dtypes.uint16) << 8)
    assert all(u.dtype == dtypes.uint8 for u in _uops(t) if u.uop is UOps.LOAD)
    want = raw[:, 2].astype(np.uint16) | (raw[:, 0].astype(np.uint16) << 8)
    np.testing.assert_array_equal(t.numpy().reshape(-1), want)
