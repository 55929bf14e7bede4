"""The op table and what an op implementation sees of one ONNX node: its inputs, attributes and the model's opset.

An implementation is a function `fn(n: OpCall) -> Tensor | tuple[Tensor | None, ...]` registered under its ONNX
op_type with `@onnx_op("Name", ...)`; the op families (ops_math, ops_shape, ops_nn) fill `OPS` when imported.
Attributes that changed across opsets (axes moving from an attribute to an input, Softmax's default axis) are
handled inside the implementation by reading `n.opset`.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tinygrad.dtype import DType, dtypes
from tinygrad.tensor import Tensor

OPS: dict[str, Callable[[OpCall], Any]] = {}

# ONNX TensorProto.DataType -> tinygrad dtype; absent types (strings, complex, float8, int4) are unsupported
ONNX_DTYPES: dict[int, DType] = {
    1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16, 6: dtypes.int32,
    7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16, 11: dtypes.float64, 12: dtypes.uint32, 13: dtypes.uint64,
    16: dtypes.bfloat16,
}


class UnsupportedOp(NotImplementedError):
    """A node this runtime can't run: an unknown op_type, or an attribute value or dtype the op doesn't support."""


def onnx_dtype(code: int) -> DType:
    """The tinygrad dtype of an ONNX data type code, or UnsupportedOp."""
    if code not in ONNX_DTYPES:
        raise UnsupportedOp(f"ONNX data type {code} has no tinygrad dtype")
    return ONNX_DTYPES[code]


def operand(t: Tensor) -> Tensor:
    """`t` as a contraction (Conv, MatMul, Gemm) should read it: in a buffer of its own when the graph computed it.

    A contraction reads each element of its data operand many times (a conv once per output channel and window
    tap, a matmul once per output column). Left as a lazy value, the ops that produced it (a Conv's bias and Relu,
    a LayerNorm) are fused into every one of those reads and recomputed there, and its producer's kernel stores the
    value before them; laid out in a buffer, they run once, in the producer's kernel. Realized buffers (weights,
    inputs) and constants are returned as they are."""
    lb = t.lazydata
    base = getattr(lb, "base", None)
    if base is None or base.realized is not None or lb.is_inlined():
        return t
    return t.contiguous()


def onnx_op(*names: str) -> Callable:
    """Register an implementation under one or more ONNX op_types."""
    def register(fn: Callable) -> Callable:
        for name in names:
            OPS[name] = fn
        return fn
    return register


class OpCall:
    """One node being run. `x` holds the input Tensors (None for an omitted optional input); `ints`/`floats` read an
    input's values on the host (shapes, axes, pads: values ONNX passes as tensors but the graph needs as numbers)."""
    __slots__ = ("op", "x", "attrs", "opset", "nout", "_host", "_graph", "_dynamic")

    def __init__(self, op: str, x: list[Tensor | None], attrs: dict[str, Any], opset: int, nout: int,
                 host: Callable[[int], np.ndarray | None], graph: Callable | None = None,
                 dynamic: Callable[[], None] | None = None):
        self.op, self.x, self.attrs, self.opset, self.nout = op, x, attrs, opset, nout
        self._host, self._graph, self._dynamic = host, graph, dynamic

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def has(self, i: int) -> bool:
        """Whether input i was given (ONNX marks an omitted optional input by an empty name or by leaving it off)."""
        return i < len(self.x) and self.x[i] is not None

    def host(self, i: int) -> np.ndarray | None:
        """Input i's values as a numpy array (None when omitted). Reading a value computed from the graph's inputs
        makes the runner give up TinyJit for the model (its kernels would bake the captured call's values in)."""
        return self._host(i) if self.has(i) else None

    def read(self, t: Tensor) -> np.ndarray:
        """A computed Tensor's values on the host (a Loop body's condition); the runner then gives up TinyJit for
        the model, as it can't tell whether they came from the inputs' data."""
        if self._dynamic is not None:
            self._dynamic()
        return t.numpy()

    def ints(self, i: int) -> list[int] | None:
        v = self.host(i)
        return None if v is None else [int(a) for a in v.reshape(-1)]

    def floats(self, i: int) -> list[float] | None:
        v = self.host(i)
        return None if v is None else [float(a) for a in v.reshape(-1)]

    def scalar(self, i: int, default: Any = None) -> Any:
        v = self.host(i)
        return default if v is None else v.reshape(-1)[0].item()

    def run_graph(self, graph: Any, inputs: dict[str, Tensor] | None = None) -> list[Tensor]:
        """Run a subgraph attribute (If's branches, Loop's body) with its inputs, seeing this graph's values;
        returns its outputs."""
        assert self._graph is not None
        return self._graph(graph, inputs)
