"""Every kernel of the corpus (codegen_corpus.py: CPU, CUDA, HIP and Metal, every tensor-core kind) renders to the
same bytes and launch facts as the fixture: refactors of code generation change no kernel."""
import pytest
from codegen_corpus import _cases, load_fixture, render_case

from tinygrad.helpers import Context

FIXTURE = load_fixture()


def test_corpus_names_match_the_fixture():
    assert sorted(name for name, *_ in _cases()) == sorted(FIXTURE)


@pytest.mark.parametrize("name,expr,renderer,opts", _cases(), ids=[c[0] for c in _cases()])
def test_kernel_is_byte_identical(name, expr, renderer, opts):
    with Context(BEAM=0, NOOPT=0, DEBUG=0):
        got = render_case(expr, renderer, opts)
    want = FIXTURE[name]
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], f"{name}: {key} changed"
