"""The JIT's home in the 0.9 layout; re-exports the implementation."""
from tinygrad.features.jit import CacheCollector, TinyJit

__all__ = ["CacheCollector", "TinyJit"]
