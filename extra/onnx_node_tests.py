"""The ONNX backend node tests (the cases the `onnx` package ships) run through tinygrad's OnnxRunner.

`node_cases()` lists the cases with the op each one tests and the model's opset; `run_case(case)` runs every data
set of one case eagerly (each model runs once, so TinyJit would only add a capture) and returns None when the
outputs match the reference within the case's tolerances, else why not. `EXCLUDED` names the cases the project does
not run, by op or dtype, each with its reason; extra/onnx_node_report.py runs everything and prints the tables.
"""
from __future__ import annotations

import functools
import re
import warnings

import numpy as np

# ops (and op groups) this project does not support, with why
EXCLUDED_OPS: dict[str, str] = {}
for _ops, _why in (
    ("Adagrad Adam Momentum Gradient", "training ops (ai.onnx.preview.training)"),
    ("ArrayFeatureExtractor Binarizer LabelEncoder TreeEnsemble TfIdfVectorizer", "ai.onnx.ml domain"),
    ("StringConcat StringNormalizer StringSplit RegexFullMatch ImageDecoder", "string or image-file inputs"),
    ("SequenceInsert SequenceMap SplitToSequence SequenceAt SequenceConstruct SequenceEmpty SequenceErase "
     "SequenceLength ConcatFromSequence", "sequence values"),
    ("OptionalGetElement OptionalHasElement Optional", "optional values"),
    ("Bernoulli RandomNormal RandomUniform RandomNormalLike RandomUniformLike Multinomial", "random ops"),
    ("STFT MelWeightMatrix", "signal processing (not implemented)"),
    ("RoiAlign DeformConv Col2Im MaxUnpool Det", "not implemented"),
    ("FlexAttention", "ai.onnx.preview domain (not implemented)"),
):
    EXCLUDED_OPS.update(dict.fromkeys(_ops.split(), _why))

# dtypes tinygrad has no counterpart for (numpy's names, as the reference data holds them)
_BAD_KINDS = ("U", "S", "O", "c")
_BAD_TYPES = ("float8", "int4", "uint4", "float4", "int2", "uint2")


def excluded_dtype(case) -> str | None:
    """Why a case's inputs, outputs or model use a dtype tinygrad lacks (strings, complex, float8, int4...)."""
    text = str(case.model.graph)
    for t in _BAD_TYPES:
        if t.upper() in text.upper().replace("_", ""):
            return f"{t} dtype"
    for ins, outs in case.data_sets:
        for v in list(ins) + list(outs):
            if v is None or isinstance(v, (list, tuple, dict)):
                return "sequence or optional value"
            v = np.asarray(v)
            if v.dtype.kind in _BAD_KINDS:
                return f"{v.dtype} dtype"
            if v.dtype.names or any(t in str(v.dtype) for t in _BAD_TYPES):
                return f"{v.dtype} dtype"
    return None


@functools.lru_cache(maxsize=1)
def node_cases() -> list[tuple[str, int, object]]:
    """(op, opset, case) for every node test case the installed `onnx` ships."""
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    single = {c.name: c.model.graph.node[0].op_type for c in cases if len(c.model.graph.node) == 1}
    out = []
    for c in cases:
        op = single.get(c.name) or single.get(re.sub(r"_expanded.*$", "", c.name))
        if op is None:
            op = single.get(re.sub(r"(_expanded.*)?$", "", c.name).rsplit("_", 1)[0], c.model.graph.node[-1].op_type)
        opset = next((o.version for o in c.model.opset_import if o.domain in ("", "ai.onnx")), 0)
        out.append((op, opset, c))
    return out


def exclusion(op: str, case) -> str | None:
    """Why the project does not run a case (None: it runs)."""
    if case.name.startswith("test_training_dropout") and "zero_ratio" not in case.name:
        return "random dropout mask (the reference data is numpy's generator)"
    if op in EXCLUDED_OPS:
        return EXCLUDED_OPS[op]
    bad = {n.op_type for n in case.model.graph.node} & set(EXCLUDED_OPS)
    if bad:
        return f"uses {sorted(bad)[0]}: {EXCLUDED_OPS[sorted(bad)[0]]}"
    return excluded_dtype(case)


def _compare(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, want {want.shape}"
    if want.dtype.kind in "fc" or want.dtype.name == "bfloat16":
        try:
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                       equal_nan=True)
        except AssertionError as e:
            return f"{name}: {str(e).strip().splitlines()[2:5]}"
    elif not np.array_equal(got.astype(want.dtype), want):
        return f"{name}: values differ (int/bool)"
    return None


def run_case(case) -> str | None:
    """Run every data set of a case; None when all outputs match, else the first mismatch or error."""
    from tinygrad.nn.onnx import OnnxRunner
    try:
        runner = OnnxRunner(case.model, jit=False)
        names = list(runner.graph.inputs)
        for ins, outs in case.data_sets:
            got = runner({k: np.asarray(v) for k, v in zip(names, ins)})
            for want_name, want in zip(runner.graph.outputs, outs):
                t = got[want_name]
                if t is None:
                    return f"{want_name}: not computed"
                why = _compare(want_name, t.numpy(), np.asarray(want), case.rtol, case.atol)
                if why:
                    return why
    except Exception as e:  # noqa: BLE001 - the report counts every failure, whatever raised it
        return f"{type(e).__name__}: {str(e)[:200]}"
    return None
