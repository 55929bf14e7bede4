"""Names and behaviours that code written for tinygrad 0.9 relies on: its imports, its error classes, its indexing."""
import os
import pathlib

import numpy as np
import pytest

from tinygrad import Tensor


def _open_devices(*names: str) -> tuple[str, ...]:
    """`names`, or a skip where one of them does not open (a second GPU on a machine with one)."""
    from tinygrad import Device
    for n in names:
        try:
            Device[n]
        except Exception as e:  # noqa: BLE001 - any device's own error: the machine lacks it
            pytest.skip(f"{n} does not open here: {e}")
    return names


def test_helpers_names_of_0_9():
    from tinygrad.helpers import CI, IMAGE, THREEFRY, Profiling, fetch, get_child, merge_dicts, partition, temp
    assert isinstance(CI, bool) and IMAGE.value == 0 and THREEFRY.value == 0
    assert temp("x.bin").endswith("x.bin") and pathlib.Path(temp("x.bin")).parent.is_dir()
    assert partition([1, 2, 3, 4], lambda x: x % 2 == 0) == ([2, 4], [1, 3])
    assert merge_dicts([{"a": 1}, {"b": 2}, {"a": 1}]) == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="'a' has two values"):
        merge_dicts([{"a": 1}, {"a": 2}])
    assert get_child({"layers": [{"w": 5}]}, "layers.0.w") == 5
    assert callable(fetch)
    with Profiling(enabled=False):
        pass


def test_fetch_never_overwrites_an_existing_file(tmp_path):
    from tinygrad.helpers import fetch
    mine = tmp_path / "weights.bin"
    mine.write_bytes(b"mine")
    # an existing file is used as it is: no download, no overwrite (the URL is never opened)
    assert fetch("http://127.0.0.1:9/never", name=mine) == mine
    assert mine.read_bytes() == b"mine"


def test_profiling_prints_a_profile(capsys):
    from tinygrad.helpers import Profiling
    with Profiling(frac=0.5):
        sum(range(1000))
    assert "function calls" in capsys.readouterr().out


def test_image_dtype_imports_and_is_refused_by_tensors():
    from tinygrad.dtype import ImageDType, dtypes
    img = dtypes.imageh((4, 4, 4))
    assert isinstance(img, ImageDType) and img.shape == (4, 4, 4) and img != dtypes.imagef((4, 4, 4))
    with pytest.raises(NotImplementedError, match="image dtypes"):
        Tensor.zeros(4, dtype=img)


def test_lazybuffer_lbs_and_shapetracker_view():
    from tinygrad.shape.shapetracker import ShapeTracker, View
    from tinygrad.shape.view import View as ViewItself
    t = Tensor([1.0, 2.0])
    assert t.lazydata.lbs == [t.lazydata]
    assert View is ViewItself and isinstance(ShapeTracker.from_shape((2, 3)).views[0], View)


@pytest.mark.parametrize("bad", [
    lambda: Tensor.ones(2, 3).reshape(4, 4),
    lambda: Tensor.ones(2, 3).permute(0, 0),
    lambda: Tensor.ones(2, 3).expand(4, 4),
    lambda: Tensor.ones(2, 3) + Tensor.ones(4, 3),
    lambda: Tensor.ones(2, 3).shrink(((0, 5), (0, 3))),
])
def test_shape_errors_are_value_assertion_and_runtime_errors(bad):
    from tinygrad.errors import ArgumentError
    for cls in (ValueError, AssertionError, RuntimeError, ArgumentError):
        with pytest.raises(cls):
            bad()


def test_a_list_with_tensors_indexes_one_dim_per_item():
    a = Tensor(np.arange(12).reshape(3, 4))
    ref = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(a[[Tensor([0, 2]), Tensor([1, 3])]].numpy(), ref[[0, 2], [1, 3]])
    np.testing.assert_array_equal(a[[slice(None), Tensor([1])]].numpy(), ref[:, [1]])
    # a list of ints still indexes the first dim
    np.testing.assert_array_equal(a[[2, 0]].numpy(), ref[[2, 0]])


def test_pow_zero_is_a_constant():
    x = Tensor([np.nan, np.inf, -2.0, 0.0]).realize()
    y = x ** 0
    # no graph over x: a constant, which a consumer inlines
    assert y.lazydata.is_unrealized_const()
    np.testing.assert_array_equal(y.numpy(), [1, 1, 1, 1])


def test_getenv_reads_a_script_s_own_names(monkeypatch):
    from tinygrad.helpers import getenv
    monkeypatch.setenv("BS", "64")
    assert getenv("BS", 32) == 64 and os.environ["BS"] == "64"


def test_more_0_9_names():
    import ctypes

    from tinygrad import Timing, fetch, getenv  # noqa: F401 - importable from the package, as later 0.9s had them
    from tinygrad.dtype import INVERSE_DTYPES_DICT, dtypes
    from tinygrad.helpers import data64, data64_le, flat_mv, from_mv, getbits, i2u, mv_address, strip_parens, to_mv
    from tinygrad.mlops import Function as MlopsFunction
    from tinygrad.tensor import Function
    assert Function is MlopsFunction
    assert INVERSE_DTYPES_DICT[dtypes.float32] == "float32"
    assert strip_parens("(a+b)") == "a+b" and strip_parens("(a)+(b)") == "(a)+(b)"
    assert getbits(0b101100, 2, 3) == 0b11 and i2u(8, -1) == 255
    assert data64(0x1_0000_0002) == (1, 2) and data64_le(0x1_0000_0002) == (2, 1)
    buf = bytearray(b"abcd")
    mv = memoryview(buf)
    assert bytes(to_mv(mv_address(mv), 4)) == b"abcd" and from_mv(mv)[1] == b"b"
    assert flat_mv(memoryview(bytearray(8)).cast("I")).nbytes == 8
    assert ctypes.sizeof(from_mv(mv)) == 4


def test_data_of_a_0d_tensor_is_a_0d_memoryview():
    from tinygrad import dtypes
    dat = Tensor(3, dtype=dtypes.int32).data()
    assert dat.shape == () and dat.format == "i" and dat.tolist() == 3
    assert Tensor.zeros(2, 0).data().tolist() == []


def test_global_counters_count_ops_and_bytes_on_every_path():
    from tinygrad import GlobalCounters, TinyJit
    a = Tensor.ones(64, 64).contiguous().realize()
    for _ in range(2):  # the first run schedules, the second replays its cached plan
        GlobalCounters.reset()
        (a * 2 + 1).realize()
        # two ALU ops over 4096 elements; one float32 buffer read and one written
        assert (GlobalCounters.kernel_count, GlobalCounters.global_ops) == (1, 2 * 4096)
        assert GlobalCounters.global_mem == 2 * 4096 * 4
    step = TinyJit(lambda x: (x * 2 + 1).realize())
    for _ in range(3):
        step(a)
    GlobalCounters.reset()
    step(a)
    assert (GlobalCounters.global_ops, GlobalCounters.global_mem) == (2 * 4096, 2 * 4096 * 4)


def test_global_ops_of_a_symbolic_kernel_at_its_launch_values():
    from tinygrad import GlobalCounters, Variable
    from tinygrad.engine.realize import op_estimate
    from tinygrad.engine.schedule import create_schedule_with_vars
    v = Variable("n", 1, 64).bind(10)
    x = Tensor.ones(64).contiguous().realize().shrink(((0, v),)) + 1
    (si,), var_vals = create_schedule_with_vars([x.contiguous().lazydata])
    assert op_estimate(si.ast) == Variable("n", 1, 64)  # one ADD per element
    GlobalCounters.reset()
    x.contiguous().realize()
    assert GlobalCounters.global_ops == 10


def test_wino_knob_is_accepted_and_conv2d_is_unchanged():
    from tinygrad.helpers import WINO, Context
    x, w = Tensor.ones(1, 2, 6, 6).contiguous(), Tensor.ones(3, 2, 3, 3).contiguous()
    with Context(WINO=1):
        assert WINO.value == 1
        np.testing.assert_allclose(x.conv2d(w, padding=1).numpy(), Tensor.ones(1, 2, 6, 6).conv2d(w, padding=1).numpy())
    assert WINO.value == 0
    from tinygrad.helpers import RING
    with Context(RING=0):
        assert RING.value == 0 and (Tensor([1.0, 2.0]) * 2).tolist() == [2.0, 4.0]


def test_lower_schedule_yields_exec_items_off_the_front():
    from tinygrad.engine.realize import CompiledRunner, ExecItem, lower_schedule
    from tinygrad.engine.schedule import create_schedule
    a = Tensor([1.0, 2.0]).realize()
    out = (a * 3).sum()
    sched = create_schedule([out.lazydata])
    n = len(sched)
    items = lower_schedule(sched)
    first = next(items)
    assert isinstance(first, ExecItem) and len(sched) == n - 1
    rest = list(items)
    assert not sched and any(isinstance(ei.prg, CompiledRunner) for ei in [first, *rest])
    for ei in [first, *rest]:
        ei.run()
    assert out.lazydata.base.realized is not None and out.item() == 9.0


def test_a_kernel_too_big_for_any_tile_still_runs():
    # a body past the optimiser's size limit even untiled (a 6x6 matrix applied twice as sums of slices) runs as
    # plain loops instead of failing to pick optimisations
    x = np.random.default_rng(0).standard_normal((64, 6, 6)).astype(np.float32)
    t = Tensor(x)
    rows = [sum((t[:, j:j + 1, :] * float(r + j + 1) for j in range(6)), t[:, r:r + 1, :]) for r in range(6)]
    u = rows[0].cat(*rows[1:], dim=1)
    cols = [sum((u[:, :, j:j + 1] * float(c - j) for j in range(6)), u[:, :, c:c + 1]) for c in range(6)]
    ref_rows = np.concatenate([x[:, r:r + 1] + sum(x[:, j:j + 1] * (r + j + 1) for j in range(6)) for r in range(6)], 1)
    ref = np.concatenate([ref_rows[:, :, c:c + 1] + sum(ref_rows[:, :, j:j + 1] * (c - j) for j in range(6))
                          for c in range(6)], 2)
    np.testing.assert_allclose(cols[0].cat(*cols[1:], dim=2).numpy(), ref, rtol=1e-5, atol=1e-3)


def _views():
    # (tinygrad view, numpy view) pairs of a (4, 6) tensor: strided, permuted, flipped, shrunk, reshaped
    return {
        "stride": (lambda x: x[:, ::2], lambda n: n[:, ::2]),
        "permute": (lambda x: x.permute(1, 0), lambda n: n.transpose(1, 0)),
        "T": (lambda x: x.T, lambda n: n.T),
        "negative_stride": (lambda x: x[:, ::-2], lambda n: n[:, ::-2]),
        "shrink": (lambda x: x[1:3, 2:5], lambda n: n[1:3, 2:5]),
        "reshape": (lambda x: x.reshape(2, 12), lambda n: n.reshape(2, 12)),
    }


@pytest.mark.parametrize("realized", [True, False])
@pytest.mark.parametrize("view", list(_views()))
@pytest.mark.parametrize("idx", [1, (slice(None), 1), (slice(0, 2),)])
def test_setitem_through_a_view_updates_the_base_as_numpy(realized, view, idx):
    # `t[:, ::2][1] = 5` writes t's memory in numpy and PyTorch; a lazy t (not realized yet) must see it too, not
    # only the temporary view
    tv, nv = _views()[view]
    n = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = Tensor.arange(24).float().reshape(4, 6)
    if realized:
        t.realize()
    other = t[::-1]  # a second view of the same memory, made before the write
    sub_shape = nv(n)[idx].shape
    val = np.arange(int(np.prod(sub_shape)), dtype=np.float32).reshape(sub_shape) + 100
    v = tv(t)
    v[idx] = Tensor(val)
    nv(n)[idx] = val
    np.testing.assert_array_equal(t.numpy(), n)
    np.testing.assert_array_equal(v.numpy(), nv(n))
    np.testing.assert_array_equal(other.numpy(), n[::-1])


def test_setitem_scalar_into_a_strided_view_of_a_lazy_tensor():
    n = np.arange(24).reshape(4, 6)
    t = Tensor(n.copy())  # not realized yet: a copy from numpy is pending
    t[:, ::2][1] = 5
    n[:, ::2][1] = 5
    np.testing.assert_array_equal(t.numpy(), n)


def test_dtype_np_is_the_numpy_scalar_type():
    from tinygrad import dtypes
    assert dtypes.float32.np is np.float32 and dtypes.uint8.np is np.uint8 and dtypes.bool.np is np.bool_
    assert issubclass(dtypes.int16.np, np.integer) and dtypes.float16.np(1.5) == np.float16(1.5)
    assert dtypes.bfloat16.np is None
    assert dtypes.from_np(np.float64) == dtypes.float64 and dtypes.from_np(np.dtype("int8")) == dtypes.int8
    assert Tensor([1, 2], dtype=dtypes.uint16).numpy().dtype == dtypes.uint16.np


def test_jit_keyword_arguments_in_any_order():
    # a capture of f(second=b, first=a) must serve f(first=a, second=b): they are the same call
    from tinygrad import TinyJit
    div = TinyJit(lambda first, second: (first / second).realize())
    for i in range(4):
        a, b = Tensor.randn(3, 3).realize(), Tensor.randn(3, 3).realize()
        c = div(second=b, first=a) if i < 2 else div(first=a, second=b)
        np.testing.assert_allclose(c.numpy(), a.numpy() / b.numpy(), rtol=1e-5)


def test_jit_of_a_function_that_only_copies():
    from tinygrad import Device, TinyJit
    d0, d1 = _open_devices(f"{Device.DEFAULT}:0", f"{Device.DEFAULT}:1")
    jf = TinyJit(lambda a, b: (a.to(d1).realize(), b.to(d1).realize()))
    for _ in range(4):
        a, b = Tensor.randn(4, 4, device=d0).realize(), Tensor.randn(4, 4, device=d0).realize()
        x, y = jf(a, b)
        np.testing.assert_array_equal(x.numpy(), a.numpy())
        np.testing.assert_array_equal(y.numpy(), b.numpy())
    assert len(jf.jit_cache) == 2


def test_extra_gradcheck_jacobians_of_0_9():
    from extra.gradcheck import gradcheck, jacobian, numerical_jacobian
    w = Tensor([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]])
    x = Tensor([[0.3, -0.7, 1.1]], requires_grad=True)

    def f(t):
        return (t.dot(w) * t.sum()).tanh()
    xs, ws = x.numpy()[0], w.numpy()
    # d tanh(y_j * s) / d x_i, y = x W, s = sum(x): (1 - tanh^2) * (W[i, j] * s + y_j)
    y, s = xs @ ws, xs.sum()
    want = ((1 - np.tanh(y * s) ** 2)[:, None] * (ws.T * s + y[:, None]))
    np.testing.assert_allclose(jacobian(f, x), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(numerical_jacobian(f, x), want, atol=1e-3)
    assert gradcheck(f, x)
    # a detached term has no gradient, but the finite differences see it: the check must fail
    assert not gradcheck(lambda t: f(t) + t.detach().sum(), x)


def test_multinomial_without_replacement_draws_distinct_categories():
    from tinygrad.errors import ArgumentError
    Tensor.manual_seed(1)
    w = Tensor([[0.1, 0.2, 0.0, 0.3, 0.4], [1.0, 0.0, 1.0, 1.0, 1.0]])
    for _ in range(5):
        got = w.multinomial(4, replacement=False).numpy()
        assert got.shape == (2, 4)
        for row, weights in zip(got, w.numpy()):
            assert len(set(row.tolist())) == 4 and all(weights[i] > 0 for i in row)
    with pytest.raises(ArgumentError):  # also an AssertionError, as 0.9 raised
        Tensor([0.1, 0.9]).multinomial(3, replacement=False)
    with pytest.raises(AssertionError):
        Tensor([1, 9]).multinomial(0)


def test_pickle_a_realized_tensor_and_a_view_of_one():
    import pickle
    t = Tensor.rand(4, 5).realize()
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(t)).numpy(), t.numpy())
    base = Tensor.arange(10).contiguous().realize()
    assert pickle.loads(pickle.dumps(base[3:5])).tolist() == [3, 4]
    # a pending op on a realized input pickles its input's bytes, and computes after loading
    assert pickle.loads(pickle.dumps(Tensor([1.0, 2.0]).realize() * 3)).tolist() == [3.0, 6.0]


def test_examples_gpt2_attention_cache_matches_the_whole_sequence():
    from examples.gpt2 import Attention
    from tinygrad import Variable
    Tensor.manual_seed(0)
    a = Attention(16, 2)
    x = Tensor.randn(1, 4, 16).realize()
    full = a(x, 0, Tensor.full((1, 1, 4, 4), float("-inf")).triu(1)).numpy()
    b = Attention(16, 2)
    b.c_attn, b.c_proj = a.c_attn, a.c_proj
    # one token at a time through the cache, at a symbolic position
    steps = [b(x[:, i:i + 1], Variable("start_pos", 0, 15).bind(i) if i else 0, None).numpy() for i in range(4)]
    np.testing.assert_allclose(np.concatenate(steps, 1), full, rtol=1e-4, atol=1e-5)
    assert Attention(8, 2)(Tensor.ones(1, 0, 8), Variable("start_pos", 0, 8).bind(0), None).shape == (1, 0, 8)


@pytest.mark.parametrize("name, kwargs", [
    ("OneCycleLR", dict(max_lr=0.1, pct_start=0.3, div_factor=25, final_div_factor=1e4, total_steps=20)),
    ("CosineAnnealingLR", dict(T_max=10, eta_min=0.001)),
])
def test_extra_lr_scheduler_follows_torch(name, kwargs):
    import torch

    import extra.lr_scheduler
    from tinygrad import nn
    opt = nn.optim.SGD([Tensor.ones(3, requires_grad=True)], lr=0.05)
    sched = getattr(extra.lr_scheduler, name)(opt, **kwargs)
    topt = torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.05)
    tsched = getattr(torch.optim.lr_scheduler, name)(topt, **kwargs)
    got, want = [], []
    for _ in range(10):
        got.append(float(opt.lr.numpy()[0]))
        want.append(topt.param_groups[0]["lr"])
        topt.step()
        sched.step()
        tsched.step()
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_half_gradients_of_long_expands_and_max_ties_accumulate_wide():
    # 10001 tied maxima: each gets 1/10001 and the expand's backward sums them; in half both the count and the sum
    # stalled (2048 + 1 == 2048), giving 0.7 instead of 1
    from tinygrad import dtypes
    t = Tensor([5, -5], dtype=dtypes.half, requires_grad=True)
    t.reshape(2, 1).expand(2, 10001).max().backward()
    assert t.grad.dtype == dtypes.half
    np.testing.assert_array_equal(t.grad.numpy(), [1, 0])
    u = Tensor([1.0, 2.0], dtype=dtypes.half, requires_grad=True)
    u.reshape(2, 1).expand(2, 3000).sum().backward()
    np.testing.assert_array_equal(u.grad.numpy(), [3000, 3000])


def test_dtypes_are_ordered_and_image_dtypes_vectorize_as_their_element():
    from tinygrad.dtype import dtypes, least_upper_dtype
    for a in (dtypes.int8, dtypes.uint16, dtypes.float16):
        for b in (dtypes.bool, dtypes.int32, dtypes.float32):
            r = least_upper_dtype(a, b)
            assert r >= a and r >= b and not r < a
    assert dtypes.float32 > dtypes.float16 and dtypes.int8 <= dtypes.int8
    assert dtypes.imagef((10, 10)).vec(4) == dtypes.float32.vec(4)
    assert dtypes.imageh((10, 10)).vec(4) == dtypes.imageh((10, 10)).base.vec(4)


def test_examples_gpt2_transformer_decodes_through_its_cache():
    from examples.gpt2 import Transformer
    from tinygrad import Variable
    from tinygrad.nn.state import get_state_dict, load_state_dict
    Tensor.manual_seed(0)
    args = dict(dim=16, n_heads=2, n_layers=2, norm_eps=1e-5, vocab_size=11, max_seq_len=16)
    m, m2 = Transformer(**args), Transformer(**args)
    load_state_dict(m2, get_state_dict(m), verbose=False)
    toks = Tensor([[1, 2, 3, 4]])
    full = m.logits(toks, 0).numpy()
    steps = [m2.logits(toks[:, i:i + 1], Variable("start_pos", 0, 15).bind(i) if i else 0).numpy() for i in range(4)]
    np.testing.assert_allclose(np.concatenate(steps, 1), full, rtol=1e-4, atol=1e-4)
    assert m(toks, 0).tolist() == full[:, -1].argmax(-1).tolist()


def test_extra_models_llama_rmsnorm_is_nn_rmsnorm():
    from extra.models.llama import RMSNorm
    from tinygrad import nn
    assert RMSNorm is nn.RMSNorm


def test_gradient_flows_back_through_to_another_device():
    from tinygrad import Device
    d0, d1 = _open_devices(f"{Device.DEFAULT}:1", f"{Device.DEFAULT}:2")
    x = Tensor.eye(3, requires_grad=True, device=d0)
    y = Tensor([[2.0, 0, -2.0]], requires_grad=True, device=d0)
    y.matmul(x).to(d1).sum().backward()
    assert x.grad.device == x.device
    np.testing.assert_array_equal(x.grad.numpy(), [[2, 2, 2], [0, 0, 0], [-2, -2, -2]])
    np.testing.assert_array_equal(y.grad.numpy(), [[1, 1, 1]])


def test_a_list_of_floats_takes_a_bfloat16_default_float(monkeypatch):
    from tinygrad import dtypes
    monkeypatch.setattr(dtypes, "default_float", dtypes.bfloat16)
    for t in (Tensor([1.5, 2.0]), Tensor([]), Tensor([[1, 2.5]])):
        assert t.dtype == dtypes.bfloat16
    assert Tensor([1.5, 2.0]).float().tolist() == [1.5, 2.0] and Tensor([1, 2]).dtype == dtypes.default_int


@pytest.mark.parametrize("name, want", [("HALF", "half"), ("bfloat16", "bfloat16"), ("DOUBLE", "double")])
def test_default_float_from_the_environment(name, want):
    import subprocess
    import sys
    code = "from tinygrad import dtypes, Tensor; print(dtypes.default_float, Tensor([1.5]).dtype)"
    env = {**os.environ, "DEFAULT_FLOAT": name}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [f"dtypes.{want}"] * 2


def test_examples_hlb_cifar10_unsynced_batchnorm_normalises_each_device_part():
    from examples.hlb_cifar10 import UnsyncedBatchNorm
    from tinygrad import Device
    from tinygrad.nn import BatchNorm2d
    _open_devices(f"{Device.DEFAULT}:1", f"{Device.DEFAULT}:2")
    x = Tensor.randn(4, 3, 2, 2).realize()
    with Tensor.train():
        bn = UnsyncedBatchNorm(3, num_devices=2)
        out = bn(x).numpy()
        # each half of the batch as an ordinary BatchNorm sees it
        want = [BatchNorm2d(3)(x[i * 2:(i + 1) * 2]).numpy() for i in range(2)]
        np.testing.assert_allclose(out, np.concatenate(want), rtol=1e-4, atol=1e-5)
        xs = x.numpy().reshape(2, 2, 3, 2, 2)
        np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * xs.mean(axis=(1, 3, 4)), rtol=1e-4, atol=1e-6)
        # sharded over two devices along the batch, as in data-parallel training
        devices = (f"{Device.DEFAULT}:1", f"{Device.DEFAULT}:2")
        sbn = UnsyncedBatchNorm(3, num_devices=2)
        sbn.running_mean.shard_(devices, axis=0)
        sbn.running_var.shard_(devices, axis=0)
        sbn.weight.to_(devices)
        sbn.bias.to_(devices)
        np.testing.assert_allclose(sbn(x.shard(devices, axis=0)).numpy(), out, rtol=1e-4, atol=1e-5)


def test_comparisons_are_not_differentiable_and_cut_the_graph():
    # as in PyTorch: a loss made only of a comparison does not require grad, and its backward raises
    a, b = Tensor.ones(4, requires_grad=True), Tensor.ones(4, requires_grad=True)
    for cmp in ((a == b), (a < b), (a != b), (a >= b)):
        assert not cmp.requires_grad
        with pytest.raises(RuntimeError, match="does not require grad"):
            cmp.sum().backward()
    # a comparison used as a mask passes the gradient of what it multiplies
    t = Tensor([-1.0, 0.0, 2.0], requires_grad=True)
    (t * (t < 1)).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), [1, 1, 0])


@pytest.mark.parametrize("idx", [[[0]], [[1, 0]], [[0], [1]], [[[0]]], [[0, 1], slice(None), [2, 3]]])
def test_a_list_holding_lists_indexes_one_dim_per_item_as_torch(idx):
    import torch
    n = np.arange(2 * 5 * 6).reshape(2, 5, 6)
    want = torch.tensor(n)[tuple(idx)].numpy()
    np.testing.assert_array_equal(Tensor(n)[idx].numpy(), want)


def test_backward_of_a_tensor_whose_requires_grad_was_never_set_is_allowed():
    # 0.9's test_repr_with_grad: requires_grad None (the default) is not "does not require grad"
    (Tensor([1]) + Tensor([1])).mean().backward()


def test_buffer_base_is_the_buffer_itself():
    t = Tensor.arange(10).contiguous().realize()[3:5].contiguous().realize()
    buf = t.lazydata.buffer
    assert buf.base is buf and t.tolist() == [3, 4]


def test_an_assign_read_before_and_after_is_named_a_cycle():
    # 0.9's test_assign_diamond_cycle matches "cycle": the graph reads a's old value (times_a) after assigning a
    a = Tensor.ones(4).contiguous().realize()
    times_a = a * 3
    a.assign(Tensor.full((4,), 2.).contiguous())
    with pytest.raises(RuntimeError, match="assign cycle"):
        (a + (times_a - 1)).numpy()


def test_symbolic_shrink_of_an_unrealized_tensor():
    # 0.9's test_symbolic_ops test_shrink: the rand's views composed with a symbolic shrink left a mask wider than
    # its dim, which the composition shrank to and refused
    from tinygrad.shape.symbolic import Variable
    for i in range(1, 5):
        vi = Variable("i", 1, 10).bind(i)
        a = Tensor.rand(7, 11)
        np.testing.assert_allclose(a.shrink(((3, 5), (vi, vi + 2))).numpy(), a.shrink(((3, 5), (i, i + 2))).numpy())
