"""A GPT-2 training step at toy size (2 layers, d 128, 4 heads, seq 64, vocab 1000, batch 2, AdamW) on the CPU:
it runs, its losses follow a PyTorch copy of the same weights for 3 steps, and its schedule stores no kernel output
far larger than what the kernel reads (issue 30: a linear layer's weight gradient was stored as the expanded
product before its sum, 38.6 GB at GPT-2-small size)."""
import numpy as np
import pytest

import tinygrad.engine.schedule as schedule_mod
from extra.models.gpt2 import GPT2, MASKED_SCORE, GPT2Config
from tinygrad import Tensor, dtypes
from tinygrad.engine.schedule import create_schedule
from tinygrad.nn.optim import AdamW
from tinygrad.nn.state import get_parameters, get_state_dict

TOY = GPT2Config(vocab_size=1000, n_positions=64, n_embd=128, n_layer=2, n_head=4)
BATCH, SEQ, STEPS, LR = 2, 64, 3, 1e-3
# a kernel's largest output may be this many times the bytes it reads plus the step's largest output, no more
GUARD_FACTOR = 8


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, TOY.vocab_size, (BATCH, SEQ)).astype(np.int32),
            rng.integers(0, TOY.vocab_size, (BATCH, SEQ)).astype(np.int32))


def _step_tensors(model: GPT2, opt: AdamW, x: Tensor, y: Tensor) -> list[Tensor]:
    """One step built lazily: the loss first, then everything the optimizer realizes."""
    opt.zero_grad()
    loss = model.loss(x, y)
    loss.backward()
    return [loss, *opt.schedule_step()]


def _torch_losses(weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> list[float]:
    """The same model and steps in PyTorch, from the same weights."""
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional
    cfg = TOY

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = cfg.n_embd
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, h):
            b, t, d = h.shape
            hd = d // cfg.n_head
            q, k, v = self.c_attn(self.ln_1(h)).reshape(b, t, 3, cfg.n_head, hd).permute(2, 0, 3, 1, 4)
            scores = (q @ k.transpose(-2, -1)) * (1.0 / hd ** 0.5)
            future = torch.ones(t, t, dtype=torch.bool).triu(1)
            att = scores.masked_fill(future, MASKED_SCORE).softmax(-1) @ v
            h = h + self.attn_proj(att.transpose(1, 2).reshape(b, t, d))
            return h + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(h)), approximate="tanh"))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.n_embd), nn.Embedding(cfg.n_positions, cfg.n_embd)
            self.h = nn.ModuleList([Block() for _ in range(cfg.n_layer)])
            self.ln_f = nn.LayerNorm(cfg.n_embd)

        def forward(self, idx):
            h = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))[None]
            for block in self.h:
                h = block(h)
            return self.ln_f(h) @ self.wte.weight.T

    model = Model()
    names = {"attn.c_attn": "c_attn", "attn.c_proj": "attn_proj", "mlp.c_fc": "c_fc", "mlp.c_proj": "mlp_proj"}
    with torch.no_grad():
        for name, p in model.named_parameters():
            ours = name
            for theirs, mine in names.items():
                ours = ours.replace(mine + ".", theirs + ".")
            p.copy_(torch.from_numpy(weights[ours]))
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    xt, yt = torch.from_numpy(x).long(), torch.from_numpy(y).long()
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(xt).reshape(-1, cfg.vocab_size), yt.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_toy_training_step_matches_pytorch():
    Tensor.manual_seed(0)
    model = GPT2(TOY)
    params = get_parameters(model)
    Tensor.corealize(params)
    weights = {k: v.numpy().copy() for k, v in get_state_dict(model).items()}
    opt = AdamW(params, lr=LR)
    xn, yn = _data()
    x, y = Tensor(xn), Tensor(yn)
    prev, Tensor.training = Tensor.training, True
    try:
        losses = []
        for _ in range(STEPS):
            outs = _step_tensors(model, opt, x, y)
            Tensor.corealize(outs)
            losses.append(outs[0].item())
    finally:
        Tensor.training = prev
    assert losses[2] < losses[0]
    np.testing.assert_allclose(losses, _torch_losses(weights, xn, yn), rtol=2e-4, atol=2e-4)


def _oversized_kernels(lazy_params: bool) -> list[str]:
    """The kernels of one toy step whose output exceeds GUARD_FACTOR x (their inputs' bytes + the largest buffer
    the step must produce), described; with `lazy_params` the parameters' initialisation is part of the step, as
    in a training script's first step."""
    Tensor.manual_seed(0)
    model = GPT2(TOY)
    params = get_parameters(model)
    if not lazy_params:
        Tensor.corealize(params)
    opt = AdamW(params, lr=LR)
    x = Tensor.empty(BATCH, SEQ, dtype=dtypes.int32)
    y = Tensor.empty(BATCH, SEQ, dtype=dtypes.int32)
    prev, Tensor.training = Tensor.training, True
    try:
        outs = _step_tensors(model, opt, x, y)
    finally:
        Tensor.training = prev
    sched = create_schedule([t.lazydata for t in outs])
    largest = max(t.lazydata.base.buffer.nbytes for t in outs)
    bad = []
    for i, si in enumerate(sched):
        out_bytes = max(b.nbytes for b in si.outputs)
        in_bytes = sum(b.nbytes for b in si.inputs)
        if out_bytes > GUARD_FACTOR * (in_bytes + largest):
            bad.append(f"kernel {i} of {len(sched)}: {si.ast[0].op} stores {out_bytes} bytes "
                       f"({[b.size for b in si.outputs]} elements) from inputs {[b.size for b in si.inputs]}")
    return bad


@pytest.mark.parametrize("max_inputs", [None, 12])
@pytest.mark.parametrize("lazy_params", [False, True])
def test_no_kernel_stores_an_expanded_product(monkeypatch, max_inputs, lazy_params):
    # with fewer buffers allowed per kernel, 2 layers are as wide as GPT-2 small's 12: its residual stream (one
    # input per block output) made the linear layers' kernels too wide, and the scheduler stored their products
    if max_inputs is not None:
        monkeypatch.setattr(schedule_mod, "MAX_KERNEL_INPUTS", max_inputs)
    bad = _oversized_kernels(lazy_params)
    assert not bad, "kernels store far more than they read:\n" + "\n".join(bad)
