"""All-reduce bus bandwidth on 2+ CUDA GPUs: tinygrad's NCCL path beside PyTorch's NCCL, in one process.

    PYTHONPATH=$PWD python extra/bench_allreduce.py [--gpus 2] [--sizes-mb 1,4,16,64,256,1024] [--no-ring]

For each size (fp32, out of place) it times:
  tinygrad api      collectives.all_reduce on per-device LazyBuffers: lazy graph, scheduler, NCCL item, every call
  tinygrad replay   the scheduled NCCL item run again and again (what TinyJit replays item by item)
  tinygrad graph    the all-reduce inside a TinyJit function, replayed as one CUDA graph with the NCCL calls inside
                    (CUDAMultiGraph; the path TinyJit took is printed, "item by item" where it could not)
  tinygrad comm     the C++ Communicator's all_reduce alone (_cuda.Communicator)
  torch nccl        torch.cuda.nccl.all_reduce (single process, its own communicator), when PyTorch is installed
  ring (copies)     tinygrad's ring of device copies and add kernels (NCCL=0's path), for reference
and prints bus bandwidth as NCCL's tests define it: busbw = algbw * 2(n-1)/n, algbw = bytes / time. The last
columns are tinygrad's replay and api paths over PyTorch's (the issue asks >= 0.9x).

It never hangs: every phase runs under a watchdog (faulthandler) that prints where it was stuck and exits after
--timeout seconds. NVLink multicast is off for both libraries (NCCL_NVLS_ENABLE=0, set before either loads NCCL).
"""
from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from tinygrad import Tensor, TinyJit, collectives  # noqa: E402
from tinygrad.device import Device  # noqa: E402
from tinygrad.engine.realize import lower_schedule_item, run_schedule  # noqa: E402
from tinygrad.engine.schedule import create_schedule  # noqa: E402
from tinygrad.multi import MultiLazyBuffer  # noqa: E402
from tinygrad.ops import ReduceOps  # noqa: E402


def busbw(nbytes: int, seconds: float, n: int) -> float:
    """GB/s of bus bandwidth (NCCL's definition for all-reduce)."""
    return nbytes / seconds * 2 * (n - 1) / n / 1e9


def timed(fn, sync, nbytes: int, min_iters: int = 5, warmup: int = 3) -> float:
    """Seconds per call of `fn` (synchronised before and after a batch of calls), over enough calls to fill about
    half a second on a fast link."""
    for _ in range(warmup):
        fn()
    sync()
    iters = max(min_iters, min(100, int(5e9 / max(nbytes, 1))))
    st = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - st) / iters


def watchdog(seconds: int) -> None:
    faulthandler.cancel_dump_traceback_later()
    faulthandler.dump_traceback_later(seconds, exit=True)


def one_size(numel: int, devices: tuple[str, ...], comm, torch, ring: bool,
             paths: dict[str, str] | None = None) -> dict[str, float]:
    """Bus bandwidth (GB/s) of each path for one all-reduce of `numel` fp32 elements per device. `paths`, if given,
    gets how TinyJit replayed the graph column ("graph")."""
    n, nbytes = len(devices), numel * 4
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(numel, dtype=np.float32) for _ in range(n)]
    lbs = [Tensor(h, device=d).realize().lazydata for h, d in zip(host, devices)]
    cols = {}

    def sync() -> None:
        for d in devices:
            Device[d].synchronize()

    # the tinygrad API, eagerly: a new lazy graph and schedule every call
    def api():
        run_schedule(create_schedule(collectives.all_reduce(ReduceOps.SUM, lbs)))
    cols["api"] = busbw(nbytes, timed(api, sync, nbytes), n)

    # check the result once against numpy, so a fast wrong answer can't pass
    outs = collectives.all_reduce(ReduceOps.SUM, lbs)
    sched = create_schedule(outs)
    run_schedule(sched)
    if numel <= (64 << 20) // 4:
        np.testing.assert_allclose(Tensor(outs[-1]).numpy(), sum(host), rtol=1e-5, atol=1e-4)

    # the same schedule item again and again (TinyJit's replay does exactly this per step)
    (si,) = sched
    ei = lower_schedule_item(si)
    cols["replay"] = busbw(nbytes, timed(ei.run, sync, nbytes), n)

    # inside a jitted function: TinyJit replays it as one CUDA graph over the GPUs with the NCCL calls inside; the
    # inputs stay the same, so the captured collective is reused as it is in a training step
    x = Tensor(MultiLazyBuffer(lbs, None), device=devices)
    tiny = Tensor(MultiLazyBuffer([Tensor.zeros(1, device=d).contiguous().realize().lazydata for d in devices], None),
                  device=devices)

    @TinyJit
    def jitted(x: Tensor, tiny: Tensor):
        summed = MultiLazyBuffer(collectives.all_reduce(ReduceOps.SUM, x.lazydata.lbs), None)
        return Tensor(summed, device=devices), tiny + 1  # TinyJit wants a kernel: one of a single element
    cols["graph"] = busbw(nbytes, timed(lambda: jitted(x, tiny), sync, nbytes), n)
    if numel <= (64 << 20) // 4:
        np.testing.assert_allclose(Tensor(jitted(x, tiny)[0].lazydata.lbs[-1]).numpy(), sum(host), rtol=1e-5, atol=1e-4)
    if paths is not None:
        paths["graph"] = type(jitted.graph).__name__ if jitted.graph is not None else "item by item"

    # the communicator alone
    send = [b._buf for b in si.bufs[n:]]
    recv = [b._buf for b in si.bufs[:n]]
    cols["comm"] = busbw(nbytes, timed(lambda: comm.all_reduce(send, recv, numel, "float32", "sum"), sync, nbytes), n)

    if torch is not None:
        ts = [torch.from_numpy(h).to(f"cuda:{i}") for i, h in enumerate(host)]
        to = [torch.empty_like(t) for t in ts]

        def torch_sync():
            for i in range(n):
                torch.cuda.synchronize(i)
        cols["torch"] = busbw(nbytes, timed(lambda: torch.cuda.nccl.all_reduce(ts, to), torch_sync, nbytes), n)

    if ring:
        def ring_once():
            run_schedule(create_schedule(collectives.ring_all_reduce(ReduceOps.SUM, lbs)))
        cols["ring"] = busbw(nbytes, timed(ring_once, sync, nbytes, min_iters=2, warmup=1), n)
    return cols


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--sizes-mb", default="1,4,16,64,256,1024", help="comma-separated sizes in MiB (fp32)")
    parser.add_argument("--no-ring", action="store_true", help="skip the ring of copies (slow at large sizes)")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--timeout", type=int, default=300, help="seconds any one phase may take before exiting")
    args = parser.parse_args()
    watchdog(args.timeout)

    torch = None
    if not args.no_torch:
        try:
            import torch  # noqa: F811  (loaded first, so both use the libnccl.so.2 PyTorch ships)
            import torch.cuda.nccl  # noqa: F401
        except ImportError as e:
            print(f"PyTorch not available ({e}): its column is left out")
            torch = None

    from tinygrad.runtime import _cuda, nccl
    try:
        count = _cuda.device_count()
    except RuntimeError as e:
        sys.exit(f"no CUDA driver: {e}")
    if count < args.gpus:
        sys.exit(f"needs {args.gpus} GPUs, this machine has {count}")
    try:
        print(f"NCCL: {nccl.load()} (version {_cuda.nccl_version()})")
    except RuntimeError as e:
        sys.exit(f"NCCL could not be loaded: {e}")
    devices = tuple(Device.canonicalize(f"CUDA:{i}") for i in range(args.gpus))
    n = len(devices)
    for d in devices:
        print(f"{d}: {Device[d].native.product_name}")
    comm = nccl.communicator(devices)

    header = (f"{'size':>9} | {'tinygrad api':>12} {'tg replay':>10} {'tg graph':>10} {'tg comm':>10} "
              f"{'torch nccl':>10} {'ring':>10} | {'replay/torch':>12} {'graph/torch':>11} {'api/torch':>9}")
    print("\nall-reduce bus bandwidth, GB/s (fp32, out of place, " + f"{n} GPUs)\n{header}\n" + "-" * len(header))
    ratios = []
    for mb in [float(s) for s in args.sizes_mb.split(",")]:
        watchdog(args.timeout)
        paths: dict[str, str] = {}
        cols = one_size(int(mb * (1 << 20)) // 4, devices, comm, torch, not args.no_ring, paths)

        def f(key, cols=cols):
            return f"{cols[key]:10.1f}" if key in cols else f"{'-':>10}"
        r1 = cols["replay"] / cols["torch"] if "torch" in cols else float("nan")
        r2 = cols["api"] / cols["torch"] if "torch" in cols else float("nan")
        r3 = cols["graph"] / cols["torch"] if "torch" in cols else float("nan")
        ratios.append((mb, r1, r2))
        label = f"{mb:g} MiB" if mb < 1024 else f"{mb / 1024:g} GiB"
        print(f"{label:>9} | {cols['api']:12.1f} {f('replay')} {f('graph')} {f('comm')} {f('torch')} {f('ring')} | "
              f"{r1:12.2f} {r3:11.2f} {r2:9.2f}   graph path: {paths['graph']}", flush=True)
    faulthandler.cancel_dump_traceback_later()
    if torch is not None:
        worst = min(r for _, r, _ in ratios)
        print(f"\nworst tinygrad replay / torch ratio: {worst:.2f} ({'>=' if worst >= 0.9 else '<'} 0.9)")


if __name__ == "__main__":
    main()
