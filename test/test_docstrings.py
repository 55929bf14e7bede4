"""The public Tensor API documents itself: every public method has a docstring, and every example in the docstrings
of Tensor and its mixins runs and prints what it says (so the examples cannot drift from the code)."""
import doctest
import importlib

import pytest

from tinygrad import Tensor, dtypes

# tensor.py and the mixins Tensor is assembled from; their module docstrings hold examples too
TENSOR_MODULES = ["tinygrad.tensor", "tinygrad.tensor_creation", "tinygrad.tensor_elementwise",
                  "tinygrad.tensor_binary", "tinygrad.tensor_movement", "tinygrad.tensor_processing",
                  "tinygrad.tensor_reduce"]


def _doctests(module_name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    # the examples are written as a user would type them, with Tensor and dtypes imported
    return [t for t in finder.find(module, globs={"Tensor": Tensor, "dtypes": dtypes}) if t.examples]


@pytest.mark.parametrize("module_name", TENSOR_MODULES)
def test_docstring_examples(module_name):
    tests = _doctests(module_name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures = []
    for t in tests:
        result = runner.run(t, out=failures.append)
        assert result.attempted == len(t.examples)
    assert not failures, "".join(failures)


def test_examples_exist():
    # the examples are the point: a finder that silently found none would make the test above pass vacuously
    assert sum(len(_doctests(m)) for m in TENSOR_MODULES) >= 100


def test_every_public_method_has_a_docstring():
    missing = [name for name in dir(Tensor) if not name.startswith("_") and callable(getattr(Tensor, name, None))
               and not (getattr(Tensor, name).__doc__ or "").strip()]
    assert not missing, f"public Tensor methods without a docstring: {missing}"
