"""ONNX models through tinygrad.nn.onnx.OnnxRunner: the `onnx` package's backend node tests (a representative subset
here; extra/onnx_node_report.py runs them all), real models exported from PyTorch checked against onnxruntime, and
the runner's own contract (inputs, TinyJit per shape, data-dependent graphs, the 0.9 entry point, the optional
import)."""
import functools
import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from extra.onnx_node_tests import exclusion, node_cases, run_case  # noqa: E402
from tinygrad import Tensor  # noqa: E402
from tinygrad.nn.onnx import OPS, OnnxRunner, UnsupportedOp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


# ---- the backend node tests ----
# NOTE: each case compiles its own kernels, and compiling dominates, so the suite runs the first case (by name) of
# every op it supports plus the variants below (attribute and opset differences worth a kernel each); the report
# script runs all of them.
VARIANTS = ("test_conv_with_strides_and_asymmetric_padding", "test_conv_with_autopad_same", "test_convtranspose_pads",
            "test_maxpool_2d_ceil", "test_maxpool_2d_same_upper", "test_averagepool_2d_pads_count_include_pad",
            "test_resize_upsample_scales_linear", "test_resize_downsample_scales_cubic",
            "test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric", "test_resize_tf_crop_and_resize",
            "test_slice_neg_steps", "test_reflect_pad", "test_edge_pad",
            "test_reduce_sum_default_axes_keepdims_example",
            "test_softmax_axis_0", "test_gather_negative_indices", "test_scatter_elements_with_reduction_max",
            "test_scatternd_add", "test_layer_normalization_4d_axis1", "test_einsum_batch_matmul",
            "test_split_variable_parts_1d_opset18", "test_top_k_smallest", "test_cumsum_1d_reverse_exclusive",
            "test_if", "test_nonzero_example", "test_gelu_tanh_1", "test_batchnorm_epsilon",
            "test_attention_4d_gqa_with_past_and_present", "test_attention_3d_causal", "test_lstm_with_peepholes",
            "test_gru_seq_length", "test_gridsample_bicubic", "test_qlinearmatmul_2D_uint8_float32",
            "test_sce_mean_weight_ii", "test_dequantizelinear_blocked")


@functools.lru_cache(maxsize=1)
def _suite_cases():
    seen: dict[str, int] = {}
    out = []
    for op, _, case in sorted(node_cases(), key=lambda c: c[2].name):
        if exclusion(op, case) or "_expanded" in case.name:
            continue
        if seen.get(op, 0) < 1 or case.name in VARIANTS:
            seen[op] = seen.get(op, 0) + 1
            out.append(case)
    return out


# cases of the subset that fail today, with why (the report lists every failure)
KNOWN_FAILURES: dict[str, str] = {}


@pytest.mark.parametrize("case", _suite_cases(), ids=lambda c: c.name)
def test_node(case):
    if case.name in KNOWN_FAILURES:
        pytest.xfail(KNOWN_FAILURES[case.name])
    err = run_case(case)
    assert err is None, err


def test_every_supported_op_has_a_node_case_in_the_suite():
    in_suite = {id(c) for c in _suite_cases()}
    ops_in_suite = {op for op, _, c in node_cases() if id(c) in in_suite}
    tested = {op for op, _, c in node_cases() if not exclusion(op, c)}
    assert {op for op in OPS if op in tested} <= ops_in_suite


# ---- real models against onnxruntime ----
models = pytest.importorskip("extra.onnx_models")


@pytest.fixture(scope="module")
def torch_models():
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    return {"cnn": models.resnet_cnn(batch=2, size=16), "bert": models.bert_block(), "mlp": models.mlp()}


@pytest.mark.parametrize("name", ["cnn", "bert", "mlp"])
def test_exported_model_matches_onnxruntime(torch_models, name):
    data, inputs = torch_models[name]
    ref = models.ort_run(data, inputs)
    runner = OnnxRunner(data)
    for _ in range(3):  # run, capture, replay: all three must agree
        out = runner(inputs)["out"].numpy()
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert not runner.data_dependent


@pytest.mark.parametrize("symbolic", [True, False])
def test_dynamic_batch_is_symbolic_or_retraced_per_shape(torch_models, symbolic):
    # the first batch size gets a capture of its own; a named batch dim is then a Variable: one more capture serves
    # every other batch size; without symbolic dims, one capture per size
    data, inputs = torch_models["mlp"]
    runner = OnnxRunner(data, symbolic=symbolic)
    assert runner.graph.inputs["x"][0][0] == "batch"
    rng = np.random.default_rng(1)
    for batch in (3, 5, 3, 5, 3, 5, 7):
        x = rng.standard_normal((batch, 64)).astype(np.float32)
        out = runner({"x": x})["out"]
        assert out.shape == (batch, 10)
        np.testing.assert_allclose(out.numpy(), models.ort_run(data, {"x": x}), rtol=1e-4, atol=1e-5)
    assert runner.symbolic == symbolic
    # symbolic: size 3's capture (called 3 times) and the symbolic one (sizes 5, 5, 5, 7); concrete: sizes 3 and 5
    # captured, 7 run once
    assert sorted(j.cnt for j in runner._jits.values()) == ([2, 2] if symbolic else [1, 2, 2])
    if symbolic:
        assert ("symbolic", ("x", ("batch", 64), runner._first_key[0][2])) in runner._jits


# ---- the runner's contract ----
def test_inputs_are_checked_and_cast():
    m = _model([helper.make_node("Add", ["a", "b"], ["y"])], [_vi("a", [2]), _vi("b", [2])], [_vi("y", [2])])
    r = OnnxRunner(m, jit=False)
    out = r({"a": [1, 2], "b": np.array([0.5, 0.5], np.float64)})["y"]
    assert out.dtype == Tensor([1.0]).dtype and out.tolist() == [1.5, 2.5]
    with pytest.raises(ValueError, match="missing"):
        r({"a": [1, 2]})
    with pytest.raises(ValueError, match="shape"):
        r({"a": [1, 2, 3], "b": [1, 2, 3]})


def test_path_bytes_and_proto_load_the_same(tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [3])], [_vi("y", [3])])
    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    for src in (m, m.SerializeToString(), str(p), p):
        assert OnnxRunner(src, jit=False)({"x": [-1.0, 0.0, 2.0]})["y"].tolist() == [0.0, 0.0, 2.0]


def test_static_shape_values_are_folded_out_of_the_jit():
    # Shape -> Gather -> Concat -> Reshape: the shape arithmetic is static, only the data's kernels are captured
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "zero1"], ["b1"]),
             helper.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("Mul", ["flat", "two"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
             onnx.numpy_helper.from_array(np.array([0], np.int64), "zero1"),
             onnx.numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    r = OnnxRunner(_model(nodes, [_vi("x", ["n", 2, 3])], [_vi("y", None)], inits))
    for n in (2, 2, 2, 2, 3):
        x = np.full((n, 2, 3), n, np.float32)
        np.testing.assert_equal(r({"x": x})["y"].numpy(), x.reshape(n, 6) * 2)
    # Shape reads the named dim n as a value: the symbolic trace (tried for n=3) gives way to one capture per shape
    assert not r.data_dependent and not r.symbolic
    jit = r._jits[r._first_key]
    assert jit.cnt == 2 and len(jit.jit_cache) == 1


def test_array_inputs_are_copied_into_one_buffer_per_input():
    # arrays go straight into a realized buffer kept per input: every call (run, capture, replays) sees its own data
    m = _model([helper.make_node("Mul", ["x", "x"], ["y"])], [_vi("x", ["n", 3])], [_vi("y", None)])
    r = OnnxRunner(m)
    rng = np.random.default_rng(0)
    for n in (2, 2, 2, 2, 4, 4, 4, 2):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_allclose(r({"x": x})["y"].numpy(), x * x, rtol=1e-6)
        np.testing.assert_allclose(r({"x": x.astype(np.float64)})["y"].numpy(), x * x, rtol=1e-6)  # cast first
    staged = r._staging["x"]
    assert staged.shape == (2, 3) and staged.lazydata.base.realized is not None


def test_data_dependent_graph_runs_eagerly():
    # NonZero's output shape depends on the data: a replay would be wrong, so the runner stops using TinyJit
    m = _model([helper.make_node("NonZero", ["x"], ["y"])], [_vi("x", [4])], [_vi("y", None, TensorProto.INT64)])
    r = OnnxRunner(m)
    for x in ([0, 1, 0, 1], [1, 1, 1, 0], [0, 0, 0, 3]):
        assert r({"x": np.array(x, np.float32)})["y"].numpy().tolist() == [np.nonzero(x)[0].tolist()]
    assert r.data_dependent


def test_if_takes_the_branch_of_the_condition():
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [_vi("t", [2])])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [_vi("e", [2])])
    m = _model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
               [_vi("c", [], TensorProto.BOOL), _vi("x", [2])], [_vi("y", [2])])
    r = OnnxRunner(m)
    x = np.array([-1.0, 2.0], np.float32)
    assert r({"c": np.array(True), "x": x})["y"].tolist() == [1.0, -2.0]
    assert r({"c": np.array(False), "x": x})["y"].tolist() == [1.0, 2.0]


def test_unsupported_op_names_it():
    m = _model([helper.make_node("Det", ["x"], ["y"])], [_vi("x", [2, 2])], [_vi("y", None)])
    with pytest.raises(UnsupportedOp, match="Det"):
        OnnxRunner(m, jit=False)({"x": np.eye(2, dtype=np.float32)})


def test_get_run_onnx_as_09_called_it():
    from extra.onnx import get_run_onnx
    m = _model([helper.make_node("Sigmoid", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])])
    run_onnx = get_run_onnx(m)
    out = run_onnx({"x": Tensor([0.0, 0.0])}, debug=False)
    assert isinstance(out["y"], Tensor) and out["y"].tolist() == [0.5, 0.5]


def test_tinygrad_imports_without_onnx_and_says_which_extra():
    # a None entry in sys.modules makes `import onnx` fail as if it were not installed
    code = ("import sys; sys.modules['onnx'] = None\n"
            "import tinygrad, tinygrad.nn.onnx\n"
            "from tinygrad.nn.onnx import OnnxRunner\n"
            "try:\n    OnnxRunner(b'')\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, check=True).stdout
    assert "tinygrad[onnx]" in out
