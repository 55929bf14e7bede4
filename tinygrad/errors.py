"""The error raised for a bad argument to a Tensor op (a shape that doesn't fit, an axis out of range, sizes that
don't match).

It is a ValueError, as the message's kind says; it is also an AssertionError and a RuntimeError, because tinygrad 0.9
raised those for the same mistakes (most of its checks were asserts, some RuntimeErrors, as PyTorch's are) and code
written for it catches them: `except AssertionError` and `pytest.raises(RuntimeError)` keep working, with this
message.

>>> from tinygrad import Tensor
>>> try:
...     Tensor.ones(2, 3).reshape(4, 4)
... except AssertionError as e:
...     print(type(e).__name__)
ArgumentError
"""


class ArgumentError(ValueError, AssertionError, RuntimeError):
    """A bad argument to a Tensor op; see the module docstring for its base classes."""
