"""NCCL collectives on CUDA devices, against the fake CUDA driver and fake libnccl (test/native/fake_nccl.cpp): the
C++ Communicator (loading, group semantics, argument checks, error names, stream ordering), and the Python backend
(one schedule item per collective, results equal to the ring's, TinyJit replay). The fake's kernels compute nothing,
so the tensors here are made by copies and combined only by NCCL; the real library is checked by
test/test_nccl_gpu.py on a machine with two GPUs."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from native_doubles import build, fake_cuda, install_fake_cuda, uninstall_fake_cuda

from tinygrad.runtime import _cuda

N = 3
DEVICES = ("CUDA", "CUDA:1", "CUDA:2")


@pytest.fixture
def fake():
    from tinygrad.runtime import nccl
    install_fake_cuda(device_count=N)
    nccl.reset()
    _cuda.nccl_load([str(build())])
    yield fake_cuda()
    nccl.reset()
    uninstall_fake_cuda()


@pytest.fixture
def devs(fake):
    return [_cuda.Device(i) for i in range(N)]


def buffer(dev, data: np.ndarray):
    b = _cuda.DeviceBuffer(dev, data.nbytes)
    _cuda.copyin(b, memoryview(np.ascontiguousarray(data)).cast("B"))
    return b


def read(b, dtype, count: int) -> np.ndarray:
    out = np.empty(count, dtype)
    _cuda.copyout(memoryview(out).cast("B"), b)
    return out


def inputs(dtype=np.float32, count: int = 6, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 5, count).astype(dtype) for _ in range(N)]


# --- the C++ communicator ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,ref", [("sum", np.sum), ("prod", np.prod), ("max", np.max), ("min", np.min)])
@pytest.mark.parametrize("dtype,name", [(np.float32, "float32"), (np.int32, "int32"), (np.float64, "float64"),
                                        (np.uint8, "uint8"), (np.float16, "float16"), (np.int64, "int64")])
def test_all_reduce_every_op_and_dtype(devs, op, ref, dtype, name):
    xs = inputs(dtype)
    send = [buffer(d, x) for d, x in zip(devs, xs)]
    recv = [_cuda.DeviceBuffer(d, xs[0].nbytes) for d in devs]
    _cuda.Communicator(devs).all_reduce(send, recv, 6, name, op)
    for r in recv:
        np.testing.assert_array_equal(read(r, dtype, 6), ref(np.stack(xs), axis=0).astype(dtype))


def test_bfloat16_is_reduced_as_bfloat16(devs):
    # bfloat16 as the top half of float32: small integers are exact
    xs = [(np.arange(4, dtype=np.float32) + i).view(np.uint32) >> 16 for i in range(N)]
    bf = [x.astype(np.uint16) for x in xs]
    send = [buffer(d, x) for d, x in zip(devs, bf)]
    _cuda.Communicator(devs).all_reduce(send, send, 4, "bfloat16", "sum")  # in place
    got = (read(send[1], np.uint16, 4).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(got, sum(np.arange(4, dtype=np.float32) + i for i in range(N)))


def test_all_gather_and_reduce_scatter(devs):
    xs = inputs(np.float32, 4)
    comm = _cuda.Communicator(devs)
    send = [buffer(d, x) for d, x in zip(devs, xs)]
    recv = [_cuda.DeviceBuffer(d, 4 * 4 * N) for d in devs]
    comm.all_gather(send, recv, 4, "float32")
    for r in recv:
        np.testing.assert_array_equal(read(r, np.float32, 4 * N), np.concatenate(xs))
    big = inputs(np.float32, 2 * N, seed=1)
    send = [buffer(d, x) for d, x in zip(devs, big)]
    recv = [_cuda.DeviceBuffer(d, 2 * 4) for d in devs]
    comm.reduce_scatter(send, recv, 2, "float32", "max")
    total = np.max(np.stack(big), axis=0)
    for i, r in enumerate(recv):
        np.testing.assert_array_equal(read(r, np.float32, 2), total[2 * i:2 * i + 2])


def test_every_rank_is_issued_in_one_group_on_its_own_stream(devs, fake):
    xs = inputs()
    send = [buffer(d, x) for d, x in zip(devs, xs)]
    comm = _cuda.Communicator(devs)
    fake.clear_records()
    comm.all_reduce(send, send, 6, "float32")
    names = [c[0] for c in fake.calls("nccl")]
    assert names == ["ncclGroupStart"] + ["ncclAllReduce"] * N + ["ncclGroupEnd"]
    streams = [c[1][6] for c in fake.calls("ncclAllReduce")]
    assert len(set(streams)) == N  # each device's own stream


def test_collective_is_queued_not_run_until_the_stream_is_waited_for(devs, fake):
    xs = inputs()
    send = [buffer(d, x) for d, x in zip(devs, xs)]
    recv = [_cuda.DeviceBuffer(d, xs[0].nbytes) for d in devs]
    fake.write(recv[2].ptr, b"\0" * xs[0].nbytes)
    comm = _cuda.Communicator(devs)  # kept: destroying it waits for the devices
    comm.all_reduce(send, recv, 6, "float32")
    assert fake.pending_ops() >= N
    assert fake.read(recv[2].ptr, xs[0].nbytes) == b"\0" * xs[0].nbytes  # nothing ran yet
    devs[2].synchronize()  # waiting for one device runs the work queued before the collective on all of them
    np.testing.assert_array_equal(np.frombuffer(fake.read(recv[2].ptr, xs[0].nbytes), np.float32), sum(xs))


def test_nvlink_multicast_is_turned_off_unless_the_user_set_it(devs, fake, monkeypatch):
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    _cuda.Communicator(devs)
    assert fake.calls("ncclCommInitAll")[-1][2] == "NCCL_NVLS_ENABLE=0"
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    _cuda.Communicator(devs)
    assert fake.calls("ncclCommInitAll")[-1][2] == "NCCL_NVLS_ENABLE=1"


def test_argument_errors_name_the_rank_and_the_sizes(devs):
    comm = _cuda.Communicator(devs)
    xs = inputs()
    send = [buffer(d, x) for d, x in zip(devs, xs)]
    with pytest.raises(ValueError, match="NCCL has no dtype bool"):
        comm.all_reduce(send, send, 6, "bool")
    with pytest.raises(ValueError, match="NCCL has no reduction avg"):
        comm.all_reduce(send, send, 6, "float32", "avg")
    with pytest.raises(ValueError, match="rank 1's receive buffer is on CUDA, not on CUDA:1"):
        comm.all_reduce(send, [send[0], send[0], send[2]], 6, "float32")
    with pytest.raises(ValueError, match="rank 0's send buffer has 24 bytes, the collective needs 28"):
        comm.all_reduce(send, send, 7, "float32")
    with pytest.raises(ValueError, match="one send and one receive buffer per GPU"):
        comm.all_reduce(send[:2], send[:2], 6, "float32")
    with pytest.raises(ValueError, match="distinct devices"):
        _cuda.Communicator([devs[0], devs[0]])


def test_nccl_errors_name_the_call_and_ncclGetErrorString(devs, fake):
    comm = _cuda.Communicator(devs)
    send = [buffer(d, x) for d, x in zip(devs, inputs())]
    fake.fail_next("ncclAllReduce", 5)  # ncclInvalidUsage
    with pytest.raises(RuntimeError, match=r"\[NCCL\] ncclAllReduce: .*\(invalid usage \(fake NCCL\)\)") as e:
        comm.all_reduce(send, send, 6, "float32")
    assert e.value.call == "ncclAllReduce"
    fake.fail_next("ncclGroupEnd", 1)
    with pytest.raises(RuntimeError, match="ncclGroupEnd") as e:
        comm.all_reduce(send, send, 6, "float32")
    assert e.value.driver_error == "unhandled cuda error (fake NCCL)"
    comm.all_reduce(send, send, 6, "float32")  # the group was closed: the next one works
    fake.fail_next("ncclCommInitAll", 2)
    with pytest.raises(RuntimeError, match="ncclCommInitAll: creating a communicator over 3 GPUs"):
        _cuda.Communicator(devs)


def test_fake_refuses_what_a_real_nccl_would_hang_on(devs, fake):
    # one process driving several ranks must group them: the fake says so instead of hanging
    comm = _cuda.Communicator(devs[:1])
    send = [buffer(devs[0], inputs()[0])]
    comm.all_reduce(send, send, 6, "float32")  # one rank needs no peers


def test_without_libnccl_the_error_names_nccl_and_the_module_imports(fake):
    import tinygrad.runtime.nccl as nccl
    nccl.reset()
    with pytest.raises(RuntimeError, match=r"could not load NCCL \(tried /nonexistent/libnccl.so.2\).*NCCL_LIBRARY"):
        _cuda.nccl_load(["/nonexistent/libnccl.so.2"])
    with pytest.raises(RuntimeError, match="NCCL is not loaded"):
        _cuda.nccl_version()


def test_a_library_missing_an_entry_point_is_refused(fake):
    import tinygrad.runtime.nccl as nccl
    nccl.reset()
    with pytest.raises(RuntimeError, match="has no ncclGetVersion"):
        _cuda.nccl_load([_cuda.__file__])


# --- the Python backend: tensors, the schedule, TinyJit ----------------------------------------------------------

@pytest.fixture
def cuda(fake, monkeypatch):
    """CUDA, CUDA:1, CUDA:2 as CUDADevices on the fake, registered for the test only."""
    from tinygrad.device import Device
    from tinygrad.engine import realize
    from tinygrad.engine.plan import clear_plans
    from tinygrad.helpers import Context
    from tinygrad.runtime.ops_cuda import CUDADevice
    for d in DEVICES:
        monkeypatch.setitem(Device._opened, d, CUDADevice(d))
    with Context(CACHELEVEL=0):
        yield fake
    for key in [k for k in realize.method_cache if k[0].startswith("CUDA")]:
        del realize.method_cache[key]
    clear_plans()


def per_device(arrays, devices=DEVICES):
    from tinygrad import Tensor
    return [Tensor(a, device=d).realize().lazydata for a, d in zip(arrays, devices)]


def realize_all(lbs) -> list[np.ndarray]:
    from tinygrad import Tensor
    from tinygrad.engine.realize import run_schedule
    from tinygrad.engine.schedule import create_schedule
    run_schedule(create_schedule(lbs))
    return [Tensor(lb).numpy() for lb in lbs]


def ring(kind: str, arrays, *args):
    """The same collective by the ring of copies, on host devices (`args` as collectives' ring_* take them after
    the buffers; a reduce's op first)."""
    from tinygrad import collectives
    from tinygrad.ops import ReduceOps
    lbs = per_device(arrays, [f"CLANG:{i}" for i in range(N)])
    fn = getattr(collectives, f"ring_{kind}")
    if args and isinstance(args[0], ReduceOps):
        return realize_all(fn(args[0], lbs, *args[1:]))
    return realize_all(fn(lbs, *args))


def test_all_reduce_is_one_schedule_item_over_every_device(cuda):
    from tinygrad import collectives
    from tinygrad.engine.schedule import create_schedule
    from tinygrad.ops import LoadOps, ReduceOps
    lbs = per_device(inputs())
    outs = collectives.all_reduce(ReduceOps.SUM, lbs)
    sched = create_schedule([outs[1]])  # asking for one device's result computes every device's
    assert len(sched) == 1 and sched[0].ast[0].op is LoadOps.CUSTOM
    assert [b.device for b in sched[0].bufs] == list(DEVICES) * 2 and sched[0].n_outputs == N


@pytest.mark.parametrize("op", ["SUM", "MAX", "PROD"])
def test_all_reduce_equals_the_ring(cuda, op):
    from tinygrad import collectives
    from tinygrad.ops import ReduceOps
    xs = [x.reshape(2, 3) for x in inputs()]
    got = realize_all(collectives.all_reduce(ReduceOps[op], per_device(xs)))
    want = ring("all_reduce", xs, ReduceOps[op])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert any(c[0] == "ncclAllReduce" for c in cuda.calls("nccl"))


def test_all_gather_and_reduce_scatter_equal_the_ring(cuda):
    from tinygrad import collectives
    from tinygrad.ops import ReduceOps
    # along axis 0 only: another axis is moved first by a kernel, which the fake does not compute
    axis = 0
    xs = [np.arange(6 * N, dtype=np.float32).reshape(2 * N, 3) * (i + 1) for i in range(N)]
    for got, want in zip(realize_all(collectives.all_gather(per_device(xs), axis)), ring("all_gather", xs, axis)):
        np.testing.assert_array_equal(got, want)
    bounds = collectives.even_bounds(xs[0].shape[axis], N)
    got = realize_all(collectives.reduce_scatter(ReduceOps.SUM, per_device(xs), axis, bounds))
    for g, w in zip(got, ring("reduce_scatter", xs, ReduceOps.SUM, axis, bounds)):
        np.testing.assert_array_equal(g, w)


def test_unsupported_dtypes_and_uneven_splits_use_the_ring(cuda):
    from tinygrad import collectives
    from tinygrad.ops import LoadOps, ReduceOps
    lbs = per_device([np.ones(4, np.int16)] * N)
    assert collectives.all_reduce(ReduceOps.SUM, lbs)[0].base.op is not LoadOps.CUSTOM
    uneven = per_device([np.ones(4, np.float32)] * N)
    outs = collectives.reduce_scatter(ReduceOps.SUM, uneven, 0)  # 4 over 3 devices: 2, 1, 1
    assert all(o.base.op is not LoadOps.CUSTOM for o in outs)


def test_nccl_off_uses_the_ring(cuda, monkeypatch):
    from tinygrad.collectives_nccl import BACKEND
    monkeypatch.setenv("NCCL", "0")
    assert not BACKEND.supports(DEVICES)
    monkeypatch.setenv("NCCL", "1")
    assert BACKEND.supports(DEVICES)
    assert not BACKEND.supports(("CUDA", "CLANG"))


def test_without_nccl_the_backend_declines_and_the_ring_is_used(cuda, monkeypatch):
    from tinygrad import collectives
    from tinygrad.collectives_nccl import BACKEND
    from tinygrad.ops import LoadOps, ReduceOps
    from tinygrad.runtime import nccl
    nccl.reset()
    monkeypatch.setenv("NCCL_LIBRARY", "/nonexistent/libnccl.so.2")
    assert nccl.nccl_candidates() == ["/nonexistent/libnccl.so.2"]
    assert not BACKEND.supports(DEVICES)
    assert "could not load NCCL" in nccl._load_error
    assert collectives.all_reduce(ReduceOps.SUM, per_device(inputs()))[0].base.op is not LoadOps.CUSTOM


def test_sharded_sum_all_reduces_through_nccl(cuda):
    from tinygrad import Tensor
    from tinygrad.engine.schedule import create_schedule
    from tinygrad.ops import LoadOps
    x = Tensor(np.ones((N * 2, 4), np.float32)).shard(DEVICES, axis=0)
    sched = create_schedule(x.sum(0).lazydata.lbs)
    assert sum(si.ast[0].op is LoadOps.CUSTOM for si in sched) == 1


def test_jit_replays_the_collective_on_new_inputs(cuda):
    from tinygrad import Tensor, TinyJit, collectives
    from tinygrad.multi import MultiLazyBuffer
    from tinygrad.ops import ReduceOps
    from tinygrad.runtime.nccl import NCCLRunner

    @TinyJit
    def step(x: Tensor) -> tuple[Tensor, Tensor]:
        summed = Tensor(MultiLazyBuffer(collectives.all_reduce(ReduceOps.SUM, x.lazydata.lbs), None), device=DEVICES)
        return summed, x * 2  # a kernel too: TinyJit wants one (the fake does not compute it)

    for i in range(5):
        xs = inputs(seed=i)
        x = Tensor(MultiLazyBuffer(per_device(xs), None), device=DEVICES)
        cuda.clear_records()
        summed, _ = step(x)
        assert sum(c[0] == "ncclAllReduce" for c in cuda.calls("nccl")) == N
        for lb in summed.lazydata.lbs:
            np.testing.assert_array_equal(Tensor(lb).numpy(), sum(xs))
    # captured, then replayed as one CUDA graph over the three GPUs, the collective inside it: fed by the input
    # itself, it is captured again for every call's new buffers (the first replay builds the graph)
    assert step.cnt == 2 and type(step.graph).__name__ == "CUDAMultiGraph"
    assert sum(isinstance(ei.prg, NCCLRunner) for ei in step.jit_cache) == 1
    graph = step.graph.graphs[0]
    assert (graph.instantiations, graph.recaptures) == (1, 2)


def test_the_allreduce_benchmark_runs_its_tinygrad_paths(cuda):
    # extra/bench_allreduce.py is run on GPUs by hand: its tinygrad columns (and its check against numpy) are
    # exercised here so it does not first fail there
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from extra.bench_allreduce import one_size
    from tinygrad.runtime import nccl
    paths: dict[str, str] = {}
    cols = one_size(1024, DEVICES, nccl.communicator(DEVICES), None, ring=False, paths=paths)
    assert set(cols) == {"api", "replay", "graph", "comm"} and all(v > 0 for v in cols.values())
    assert paths == {"graph": "CUDAMultiGraph"}


def _nccl_header_dir() -> str | None:
    import glob
    import os
    import sys
    dirs = [os.path.join(p, "nvidia", sub, "include") for p in sys.path for sub in ("nccl", "cu13", "cu12")]
    dirs += ["/usr/include", "/usr/local/include", *glob.glob("/usr/local/cuda*/include")]
    return next((d for d in dirs if os.path.exists(os.path.join(d, "nccl.h"))), None)


@pytest.mark.skipif(_nccl_header_dir() is None or not os.path.exists("/usr/local/cuda/include/cuda_runtime.h") or
                    shutil.which("c++") is None, reason="needs nccl.h, the CUDA toolkit's headers and a C++ compiler")
def test_nccl_declarations_match_ncclh():
    # every NcclApi slot's signature and every enum value, against NCCL's own header
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(["c++", "-std=c++17", "-fsyntax-only", f"-I{_nccl_header_dir()}", "-I/usr/local/cuda/include",
                          f"-I{root / 'runtimes/cuda'}", str(root / "test/native/nccl_abi_check.cpp")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]


# --- CUDA graphs over several GPUs: CUDAMultiGraph and _cuda.MultiGraph ------------------------------------------

def _multi(arrays):
    from tinygrad import Tensor
    from tinygrad.multi import MultiLazyBuffer
    return Tensor(MultiLazyBuffer(per_device(arrays), None), device=DEVICES)


def _all_reduced(x):
    from tinygrad import Tensor, collectives
    from tinygrad.multi import MultiLazyBuffer
    from tinygrad.ops import ReduceOps
    return Tensor(MultiLazyBuffer(collectives.all_reduce(ReduceOps.SUM, x.lazydata.lbs), None), device=DEVICES)


def _dp_like_step():
    """A jitted step with what a data-parallel step holds: a kernel on every GPU, an NCCL all-reduce (of the input
    itself, so its buffers change every call), and a copy from one GPU to another (of an input too)."""
    from tinygrad import TinyJit

    @TinyJit
    def step(x, y):
        return _all_reduced(x), x * 2, y.to("CUDA:1")
    return step


def _kernels(fake) -> list[tuple]:
    return [launch[:4] for launch in fake.launches()]


def test_multi_gpu_capture_replays_as_one_graph_equal_to_item_by_item(cuda):
    from tinygrad import Tensor
    step = _dp_like_step()
    kept = []  # every call's inputs alive: each call's buffers are new ones
    for i in range(6):
        xs, y = inputs(seed=i), np.arange(5, dtype=np.float32) + i
        kept.append((_multi(xs), Tensor(y, device="CUDA").realize()))
        cuda.clear_records()
        summed, _, moved = step(*kept[-1])
        for lb in summed.lazydata.lbs:
            np.testing.assert_array_equal(Tensor(lb).numpy(), sum(xs))
        np.testing.assert_array_equal(moved.numpy(), y)
        if i >= 2:  # replays: one graph launch, no kernel launched from the host, the NCCL call captured again
            assert len(cuda.calls("cuGraphLaunch")) == 1 and not cuda.calls("cuLaunchKernel")
            assert all(launch[4] for launch in cuda.launches())
            assert len(cuda.calls("ncclAllReduce")) == N and len(cuda.calls("cuMemcpyDtoDAsync")) == 1
    assert type(step.graph).__name__ == "CUDAMultiGraph"
    # the same call replayed through the graph, then item by item: the same kernels with the same arguments
    xs, y = inputs(seed=9), np.arange(5, dtype=np.float32)
    x, yt = _multi(xs), Tensor(y, device="CUDA").realize()
    cuda.clear_records()
    step(x, yt)
    by_graph = _kernels(cuda)
    step.graph = None
    cuda.clear_records()
    summed, _, moved = step(x, yt)
    assert _kernels(cuda) == by_graph and len(by_graph) == N and not any(launch[4] for launch in cuda.launches())
    np.testing.assert_array_equal(Tensor(summed.lazydata.lbs[2]).numpy(), sum(xs))
    np.testing.assert_array_equal(moved.numpy(), y)


def test_collectives_on_buffers_the_jit_keeps_are_captured_once(cuda):
    from tinygrad import TinyJit

    @TinyJit
    def step(x):
        return _all_reduced(x * 2)  # the all-reduce reads the kernels' outputs, which the JIT keeps
    kept = []  # every call's input alive: each call's buffers are new ones
    for i in range(6):
        cuda.clear_records()
        kept.append(_multi(inputs(seed=i)))
        step(kept[-1])
    graph = step.graph.graphs[0]
    assert (graph.instantiations, graph.recaptures, len(graph)) == (1, 0, N + 1)
    # the last replay: the kernels' input patched, no NCCL call and no capture, one launch
    assert not cuda.calls("nccl") and not cuda.calls("cuStreamBeginCapture")
    assert len(cuda.calls("cuGraphLaunch")) == 1 and len(cuda.calls("cuGraphExecKernelNodeSetParams")) == N
    # the graph as built: each GPU's kernel depends on nothing (the GPUs run side by side), the collective on all
    step.reset()
    for i in range(3):
        cuda.clear_records()
        step(_multi(inputs(seed=i)))
    assert [c[1][1] for c in cuda.calls("cuGraphAddKernelNode")] == [0] * N
    assert [c[1][1] for c in cuda.calls("cuGraphAddChildGraphNode")] == [N]


def test_the_graph_waits_for_every_gpu_and_every_gpu_waits_for_it(cuda):
    step = _dp_like_step()
    from tinygrad import Tensor
    for i in range(4):
        cuda.clear_records()
        step(_multi(inputs(seed=i)), Tensor(np.ones(5, np.float32), device="CUDA").realize())
    launch_stream = cuda.calls("cuGraphLaunch")[0][1][1]
    waits = cuda.calls("cuStreamWaitEvent")
    before = [w for w in waits if w[1][0] == launch_stream]
    after = [w for w in waits if w[1][0] != launch_stream and w[1][1] == waits[-1][1][1]]
    assert len(before) >= N - 1 and len(after) == N - 1


def test_a_refused_child_graph_update_rebuilds_the_graph(cuda):
    from tinygrad import TinyJit

    @TinyJit
    def step(x):
        return _all_reduced(x), x * 2
    kept = [_multi(inputs(seed=i)) for i in range(4)]  # alive: each call's buffers are new ones
    for x in kept[:3]:
        step(x)
    cuda.fail_next("cuGraphExecChildGraphNodeSetParams", "CUDA_ERROR_INVALID_VALUE")
    xs = inputs(seed=3)
    summed, _ = step(kept[3])
    from tinygrad import Tensor
    np.testing.assert_array_equal(Tensor(summed.lazydata.lbs[1]).numpy(), sum(xs))
    assert step.graph.graphs[0].instantiations == 2


def test_what_the_graph_cannot_hold_is_replayed_item_by_item(cuda, monkeypatch):
    from tinygrad import Tensor, TinyJit
    monkeypatch.setenv("CUDA_MULTIGRAPH", "0")
    step = _dp_like_step()
    for i in range(4):
        xs = inputs(seed=i)
        summed, _, _ = step(_multi(xs), Tensor(np.ones(5, np.float32), device="CUDA").realize())
        np.testing.assert_array_equal(Tensor(summed.lazydata.lbs[0]).numpy(), sum(xs))
    assert step.graph is None
    monkeypatch.setenv("CUDA_MULTIGRAPH", "1")

    @TinyJit
    def from_host(x, h):  # a copy from the host device: not a CUDA graph's
        return _all_reduced(x), h.to("CUDA:2"), x * 2
    for i in range(4):
        xs = inputs(seed=i)
        summed, moved, _ = from_host(_multi(xs), Tensor(np.full(3, i, np.float32), device="CLANG").realize())
        np.testing.assert_array_equal(Tensor(summed.lazydata.lbs[0]).numpy(), sum(xs))
        np.testing.assert_array_equal(moved.numpy(), np.full(3, i, np.float32))
    assert from_host.graph is None


def test_multi_graph_checks_its_steps_and_names_driver_errors(devs, fake):
    xs = inputs()
    comm = _cuda.Communicator(devs)
    send = [buffer(d, x) for d, x in zip(devs, xs)]
    recv = [_cuda.DeviceBuffer(d, xs[0].nbytes) for d in devs]
    with pytest.raises(ValueError, match="distinct GPUs"):
        _cuda.MultiGraph([devs[0], devs[0]])
    g = _cuda.MultiGraph(devs[:2])
    with pytest.raises(ValueError, match="takes 6 buffers"):
        g.add_collective(comm, "all_reduce", recv + send[:2], 6, "float32")
    with pytest.raises(ValueError, match="a communicator's GPU is on CUDA:2, not on one of the graph's GPUs"):
        g.add_collective(comm, "all_reduce", recv + send, 6, "float32")
    with pytest.raises(ValueError, match="no collective broadcast"):
        g.add_collective(comm, "broadcast", recv + send, 6, "float32")
    with pytest.raises(ValueError, match="two buffers"):
        g.add_copy([recv[0]], 4)
    g = _cuda.MultiGraph(devs)
    with pytest.raises(ValueError, match="rank 0's send buffer has 24 bytes, the collective needs 28"):
        g.add_collective(comm, "all_reduce", recv + send, 7, "float32")
    assert g.add_collective(comm, "all_reduce", recv + send, 6, "float32") == 0
    assert g.add_copy([recv[1], send[0]], 8) == 1
    with pytest.raises(ValueError, match="is a pointer; set_arg cannot change its kind"):
        g.set_arg(0, 1, 5)
    with pytest.raises(ValueError, match="is not a kernel"):
        g.set_dims(0, (1, 1, 1), (1, 1, 1))
    fake.fail_next("cuStreamBeginCapture", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(RuntimeError, match="starting a stream capture") as e:
        g()
    assert e.value.call == "cuStreamBeginCapture_v2" and e.value.driver_error == "CUDA_ERROR_UNKNOWN"
    fake.fail_next("ncclGroupEnd", 1)  # fails inside the capture: the capture is ended, the streams usable again
    with pytest.raises(RuntimeError, match="ncclGroupEnd"):
        g()
    g()
    for d in devs:
        d.synchronize()
    np.testing.assert_array_equal(read(recv[2], np.float32, 6), sum(xs))
    np.testing.assert_array_equal(read(recv[1], np.float32, 2), xs[0][:2])  # the copy ran after the all-reduce
    assert g.instantiations == 1


def test_multi_graph_never_replays_a_freed_or_moved_buffer(devs, fake):
    xs = inputs()
    comm = _cuda.Communicator(devs)
    send = [buffer(d, x) for d, x in zip(devs, xs)]
    recv = [_cuda.DeviceBuffer(d, xs[0].nbytes) for d in devs]
    g = _cuda.MultiGraph(devs)
    g.add_collective(comm, "all_reduce", recv + send, 6, "float32")
    g()
    # a new send buffer for rank 1: the collective is captured again before the launch, with the new address
    other = buffer(devs[1], xs[1] * 10)
    g.set_arg(0, N + 1, other)
    g()
    devs[0].synchronize()
    np.testing.assert_array_equal(read(recv[0], np.float32, 6), xs[0] + 10 * xs[1] + xs[2])
    assert (g.recaptures, g.instantiations) == (1, 1)
    launches = len(fake.calls("cuGraphLaunch"))
    other.free()
    with pytest.raises(ValueError, match="was freed"):
        g()
    assert len(fake.calls("cuGraphLaunch")) == launches
