"""Large-batch training: the learning rate scaled with the ranks, warm-up, LARS/LAMB, and a
global batch size that grows during training. Every knob is a plain config value, so it can
be searched like any other hyperparameter.

Example:
    >>> lr = scaled_lr(config["lr"], dist.size(), config.get("lr_scaling", "linear"))
    >>> optimizer = make_optimizer(config.get("optimizer", "sgd"), model.parameters(), lr)
    >>> schedule = BatchSchedule.from_config(config)   # e.g. 512, then 16384 from epoch 20
    >>> schedule.global_batch(epoch)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

SCALINGS = ("linear", "sqrt", "none")
OPTIMIZERS = ("sgd", "adam", "adamw", "lars", "lamb")


def scaled_lr(base_lr: float, ranks: float, rule: str = "linear") -> float:
    """Goyal et al.'s linear rule (lr x ranks), the square-root rule, or none; `ranks` may be
    any batch-size ratio."""
    factors = {"linear": ranks, "sqrt": math.sqrt(ranks), "none": 1}
    if rule not in factors:
        raise ValueError(f"lr_scaling must be one of {', '.join(SCALINGS)}, got {rule!r}")
    return base_lr * factors[rule]


def warmup_lr(target_lr: float, base_lr: float, epoch: float, warmup_epochs: float) -> float:
    """Linear ramp from base_lr to target_lr over the first warmup_epochs (fractional epochs
    allowed, so it can be applied per step)."""
    if warmup_epochs <= 0 or epoch >= warmup_epochs:
        return target_lr
    return base_lr + (target_lr - base_lr) * epoch / warmup_epochs


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def make_optimizer(name: str, params: Iterable[Any], lr: float, momentum: float = 0.9,
                   weight_decay: float = 0.0, nesterov: bool = False) -> torch.optim.Optimizer:
    """SGD (momentum, Nesterov), Adam, AdamW from torch; LARS and LAMB from pytorch_optimizer."""
    import torch

    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=nesterov,
                               weight_decay=weight_decay)
    if name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return cls(params, lr=lr, weight_decay=weight_decay)
    if name in ("lars", "lamb"):
        import pytorch_optimizer

        if name == "lars":
            return pytorch_optimizer.LARS(params, lr=lr, momentum=momentum, nesterov=nesterov,
                                          weight_decay=weight_decay)
        return pytorch_optimizer.Lamb(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")


@dataclass(frozen=True)
class BatchSchedule:
    """A global batch size that jumps once: `batch_size`, then `big_batch_size` from epoch
    `big_batch_from_epoch` (larger batches late in training, as the seed's recipe did), with
    the learning rate scaled by the batch ratio under `big_batch_lr_scaling`, ramped in over
    `big_batch_warmup_epochs` so the jump does not throw the model off."""

    batch_size: int
    big_batch_size: int = 0  # 0: the batch stays fixed
    big_batch_from_epoch: int = 0
    big_batch_lr_scaling: str = "none"
    big_batch_warmup_epochs: float = 1.0

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> BatchSchedule:
        schedule = cls(int(config["batch_size"]), int(config.get("big_batch_size", 0) or 0),
                       int(config.get("big_batch_from_epoch", 0) or 0),
                       str(config.get("big_batch_lr_scaling", "none")),
                       float(config.get("big_batch_warmup_epochs", 1.0)))
        if schedule.batch_size < 1 or schedule.big_batch_size < 0:
            raise ValueError(f"batch sizes must be positive, got {schedule}")
        scaled_lr(1.0, 1, schedule.big_batch_lr_scaling)  # an unknown rule fails now
        return schedule

    def global_batch(self, epoch: int) -> int:
        if self.big_batch_size and epoch >= self.big_batch_from_epoch:
            return self.big_batch_size
        return self.batch_size

    def lr(self, lr: float, epoch: float) -> float:
        """The learning rate at this (fractional) epoch, given the one for `batch_size`."""
        ratio = self.global_batch(int(epoch)) / self.batch_size
        if ratio == 1:
            return lr
        return warmup_lr(scaled_lr(lr, ratio, self.big_batch_lr_scaling), lr,
                         epoch - self.big_batch_from_epoch, self.big_batch_warmup_epochs)
