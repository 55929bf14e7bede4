"""Peak memory of a GPT-2 training step (forward, backward, AdamW) on the CPU at toy size (issue 30, item 6: within
1.5x of PyTorch's peak).

Two bounds. The schedule's own peak (extra/gpt2_train_memory.py: the bytes live at its fullest kernel, nothing run)
stays within 1.5x of what PyTorch eager must hold for the same step (parameters, gradients, AdamW's moments and the
tensors autograd saves). And the bytes the runtime really holds, eager and while TinyJit captures the step, stay
near that schedule peak: before each realize let go of its buffers after their last use, the runtime held every
intermediate of the step at once (35.8 GB at GPT-2 small, batch 8, seq 1024, where the schedule needs 20.4;
15.2 since softmax's backward reads its result alone)."""
import gc

import numpy as np

from extra.gpt2_train_memory import peak_bytes, torch_theoretical
from extra.models.gpt2 import GPT2, GPT2Config
from tinygrad import GlobalCounters, Tensor, TinyJit
from tinygrad.device import Buffer
from tinygrad.engine.schedule import create_schedule
from tinygrad.nn.optim import AdamW
from tinygrad.nn.state import get_parameters

CFG = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4)
BATCH, SEQ = 4, 64
# the target against PyTorch's theoretical
TORCH_FACTOR = 1.5
# the runtime above the schedule's peak: the JIT shares a buffer only between equal sizes (measured 1.18x), and the
# eager run frees through Python's reference counts as the graph lets go (1.07x); holding every intermediate at
# once was 1.58x (capture) and 3.0x (eager)
RUNTIME_FACTOR = 1.3


class _Peak:
    """The most bytes GlobalCounters.mem_used reached, sampled after every allocation while in use."""

    def __enter__(self):
        self._orig = Buffer._allocate
        self.peak = GlobalCounters.mem_used

        def allocate(buf, opaque=None):
            out = self._orig(buf, opaque)
            self.peak = max(self.peak, GlobalCounters.mem_used)
            return out
        Buffer._allocate = allocate
        return self

    def __exit__(self, *exc):
        Buffer._allocate = self._orig


def _setup():
    model = GPT2(CFG)
    params = get_parameters(model)
    opt = AdamW(params, lr=1e-3)
    Tensor.realize(*params)
    rng = np.random.default_rng(0)
    x = Tensor(rng.integers(0, CFG.vocab_size, (BATCH, SEQ)).astype(np.int32)).realize()
    y = Tensor(rng.integers(0, CFG.vocab_size, (BATCH, SEQ)).astype(np.int32)).realize()
    return model, params, opt, x, y


def _step(model, opt, x, y) -> list[Tensor]:
    opt.zero_grad()
    loss = model.loss(x, y)
    loss.backward()
    return [loss, *opt.schedule_step()]


def _schedule_peak() -> int:
    model, params, opt, x, y = _setup()
    prev, Tensor.training = Tensor.training, True
    try:
        outs = _step(model, opt, x, y)
        # a step after the first: the optimizer's state already exists (as in the runs measured below)
        Tensor.corealize(outs)
        outs = _step(model, opt, x, y)
        peak, _, _ = peak_bytes(create_schedule([t.lazydata for t in outs]), outs)
    finally:
        Tensor.training = prev
    return peak


def test_schedule_peak_within_torch():
    torch_bytes = sum(torch_theoretical(CFG, BATCH, SEQ).values())
    assert _schedule_peak() <= TORCH_FACTOR * torch_bytes


def test_runtime_peak_near_schedule_peak():
    bound = RUNTIME_FACTOR * _schedule_peak()
    # the bytes this test adds to what the process already holds (earlier tests in the same worker keep some alive)
    gc.collect()
    base = GlobalCounters.mem_used
    model, params, opt, x, y = _setup()

    def fn(x, y):
        outs = _step(model, opt, x, y)
        Tensor.corealize(outs)
        return outs[0]
    jit = TinyJit(fn)
    prev, Tensor.training = Tensor.training, True
    losses, peaks = [], []
    try:
        # the first call creates AdamW's state: measured from the second (run plainly), then the capture, a replay
        Tensor.corealize(_step(model, opt, x, y))
        for _ in range(3):
            with _Peak() as p:
                losses.append(jit(x, y).item())
            peaks.append(p.peak - base)
    finally:
        Tensor.training = prev
    assert max(peaks) <= bound, f"peaks {peaks} (eager, capture, replay) over {bound:.0f} bytes"
    # memory given back during the capture is allocated again for the replay: the steps keep training
    assert losses[0] > losses[1] > losses[2]


def test_softmax_backward_reads_its_result_alone():
    # the scores of attention need not live until the backward: their softmax's gradient comes from its weights
    x = Tensor(np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32), requires_grad=True)
    scores = (x * 3).contiguous().realize()
    weights = scores.softmax(-1).realize()
    w = Tensor(np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32))
    (weights * w).sum().backward()
    reads = {id(b) for si in create_schedule([scores.grad.lazydata]) for b in si.inputs}
    assert id(scores.lazydata.base.buffer) not in reads
    p, g = weights.numpy(), w.numpy()
    np.testing.assert_allclose(scores.grad.numpy(), p * (g - (g * p).sum(-1, keepdims=True)), rtol=1e-5, atol=1e-6)


def test_softmax_backward_half():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 300)).astype(np.float32)
    g = rng.standard_normal((3, 300)).astype(np.float32)
    grads = []
    for dtype in ("float16", "float32"):
        t = Tensor(x, requires_grad=True)
        (t.cast(dtype).softmax(-1) * Tensor(g).cast(dtype)).sum().backward()
        grads.append(t.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], atol=2e-3)
