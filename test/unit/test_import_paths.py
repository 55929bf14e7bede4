"""The import paths the user's documents use must keep working: users copy them."""
import importlib

import pytest

PATHS = [
    ("tinygrad", ["Tensor", "Device", "dtypes", "Variable", "TinyJit", "GlobalCounters", "Context"]),
    ("tinygrad.tensor", ["Tensor"]),
    ("tinygrad.realize", ["create_schedule", "run_schedule"]),
    ("tinygrad.engine.schedule", ["create_schedule", "create_schedule_with_vars", "ScheduleItem"]),
    ("tinygrad.engine.realize", ["run_schedule"]),
    ("tinygrad.features.jit", ["CacheCollector", "TinyJit"]),
    ("tinygrad.codegen.linearizer", ["Linearizer"]),
    ("tinygrad.runtime.ops_clang", ["ClangCompiler", "ClangProgram"]),
    ("tinygrad.device", ["Buffer", "MallocAllocator", "Device", "Allocator", "Compiler", "Compiled"]),
    ("tinygrad.shape.symbolic", ["Variable", "NumNode", "Node"]),
    ("tinygrad.shape.shapetracker", ["ShapeTracker"]),
    ("tinygrad.shape.view", ["View"]),
    ("tinygrad.lazy", ["LazyBuffer"]),
    ("tinygrad.ops", ["LazyOp", "UnaryOps", "BinaryOps", "ReduceOps", "MovementOps", "TernaryOps", "LoadOps"]),
    ("tinygrad.dtype", ["DType", "dtypes"]),
    ("tinygrad.mlops", ["Function", "Log"]),
    ("tinygrad.helpers", ["getenv", "DEBUG", "Context", "GlobalCounters", "prod"]),
]


@pytest.mark.parametrize("module,names", PATHS)
def test_import_path(module, names):
    mod = importlib.import_module(module)
    for name in names:
        assert hasattr(mod, name), f"{module}.{name}"


def test_linearizer_options_on_the_compiler_class():
    from tinygrad.runtime.ops_clang import ClangCompiler
    assert ClangCompiler.linearizer_opts.device == "CLANG"


def test_unavailable_device_is_named():
    from tinygrad import Device
    try:
        Device["CUDA"]
    except RuntimeError as e:
        assert "CUDA" in str(e) or "libcuda" in str(e)
    else:
        pytest.skip("this machine has a CUDA device")
