"""Kernel preludes: the helper source (half and bfloat16 conversions, vector structs, inline PTX, Metal SIMD-group
helpers) the renderers put before a kernel, kept as C, CUDA, HIP and Metal files in `renderer/include/` so an editor
and a compiler can read them as what they are. Each file is read once, when its renderer is imported; a renderer
pastes the text unchanged, so a kernel's source is the same as if the text were a string literal here.
"""
from __future__ import annotations

from pathlib import Path

INCLUDE_DIR = Path(__file__).with_name("include")


def read_prelude(name: str) -> str:
    """The text of `renderer/include/<name>`, exactly as stored (newlines and all)."""
    return (INCLUDE_DIR / name).read_text(encoding="utf-8")
