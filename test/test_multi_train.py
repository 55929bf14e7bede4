"""Training on several host devices: collectives, TinyJit replay of a multi-device step, sharded state loading, the
optimizer on sharded parameters, and data-parallel CNN training equal to one device's, step by step."""
import os
import sys

import numpy as np
import pytest

from tinygrad import Tensor, TinyJit, dtypes
from tinygrad.collectives import all_gather, all_reduce, reduce_scatter
from tinygrad.device import Device
from tinygrad.engine.jit import JitError
from tinygrad.errors import ArgumentError
from tinygrad.lazy import LazyBuffer
from tinygrad.nn import Linear
from tinygrad.nn.optim import SGD, Adam
from tinygrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save
from tinygrad.ops import ReduceOps

D2 = ("CLANG", "CLANG:1")
D3 = ("CLANG", "CLANG:1", "CLANG:2")


def _lbs(arrays, devices):
    return [Tensor(a).to(d).realize().lazydata for a, d in zip(arrays, devices)]


def _np(lb: LazyBuffer) -> np.ndarray:
    return Tensor(lb).numpy()


# ---- collectives ----

@pytest.mark.parametrize("op,np_op", [(ReduceOps.SUM, np.sum), (ReduceOps.MAX, np.max), (ReduceOps.PROD, np.prod)])
@pytest.mark.parametrize("devices", [D2, D3], ids=["2", "3"])
def test_all_reduce(op, np_op, devices):
    rng = np.random.default_rng(0)
    # 7 elements: not a multiple of the device count, so the ring's parts are padded
    arrays = [rng.uniform(0.5, 1.5, size=(7,)).astype(np.float32) for _ in devices]
    out = all_reduce(op, _lbs(arrays, devices))
    assert [lb.device for lb in out] == list(devices)
    results = [_np(lb) for lb in out]
    np.testing.assert_allclose(results[0], np_op(np.stack(arrays), axis=0), rtol=1e-6)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])  # bitwise the same everywhere


def test_all_reduce_shapes_and_ints():
    arrays = [np.arange(12, dtype=np.int32).reshape(3, 4) * (i + 1) for i in range(3)]
    for lb in all_reduce(ReduceOps.SUM, _lbs(arrays, D3)):
        assert lb.shape == (3, 4) and lb.dtype == dtypes.int32
        np.testing.assert_array_equal(_np(lb), np.arange(12).reshape(3, 4) * 6)


def test_all_gather_uneven():
    arrays = [np.full((2, i + 1), i, dtype=np.float32) for i in range(3)]
    want = np.concatenate(arrays, axis=1)
    out = all_gather(_lbs(arrays, D3), axis=1)
    assert [lb.device for lb in out] == list(D3)
    for lb in out:
        np.testing.assert_array_equal(_np(lb), want)


def test_reduce_scatter():
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((5, 2)).astype(np.float32) for _ in D3]
    total = np.sum(np.stack(arrays), axis=0)
    out = reduce_scatter(ReduceOps.SUM, _lbs(arrays, D3), axis=0)
    assert [lb.shape for lb in out] == [(2, 2), (2, 2), (1, 2)]
    np.testing.assert_allclose(np.concatenate([_np(lb) for lb in out]), total, rtol=1e-5, atol=1e-6)
    out = reduce_scatter(ReduceOps.SUM, _lbs(arrays, D3), axis=0, bounds=((0, 1), (1, 1), (1, 5)))
    assert [lb.shape for lb in out] == [(1, 2), (0, 2), (4, 2)]
    np.testing.assert_allclose(_np(out[2]), total[1:], rtol=1e-5, atol=1e-6)


def test_collectives_refuse_bad_input():
    a = _lbs([np.zeros(3, np.float32)] * 2, D2)
    with pytest.raises(ArgumentError, match="one buffer per device"):
        all_reduce(ReduceOps.SUM, [a[0], a[0]])
    with pytest.raises(ArgumentError, match="equal shapes"):
        all_reduce(ReduceOps.SUM, [a[0], _lbs([np.zeros(4, np.float32)], ("CLANG:1",))[0]])
    with pytest.raises(ArgumentError, match="bounds"):
        reduce_scatter(ReduceOps.SUM, a, axis=0, bounds=((0, 2), (1, 3)))


class _RecordingBackend:
    """A device type's own collectives, as a CUDA NCCL backend would plug in: records the calls, runs the ring."""

    def __init__(self, devices):
        self.devices, self.calls = devices, []

    def supports(self, devices):
        return devices == self.devices

    def all_reduce(self, op, lbs):
        from tinygrad.collectives import ring_all_reduce
        self.calls.append(("all_reduce", op))
        return ring_all_reduce(op, lbs)

    def all_gather(self, lbs, axis):
        from tinygrad.collectives import ring_all_gather
        self.calls.append(("all_gather", axis))
        return ring_all_gather(lbs, axis)

    def reduce_scatter(self, op, lbs, axis, bounds):
        from tinygrad.collectives import ring_reduce_scatter
        self.calls.append(("reduce_scatter", op))
        return ring_reduce_scatter(op, lbs, axis, bounds)


def test_device_backend_seam(monkeypatch):
    backend = _RecordingBackend(D2)
    monkeypatch.setattr(Device[D2[0]], "collectives", backend, raising=False)
    x = Tensor.arange(8).float().reshape(4, 2).shard(D2, axis=0)
    assert x.sum().item() == 28 and x.reshape(8).tolist() == list(range(8))
    assert ("all_reduce", ReduceOps.SUM) in backend.calls
    # the ring serves device sets the backend does not support
    backend.calls.clear()
    assert Tensor.arange(6).float().shard(D3, axis=0).sum().item() == 15 and backend.calls == []


# ---- TinyJit ----

def test_jit_replays_a_multi_device_function():
    rng = np.random.default_rng(2)
    w_np = rng.standard_normal((6, 3)).astype(np.float32)
    w = Tensor(w_np).shard(D3).realize()

    @TinyJit
    def f(x):
        return ((x @ w).relu().sum(1) + x.max()).realize()

    for _ in range(5):
        x_np = rng.standard_normal((7, 6)).astype(np.float32)
        out = f(Tensor(x_np).shard(D3, axis=0))
        assert out.device == D3 and out.lazydata.axis == 0
        want = np.maximum(x_np @ w_np, 0).sum(1) + x_np.max()
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    assert f.cnt == 2 and len(f.jit_cache) > 0
    # one input per device piece: all three of x's pieces are replaced on replay
    assert sorted({k for k in f.input_replace.values()}) == [0, 1, 2]


def test_jit_refuses_another_placement():
    @TinyJit
    def f(x):
        return (x * 2).realize()

    for _ in range(3):
        f(Tensor.ones(4, 2).contiguous().shard(D2, axis=0))
    with pytest.raises(JitError):
        f(Tensor.ones(4, 2).contiguous().shard(D2, axis=1))


# ---- state and optimizers ----

class _TwoLayer:
    def __init__(self):
        self.l1, self.l2 = Linear(6, 8), Linear(8, 3)

    def __call__(self, x):
        return self.l2(self.l1(x).relu())


def test_load_state_dict_into_sharded_model(tmp_path):
    Tensor.manual_seed(3)
    src = _TwoLayer()
    path = str(tmp_path / "m.safetensors")
    safe_save(get_state_dict(src), path)
    dst = _TwoLayer()
    dst.l1.weight.shard_(D2, axis=0)  # model-parallel: rows split
    dst.l1.bias.shard_(D2, axis=0)
    dst.l2.weight.shard_(D2, axis=1)
    dst.l2.bias.shard_(D2)
    before = dst.l1.weight.lazydata.bounds
    load_state_dict(dst, safe_load(path), verbose=False)  # from DISK tensors
    for k, v in get_state_dict(dst).items():
        assert v.device == D2
        np.testing.assert_array_equal(v.numpy(), get_state_dict(src)[k].numpy(), err_msg=k)
    assert dst.l1.weight.lazydata.axis == 0 and dst.l1.weight.lazydata.bounds == before
    w0 = Tensor(dst.l1.weight.lazydata.lbs[1]).numpy()
    np.testing.assert_array_equal(w0, src.l1.weight.numpy()[4:])  # device 1 holds its own rows only
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(dst(Tensor(x).shard(D2)).numpy(), src(Tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt_cls", [SGD, Adam])
def test_optimizer_on_sharded_parameters(opt_cls):
    Tensor.manual_seed(4)
    single, multi = _TwoLayer(), _TwoLayer()
    # copies of the values: loading the tensors themselves would share their buffers, which the single model's
    # steps then overwrite
    load_state_dict(multi, {k: Tensor(v.numpy()) for k, v in get_state_dict(single).items()}, verbose=False)
    multi.l1.weight.shard_(D3, axis=0)
    multi.l1.bias.shard_(D3, axis=0)
    multi.l2.weight.shard_(D3, axis=1)
    multi.l2.bias.shard_(D3)
    kw = {"lr": 0.1, "momentum": 0.9} if opt_cls is SGD else {"lr": 0.01}
    opts = [opt_cls(get_parameters(m), **kw) for m in (single, multi)]
    rng = np.random.default_rng(5)
    for _ in range(3):
        x = rng.standard_normal((8, 6)).astype(np.float32)
        for m, opt, xt in ((single, opts[0], Tensor(x)), (multi, opts[1], Tensor(x).shard(D3, axis=0))):
            opt.zero_grad()
            m(xt).square().mean().backward()
            opt.step()
    for k, v in get_state_dict(multi).items():
        np.testing.assert_allclose(v.numpy(), get_state_dict(single)[k].numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    # the state follows the parameters' placement: no all-gather per step
    if opt_cls is Adam:
        assert opts[1].m[0].lazydata.axis == 0 and opts[1].m[2].lazydata.axis == 1


def test_gradient_takes_its_tensors_placement():
    # a replicated weight times a batch split on axis 0, no reduce: the raw gradient is split, the weight's is not
    w = Tensor.ones(4, 3).contiguous().shard(D2).realize().requires_grad_()
    x_np = np.arange(12, dtype=np.float32).reshape(4, 3)
    (w * Tensor(x_np).shard(D2, axis=0)).sum().backward()
    assert w.grad.lazydata.axis is None
    np.testing.assert_equal(w.grad.numpy(), x_np)
    SGD([w], lr=1.0).step()
    np.testing.assert_equal(w.numpy(), 1 - x_np)


# ---- data-parallel training ----

@pytest.fixture(scope="module")
def train_cnn_multi():
    pytest.importorskip("sklearn")
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from extra.examples import train_cnn_multi
    return train_cnn_multi


def test_data_parallel_cnn_matches_one_device(train_cnn_multi):
    """10 jitted Adam steps of the digits CNN with the batch split over 3 devices (unevenly: 22, 21, 21) give the
    losses and weights of the same 10 steps on one device."""
    single_losses, single = train_cnn_multi.train_steps(None, 10)
    multi_losses, multi = train_cnn_multi.train_steps(D3, 10)
    np.testing.assert_allclose(multi_losses, single_losses, rtol=1e-5, atol=1e-5)
    assert single_losses[-1] < single_losses[0] * 0.6  # it does learn
    for k, v in get_state_dict(multi).items():
        assert v.device == D3
        np.testing.assert_allclose(v.numpy(), get_state_dict(single)[k].numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


def _open_or_skip(devices: tuple[str, ...]) -> None:
    """Skips unless every one of `devices` opens: `CUDA=1` on a one-GPU machine has a CUDA but no CUDA:1, and only
    opening it tells (a name is accepted for any ordinal)."""
    for d in devices:
        try:
            Device[d]
        except Exception as e:  # each runtime names a missing GPU its own way (RuntimeError, OSError, ...)
            pytest.skip(f"{d} does not open: {type(e).__name__}: {e}")


def test_example_main_compares_with_one_device(train_cnn_multi, monkeypatch, capsys):
    """The example's own command line, on 2 devices of the default type (CLANG, CLANG:1 unless a GPU is asked for)."""
    devices = train_cnn_multi.host_devices(2)
    _open_or_skip(devices)
    monkeypatch.setattr(sys, "argv", ["train_cnn_multi.py", "--devices", "2", "--steps", "3", "--compare"])
    assert train_cnn_multi.main() == 0
    out = capsys.readouterr().out
    assert f"3 steps on {', '.join(devices)}" in out and "largest loss difference" in out


def test_data_parallel_backward_moves_only_small_results():
    """A replicated conv weight's gradient with the batch split: each device reduces its part, and only results of
    the weight's size cross devices (no gather of the expanded activations the gradient is summed from)."""
    from tinygrad.engine.schedule import create_schedule
    from tinygrad.ops import LoadOps
    w = Tensor.ones(4, 2, 3, 3).contiguous().shard(D2).realize().requires_grad_()
    x = Tensor.ones(16, 2, 8, 8).contiguous().shard(D2, axis=0).realize()
    x.conv2d(w, padding=1).relu().sum().backward()
    sched = create_schedule(w.grad.lazydata.lbs)
    copied = [si.bufs[0].nbytes for si in sched if si.ast[0].op is LoadOps.COPY]
    assert copied and max(copied) <= w.nbytes(), copied
