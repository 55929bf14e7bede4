"""The real NCCL path on two or more CUDA GPUs, against numpy: the C++ Communicator, the collectives through
tinygrad's API (every axis, the ring's fallbacks), sharded reductions, and data-parallel training under TinyJit
against one GPU. Skipped without 2 GPUs and a loadable NCCL. Every test runs under a watchdog that prints the
stacks and exits instead of hanging (a mismatched NCCL group waits forever).

    PYTHONPATH=$PWD python -m pytest test/test_nccl_gpu.py -o addopts="" -v
"""
from __future__ import annotations

import faulthandler
import os

import numpy as np
import pytest

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def _gpus() -> int:
    try:
        from tinygrad.runtime import _cuda, nccl
        return _cuda.device_count() if nccl.available() else 0
    except (ImportError, RuntimeError):
        return 0


GPUS = _gpus()
pytestmark = pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA GPUs and NCCL")
DEVICES = ("CUDA", "CUDA:1")


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(180, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def native(d: str):
    from tinygrad.device import Device
    return Device[d].native


def put(d: str, a: np.ndarray):
    from tinygrad.runtime import _cuda
    b = _cuda.DeviceBuffer(native(d), a.nbytes)
    _cuda.copyin(b, memoryview(np.ascontiguousarray(a)).cast("B"))
    return b


def get(b, dtype, count: int) -> np.ndarray:
    from tinygrad.runtime import _cuda
    out = np.empty(count, dtype)
    _cuda.copyout(memoryview(out).cast("B"), b)
    return out


@pytest.mark.parametrize("op,ref", [("sum", np.sum), ("prod", np.prod), ("max", np.max), ("min", np.min)])
@pytest.mark.parametrize("dtype,name", [(np.float32, "float32"), (np.float16, "float16"), (np.int32, "int32"),
                                        (np.float64, "float64"), (np.int64, "int64")])
def test_communicator_all_reduce(op, ref, dtype, name):
    from tinygrad.runtime import nccl
    rng = np.random.default_rng(0)
    xs = [rng.integers(1, 4, 1000).astype(dtype) for _ in DEVICES]
    comm = nccl.communicator(DEVICES)
    send = [put(d, x) for d, x in zip(DEVICES, xs)]
    recv = [put(d, np.zeros_like(x)) for d, x in zip(DEVICES, xs)]
    comm.all_reduce(send, recv, 1000, name, op)
    for r in recv:
        np.testing.assert_array_equal(get(r, dtype, 1000), ref(np.stack(xs), axis=0).astype(dtype))


def test_communicator_all_gather_and_reduce_scatter():
    from tinygrad.runtime import nccl
    n = len(DEVICES)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(4096).astype(np.float32) for _ in DEVICES]
    comm = nccl.communicator(DEVICES)
    send = [put(d, x) for d, x in zip(DEVICES, xs)]
    recv = [put(d, np.zeros(4096 * n, np.float32)) for d in DEVICES]
    comm.all_gather(send, recv, 4096, "float32")
    for r in recv:
        np.testing.assert_array_equal(get(r, np.float32, 4096 * n), np.concatenate(xs))
    recv = [put(d, np.zeros(4096 // n, np.float32)) for d in DEVICES]
    comm.reduce_scatter(send, recv, 4096 // n, "float32", "sum")
    total = np.sum(np.stack(xs), axis=0)
    for i, r in enumerate(recv):
        np.testing.assert_allclose(get(r, np.float32, 4096 // n), total[i * 4096 // n:(i + 1) * 4096 // n], rtol=1e-6)


def test_nvlink_multicast_is_off():
    from tinygrad.runtime import nccl
    nccl.communicator(DEVICES)
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"


@pytest.mark.parametrize("axis", [0, 1])
def test_collectives_through_the_api(axis):
    from tinygrad import Tensor, collectives
    from tinygrad.ops import LoadOps, ReduceOps
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((6, 8)).astype(np.float32) for _ in DEVICES]
    lbs = [Tensor(x, device=d).realize().lazydata for x, d in zip(xs, DEVICES)]
    outs = collectives.all_reduce(ReduceOps.SUM, lbs)
    assert outs[0].base.op is LoadOps.CUSTOM
    for o in outs:
        np.testing.assert_allclose(Tensor(o).numpy(), sum(xs), rtol=1e-5, atol=1e-6)
    for o in collectives.all_reduce(ReduceOps.MAX, lbs):
        np.testing.assert_array_equal(Tensor(o).numpy(), np.maximum(*xs))
    for o in collectives.all_gather(lbs, axis):
        np.testing.assert_array_equal(Tensor(o).numpy(), np.concatenate(xs, axis))
    full = sum(xs)
    bounds = collectives.even_bounds(xs[0].shape[axis], len(DEVICES))
    for o, (lo, hi) in zip(collectives.reduce_scatter(ReduceOps.SUM, lbs, axis, bounds), bounds):
        np.testing.assert_allclose(Tensor(o).numpy(), np.take(full, range(lo, hi), axis), rtol=1e-5, atol=1e-6)


def test_uneven_and_unsupported_fall_back_to_the_ring():
    from tinygrad import Tensor, collectives
    from tinygrad.ops import ReduceOps
    xs = [np.arange(5, dtype=np.int16) * (i + 1) for i in range(len(DEVICES))]
    lbs = [Tensor(x, device=d).realize().lazydata for x, d in zip(xs, DEVICES)]
    for o in collectives.all_reduce(ReduceOps.SUM, lbs):
        np.testing.assert_array_equal(Tensor(o).numpy(), sum(xs))
    fl = [Tensor(x.astype(np.float32), device=d).realize().lazydata for x, d in zip(xs, DEVICES)]
    bounds = collectives.even_bounds(5, len(DEVICES))
    for o, (lo, hi) in zip(collectives.reduce_scatter(ReduceOps.SUM, fl, 0), bounds):
        np.testing.assert_array_equal(Tensor(o).numpy(), sum(xs)[lo:hi].astype(np.float32))


def test_sharded_reductions_and_matmul():
    from tinygrad import Tensor
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    x = Tensor(a).shard(DEVICES, axis=0)
    np.testing.assert_allclose(x.sum(0).numpy(), a.sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.max(0).numpy(), a.max(0))
    xs = Tensor(a).shard(DEVICES, axis=1)
    ws = Tensor(w).shard(DEVICES, axis=0)
    np.testing.assert_allclose((xs @ ws).numpy(), a @ w, rtol=1e-4, atol=1e-4)


def test_data_parallel_training_under_jit_matches_one_gpu():
    from tinygrad import Tensor, TinyJit
    from tinygrad.nn import Linear
    from tinygrad.nn.optim import SGD
    from tinygrad.nn.state import get_parameters, get_state_dict

    def train(devices):
        Tensor.manual_seed(0)
        layers = [Linear(16, 32), Linear(32, 4)]
        for t in get_state_dict(layers).values():
            t.to_("CUDA").realize()
            if len(devices) > 1:
                t.shard_(devices)
        opt = SGD(get_parameters(layers), lr=0.1)

        @TinyJit
        def step(x, y):
            opt.zero_grad()
            loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y)
            loss.backward()
            opt.step()
            return loss.realize()

        rng = np.random.default_rng(4)
        losses = []
        with Tensor.train():
            for _ in range(6):
                x = Tensor(rng.standard_normal((64, 16)).astype(np.float32), device="CUDA")
                y = Tensor(rng.integers(0, 4, 64).astype(np.int32), device="CUDA")
                if len(devices) > 1:
                    x, y = x.shard(devices, axis=0), y.shard(devices, axis=0)
                losses.append(step(x, y).item())
        return losses

    np.testing.assert_allclose(train(DEVICES), train(("CUDA",)), rtol=1e-4, atol=1e-5)


# --- TinyJit captures over both GPUs replayed as one CUDA graph with the NCCL calls inside ---------------------

def test_all_reduce_in_a_jitted_function_replays_through_one_cuda_graph():
    from tinygrad import Tensor, TinyJit, collectives
    from tinygrad.helpers import Context
    from tinygrad.multi import MultiLazyBuffer
    from tinygrad.ops import ReduceOps

    def f(x: Tensor, y: Tensor):
        # the all-reduce of an input (its buffers change every call: captured again), of a kernel's output (kept by
        # the JIT: captured once), and a copy between the GPUs
        direct = MultiLazyBuffer(collectives.all_reduce(ReduceOps.SUM, x.lazydata.lbs), None)
        scaled = MultiLazyBuffer(collectives.all_reduce(ReduceOps.SUM, (x * 2 + 1).lazydata.lbs), None)
        return Tensor(direct, device=DEVICES), Tensor(scaled, device=DEVICES), y.to(DEVICES[1]) * 3

    jitted = TinyJit(f)
    rng = np.random.default_rng(5)
    kept = []  # every call's inputs alive, so each call has new buffers
    for _call in range(6):
        xs = [rng.standard_normal(4096).astype(np.float32) for _ in DEVICES]
        yv = rng.standard_normal(100).astype(np.float32)
        lbs = [Tensor(a, device=d).realize().lazydata for a, d in zip(xs, DEVICES)]
        kept.append((Tensor(MultiLazyBuffer(lbs, None), device=DEVICES), Tensor(yv, device=DEVICES[0]).realize()))
        got = [t.lazydata for t in jitted(*kept[-1])]
        with Context(JIT=0):
            want = [t.lazydata for t in f(*kept[-1])]
        for g, w in zip(got[:2], want[:2]):
            for gl, wl in zip(g.lbs, w.lbs):
                np.testing.assert_allclose(Tensor(gl).numpy(), Tensor(wl).numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(Tensor(got[0].lbs[1]).numpy(), xs[0] + xs[1], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(Tensor(got[1].lbs[0]).numpy(), 2 * (xs[0] + xs[1]) + 2, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(Tensor(got[2]).numpy(), yv * 3, rtol=1e-6)
    assert type(jitted.graph).__name__ == "CUDAMultiGraph"
    graph = jitted.graph.graphs[0]
    assert graph.instantiations == 1 and graph.recaptures >= 3  # the input-fed collective and copy, every replay


def _dp_train(devices, steps: int = 6):
    from tinygrad import Tensor, TinyJit
    from tinygrad.nn import Linear
    from tinygrad.nn.optim import SGD
    from tinygrad.nn.state import get_parameters, get_state_dict
    Tensor.manual_seed(0)
    layers = [Linear(16, 32), Linear(32, 4)]
    for t in get_state_dict(layers).values():
        t.to_("CUDA").realize()
        if len(devices) > 1:
            t.shard_(devices)
    opt = SGD(get_parameters(layers), lr=0.1, momentum=0.9)

    @TinyJit
    def step(x, y):
        opt.zero_grad()
        loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y)
        loss.backward()
        opt.step()
        return loss.realize()

    rng = np.random.default_rng(6)
    losses = []
    with Tensor.train():
        for _ in range(steps):
            x = Tensor(rng.standard_normal((64, 16)).astype(np.float32), device="CUDA")
            y = Tensor(rng.integers(0, 4, 64).astype(np.int32), device="CUDA")
            if len(devices) > 1:
                x, y = x.shard(devices, axis=0), y.shard(devices, axis=0)
            losses.append(step(x, y).item())
    weights = [t.to("CUDA").numpy() for t in get_state_dict(layers).values()]
    return losses, weights, step


def test_data_parallel_step_replays_as_one_cuda_graph_and_matches_eager(monkeypatch):
    from tinygrad.helpers import Context
    losses, weights, step = _dp_train(DEVICES)
    assert type(step.graph).__name__ == "CUDAMultiGraph"
    graph = step.graph.graphs[0]
    # the gradients' all-reduces read and write buffers the JIT keeps: captured once, never again
    assert graph.instantiations == 1 and graph.recaptures == 0
    with Context(JIT=0):
        eager_losses, eager_weights, _ = _dp_train(DEVICES)
    monkeypatch.setenv("CUDA_MULTIGRAPH", "0")
    item_losses, item_weights, item_step = _dp_train(DEVICES)
    assert item_step.graph is None
    for other_losses, other_weights in ((eager_losses, eager_weights), (item_losses, item_weights)):
        np.testing.assert_allclose(losses, other_losses, rtol=1e-5, atol=1e-6)
        for w, o in zip(weights, other_weights):
            np.testing.assert_allclose(w, o, rtol=1e-5, atol=1e-6)
