"""Model state: finding a model's tensors by name, loading values into them, and the checkpoint formats.

A model is any object graph: its tensors are found through attributes, lists, tuples and dicts, and named by the
path to them ("layers.0.weight"), as in tinygrad 0.9 and PyTorch.

>>> from tinygrad import Tensor
>>> class Net:
...     def __init__(self): self.layers = [Tensor.zeros(2), {"w": Tensor.ones(3)}]
>>> list(get_state_dict(Net()))
['layers.0', 'layers.1.w']

The formats live one per module and are re-exported here: safetensors (`safe_load`, `safe_save`,
`safe_load_metadata`), PyTorch checkpoints (`torch_load`) and GGUF (`gguf_load`).
"""
from __future__ import annotations

import time
import types
from collections import OrderedDict
from typing import Any

from tinygrad.helpers import GlobalCounters
from tinygrad.nn.state_file import CheckpointError
from tinygrad.nn.state_gguf import gguf_load
from tinygrad.nn.state_safetensors import inverse_safe_dtypes, safe_dtypes, safe_load, safe_load_metadata, safe_save
from tinygrad.nn.state_torch import torch_load
from tinygrad.tensor import Tensor

__all__ = ["get_state_dict", "get_parameters", "load_state_dict", "safe_load", "safe_save", "safe_load_metadata",
           "safe_dtypes", "inverse_safe_dtypes", "torch_load", "gguf_load", "CheckpointError"]


def _children(obj: Any) -> list[tuple[str, Any]] | None:
    """The named members of a container or object (None for a leaf): what get_state_dict walks into."""
    if hasattr(obj, "_asdict") and isinstance(obj, tuple):
        return [(str(k), v) for k, v in obj._asdict().items()]  # a namedtuple, by field name
    if isinstance(obj, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        return [(str(k), v) for k, v in obj.items()]
    d = getattr(obj, "__dict__", None)
    # classes and modules hold code, not a model's state
    if isinstance(d, dict) and not isinstance(obj, (type, types.ModuleType)):
        return [(str(k), v) for k, v in d.items()]
    return None


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
    """Every `tensor_type` reachable from `obj`, by dotted path: attributes by name, list and tuple items by index,
    dict items by key ("layers.0.weight"). A tensor reachable by two paths appears under both (tied weights);
    cycles in the object graph are not followed."""
    ret: dict[str, Tensor] = {}
    # depth-first, children in order; each frame carries the ids of its ancestors to stop at cycles
    stack: list[tuple[str, Any, frozenset[int]]] = [(prefix, obj, frozenset())]
    while stack:
        name, o, ancestors = stack.pop()
        if isinstance(o, tensor_type):
            ret[name.strip(".")] = o
            continue
        if id(o) in ancestors:
            continue
        kids = _children(o)
        if not kids:
            continue
        inner = ancestors | {id(o)}
        stack.extend((f"{name}{k}.", v, inner) for k, v in reversed(kids))
    return ret


def get_parameters(obj: Any) -> list[Tensor]:
    """Every Tensor reachable from `obj` (see get_state_dict), each once, in the order they are first reached."""
    seen: dict[int, Tensor] = {}
    for t in get_state_dict(obj).values():
        seen.setdefault(id(t), t)
    return list(seen.values())


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = True,
                    consume: bool = False) -> None:
    """Copy the values of `state_dict` into the tensors of `model` with the same names (`assign`, moved to each
    tensor's device and cast to its dtype), then realize them.

    strict: every model tensor must be in `state_dict` and every entry of it used; otherwise missing tensors keep
    their value and extra entries are ignored. Shapes must always match. consume: delete each entry from
    `state_dict` once copied, so its memory can go. verbose: print one line with the time taken and bytes loaded.
    """
    if not isinstance(state_dict, dict):
        raise TypeError(f"load_state_dict takes a dict of name -> Tensor, not {type(state_dict).__name__}")
    model_sd = get_state_dict(model)
    missing = [k for k in model_sd if k not in state_dict]
    unexpected = [k for k in state_dict if k not in model_sd]
    if strict and (missing or unexpected):
        raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}" + (
            " (strict=False loads the matching keys only)"))
    todo = []
    for k, v in model_sd.items():
        if k not in state_dict:
            continue
        src = state_dict[k]
        if not isinstance(src, Tensor):
            raise TypeError(f"load_state_dict: {k!r} is a {type(src).__name__}, not a Tensor")
        if src.shape != v.shape:
            raise ValueError(f"load_state_dict: shape mismatch for {k!r}: the model has {v.shape}, the state dict "
                             f"{src.shape}")
        todo.append((k, v, src))
    st, mem0 = time.perf_counter(), GlobalCounters.mem_used
    targets = []
    for k, v, src in todo:
        if isinstance(v.device, tuple):
            # a tensor on several devices gets its own piece of the value on each: through the first device, not
            # a full copy to every device (the move comes first: a DISK tensor can't be cast where it is)
            src = src if isinstance(src.device, tuple) else src.to(v.device[0])
            v.assign(src.cast(v.dtype).shard(v.device, v.lazydata.axis))
        else:
            # the move comes first: a DISK tensor can't be cast where it is
            v.assign(src.to(v.device).cast(v.dtype))
        targets.append(v)
        if consume:
            del state_dict[k]
    # several tensors might share one model tensor (tied weights): realize each object once
    Tensor.corealize(list(OrderedDict((id(t), t) for t in targets).values()))
    if verbose:
        et = time.perf_counter() - st
        nbytes = sum(t.nbytes() for _, t, _ in todo)
        print(f"loaded {len(todo)} tensors, {nbytes / 1e6:.2f} MB in {et * 1e3:.2f} ms "
              f"(device memory {(GlobalCounters.mem_used - mem0) / 1e6:+.2f} MB)")
