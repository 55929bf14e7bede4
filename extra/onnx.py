"""tinygrad 0.9's `extra/onnx.py` entry point, kept for code written against it: a thin wrapper over OnnxRunner.

    from extra.onnx import get_run_onnx
    run_onnx = get_run_onnx(onnx.load("model.onnx"))
    out = run_onnx({"input": x}, debug=False)  # {output name: Tensor}

0.9 ran the graph eagerly on every call; so does this (pass `jit=True` to get OnnxRunner's TinyJit replays).
"""
from __future__ import annotations

from typing import Any, Callable

from tinygrad.nn.onnx import OnnxRunner
from tinygrad.tensor import Tensor

__all__ = ["get_run_onnx", "OnnxRunner"]


def get_run_onnx(onnx_model: Any, jit: bool = False) -> Callable[..., dict[str, Tensor]]:
    """`run_onnx(inputs: dict, debug=False)` for a loaded `onnx.ModelProto` (or a path or bytes)."""
    runner = OnnxRunner(onnx_model, jit=jit)

    def run_onnx(inputs: dict[str, Any] | None = None, debug: bool | int = False) -> dict[str, Tensor]:
        return runner(inputs or {}, debug=bool(debug))
    run_onnx.runner = runner  # type: ignore[attr-defined]
    return run_onnx
