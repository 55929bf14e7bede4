"""Learning-rate schedules for tinygrad's optimizers, as torch.optim.lr_scheduler's (tinygrad 0.9's tests import
OneCycleLR from extra.lr_scheduler).

A schedule writes the rate into the optimizer's `lr` tensor in place (so a jitted training step that reads it sees
each new value): once when made (the rate of step 0) and again at every `step()`.
"""
from __future__ import annotations

import math

from tinygrad import Tensor
from tinygrad.nn.optim import Optimizer


class LR_Scheduler:  # noqa: N801 (the name 0.9 and torch code use)
    """Base of the schedules: `get_lr()` is the rate at step `epoch_counter`; `step()` moves to the next step."""

    def __init__(self, optimizer: Optimizer):
        self.optimizer = optimizer
        self.epoch_counter = 0

    def get_lr(self) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement get_lr()")

    def _set(self, lr: float) -> None:
        opt_lr = self.optimizer.lr
        opt_lr.assign(Tensor([lr], dtype=opt_lr.dtype, device=opt_lr.device)).realize()

    def step(self) -> None:
        self.epoch_counter += 1
        self._set(self.get_lr())


class OneCycleLR(LR_Scheduler):
    """torch's OneCycleLR (two phases, cosine annealing): from max_lr / div_factor up to max_lr over the first
    pct_start of total_steps, then down to max_lr / div_factor / final_div_factor at the last step."""

    def __init__(self, optimizer: Optimizer, max_lr: float, div_factor: float, final_div_factor: float,
                 total_steps: int, pct_start: float):
        super().__init__(optimizer)
        self.initial_lr = max_lr / div_factor
        self.max_lr = max_lr
        self.min_lr = self.initial_lr / final_div_factor
        self.total_steps, self.pct_start = total_steps, pct_start
        self._set(self.get_lr())

    @staticmethod
    def _anneal(start: float, end: float, pct: float) -> float:
        return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)

    def get_lr(self) -> float:
        up_end = float(self.pct_start * self.total_steps) - 1
        down_end = float(self.total_steps - 1)
        t = self.epoch_counter
        if t <= up_end:
            return self._anneal(self.initial_lr, self.max_lr, t / up_end if up_end > 0 else 1.0)
        return self._anneal(self.max_lr, self.min_lr, (t - up_end) / (down_end - up_end))


class CosineAnnealingLR(LR_Scheduler):
    """torch's CosineAnnealingLR over T_max steps, from the optimizer's rate when made down to eta_min."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0):  # noqa: N803 (torch's name)
        super().__init__(optimizer)
        self.T_max, self.eta_min = T_max, eta_min
        self.eta_max = float(optimizer.lr.numpy()[0])

    def get_lr(self) -> float:
        cos = math.cos(math.pi * self.epoch_counter / self.T_max)
        return self.eta_min + (self.eta_max - self.eta_min) * (1 + cos) / 2
