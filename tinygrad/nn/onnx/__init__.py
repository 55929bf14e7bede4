"""ONNX models on tinygrad: `OnnxRunner(path_or_model)(inputs)` returns the outputs as Tensors.

The `onnx` package (the optional `[onnx]` extra) parses the model; it is imported when a model is loaded, so
importing tinygrad (and this module) works without it.

>>> from tinygrad.nn.onnx import OnnxRunner  # doctest: +SKIP
>>> OnnxRunner("model.onnx")({"input": x})["output"].numpy()  # doctest: +SKIP
"""
from tinygrad.nn.onnx.node import OPS, UnsupportedOp
from tinygrad.nn.onnx.runner import OnnxRunner

__all__ = ["OnnxRunner", "OPS", "UnsupportedOp"]
