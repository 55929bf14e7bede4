"""What a device tells the code generator about itself."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinearizerOptions:
    """Capabilities of a device's code generation. CPUs loop over every dimension; GPUs map the outer
    dimensions to a grid of threads (`has_local`, `global_max`, `local_max`)."""
    device: str = ""
    suffix: str = ""
    supports_float4: bool = True
    has_local: bool = True
    has_shared: bool = True
    global_max: tuple[int, ...] | None = None
    local_max: tuple[int, ...] | None = None
