"""Tensors, realize and TinyJit from several threads give the answers one thread gets (docs/threads.md).

Each test starts 8 threads at a barrier, so they reach the engine together, and shortens the interpreter's switch
interval so the GIL changes hands every few bytecodes: without the engine lock these tests fail within a few
iterations (a shared graph realized twice into one buffer, "already allocated" errors, a jitted function's
outputs overwritten by another thread's call, kernels of one thread recorded into another's capture)."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from test.helpers import default_sigint
from tinygrad import Tensor, TinyJit
from tinygrad.device import Buffer, Device
from tinygrad.dtype import dtypes
from tinygrad.locks import ENGINE_LOCK

N_THREADS = 8
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _switch_often():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def run_threads(work, iters: int, n: int = N_THREADS) -> None:
    """`work(thread, iteration)` in `n` threads, all starting each iteration together; re-raises the first error."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def worker(tid: int) -> None:
        for it in range(iters):
            try:
                barrier.wait(timeout=60)
                work(tid, it)
            except threading.BrokenBarrierError:
                return
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)
                barrier.abort()
                return

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


BASE = np.arange(96, dtype=np.float32) / 7


def test_one_lazy_tensor_realized_by_every_thread():
    # a new unrealized graph (a reduce feeding an elementwise kernel) each iteration, realized by all threads at once
    shared: dict[int, Tensor] = {}
    lock = threading.Lock()

    def work(tid: int, it: int) -> None:
        with lock:
            if it not in shared:
                a = Tensor(BASE).realize()
                shared[it] = (a * 2 + (it + 0.25)).sum() * a + 1
        t = shared[it]
        t.realize()
        np.testing.assert_allclose(t.numpy(), (BASE * 2 + (it + 0.25)).sum() * BASE + 1, rtol=1e-5)

    run_threads(work, 30)


def test_numpy_of_a_shared_graph():
    # every thread reads (not realizes first) views of one shared graph: .numpy(), .tolist() and .item()
    a = Tensor(BASE).realize()
    # NOTE: values with a fraction are read from buffers, not compiled in: one kernel for all 20 graphs
    graphs = [((a + (i + 0.5)) * (a - (i + 0.5))).reshape(8, 12) for i in range(20)]

    def work(tid: int, it: int) -> None:
        g = graphs[it]
        ref = ((BASE + (it + 0.5)) * (BASE - (it + 0.5))).reshape(8, 12)
        if tid % 3 == 0:
            np.testing.assert_allclose(g.numpy(), ref, rtol=1e-5)
        elif tid % 3 == 1:
            np.testing.assert_allclose(np.array(g[tid % 8].tolist()), ref[tid % 8], rtol=1e-5)
        else:
            assert g[1, tid].item() == pytest.approx(float(ref[1, tid]), rel=1e-5)

    run_threads(work, 20)


def test_separate_tensors_per_thread():
    # the same structures on each thread's own data: served by one schedule plan, run on different buffers
    def work(tid: int, it: int) -> None:
        x = Tensor(BASE + tid)
        c = it + 0.5
        y = ((x + c) * 3 - tid / 2).relu().sum(keepdim=True) / (x.max() + 1)
        ref = np.maximum((BASE + tid + c) * 3 - tid / 2, 0).sum(keepdims=True) / ((BASE + tid).max() + 1)
        np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5)

    run_threads(work, 20)


def test_one_jitted_function_from_every_thread():
    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        return (x * 2 + y).exp2().sum(axis=1)

    outs: dict[tuple[int, int], np.ndarray] = {}

    def work(tid: int, it: int) -> None:
        xn = np.full((4, 16), tid, np.float32) / 8 + it / 64
        yn = np.arange(64, dtype=np.float32).reshape(4, 16) / 64 - tid / 16
        out = f(Tensor(xn), Tensor(yn))
        ref = np.exp2(xn * 2 + yn).sum(axis=1)
        got = out.numpy()
        outs[(tid, it)] = got
        np.testing.assert_allclose(got, ref, rtol=1e-5)

    run_threads(work, 12)
    assert len(outs) == N_THREADS * 12
    # the calling thread has a capture of its own, separate from the workers'
    assert f.cnt == 0 and f.jit_cache == []


def test_a_capture_records_only_its_own_thread():
    # while one thread captures, the others run eager kernels: none of theirs may land in its capture
    @TinyJit
    def g(x: Tensor) -> Tensor:
        for _ in range(6):
            x = (x + 1).realize()
        return x

    captured: list[int] = []

    def work(tid: int, it: int) -> None:
        if tid == 0:
            out = g(Tensor.ones(8).contiguous())
            assert out.tolist() == [7.0] * 8
            if it == 1:
                captured.append(len(g.jit_cache))
        else:
            x = Tensor.ones(8).contiguous()
            for _ in range(6):
                x = (x * 1.5).realize()

    run_threads(work, 4)
    assert captured == [6]


def test_backward_with_shared_weights():
    # threads accumulate into one weight's .grad: one backward at a time, every contribution kept
    w = Tensor(np.ones(16, np.float32), requires_grad=True)

    def work(tid: int, it: int) -> None:
        x = Tensor(np.full(16, tid + 1, np.float32))
        (w * x).sum().backward()

    run_threads(work, 3)
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), np.full(16, 3 * sum(range(1, N_THREADS + 1)), np.float32))


def test_engine_lock_is_reentrant_and_excludes_other_threads():
    seen = []
    with ENGINE_LOCK:
        with ENGINE_LOCK:
            assert ENGINE_LOCK.held()
        t = threading.Thread(target=lambda: seen.append(ENGINE_LOCK.run(ENGINE_LOCK.held)))
        t.start()
        t.join(timeout=0.2)
        assert t.is_alive() and seen == [], "another thread got the lock while this one held it"
        assert ENGINE_LOCK.held()
    t.join(timeout=10)
    assert seen == [True] and not ENGINE_LOCK.held()
    with pytest.raises(RuntimeError, match="doesn't hold"):
        ENGINE_LOCK.release()


def test_a_buffer_freed_while_another_thread_holds_the_lock_is_freed_by_the_holder():
    # a finalizer never waits for the lock (its holder may be waiting for the finalizer's thread): the holder frees
    # the memory when it releases the lock
    allocator = Device["CLANG"].allocator
    bufs = [Buffer("CLANG", 1 << 16, dtypes.float32).ensure_allocated()]
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with ENGINE_LOCK:
            holding.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert holding.wait(10)
        before = allocator.cached_bytes
        dropper = threading.Thread(target=bufs.clear)  # the last reference goes: Buffer.__del__ runs in `dropper`
        dropper.start()
        dropper.join(5)
        assert not dropper.is_alive(), "a finalizer waited for the engine lock"
        assert allocator.cached_bytes == before, "freed while another thread held the lock"
    finally:
        release.set()
        t.join(10)
    assert allocator.cached_bytes == before + (1 << 18)


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_ctrl_c_interrupts_a_main_thread_waiting_for_the_lock():
    script = textwrap.dedent("""
        import sys, threading, time
        from tinygrad import Tensor
        from tinygrad.locks import ENGINE_LOCK
        x = Tensor.ones(8).contiguous().realize()
        held = threading.Event()
        def hold():
            with ENGINE_LOCK:
                held.set()
                time.sleep(60)
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        print("waiting", flush=True)
        try:
            (x + 1).realize()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_sigint)
    assert proc.stdout.readline().strip() == "waiting"
    time.sleep(0.3)  # blocked in the lock's wait by now
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, (out, err)


def test_an_error_in_deferred_work_is_reported_not_raised_in_the_holder(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: seen.append(args.exc_value))

    def broken_free() -> None:
        raise ValueError("a broken free")

    with ENGINE_LOCK:
        t = threading.Thread(target=ENGINE_LOCK.run_or_defer, args=(broken_free,))
        t.start()
        t.join(10)
        assert seen == []  # queued for this thread, the holder
    assert [str(e) for e in seen] == ["a broken free"]
    assert (Tensor([1.0, 2.0]) * 3).tolist() == [3.0, 6.0]
