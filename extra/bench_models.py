"""Whole models beside PyTorch (issue 30, item 6): each model written in both frameworks with the same weights,
timed in one process on one device, its output or loss checked against PyTorch's.

Rows: ResNet-50 inference (fp16, batch 64, 224x224) and training step (fp32, batch 256, SGD momentum 0.9), BERT-base
inference (fp16, batch 32, seq 128), a GPT-2 124M training step (fp32, batch 8, seq 1024, AdamW) and the prefill of
one Llama-style decoder layer (fp16, 4096 tokens; d 4096, 32 heads, 8 kv heads, mlp 14336).

Each row runs tinygrad under TinyJit and PyTorch eager; once every row has, `torch.compile` runs each (the model
and loss compiled, the optimizer eager; the reason where it fails), so that `--deadline` cuts only that part. Every
side starts from the same initial weights (tinygrad's initialisation under seed 0, copied into the PyTorch twins of
extra/models/torch_twins.py) and takes the same inputs. A side is warmed up (the JIT captures on its second call,
torch.compile compiles on its first), then timed over back-to-back steps with the device waited for at the end of
each round; the best round counts. A run stopped by SIGTERM (`timeout`) still prints what it measured. Float32
matmuls and convolutions take TF32 in both frameworks exactly when ALLOW_TF32=1; PyTorch runs with cudnn.benchmark
on, as people train ResNets.

Peak memory: PyTorch's torch.cuda.max_memory_allocated, and for tinygrad the most bytes its buffers held at once
(GlobalCounters.mem_used, sampled at each allocation; the allocator's cache of freed memory not counted, as
PyTorch's is not), both counting the row's weights and inputs, through the warm-up and the timed steps.
Check: the largest difference of the outputs (inference) or of the first steps' losses (training) from PyTorch
eager's, beside the largest value compared.

    PYTHONPATH=. python extra/bench_models.py --device CUDA --json models.json
    PYTHONPATH=. python extra/bench_models.py --device CLANG --small --no-compile     # seconds, on the CPU
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from extra.benchlib import machine_line
from extra.models.bert import Bert, BertConfig
from extra.models.gpt2 import GPT2, GPT2Config
from extra.models.llama import DecoderLayer, LayerConfig
from extra.models.resnet import ResNet, ResNetConfig
from tinygrad import Device, GlobalCounters, Tensor, TinyJit, dtypes
from tinygrad.device import Buffer
from tinygrad.helpers import getenv
from tinygrad.nn.optim import SGD, AdamW
from tinygrad.nn.state import get_parameters, get_state_dict

MODELS = ("resnet50", "bert", "gpt2", "llama_layer")
# losses compared at the first steps of a training row (each later one also checks the optimizer's update)
CHECK_STEPS = 2
# calls before timing, the checked ones included: TinyJit runs the first, captures the second, replays from the third
WARMUP = 3
SGD_LR, ADAMW_LR = 0.01, 1e-4


# ---- the rows ----

@dataclass(frozen=True)
class Sizes:
    """One size preset of every row: the full sizes of issue 30, or tiny ones that run on the CPU in seconds."""
    resnet: ResNetConfig
    image: int
    resnet_infer_batch: int
    resnet_train_batch: int
    bert: BertConfig
    bert_batch: int
    bert_seq: int
    gpt2: GPT2Config
    gpt2_batch: int
    gpt2_seq: int
    llama: LayerConfig
    llama_seq: int


FULL = Sizes(ResNetConfig(), 224, 64, 256, BertConfig(), 32, 128, GPT2Config(), 8, 1024, LayerConfig(), 4096)
SMALL = Sizes(ResNetConfig(layers=(1,), width=4, num_classes=10), 32, 2, 4,
              BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=32), 2, 16,
              GPT2Config(vocab_size=100, n_positions=16, n_embd=32, n_layer=2, n_head=4), 2, 16,
              LayerConfig(dim=64, n_heads=4, n_kv_heads=2, hidden_dim=128), 32)


@dataclass
class Setup:
    """What one side of a row needs: the tinygrad model (built, weights realized), its weights as numpy (float32),
    the inputs as numpy, and how to build the PyTorch twin."""
    model: Any
    weights: dict[str, np.ndarray]
    inputs: tuple[np.ndarray, ...]
    twin: Callable[[], Any]


@dataclass(frozen=True)
class Row:
    key: str
    model: str          # the --models group it belongs to
    title: str
    train: bool
    dtype: str          # "float16" or "float32"
    items: Callable[[Sizes], int]
    unit: str
    setup: Callable[[Sizes, np.random.Generator], Setup]
    # the loss or output of one step: (tinygrad model, input Tensors) or (torch module, input tensors)
    tiny_fn: Callable[..., Tensor]
    torch_fn: Callable[..., Any]
    optimizer: str = ""  # "sgd" or "adamw" for training rows


def _snapshot(model: Any) -> dict[str, np.ndarray]:
    """The model's initial weights as float32 numpy (the random initialisation realized once)."""
    return {k: t.numpy().astype(np.float32, copy=False) for k, t in get_state_dict(model).items()}


def _twin(name: str, cfg: Any) -> Callable[[], Any]:
    """A builder of the PyTorch twin `name` of extra/models/torch_twins.py (imported only when built: tinygrad's
    side runs without torch)."""
    def build():
        from extra.models import torch_twins
        return getattr(torch_twins, name)(cfg)
    return build


def _resnet(s: Sizes, rng: np.random.Generator, batch: int) -> Setup:
    model = ResNet(s.resnet)
    x = rng.standard_normal((batch, 3, s.image, s.image), dtype=np.float32)
    y = rng.integers(0, s.resnet.num_classes, batch).astype(np.int32)
    return Setup(model, _snapshot(model), (x, y), _twin("ResNetTwin", s.resnet))


def _bert(s: Sizes, rng: np.random.Generator) -> Setup:
    model = Bert(s.bert)
    ids = rng.integers(0, s.bert.vocab_size, (s.bert_batch, s.bert_seq)).astype(np.int32)
    return Setup(model, _snapshot(model), (ids,), _twin("BertTwin", s.bert))


def _gpt2(s: Sizes, rng: np.random.Generator) -> Setup:
    model = GPT2(s.gpt2)
    shape = (s.gpt2_batch, s.gpt2_seq)
    x = rng.integers(0, s.gpt2.vocab_size, shape).astype(np.int32)
    y = rng.integers(0, s.gpt2.vocab_size, shape).astype(np.int32)
    return Setup(model, _snapshot(model), (x, y), _twin("GPT2Twin", s.gpt2))


def _llama(s: Sizes, rng: np.random.Generator) -> Setup:
    model = DecoderLayer(s.llama)
    # hidden states of unit variance, as a layer's input after the embedding's scale
    x = rng.standard_normal((1, s.llama_seq, s.llama.dim), dtype=np.float32)
    return Setup(model, _snapshot(model), (x,), _twin("DecoderLayerTwin", s.llama))


def _torch_ce(logits, labels):
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own spelling
    return F.cross_entropy(logits, labels.long())


ROWS = [
    Row("resnet50_infer", "resnet50", "ResNet-50 inference", False, "float16", lambda s: s.resnet_infer_batch,
        "img/s", lambda s, r: _resnet(s, r, s.resnet_infer_batch),
        lambda m, x, y: m(x), lambda m, x, y: m(x)),
    Row("resnet50_train", "resnet50", "ResNet-50 train step SGD", True, "float32", lambda s: s.resnet_train_batch,
        "img/s", lambda s, r: _resnet(s, r, s.resnet_train_batch),
        lambda m, x, y: m.loss(x, y), lambda m, x, y: _torch_ce(m(x), y), "sgd"),
    Row("bert_infer", "bert", "BERT-base inference", False, "float16", lambda s: s.bert_batch, "seq/s", _bert,
        lambda m, ids: m(ids), lambda m, ids: m(ids)),
    Row("gpt2_train", "gpt2", "GPT-2 124M train step AdamW", True, "float32", lambda s: s.gpt2_batch * s.gpt2_seq,
        "tok/s", _gpt2, lambda m, x, y: m.loss(x, y), lambda m, x, y: m.loss(x, y), "adamw"),
    Row("llama_layer_prefill", "llama_layer", "Llama decoder layer prefill", False, "float16",
        lambda s: s.llama_seq, "tok/s", _llama, lambda m, x: m(x), lambda m, x: m(x)),
]


def _shape_note(row: Row, s: Sizes) -> str:
    return {"resnet50_infer": f"batch {s.resnet_infer_batch}, {s.image}x{s.image}",
            "resnet50_train": f"batch {s.resnet_train_batch}, {s.image}x{s.image}, momentum 0.9",
            "bert_infer": f"batch {s.bert_batch}, seq {s.bert_seq}",
            "gpt2_train": f"batch {s.gpt2_batch}, seq {s.gpt2_seq}",
            "llama_layer_prefill": f"{s.llama_seq} tokens, d {s.llama.dim}, {s.llama.n_heads}/{s.llama.n_kv_heads} "
                                   f"heads, mlp {s.llama.hidden_dim}"}[row.key]


# ---- timing and memory ----

class PeakMemory:
    """The most bytes tinygrad's buffers held at once since `reset()`: GlobalCounters.mem_used is the bytes live
    now, raised by every allocation, so sampling it after each one finds the peak. Installed around
    Buffer._allocate (through which the engine, the scheduler's plans and the JIT allocate) while in use."""

    def __enter__(self) -> PeakMemory:
        self._orig = Buffer._allocate
        orig, tracker = self._orig, self

        def allocate(buf, opaque=None):
            out = orig(buf, opaque)
            tracker.peak = max(tracker.peak, GlobalCounters.mem_used)
            return out

        Buffer._allocate = allocate
        self.reset()
        return self

    def reset(self) -> None:
        self.peak = GlobalCounters.mem_used

    def __exit__(self, *exc) -> None:
        Buffer._allocate = self._orig


def time_steps(step: Callable[[], Any], sync: Callable[[], None], iters: int, rounds: int,
               round_s: float) -> float:
    """Seconds per step: `rounds` rounds of back-to-back steps, the device waited for at the end of each, best
    round. A round has `iters` steps, fewer where one step is slow, so a round lasts about `round_s` at most."""
    sync()
    st = time.perf_counter()
    step()
    sync()
    n = max(1, min(iters, int(round_s / max(time.perf_counter() - st, 1e-9))))
    best = math.inf
    for _ in range(rounds):
        st = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        best = min(best, (time.perf_counter() - st) / n)
    return best


# ---- tinygrad's side ----

def _tiny_weights(model: Any, weights: dict[str, np.ndarray], dtype, device: str) -> None:
    """The model's weights realized on `device` in `dtype` (floats only), from the snapshot."""
    for k, t in get_state_dict(model).items():
        w = weights[k]
        target = dtype if dtypes.is_float(t.dtype) else t.dtype
        t.replace(Tensor(w, device=device).cast(target).contiguous().realize())


def run_tinygrad(row: Row, setup: Setup, device: str, opts: argparse.Namespace, base: int) -> dict:
    """The row's step in tinygrad under TinyJit; `base` is the bytes tinygrad held before the row was set up (not
    the row's, so not counted in its peak)."""
    dtype = dtypes.float16 if row.dtype == "float16" else dtypes.float32
    model = setup.model
    _tiny_weights(model, setup.weights, dtype, device)
    inputs = [Tensor(a, device=device).cast(dtype).contiguous().realize() if a.dtype == np.float32
              else Tensor(a, device=device).realize() for a in setup.inputs]
    dev = Device[device]
    with PeakMemory() as mem:
        mem.reset()
        if row.train:
            params = get_parameters(model)
            opt = SGD(params, lr=SGD_LR, momentum=0.9) if row.optimizer == "sgd" else AdamW(params, lr=ADAMW_LR)

            def fn(*xs: Tensor) -> Tensor:
                opt.zero_grad()
                loss = row.tiny_fn(model, *xs)
                loss.backward()
                Tensor.corealize([loss, *opt.schedule_step()])
                return loss
        else:
            def fn(*xs: Tensor) -> Tensor:
                return row.tiny_fn(model, *xs).realize()

        jit = TinyJit(fn)
        prev, Tensor.training = Tensor.training, row.train
        try:
            # the checked values come from the first calls: the function run plainly, then captured
            check = [jit(*inputs).numpy().astype(np.float32) for _ in range(CHECK_STEPS if row.train else 1)]
            for _ in range(WARMUP - len(check)):
                jit(*inputs)
            sec = time_steps(lambda: jit(*inputs), dev.synchronize, opts.iters, opts.rounds, opts.round_s)
        finally:
            Tensor.training = prev
        peak = mem.peak - base
    return {"ms": sec * 1e3, "peak_bytes": peak, "check": check}


# ---- PyTorch's side ----

def torch_device(device: str) -> str:
    return "cuda" if device.split(":")[0] in ("CUDA", "NV", "AMD", "HIP") else "cpu"


def run_torch(row: Row, setup: Setup, device: str, opts: argparse.Namespace, compiled: bool) -> dict:
    import torch

    from extra.models.torch_twins import load_weights
    tdev = torch_device(device)
    cuda = tdev == "cuda"
    tdtype = torch.float16 if row.dtype == "float16" else torch.float32
    base = torch.cuda.memory_allocated() if cuda else 0
    twin = load_weights(setup.twin(), setup.weights).to(device=tdev, dtype=tdtype)
    twin.train(row.train)
    inputs = [torch.from_numpy(a).to(tdev, tdtype) if a.dtype == np.float32 else torch.from_numpy(a).to(tdev).long()
              for a in setup.inputs]

    def forward(*xs):
        return row.torch_fn(twin, *xs)

    # compiled: the model's forward and the loss, as one function (the backward follows through AOTAutograd)
    fn = torch.compile(forward) if compiled else forward

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats()
    if row.train:
        if row.optimizer == "sgd":
            opt = torch.optim.SGD(twin.parameters(), lr=SGD_LR, momentum=0.9)
        else:
            opt = torch.optim.AdamW(twin.parameters(), lr=ADAMW_LR, weight_decay=0.01)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = fn(*inputs)
            loss.backward()
            opt.step()
            return loss
    else:
        def step():
            with torch.inference_mode():
                return fn(*inputs)

    check = [step().detach().float().cpu().numpy() for _ in range(CHECK_STEPS if row.train else 1)]
    for _ in range(WARMUP - len(check)):
        step()
    sec = time_steps(step, sync, opts.iters, opts.rounds, opts.round_s)
    peak = torch.cuda.max_memory_allocated() - base if cuda else None
    return {"ms": sec * 1e3, "peak_bytes": peak, "check": check}


def _same_precision() -> None:
    """Float32 matmuls and convolutions in PyTorch at tinygrad's precision: TF32 exactly where ALLOW_TF32=1."""
    import torch
    tf32 = bool(getenv("ALLOW_TF32"))
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True


# ---- one row, all sides ----

@dataclass
class Result:
    key: str
    title: str
    shape: str
    dtype: str
    unit: str
    items: int
    sides: dict[str, dict] = field(default_factory=dict)  # "tinygrad" / "eager" / "compile" -> ms, peak or error
    max_diff: float | None = None     # tinygrad against PyTorch eager, the largest absolute difference
    max_ref: float | None = None      # the largest absolute value of PyTorch eager's output or losses
    max_diff_compile: float | None = None  # torch.compile against PyTorch eager
    losses: dict[str, list[float]] = field(default_factory=dict)
    # what each side computed at its first steps (outputs or losses), compared with eager's; not in the JSON
    checks: dict[str, list[np.ndarray]] = field(default_factory=dict, repr=False)

    def throughput(self, side: str) -> float | None:
        ms = self.sides.get(side, {}).get("ms")
        return self.items / (ms / 1e3) if ms else None

    def ratio(self, other: str) -> float | None:
        """PyTorch's time over tinygrad's: above 1, tinygrad is faster."""
        a, b = self.sides.get("tinygrad", {}).get("ms"), self.sides.get(other, {}).get("ms")
        return b / a if a and b else None

    def to_json(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k not in ("sides", "checks")}
        out["sides"] = self.sides
        for side in ("tinygrad", "eager", "compile"):
            out[f"{side}_throughput"] = self.throughput(side)
        out["ratio_eager"], out["ratio_compile"] = self.ratio("eager"), self.ratio("compile")
        return out


def _error(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:200]}"


def run_sides(row: Row, res: Result, sides: list[str], sizes: Sizes, device: str, opts: argparse.Namespace,
              deadline: float) -> None:
    """Run `sides` ("tinygrad", "eager", "compile") of `row` into `res`, from the same initial weights each time
    (tinygrad's initialisation under seed 0), and compare what each computed with PyTorch eager's."""
    base = GlobalCounters.mem_used
    Tensor.manual_seed(0)
    setup = row.setup(sizes, np.random.default_rng(0))
    for side in sides:
        if time.perf_counter() > deadline:
            res.sides[side] = {"error": "skipped: past --deadline"}
            continue
        try:
            if side == "tinygrad":
                out = run_tinygrad(row, setup, device, opts, base)
            else:
                out = run_torch(row, setup, device, opts, side == "compile")
            res.checks[side] = out.pop("check")
            res.sides[side] = out
        except Exception as e:  # noqa: BLE001 - a side that fails is a row's finding, not the run's end
            res.sides[side] = {"error": _error(e)}
        gc.collect()
        _free_device_caches(device, side)
    if row.train:
        res.losses = {side: [float(v) for v in vals] for side, vals in res.checks.items()}
    if "eager" in res.checks:
        ref = np.stack([v.reshape(-1) for v in res.checks["eager"]])
        res.max_ref = float(np.max(np.abs(ref)))
        for side, attr in (("tinygrad", "max_diff"), ("compile", "max_diff_compile")):
            if side in res.checks:
                got = np.stack([v.reshape(-1) for v in res.checks[side]])
                setattr(res, attr, float(np.max(np.abs(got - ref))))


def _free_device_caches(device: str, side: str) -> None:
    """Memory a side cached for reuse back to the device before the next side runs (and torch.compile's graphs,
    which hold their own buffers, dropped)."""
    allocator = Device[device].allocator
    if hasattr(allocator, "free_cache"):
        allocator.free_cache()
    if side != "tinygrad":
        import torch
        if side == "compile":
            torch._dynamo.reset()
        if torch_device(device) == "cuda":
            torch.cuda.empty_cache()


# ---- output ----

def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}" if v >= 10 else f"{v:.2f}"


def _gb(v: int | None) -> str:
    return "-" if v is None else f"{v / 1e9:.2f}" if v >= 1e7 else f"{v / 1e6:.2f}MB"


def print_table(results: list[Result]) -> None:
    cols = ["model", "dtype", "tinygrad ms", "eager ms", "compile ms", "tinygrad/s", "eager/s", "compile/s",
            "x eager", "x compile", "peak GB tg/eager/compile", "max diff (of max)"]
    lines = []
    for r in results:
        s = r.sides
        diff = "-" if r.max_diff is None else f"{r.max_diff:.2e} ({r.max_ref:.3g})"
        ratio = [f"{x:.3f}x" if x is not None else "-" for x in (r.ratio("eager"), r.ratio("compile"))]
        lines.append([r.key, r.dtype, *(_ms(s.get(k, {}).get("ms")) for k in ("tinygrad", "eager", "compile")),
                      *(_rate(r.throughput(k)) for k in ("tinygrad", "eager", "compile")), *ratio,
                      "/".join(_gb(s.get(k, {}).get("peak_bytes")) for k in ("tinygrad", "eager", "compile")), diff])
    widths = [max(len(c), *(len(ln[i]) for ln in lines)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cols, widths))))
    for ln in lines:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(ln, widths))))
    for r in results:
        print(f"  {r.key}: {r.title}, {r.shape}, throughput in {r.unit}")
        for side, v in r.sides.items():
            if "error" in v:
                print(f"    {side}: {v['error']}")
        for side, losses in r.losses.items():
            print(f"    {side} losses: {', '.join(f'{x:.6f}' for x in losses)}")
        if r.max_diff_compile is not None:
            print(f"    torch.compile against eager: max diff {r.max_diff_compile:.2e}")
    print("x eager, x compile: PyTorch's time over tinygrad's (above 1, tinygrad is faster); peak: the most bytes "
          "a side's step held at once, weights and inputs included")


def _write_json(path: str | None, header: dict, small: bool, results: list[Result]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump({**header, "small": small, "rows": [r.to_json() for r in results]}, f, indent=1)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _header(device: str) -> dict:
    info = {"machine": machine_line(), "device": device, "ALLOW_TF32": bool(getenv("ALLOW_TF32"))}
    try:
        import torch
        info["torch"] = torch.__version__
        if torch_device(device) == "cuda" and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        info["torch"] = None
    return info


def main(argv: list[str] | None = None) -> list[Result]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="tinygrad device (CUDA, CLANG, ...); PyTorch runs on the same")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--small", action="store_true", help="tiny sizes that run on the CPU in seconds")
    ap.add_argument("--iters", type=int, default=20, help="timed steps per round, at most")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per side (the best counts)")
    ap.add_argument("--round-s", type=float, default=2.0, help="a round's steps are cut to last about this long")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--no-torch", action="store_true", help="tinygrad alone")
    ap.add_argument("--sides", default="tinygrad,eager,compile",
                    help="which to run, of tinygrad, eager, compile (a run split in two: 'tinygrad,eager', then "
                         "'eager,compile'; a side is compared with eager where eager runs)")
    ap.add_argument("--deadline", type=float, default=math.inf,
                    help="seconds from the start after which sides not yet started are skipped")
    ap.add_argument("--json", default=None, help="write the results here too (rewritten after every row)")
    opts = ap.parse_args(argv)
    start = time.perf_counter()
    wanted = [m.strip() for m in opts.models.split(",") if m.strip()]
    unknown = sorted(set(wanted) - set(MODELS))
    if unknown:
        ap.error(f"unknown models {unknown}; have {', '.join(MODELS)}")
    bad_sides = {x.strip() for x in opts.sides.split(",") if x.strip()} - {"tinygrad", "eager", "compile"}
    if bad_sides:
        ap.error(f"unknown sides {sorted(bad_sides)}; have tinygrad, eager, compile")
    device = Device.canonicalize(opts.device) if opts.device else Device.DEFAULT
    prev_default, Device.DEFAULT = Device.DEFAULT, device
    try:
        return _run_rows(opts, wanted, device, start)
    finally:
        Device.DEFAULT = prev_default


def _run_rows(opts: argparse.Namespace, wanted: list[str], device: str, start: float) -> list[Result]:
    """Every side of every wanted row, the table printed at the end (and the JSON written after each row)."""
    have_torch = not opts.no_torch
    if have_torch:
        try:
            _same_precision()
        except ImportError:
            have_torch = False
    sizes = SMALL if opts.small else FULL
    header = _header(device)
    print(header["machine"])
    print(f"device {device}" + (f" ({header['gpu']})" if header.get("gpu") else "") +
          f", torch {header.get('torch')}, ALLOW_TF32={int(header['ALLOW_TF32'])}, {'small' if opts.small else 'full'}"
          " sizes", flush=True)
    rows = [row for row in ROWS if row.model in wanted]
    results = [Result(row.key, row.title, _shape_note(row, sizes), row.dtype, row.unit, row.items(sizes))
               for row in rows]
    # every row's tinygrad and eager sides first, then torch.compile's (minutes of compiling), so a --deadline cuts
    # the optional part
    wanted_sides = {x.strip() for x in opts.sides.split(",") if x.strip()}
    if not have_torch:
        wanted_sides -= {"eager", "compile"}
    if opts.no_compile:
        wanted_sides.discard("compile")
    passes = [[x for x in ("tinygrad", "eager") if x in wanted_sides]] + \
        ([["compile"]] if "compile" in wanted_sides else [])
    # a run stopped from outside (`timeout` sends SIGTERM) still prints the table of what it measured
    prev_term = signal.signal(signal.SIGTERM, _interrupt)
    try:
        for sides in passes:
            for row, res in zip(rows, results):
                run_sides(row, res, sides, sizes, device, opts, start + opts.deadline)
                print(f"{res.key}: " + ", ".join(f"{k} {v['ms']:.2f} ms" if "ms" in v else f"{k} {v['error']}"
                                                 for k, v in res.sides.items() if k in sides), flush=True)
                _write_json(opts.json, header, opts.small, results)
    except KeyboardInterrupt:
        print(f"interrupted after {time.perf_counter() - start:.0f} s: the table has the sides that finished")
        _write_json(opts.json, header, opts.small, results)
    finally:
        signal.signal(signal.SIGTERM, prev_term)
    print_table(results)
    return results


if __name__ == "__main__":
    main()
