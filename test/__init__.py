"""The test suite as a package, so that `from test.helpers import ...` (the import tinygrad 0.9's test files use)
finds this folder's helpers.py rather than the standard library's own `test` package."""
