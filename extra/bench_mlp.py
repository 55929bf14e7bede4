"""One training step of a 784-256-10 MLP: tinygrad with TinyJit and eagerly, PyTorch eager, and numpy by hand.

The model is Linear-ReLU-Linear with sparse categorical cross entropy and SGD (or Adam, `--opt adam`). Every
implementation starts from the same weights and trains on the same few fixed batches, and the losses of its first
steps are checked against PyTorch's, so all rows time the same arithmetic. The numpy row is a hand-written forward,
backward and update: a floor for what the step costs when nothing but the matrix products is paid for.

Each implementation runs in a worker process of its own (see benchlib.py). The default batch size, 64 with Adam, is
where PyTorch eager takes about 0.62 ms per step on the 2-core machine the issue was measured on (the issue's
PyTorch figure); `--bs auto` times PyTorch at 32 and 64 first and takes the one closer to 0.62 ms on this machine.

Run from the repo root:  PYTHONPATH=. python extra/bench_mlp.py [--bs 32|auto] [--opt sgd] [--tinygrad-python PATH]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time

import benchlib
import numpy as np

IN, HIDDEN, OUT = 784, 256, 10
LR = {"sgd": 0.01, "adam": 0.001}
N_BATCHES = 4  # steps cycle through these, all made before timing starts
CHECK_STEPS = 4  # losses compared across implementations; with TinyJit they cover the capture and two replays
TARGET_TORCH_S = 0.62e-3
PROBE_BS = (32, 64)
# measured on the 2-core machine with Adam, quiet: PyTorch eager 0.50 ms at 32, 0.66 ms at 64 (SGD: 0.30 / 0.45 ms)
DEFAULT_BS, DEFAULT_OPT = 64, "adam"


def batches(bs: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((bs, IN)).astype(np.float32), rng.integers(0, OUT, bs).astype(np.int32))
            for _ in range(N_BATCHES)]


def init_weights() -> list[np.ndarray]:
    """w1, b1, w2, b2 drawn like torch.nn.Linear's default (uniform in +-1/sqrt(fan_in)), from a fixed seed."""
    rng = np.random.default_rng(1)
    out = []
    for fan_in, fan_out in ((IN, HIDDEN), (HIDDEN, OUT)):
        bound = 1.0 / np.sqrt(fan_in)
        out += [rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                rng.uniform(-bound, bound, fan_out).astype(np.float32)]
    return out


# ---- the step, per implementation: each returns step(i) -> a loss object, and loss_value(loss) -> float ----

def tinygrad_step(bs: int, opt_name: str, jit: bool):
    # only API that tinygrad 0.9.0 has too: this runs under its interpreter as well
    from tinygrad import Tensor, TinyJit
    from tinygrad.nn import Linear
    from tinygrad.nn.optim import SGD, Adam
    w1, b1, w2, b2 = init_weights()
    l1, l2 = Linear(IN, HIDDEN), Linear(HIDDEN, OUT)
    l1.weight, l1.bias, l2.weight, l2.bias = Tensor(w1), Tensor(b1), Tensor(w2), Tensor(b2)
    params = [l1.weight, l1.bias, l2.weight, l2.bias]
    opt = (SGD if opt_name == "sgd" else Adam)(params, lr=LR[opt_name])
    data = [(Tensor(x).realize(), Tensor(y).realize()) for x, y in batches(bs)]

    def step(x, y):
        opt.zero_grad()
        loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
        loss.backward()
        # NOTE: the loss is realized before the update: realized after it, a lazy loss may read the updated weights
        # (whether it does depends on which intermediates the step's schedule happened to keep)
        loss.realize()
        opt.step()
        return loss
    run = TinyJit(step) if jit else step

    def call(i: int):
        # NOTE: the optimizers refuse to step outside training mode (tinygrad 0.9.0 asserts on it)
        with Tensor.train():
            return run(*data[i % N_BATCHES])
    return call, lambda loss: float(loss.numpy())


def torch_step(bs: int, opt_name: str):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT))
    with torch.no_grad():
        for p, w in zip(model.parameters(), init_weights()):
            p.copy_(torch.from_numpy(w))
    opt = (torch.optim.SGD if opt_name == "sgd" else torch.optim.Adam)(model.parameters(), lr=LR[opt_name])
    data = [(torch.from_numpy(x), torch.from_numpy(y).long()) for x, y in batches(bs)]
    loss_fn = torch.nn.functional.cross_entropy

    def call(i: int):
        x, y = data[i % N_BATCHES]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return call, lambda loss: float(loss.item())


class NumpyMLP:
    """The same step written out by hand in float32: forward, softmax cross entropy's gradient, backward, update.

    The weight-sized arrays (gradients, Adam's state, a scratch buffer) are allocated once and written in place:
    allocating fresh 800 KB temporaries every step costs page faults that would make this floor no floor.
    """

    def __init__(self, opt_name: str):
        self.params = init_weights()
        self.adam = opt_name == "adam"
        self.lr = np.float32(LR[opt_name])
        self.grads = [np.zeros_like(p) for p in self.params]
        self.m = [np.zeros_like(p) for p in self.params]
        self.v = [np.zeros_like(p) for p in self.params]
        self.scratch = [np.zeros_like(p) for p in self.params]
        self.t = 0

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        w1, b1, w2, b2 = self.params
        gw1, gb1, gw2, gb2 = self.grads
        rows = np.arange(len(y))
        pre = x @ w1.T + b1
        h = np.maximum(pre, 0)
        logits = h @ w2.T + b2
        shifted = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(axis=1, keepdims=True)
        loss = float(np.mean(np.log(total[:, 0]) - shifted[rows, y]))
        d = e / total
        d[rows, y] -= 1
        d /= np.float32(len(y))
        dh = (d @ w2) * (pre > 0)
        np.matmul(dh.T, x, out=gw1)
        np.sum(dh, axis=0, out=gb1)
        np.matmul(d.T, h, out=gw2)
        np.sum(d, axis=0, out=gb2)
        self._update()
        return loss

    def _update(self) -> None:
        if not self.adam:
            for p, g, tmp in zip(self.params, self.grads, self.scratch):
                np.multiply(g, self.lr, out=tmp)
                p -= tmp
            return
        self.t += 1
        b1, b2, eps = np.float32(0.9), np.float32(0.999), np.float32(1e-8)
        c1, c2 = np.float32(1 - 0.9 ** self.t), np.float32(1 - 0.999 ** self.t)
        for p, g, m, v, tmp in zip(self.params, self.grads, self.m, self.v, self.scratch):
            # m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr (m / c1) / (sqrt(v / c2) + eps)
            m *= b1
            np.multiply(g, 1 - b1, out=tmp)
            m += tmp
            v *= b2
            np.multiply(g, g, out=tmp)
            tmp *= 1 - b2
            v += tmp
            np.divide(v, c2, out=tmp)
            np.sqrt(tmp, out=tmp)
            tmp += eps
            np.divide(m, tmp, out=tmp)
            tmp *= self.lr / c1
            p -= tmp


def numpy_step(bs: int, opt_name: str):
    model, data = NumpyMLP(opt_name), batches(bs)
    return (lambda i: model.step(*data[i % N_BATCHES])), float


# ---- workers ----

def measure(call, loss_value, timing: dict) -> dict:
    """The first CHECK_STEPS losses (read after every step), then the seconds per step of the steps after them."""
    losses = [loss_value(call(i)) for i in range(CHECK_STEPS)]
    counter = iter(range(CHECK_STEPS, 10 ** 9))
    step_s = benchlib.timed(lambda: call(next(counter)), **timing)
    final = loss_value(call(next(counter)))  # also waits for anything still in flight
    if not np.isfinite(final):
        raise RuntimeError(f"the loss diverged to {final} during timing")
    return {"losses": losses, "step_s": step_s}


def work(impl: str, bs: int, opt_name: str, timing: dict) -> dict:
    if impl == "tinygrad":
        return {"jit": measure(*tinygrad_step(bs, opt_name, jit=True), timing),
                "eager": measure(*tinygrad_step(bs, opt_name, jit=False), timing),
                "origin": benchlib.tinygrad_origin()}
    if impl == "torch":
        import torch
        out = {"eager": measure(*torch_step(bs, opt_name), timing), "threads": torch.get_num_threads()}
        # one thread as well: on a shared 2-core machine a second intra-op thread often waits for a core
        torch.set_num_threads(1)
        out["eager_1t"] = measure(*torch_step(bs, opt_name), timing)
        return out
    return {"eager": measure(*numpy_step(bs, opt_name), timing)}


def probe_torch(opt_name: str, timing: dict) -> dict:
    return {str(bs): measure(*torch_step(bs, opt_name), timing)["step_s"] for bs in PROBE_BS}


def first_step(impl: str, bs: int, opt_name: str) -> dict:
    """For bench_coldstart.py: build the model, run one (jitted, for tinygrad) step, read its loss, say when."""
    if impl == "tinygrad":
        call, loss_value = tinygrad_step(bs, opt_name, jit=True)
    elif impl == "torch":
        call, loss_value = torch_step(bs, opt_name)
    else:
        call, loss_value = numpy_step(bs, opt_name)
    loss = loss_value(call(0))
    return {"t_end": time.time(), "loss": loss}


# ---- the parent ----

def check(label: str, losses: list[float], reference: list[float]) -> None:
    if not np.allclose(losses, reference, rtol=1e-5, atol=1e-6):
        raise RuntimeError(f"{label}: losses of the first steps {losses} differ from the reference {reference}")


def ratio(seconds: float, reference: float | None) -> str:
    return f"{seconds / reference:.2f}x" if reference else "-"


def batch_size(text: str) -> int | str:
    if text == "auto":
        return text
    return benchlib.positive(int)(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bs", type=batch_size, default=DEFAULT_BS,
                        help=f"batch size, or auto: whichever of {PROBE_BS} brings PyTorch closest to "
                        f"{TARGET_TORCH_S * 1e3} ms per step here (default {DEFAULT_BS})")
    parser.add_argument("--opt", choices=sorted(LR), default=DEFAULT_OPT,
                        help=f"optimizer, the same in every framework (default {DEFAULT_OPT})")
    benchlib.add_foreign_arg(parser)
    benchlib.add_timing_args(parser, round_s=0.15, rounds=7)
    parser.add_argument("--worker", choices=("tinygrad", "torch", "numpy", "probe"), help=argparse.SUPPRESS)
    parser.add_argument("--first-step", choices=("tinygrad", "torch", "numpy"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    timing = {"round_s": args.round_s, "rounds": args.rounds}
    if args.worker == "probe":
        benchlib.emit(probe_torch(args.opt, timing))
        return
    if args.bs == "auto" and (args.worker or args.first_step):
        parser.error("workers need a numeric --bs")
    if args.first_step:
        benchlib.emit(first_step(args.first_step, args.bs, args.opt))
        return
    if args.worker:
        benchlib.emit(work(args.worker, args.bs, args.opt, timing))
        return

    script, has_torch = os.path.abspath(__file__), importlib.util.find_spec("torch") is not None
    common = ["--opt", args.opt, "--round-s", str(args.round_s), "--rounds", str(args.rounds)]
    bs, bs_note = args.bs, "default" if args.bs == DEFAULT_BS else "given by --bs"
    if bs == "auto":
        if not has_torch:
            parser.error("--bs auto times PyTorch, which is not installed")
        bs, bs_note = pick_batch_size(script, common)
    rows, notes = collect(script, common + ["--bs", str(bs)], args.tinygrad_python, has_torch)
    # PyTorch's losses when it ran, else numpy's: the first row of the two
    reference = next(res for label, res in rows if label.startswith(("PyTorch", "numpy")))["losses"]
    for label, res in rows:
        check(label, res["losses"], reference)

    print(benchlib.machine_line())
    print(f"batch size {bs} ({bs_note}); optimizer {args.opt}, lr {LR[args.opt]}")
    torch_s = {label: res["step_s"] for label, res in rows if label.startswith("PyTorch")}
    refs = list(torch_s.values()) if has_torch else [None, None]
    benchlib.print_table(
        f"{IN}-{HIDDEN}-{OUT} MLP training step (forward, backward, {args.opt}): time per step "
        f"(best of {args.rounds} rounds)",
        ["per step", "vs PyTorch", "vs PyTorch 1 thread"],
        [(label, [benchlib.fmt(res["step_s"], "ms"), ratio(res["step_s"], refs[0]), ratio(res["step_s"], refs[1])])
         for label, res in rows])
    print(f"the losses of the first {CHECK_STEPS} steps agree in every row (to 1e-5) with "
          f"{'PyTorch' if has_torch else 'numpy'}'s")
    print("\n".join(notes))


def pick_batch_size(script: str, common: list[str]) -> tuple[int, str]:
    """--bs auto: the probed batch size whose PyTorch step is closest to the issue's figure, and a note saying so."""
    probe = benchlib.run_worker(sys.executable, [script, "--worker", "probe", *common])
    bs = min(PROBE_BS, key=lambda b: abs(probe[str(b)] - TARGET_TORCH_S))
    timings = ", ".join(f"{benchlib.fmt(s, 'ms')} at {b}" for b, s in probe.items())
    return bs, f"picked by --bs auto: PyTorch eager {timings}; target {TARGET_TORCH_S * 1e3} ms"


def collect(script: str, common: list[str], foreign: str | None,
            has_torch: bool) -> tuple[list[tuple[str, dict]], list[str]]:
    """Run every worker: (label, {losses, step_s}) rows in table order (tinygrads, PyTorch's two, numpy's two)."""
    rows: list[tuple[str, dict]] = []
    ours = benchlib.run_worker(sys.executable, [script, "--worker", "tinygrad", *common])
    rows += [("tinygrad (this repo), TinyJit", ours["jit"]), ("tinygrad (this repo), eager", ours["eager"])]
    notes = [f"tinygrad (this repo): device {ours['origin']['device']}, C compiler {benchlib.compiler_note(False)}"]
    if foreign:
        with tempfile.TemporaryDirectory() as cwd:
            theirs = benchlib.run_worker(foreign, [script, "--worker", "tinygrad", *common],
                                         env=benchlib.foreign_env(), cwd=cwd)
        benchlib.assert_foreign(theirs["origin"], foreign)
        label = benchlib.foreign_label(theirs["origin"], foreign)
        rows += [(label + ", TinyJit", theirs["jit"]), (label + ", eager", theirs["eager"])]
        notes.append(f"{label}: device {theirs['origin']['device']}, C compiler {benchlib.compiler_note(True)}")
    if has_torch:
        torch_res = benchlib.run_worker(sys.executable, [script, "--worker", "torch", *common])
        rows.append((f"PyTorch eager ({torch_res['threads']} threads, the default)", torch_res["eager"]))
        rows.append(("PyTorch eager, 1 thread", torch_res["eager_1t"]))
    rows.append(("numpy by hand (floor)",
                 benchlib.run_worker(sys.executable, [script, "--worker", "numpy", *common])["eager"]))
    # BLAS reads its thread count once, when it loads: one thread needs a process of its own
    one = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    rows.append(("numpy by hand, 1 BLAS thread",
                 benchlib.run_worker(sys.executable, [script, "--worker", "numpy", *common], env=one)["eager"]))
    return rows, notes


if __name__ == "__main__":
    benchlib.run_main(main)
