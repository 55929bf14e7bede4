"""tinygrad: lazy tensors with autograd, fused into kernels, compiled and run on CPUs and GPUs."""
from tinygrad.device import Device
from tinygrad.dtype import dtypes
from tinygrad.engine.jit import TinyJit
from tinygrad.helpers import VIZ, Context, GlobalCounters, Timing, fetch, getenv
from tinygrad.shape.symbolic import Variable
from tinygrad.tensor import Tensor

__all__ = ["Tensor", "TinyJit", "Device", "dtypes", "Variable", "GlobalCounters", "Context", "Timing", "fetch",
           "getenv"]

if VIZ:
    # VIZ=1 in the environment: what the program realizes is served as a web page when it exits (tinygrad/viz)
    from tinygrad.viz import serve_at_exit
    serve_at_exit()
