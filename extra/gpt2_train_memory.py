"""Peak memory of a GPT-2 training step (forward, backward, AdamW), from its schedule alone: nothing runs.

The buffers the step keeps (parameters, optimizer state, the loss) and those it reads without writing are live all
along; every other buffer is live from the first kernel that touches it to the last. The peak is the most bytes
live at one kernel, in schedule order. Beside it, PyTorch's theoretical for the same model in float32 eager mode:
parameters, gradients, AdamW's two moments, and the activations autograd saves for the backward.

    PYTHONPATH=. python extra/gpt2_train_memory.py                  # GPT-2 small, batch 8, seq 1024
    PYTHONPATH=. python extra/gpt2_train_memory.py --batch 8 --seq 512 --init --top 5
"""
from __future__ import annotations

import argparse
import time

from extra.models.gpt2 import GPT2, GPT2Config
from tinygrad import Tensor, dtypes
from tinygrad.engine.schedule import create_schedule
from tinygrad.nn.optim import AdamW
from tinygrad.nn.state import get_parameters

GB = 1e9


def step_schedule(cfg: GPT2Config, batch: int, seq: int, init: bool = False) -> tuple[list, list[Tensor]]:
    """The schedule of one training step and the tensors it realizes. The parameters are empty buffers, or with
    `init` their random initialisation is part of the step (a training script's first step)."""
    model = GPT2(cfg)
    params = get_parameters(model)
    for p in params if not init else ():
        p.lazydata = Tensor.empty(*p.shape, dtype=p.dtype).lazydata
    opt = AdamW(params, lr=1e-4)
    tokens = Tensor.empty(batch, seq, dtype=dtypes.int32)
    targets = Tensor.empty(batch, seq, dtype=dtypes.int32)
    prev, Tensor.training = Tensor.training, True
    try:
        loss = model.loss(tokens, targets)
        loss.backward()
        outs = [loss, *opt.schedule_step()]
    finally:
        Tensor.training = prev
    return create_schedule([t.lazydata for t in outs]), outs


def peak_bytes(schedule: list, keep: list[Tensor]) -> tuple[int, int, int]:
    """(peak bytes live, the kernel at the peak, bytes live all along) over `schedule`; the buffers of `keep` and
    every buffer read before any kernel writes it stay live from start to end."""
    first, last, bufs = {}, {}, {}
    written = set()
    resident = {id(t.lazydata.base.buffer): t.lazydata.base.buffer for t in keep}
    for i, si in enumerate(schedule):
        for j, b in enumerate(si.bufs):
            key = id(b)
            bufs[key] = b
            if j >= si.n_outputs and key not in written:
                resident[key] = b
            if j < si.n_outputs:
                written.add(key)
            first.setdefault(key, i)
            last[key] = i
    base = sum(b.nbytes for b in resident.values())
    # a sweep over start and end events: +bytes at a buffer's first kernel, -bytes after its last
    delta = [0] * (len(schedule) + 1)
    for key, b in bufs.items():
        if key in resident:
            continue
        delta[first[key]] += b.nbytes
        delta[last[key] + 1] -= b.nbytes
    live, peak, at = 0, 0, 0
    for i in range(len(schedule)):
        live += delta[i]
        if live > peak:
            peak, at = live, i
    return base + peak, at, base


def jit_bytes(schedule: list, keep: list[Tensor]) -> int:
    """The bytes a TinyJit replay of `schedule` holds: the buffers live all along, and the step's others sharing
    memory as engine/jit.py's _share_buffers lets them (one of the same dtype and size whose last use has
    passed)."""
    first, last, bufs, read_first = {}, {}, {}, set()
    for i, si in enumerate(schedule):
        for j, b in enumerate(si.bufs):
            if id(b) not in first:
                first[id(b)] = i
                if j >= si.n_outputs:
                    read_first.add(id(b))
            last[id(b)] = i
            bufs[id(b)] = b
    kept = {id(t.lazydata.base.buffer) for t in keep}
    own = {k for k in bufs if k not in read_first and k not in kept}
    total = sum(b.nbytes for k, b in bufs.items() if k not in own)
    waiting: dict[tuple, int] = {}
    ends: dict[int, list[int]] = {}
    for k in own:
        ends.setdefault(last[k], []).append(k)
    for i, si in enumerate(schedule):
        for k in dict.fromkeys(id(b) for b in si.outputs):
            if k in own and first[k] == i:
                b = bufs[k]
                key = (b.dtype, b.size)
                if waiting.get(key):
                    waiting[key] -= 1
                else:
                    total += b.nbytes
        for k in ends.get(i, ()):
            key = (bufs[k].dtype, bufs[k].size)
            waiting[key] = waiting.get(key, 0) + 1
    return total


def live_at(schedule: list, keep: list[Tensor], at: int) -> list[tuple[int, int, int, object]]:
    """(bytes, the kernel writing it first, its last kernel, the buffer) for each buffer live at kernel `at` that
    the step does not keep, largest first."""
    first, last, bufs = {}, {}, {}
    kept = {id(t.lazydata.base.buffer) for t in keep}
    for i, si in enumerate(schedule):
        for j, b in enumerate(si.bufs):
            if j < si.n_outputs:
                first.setdefault(id(b), i)
            last[id(b)] = i
            bufs[id(b)] = b
    live = [(b.nbytes, first[k], last[k], b) for k, b in bufs.items()
            if k in first and k not in kept and first[k] <= at <= last[k]]
    return sorted(live, key=lambda t: t[0], reverse=True)


def kernel_name(si) -> str:
    """A short name for a schedule item: its AST's ops, the reduce and the first elementwise op."""
    ops = []
    stack = list(si.ast)
    while stack and len(ops) < 40:
        op = stack.pop()
        ops.append(op.op.name)
        stack.extend(op.src)
    main = [o for o in ops if o not in ("STORE", "LOAD", "CONST")]
    return "/".join(dict.fromkeys(main[:4])) or ops[0]


def torch_theoretical(cfg: GPT2Config, batch: int, seq: int) -> dict[str, int]:
    """Bytes PyTorch float32 eager needs for the step: parameters, gradients, two AdamW moments, and the tensors
    autograd saves. Per layer and token: the block input, ln_1's output, q/k/v, the attention output, the second
    residual, ln_2's output, c_fc's output (gelu's input) and gelu's output (16 * d floats), plus each head's row
    of softmax output (n_head * seq floats) and the causal mask; after the layers the final norm's input and output,
    the logits and their log-softmax."""
    d, n_tok = cfg.n_embd, batch * seq
    n_params = (cfg.vocab_size * d + cfg.n_positions * d + 2 * d +
                cfg.n_layer * (4 * d + d * 3 * d + 3 * d + d * d + d + d * 4 * d + 4 * d + 4 * d * d + d))
    per_layer = 4 * (n_tok * 16 * d + batch * cfg.n_head * seq * seq) + seq * seq
    activations = cfg.n_layer * per_layer + 4 * (2 * n_tok * d + 2 * n_tok * cfg.vocab_size)
    return {"params": 4 * n_params, "grads": 4 * n_params, "adam": 8 * n_params, "activations": activations}


def torch_saved_bytes(cfg: GPT2Config, batch: int, seq: int) -> int:
    """Bytes autograd saves for the backward in PyTorch's twin of the model (extra/models/torch_twins.py:
    scaled_dot_product_attention, so no attention weights where a fused kernel runs), measured on the CPU at batch
    1 and scaled to `batch` (every saved activation has a batch axis); parameters not counted."""
    import torch
    import torch.nn.functional as F

    from extra.models.torch_twins import GPT2Twin
    model = GPT2Twin(cfg)
    params = {p.data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        if t.data_ptr() not in params:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    x = torch.randint(0, cfg.vocab_size, (1, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, cfg.vocab_size), x.reshape(-1))
    return batch * sum(saved.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--init", action="store_true", help="the parameters' initialisation is part of the step")
    ap.add_argument("--top", type=int, default=0, help="also list the N largest kernel outputs")
    ap.add_argument("--torch", action="store_true", help="also measure what PyTorch's twin saves for the backward")
    ap.add_argument("--live", type=int, default=0, help="also list the N largest buffers live at the peak")
    args = ap.parse_args()
    cfg = GPT2Config(n_layer=args.layers, n_positions=max(1024, args.seq))
    t0 = time.perf_counter()
    schedule, outs = step_schedule(cfg, args.batch, args.seq, args.init)
    peak, at, resident = peak_bytes(schedule, outs)
    print(f"GPT-2 ({cfg.n_layer} layers, d {cfg.n_embd}) training step, AdamW, float32, batch {args.batch}, "
          f"seq {args.seq}: {len(schedule)} kernels, scheduled in {time.perf_counter() - t0:.1f} s")
    print(f"tinygrad peak (schedule order):  {peak / GB:7.2f} GB at kernel {at} "
          f"({resident / GB:.2f} GB held all step)")
    print(f"TinyJit replay (buffers shared): {jit_bytes(schedule, outs) / GB:7.2f} GB")
    th = torch_theoretical(cfg, args.batch, args.seq)
    parts = ", ".join(f"{k} {v / GB:.2f}" for k, v in th.items())
    print(f"PyTorch theoretical:             {sum(th.values()) / GB:7.2f} GB ({parts})")
    if args.torch:
        n_params = th["params"]
        saved = torch_saved_bytes(cfg, args.batch, args.seq)
        print(f"PyTorch measured (CPU, saved):   {(4 * n_params + saved) / GB:7.2f} GB (params, grads and AdamW "
              f"{4 * n_params / GB:.2f}, saved activations {saved / GB:.2f}; the backward's own temporaries not "
              "counted)")
    every = {id(b): b.nbytes for si in schedule for b in si.bufs}
    print(f"every buffer at once:            {sum(every.values()) / GB:7.2f} GB (what a runtime freeing nothing "
          "before the step ends holds)")
    if args.live:
        print(f"largest buffers live at kernel {at} (made by kernel, last read by kernel):")
        for nbytes, i, j, b in live_at(schedule, outs, at)[:args.live]:
            print(f"  {nbytes / GB:6.3f} GB {b.dtype.name}[{b.size}]  kernel {i} ({kernel_name(schedule[i])}) "
                  f"-> kernel {j} ({kernel_name(schedule[j])})")
    if args.top:
        sizes = sorted(((max(b.nbytes for b in si.outputs), i) for i, si in enumerate(schedule)), reverse=True)
        for nbytes, i in sizes[:args.top]:
            print(f"  kernel {i}: output {nbytes / GB:.3f} GB, inputs "
                  f"{[round(b.nbytes / GB, 3) for b in schedule[i].inputs]} GB")


if __name__ == "__main__":
    main()
