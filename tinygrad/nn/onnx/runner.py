"""OnnxRunner: load an ONNX model (parsed with the optional `onnx` package) and run its graph with Tensors.

Values the graph needs as numbers on the host (a Reshape's shape, a Slice's starts, Pad's pads) are usually
*static*: computed from initializers, Constant nodes and the inputs' shapes (Shape, Size), never from the inputs'
data. The runner finds them from the graph's structure, computes them on the first call for a set of input shapes,
keeps the ones the rest of the graph reads (realized, or as constants when they hold one value) and skips their
nodes afterwards, so TinyJit captures only the kernels that depend on the inputs' data.

Calls with the same input shapes run under TinyJit (the first runs, the second captures, later ones replay); each
new set of shapes is traced and captured on its own. Named input dims (ONNX dim_params such as "batch"): the first
call's shapes are captured with their values (the fastest kernels); calls with other values of them are run with
the dims as symbolic Variables, so one more capture serves all of them (as PyTorch's compiler specializes first and
turns a dim dynamic once it changes); a graph whose shape arithmetic needs them as numbers (Shape, Size, sizes
computed on the host) fails that trace and falls back to one capture per shape.
A graph that reads values computed from its inputs' data on the
host (NonZero, a Reshape to a shape read from an input, If on a data-dependent condition) can't be replayed, so the
runner notices the first such read and runs that model eagerly from then on.
NOTE: as with any TinyJit, a replay writes into the same output buffers: the Tensors a call returned hold the next
call's results once it runs (copy them, e.g. `.numpy()`, to keep them).
"""
from __future__ import annotations

import os
from collections import ChainMap
from typing import Any

import numpy as np

# importing the op families fills OPS (module imports, not `from tinygrad.nn.onnx import`: the package imports us)
import tinygrad.nn.onnx.ops_attention  # noqa: F401
import tinygrad.nn.onnx.ops_host  # noqa: F401
import tinygrad.nn.onnx.ops_math  # noqa: F401
import tinygrad.nn.onnx.ops_nn  # noqa: F401
import tinygrad.nn.onnx.ops_quant  # noqa: F401
import tinygrad.nn.onnx.ops_rnn  # noqa: F401
import tinygrad.nn.onnx.ops_shape  # noqa: F401
from tinygrad.device import Device
from tinygrad.dtype import dtypes
from tinygrad.engine.jit import JitError, TinyJit
from tinygrad.helpers import prod
from tinygrad.nn.onnx.node import OPS, OpCall, UnsupportedOp, onnx_dtype
from tinygrad.shape.symbolic import Variable, sym_infer
from tinygrad.tensor import Tensor

# the bounds a named input dim takes as a symbolic Variable (a call beyond them runs with concrete shapes)
SYMBOLIC_MAX = 1 << 16

# ops whose outputs depend on their input's shape only, so they are static however the input was computed
_SHAPE_ONLY = {"Shape", "Size"}
# ops that must not be folded into constants: their outputs change from call to call
_NOT_STATIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def import_onnx():
    """The `onnx` package, or an ImportError that says how to install it."""
    try:
        import onnx
    except ImportError as e:
        raise ImportError("tinygrad.nn.onnx parses models with the `onnx` package: "
                          "pip install 'tinygrad[onnx]' (or pip install onnx)") from e
    return onnx


def _attr_value(a: Any) -> Any:
    onnx = import_onnx()
    v = onnx.helper.get_attribute_value(a)
    if a.type == onnx.AttributeProto.TENSOR:
        return onnx.numpy_helper.to_array(v)
    if a.type == onnx.AttributeProto.GRAPH:
        return _Graph(v)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [s.decode() for s in v]
    return v


class _Node:
    """A parsed NodeProto: op_type, domain, input/output names ('' for an omitted one) and attribute values."""
    __slots__ = ("op", "domain", "inputs", "outputs", "attrs", "name")

    def __init__(self, proto: Any):
        self.op, self.domain, self.name = proto.op_type, proto.domain, proto.name
        self.inputs, self.outputs = list(proto.input), list(proto.output)
        self.attrs = {a.name: _attr_value(a) for a in proto.attribute}


class _Graph:
    """A parsed GraphProto: nodes in order, initializers as numpy arrays, input specs and output names."""

    def __init__(self, proto: Any):
        onnx = import_onnx()
        self.nodes = [_Node(n) for n in proto.node]
        self.initializers = {i.name: onnx.numpy_helper.to_array(i) for i in proto.initializer}
        self.inputs: dict[str, tuple[list[int | str | None], int]] = {}
        for vi in proto.input:
            if vi.name in self.initializers:
                continue
            tt = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim] \
                if tt.HasField("shape") else None
            self.inputs[vi.name] = (dims, tt.elem_type)
        self.outputs = [o.name for o in proto.output]


def _static_names(graph: _Graph) -> set[str]:
    """The values of the graph that never depend on its inputs' data (see the module docstring)."""
    static = set(graph.initializers)
    for node in graph.nodes:
        ins = [i for i in node.inputs if i]
        if node.op in _NOT_STATIC or any(isinstance(v, _Graph) for v in node.attrs.values()):
            continue
        if node.op in _SHAPE_ONLY or all(i in static for i in ins):
            static.update(o for o in node.outputs if o)
    return static


def _from_numpy(v: np.ndarray) -> Tensor:
    """A Tensor of an array; numpy's bfloat16 (the ml_dtypes extension type) is made in float32 and cast."""
    # the kind first: numpy's dtype.name takes microseconds, and every float32 input asked
    if v.dtype.kind == "V" and v.dtype.name == "bfloat16":
        return Tensor(np.array(v, dtype=np.float32, order="C")).cast(dtypes.bfloat16)
    return Tensor(np.array(v, order="C"))


def _concrete(t: Any) -> Any:
    """A result with symbolic dims viewed with their bound values (what numpy() and the caller expect)."""
    if not isinstance(t, Tensor) or all(isinstance(s, int) for s in t.shape):
        return t
    return t.reshape(tuple(s if isinstance(s, int) else sym_infer(s, {}) for s in t.shape))


def _load(model: Any) -> Any:
    onnx = import_onnx()
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        return onnx.load(os.fspath(model))
    raise TypeError(f"OnnxRunner needs a path, bytes or onnx.ModelProto, not {type(model).__name__}")


class OnnxRunner:
    """Run an ONNX model: `OnnxRunner("model.onnx")({"input": array})` returns {output name: Tensor}.

    `model`: a path, the file's bytes or an `onnx.ModelProto`. `jit=False` runs every call eagerly. Inputs may be
    numpy arrays, lists, scalars or Tensors; they are cast to the dtype the model declares. See the module docstring
    for how calls are traced, captured and replayed."""

    def __init__(self, model: Any, jit: bool = True, symbolic: bool = True):
        proto = _load(model)
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.graph = _Graph(proto.graph)
        self.jit = jit
        # named input dims become Variables shared by every input that names them (see _call_symbolic)
        names = {d for dims, _ in self.graph.inputs.values() for d in dims or [] if isinstance(d, str)}
        self._vars = {d: Variable(d, 1, SYMBOLIC_MAX) for d in sorted(names)}
        self.symbolic = symbolic and jit and bool(names)
        # initializers become Tensors once; tiny ones stay constants the kernels can inline
        self.weights = {k: self._const(v) for k, v in self.graph.initializers.items()}
        self._static = _static_names(self.graph)
        needed = {i for n in self.graph.nodes if not set(n.outputs) <= self._static for i in n.inputs}
        # values the kernels need from nodes that are skipped once folded: what non-static nodes and subgraphs read
        self._frontier = (needed | set(self.graph.outputs)) & (self._static - set(self.weights))
        self._folded: dict[tuple, tuple[dict[str, Tensor], dict[str, np.ndarray]]] = {}
        self._jits: dict[tuple, TinyJit] = {}
        self._eager_keys: set[tuple] = set()
        # input name -> the realized buffer calls copy their arrays into (see _staged)
        self._staging: dict[tuple, Tensor] = {}
        self._first_key: tuple | None = None  # the input shapes of the first call: captured with concrete shapes
        self.data_dependent = False  # set once the graph read a value computed from its inputs' data on the host

    @staticmethod
    def _const(v: np.ndarray) -> Tensor:
        if v.dtype.kind in "US" or v.dtype == object:
            raise UnsupportedOp(f"tensors of {v.dtype} (strings) are not supported")
        if v.dtype.name == "bfloat16":
            return _from_numpy(v).realize()
        if v.size == 1 and v.dtype != np.float64:
            return Tensor.full(v.shape, v.reshape(-1)[0].item(), dtype=dtypes.from_np(v.dtype))
        return Tensor(np.array(v, order="C")).realize()

    def _staged(self, name: str, v: np.ndarray, want: Any) -> Tensor | None:
        """Array `v` copied straight into a realized buffer kept for this input (one, of the last shape it came in),
        or None where that doesn't apply. A Tensor made from the array would be realized by TinyJit's call through a
        schedule of its own copy: about 25 us of host time a call, more than a small model's kernels take. Like the
        outputs of a replay, the buffer is overwritten by the next call (so only for calls that TinyJit runs)."""
        if not self.jit or self.data_dependent or want is None or want.np is None or v.ndim == 0 or v.size == 0 \
                or v.dtype.kind not in "biuf":
            return None
        dims = self.graph.inputs[name][0]
        if dims is None or len(dims) != v.ndim or \
                any(isinstance(d, int) and d > 0 and d != s for d, s in zip(dims, v.shape)):
            return None  # the slow path reshapes what it can and says what's wrong
        if v.dtype != want.np:
            v = v.astype(want.np)
        t = self._staging.get(name)
        if t is None or t.shape != v.shape or t.dtype != want:
            t = self._staging[name] = Tensor.empty(*v.shape, dtype=want).realize()
        buf = t.lazydata.base.realized
        # NOTE: the previous call's kernels may still read this buffer on an asynchronous device
        Device[buf.device].synchronize()
        buf.copyin(memoryview(np.ascontiguousarray(v).reshape(-1)).cast("B"))
        return t

    def _input(self, name: str, v: Any) -> Tensor:
        dims, code = self.graph.inputs[name]
        want = onnx_dtype(code) if code else None
        if isinstance(v, np.ndarray):
            staged = self._staged(name, v, want)
            if staged is not None:
                return staged
        if not isinstance(v, Tensor):
            v = np.asarray(v)
            if want is not None and want != dtypes.bfloat16 and v.dtype != want.np and want.np is not None:
                v = v.astype(want.np)
            v = _from_numpy(v)
            if want is not None and v.dtype != want:
                v = v.cast(want)
        elif want is not None and v.dtype != want:
            v = v.cast(want)
        if dims is not None:
            if len(dims) != v.ndim and all(isinstance(d, int) for d in dims) and prod(dims) == prod(v.shape):
                v = v.reshape(tuple(dims))  # a scalar given as [x] and the like: the same values
            if len(dims) != v.ndim or any(isinstance(d, int) and d > 0 and d != s for d, s in zip(dims, v.shape)):
                raise ValueError(f"input {name!r}: the model wants shape {dims}, got {tuple(v.shape)}")
        return v

    def __call__(self, inputs: dict[str, Any] | None = None, debug: bool = False, **kwargs) -> dict[str, Tensor]:
        given = {**(inputs or {}), **kwargs}
        missing = [n for n in self.graph.inputs if n not in given]
        unknown = [n for n in given if n not in self.graph.inputs]
        if missing or unknown:
            raise ValueError(f"OnnxRunner: missing inputs {missing}, unknown inputs {unknown}; the model takes "
                             f"{list(self.graph.inputs)}")
        tens = {n: self._input(n, given[n]) for n in self.graph.inputs}
        key = tuple((n, tuple(t.shape), t.dtype) for n, t in tens.items())
        if self.symbolic and not debug and not self.data_dependent:
            # the first shapes get kernels of their own: a symbolic dim can't be unrolled or vectorized, and the
            # MLP's symbolic kernels took twice the time of its concrete ones; a named dim changing value is what
            # makes the symbolic capture worth its cost
            if self._first_key is None:
                self._first_key = key
            if key != self._first_key:
                out = self._call_symbolic(tens)
                if out is not None:
                    return out
        if debug or not self.jit or self.data_dependent or key in self._eager_keys:
            return self._run(key, tens, debug)
        jit = self._jits.get(key)
        if jit is None:
            jit = self._jits[key] = TinyJit(lambda tens: self._run(key, tens, False))
        try:
            return jit(tens)
        except JitError:
            # nothing to capture (a graph of views and constants): this shape runs eagerly
            self._eager_keys.add(key)
            self._jits.pop(key, None)
            return self._run(key, tens, False)

    def _call_symbolic(self, tens: dict[str, Tensor]) -> dict[str, Tensor] | None:
        """Run with each named dim a bound Variable, so one capture serves every value of it; None when this call
        can't (a value out of bounds, two inputs disagreeing on a dim) or the graph can't be traced that way (its
        shape arithmetic reads a named dim on the host), which also turns symbolic runs off for the model."""
        bound: dict[str, int] = {}
        sym, spec = {}, []
        for n, t in tens.items():
            dims = self.graph.inputs[n][0] or []
            shape = list(t.shape)
            for i, d in enumerate(dims):
                if isinstance(d, str):
                    if not 1 <= shape[i] <= SYMBOLIC_MAX or bound.setdefault(d, shape[i]) != shape[i]:
                        return None
                    shape[i] = self._vars[d].bind(shape[i])
            sym[n] = t.reshape(tuple(shape)) if any(not isinstance(s, int) for s in shape) else t
            spec.append((n, tuple(d if isinstance(d, str) else s for d, s in zip(dims, t.shape)), t.dtype))
        key = ("symbolic", *spec)
        jit = self._jits.get(key)
        if jit is None:
            jit = self._jits[key] = TinyJit(lambda tens: self._run(key, tens, False))
        try:
            out = jit(sym)
        except Exception:  # noqa: BLE001 - any failure of the symbolic trace falls back to concrete shapes
            self.symbolic = False
            self._jits.pop(key, None)
            self._folded.pop(key, None)
            return None
        return {k: _concrete(t) for k, t in out.items()}

    def _run(self, key: tuple, tens: dict[str, Tensor], debug: bool) -> dict[str, Tensor]:
        with Tensor.inference_mode():
            folded = self._folded.get(key)
            first = folded is None
            if first:
                folded = ({}, {})
            env: dict[str, Any] = {**self.weights, **tens}
            if not first:
                env.update(folded[0])
            self._exec(self.graph, env, folded, skip_static=not first, debug=debug)
            if first:
                kept = {k: env[k] for k in self._frontier if isinstance(env.get(k), Tensor)}
                Tensor.corealize([t for t in kept.values() if prod(t.shape) != 1])
                folded[0].update({k: self._keep(t) for k, t in kept.items()})
                self._folded[key] = folded
            out = {}
            for name in self.graph.outputs:
                if name not in env:
                    raise KeyError(f"output {name!r} was not computed")
                out[name] = env[name]
            Tensor.corealize([t for t in out.values() if isinstance(t, Tensor)])
            return out

    @staticmethod
    def _keep(t: Tensor) -> Tensor:
        if prod(t.shape) == 1 and t.dtype != dtypes.float64:
            return Tensor.full(t.shape, t.reshape(-1)[0].item(), dtype=t.dtype)
        return t

    def _exec(self, graph: _Graph, env: Any, folded: tuple, skip_static: bool, debug: bool) -> None:
        """Run the nodes of `graph` in order, reading and writing values in `env`."""
        top = graph is self.graph
        for node in graph.nodes:
            if top and skip_static and all(o in self._static for o in node.outputs if o):
                continue
            fn = OPS.get(node.op) if node.domain in ("", "ai.onnx") else None
            if fn is None:
                raise UnsupportedOp(f"ONNX op {node.domain + '.' if node.domain else ''}{node.op} is not supported "
                                    f"(node {node.name!r})")
            xs = []
            for i in node.inputs:
                if i and i not in env:
                    raise KeyError(f"node {node.name!r} ({node.op}) reads {i!r}, which nothing computed")
                xs.append(env[i] if i else None)

            def host(k: int, node=node, xs=xs) -> np.ndarray:
                return self._host(node.inputs[k], xs[k], folded[1], top)
            call = OpCall(node.op, xs, node.attrs, self.opset, len(node.outputs), host,
                          lambda g, ins=None, env=env: self._subgraph(g, env, ins or {}, folded, debug),
                          self._mark_dynamic)
            out = fn(call)
            if not isinstance(out, (tuple, list)):
                out = (out,)
            for name, t in zip(node.outputs, out):
                if name:
                    env[name] = t
            if debug:
                shapes = [tuple(t.shape) if isinstance(t, Tensor) else t for t in out]
                print(f"{node.op:<20} {node.name:<30} -> {shapes}")

    def _subgraph(self, graph: _Graph, outer: Any, inputs: dict[str, Tensor], folded: tuple,
                  debug: bool) -> list[Tensor]:
        env = ChainMap({**{k: self._const(v) for k, v in graph.initializers.items()}, **inputs}, outer)
        self._exec(graph, env, folded, skip_static=False, debug=debug)
        return [env[o] for o in graph.outputs]

    def _mark_dynamic(self) -> None:
        self.data_dependent = True

    def _host(self, name: str, t: Tensor, cache: dict[str, np.ndarray], top: bool) -> np.ndarray:
        if name in cache:
            return cache[name]
        if name in self.graph.initializers:
            return self.graph.initializers[name]
        v = t.numpy()
        if top and name in self._static:
            cache[name] = v
        else:
            # a value computed from the inputs' data: a replay would reuse this call's value, so no TinyJit
            self.data_dependent = True
        return v
