"""Kernels that differ only in their Variables' names share one compile (engine/canon_vars.py), and each runs with
its own Variables' values."""
import numpy as np

from tinygrad import Tensor
from tinygrad.dtype import dtypes
from tinygrad.engine import realize
from tinygrad.engine.canon_vars import canonical
from tinygrad.ops import BufferOps, LazyOp, MemBuffer
from tinygrad.shape.shapetracker import ShapeTracker
from tinygrad.shape.symbolic import Variable


def test_renamed_variables_share_one_binary_and_keep_their_own_values():
    x = Tensor.arange(16).float().contiguous().realize()
    outs = [(x[:Variable(name, 1, 16).bind(n)].sum(), n) for name, n in (("first_n", 5), ("second_n", 9),
                                                                        ("third_n", 16))]
    before = set(realize.method_cache)
    got = [float(t.numpy()) for t, _ in outs]
    assert got == [float(np.arange(n).sum()) for _, n in outs]
    symbolic = [r for k, r in realize.method_cache.items() if k not in before and r.vars]
    names = {v.expr for r in symbolic for v in r.vars}
    assert {"first_n", "second_n", "third_n"} <= names
    # one binary for the three (the canonical kernel's), each runner with its own Variable
    assert len({id(r.lib) for r in symbolic}) == 1


def _store(*dims):
    st = ShapeTracker.from_shape(dims)
    load = LazyOp(BufferOps.LOAD, (), MemBuffer(1, dtypes.float32, st))
    return (LazyOp(BufferOps.STORE, (load,), MemBuffer(0, dtypes.float32, st)),)


def test_canonical_renames_in_order_and_maps_back():
    a, b = Variable("row3_pos", 1, 100), Variable("start_pos", 1, 100)
    canon, back = canonical(_store(a + b, 4))
    assert {v.expr for v in canon[0].arg.st.vars()} == {"_v0", "_v1"}
    assert {c.expr: v.expr for c, v in back.items()} == {"_v0": "row3_pos", "_v1": "start_pos"}
    # the same kernel with other names is the same canonical AST; other bounds are not
    assert canonical(_store(Variable("row9_pos", 1, 100) + Variable("start_pos", 1, 100), 4))[0] == canon
    assert canonical(_store(Variable("row9_pos", 1, 50) + Variable("start_pos", 1, 100), 4))[0] != canon
    # no Variables: the AST itself
    plain = _store(3)
    assert canonical(plain) == (plain, {})


def test_a_shared_kernel_shows_its_own_variables_names():
    x = Tensor.arange(16).float().contiguous().realize()
    before = set(realize.method_cache)
    for name in ("shown_a", "shown_b"):
        x[:Variable(name, 1, 16).bind(3)].sum().realize()
    shown = [r.display_name for k, r in realize.method_cache.items() if k not in before and r.vars]
    assert any("shown_a" in n for n in shown) and any("shown_b" in n for n in shown), shown


def test_a_shared_kernel_shows_its_source_with_its_own_variables():
    x = Tensor.arange(16).float().contiguous().realize()
    before = set(realize.method_cache)
    for name in ("first_len", "second_len"):
        x[:Variable(name, 1, 16).bind(4)].sum().realize()
    runners = {v.expr: r for k, r in realize.method_cache.items() if k not in before for v in r.vars}
    for name in ("first_len", "second_len"):
        # DEBUG=4 prints runner.prg: the loop bounded by the user's own Variable, as the seed walkthrough shows it
        assert f"< {name}" in runners[name].prg and "_v0" not in runners[name].prg
