"""BEAM search (engine/search.py): the kernel it picks computes what the plain kernel does, is never slower than the
heuristic's by its own timing, and is searched once per machine (the disk cache); symbolic kernels are not searched."""
import numpy as np
import pytest

from tinygrad import Tensor, Variable
from tinygrad.codegen.kernel import Opt, OptOps
from tinygrad.engine import search
from tinygrad.engine.schedule import create_schedule_with_vars
from tinygrad.helpers import Context
from tinygrad.ops import BufferOps


@pytest.fixture
def small_search(tmp_path, monkeypatch):
    """A quick search (one step, few amounts) into a cache file of this test's own."""
    monkeypatch.setenv("CACHEDB", str(tmp_path / "cache.db"))
    monkeypatch.setattr(search, "MAX_STEPS", 2)
    monkeypatch.setattr(search, "ACTION_AMOUNTS", {OptOps.UPCAST: (2, 4), OptOps.UNROLL: (4,),
                                                   OptOps.VECTORIZE: (4,)})


def kernel_ast(t: Tensor) -> tuple:
    items = [si for si in create_schedule_with_vars([t.lazydata])[0] if si.ast[0].op is BufferOps.STORE]
    for si in items[:-1]:
        from tinygrad.engine.realize import lower_schedule_item
        lower_schedule_item(si).run()
    return items[-1].ast


def test_the_searched_kernel_is_right_and_cached(small_search, monkeypatch):
    a = Tensor(np.random.default_rng(0).standard_normal((24, 40)).astype(np.float32)).realize()
    b = Tensor(np.random.default_rng(1).standard_normal((40, 16)).astype(np.float32)).realize()
    ast = kernel_ast(a @ b)
    opts = search.beam_search("CLANG", ast, 2)
    assert opts is not None and all(isinstance(o, Opt) for o in opts)

    # a second search of the same kernel is a disk-cache read: nothing is compiled or run
    def no_run(*args, **kwargs):
        raise AssertionError("the cached kernel was searched again")
    monkeypatch.setattr(search, "_run", no_run)
    assert search.beam_search("CLANG", ast, 2) == opts
    # another beam width is another search
    with pytest.raises(AssertionError, match="searched again"):
        search.beam_search("CLANG", ast, 3)


def test_beam_through_the_engine(small_search):
    from tinygrad.engine import realize
    a = Tensor(np.arange(12 * 20, dtype=np.float32).reshape(12, 20) / 100).realize()
    with Context(BEAM=1):
        realize.method_cache.clear()
        got = (a.exp() * 2).sum(axis=1).numpy()
    np.testing.assert_allclose(got, (np.exp(a.numpy()) * 2).sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("outcome, expect", [
    ((1e-3, [np.array([1.0, 2.0], np.float32)]), 1e-3),           # right and fast enough
    ((1e-3, [np.array([1.0, 2.5], np.float32)]), None),           # a wrong value
    ((1e-3, [np.array([1.0, np.nan], np.float32)]), None),        # an element left unwritten
    ((5.0, [np.array([1.0, 2.0], np.float32)]), None),            # past the time limit
    (RuntimeError("launch failed"), None),                        # it could not run
])
def test_a_wrong_or_slow_candidate_is_dropped(monkeypatch, outcome, expect):
    def fake_run(*args, **kwargs):
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    monkeypatch.setattr(search, "_run", fake_run)
    ref = [np.array([1.0, 2.0], np.float32)]
    assert search._timed(None, None, {}, [0], ref, 1.0, compiled=(None, b"")) == expect


def test_symbolic_kernels_are_not_searched(small_search):
    a = Tensor.rand(3, 10).realize()
    v = Variable("n", 1, 10).bind(4)
    ast = kernel_ast(a[:, :v].sum(1))
    assert search.beam_search("CLANG", ast, 2) is None
