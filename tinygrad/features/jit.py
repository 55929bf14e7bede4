"""The 0.8-era import path of TinyJit and CacheCollector (`from tinygrad.features.jit import CacheCollector`)."""
from tinygrad.engine.jit import CacheCollector, JitError, TinyJit

__all__ = ["CacheCollector", "JitError", "TinyJit"]
