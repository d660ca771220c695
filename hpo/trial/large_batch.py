"""Large-batch training with one meaning per config, whatever the number of ranks.

`batch_size` is the global batch and `lr` the learning rate at `lr_reference_batch`: the
rank count never enters the math, so a config takes the same steps on 1, 2 or 4 ranks
(split the batch with `dist.local_batch_size`, draw its rows with `dist.batches`).
`batch_schedule` grows the global batch during training, moving the LR with it:

    batch_size: 64             # the global batch (the first one, when it grows)
    lr_reference_batch: 64     # the global batch `lr` is meant for (default: the first)
    batch_schedule:
      start: 64                # the first global batch (default: batch_size; give one of them)
      max: 1024                # the largest (default: start, i.e. a fixed batch)
      double_every: 2          # epochs between doublings (default 1)
      lr_rule: sqrt            # none | sqrt | linear: lr x rule(global batch / reference)
      switch_at: 20            # or: one switch from start to max at this epoch (the seed's)
      grow: noise              # or: double when the gradient noise scale passes the batch
      ramp_steps: 50           # steps over which the LR moves to each new rate (default 0)
      warmup_steps: 200        # steps over which the LR climbs from 0 at the start (default 0)
      decay: poly              # none | poly | cosine: the LR falls to 0 at the last epoch
      decay_power: 2           # poly's power (default 2, as You et al.'s LARS and LAMB)
      grow_at: [1, 2]          # epochs from which the batch is grow_factor x bigger again
      grow_factor: 2           # (the rasda scheduler writes both as it grows a trial's ranks)

Every field can also be given, or searched, as a flat key (`batch_schedule.double_every`);
a flat key wins over the nested one. The optimizer stays the trial's one `optimizer` key
(`make_optimizer`: lars or lamb for a batch that grows large).

Example:
    >>> check_trial_config(config, "space.yaml", workers=4)    # also what `hpo validate` calls
    >>> schedule = BatchSchedule.from_config(config, workers=dist.size())
    >>> schedule.global_batch(epoch), schedule.lr(config["lr"], epoch, step, len(x_train))
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpo.trial.batch_keys import (
    DECAYS,
    FIELDS,
    GROWTHS,
    LR_RULES,
    REMOVED,
    SCHEDULE,
    resolve,
)

if TYPE_CHECKING:
    import torch

OPTIMIZERS = ("sgd", "adam", "adamw", "lars", "lamb")
SOURCE = "trial config"  # the source named in errors raised inside a trial
__all__ = ["DECAYS", "FIELDS", "GROWTHS", "LR_RULES", "OPTIMIZERS", "REMOVED", "SCHEDULE",
           "BatchSchedule", "check_trial_config", "lr_for_batch", "make_optimizer", "set_lr"]


def lr_for_batch(lr: float, batch: int, reference: int, rule: str) -> float:
    """The rate for a global batch, given `lr` at the reference batch (Goyal et al.'s linear
    rule, the square-root rule, or none)."""
    ratio = batch / reference
    factors = {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1.0}
    if rule not in factors:
        raise ValueError(f"lr_rule must be one of {', '.join(LR_RULES)}, got {rule!r}")
    return lr * factors[rule]


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def make_optimizer(name: str, params: Iterable[Any], lr: float, momentum: float = 0.9,
                   weight_decay: float = 0.0, nesterov: bool = False) -> torch.optim.Optimizer:
    """SGD (momentum, Nesterov), Adam, AdamW from torch; LARS and LAMB from pytorch_optimizer.

    SGD and LARS keep momentum buffers of gradients, not of steps (the LR multiplies the whole
    buffer), so a new LR applies to the momentum at once: Goyal et al.'s momentum correction
    is built in, and `ramp_steps` keeps that change gradual.
    """
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


def check_trial_config(config: Mapping[str, Any], source: str, workers: int = 1) -> None:
    """Check the keys this module owns (`batch_size`, `lr_reference_batch`, `batch_schedule`
    and its flat `batch_schedule.*` form, the removed keys) in a trial config or in an
    experiment's constants. Keys that are absent (searched, or left to defaults) are not
    checked; every global batch that is known must split over `workers` ranks.

    Raises:
        ConfigError: one line naming the key path, the bad value and a hint.
    """
    resolve(config, source, workers, default_batch=None)


@dataclass(frozen=True)
class BatchSchedule:
    """A global batch that doubles every `double_every` epochs from `start` up to `max` (or
    switches to `max` once, at epoch `switch_at`), with the LR moved by `lr_rule` against the
    `reference` batch and ramped over `ramp_steps` optimizer steps at each growth (and at the
    start, from `lr` at the reference batch). On top: a linear warm-up from 0 over the first
    `warmup_steps` steps, and a decay to 0 at the end of `epochs` (`poly`: (1 - progress) **
    `decay_power`, `cosine`), as the LARS and LAMB papers train. From each epoch in `grow_at`
    on, the batch is `grow_factor` times bigger again (RASDA's growth with the ranks, on top of
    the doublings). A pure function of (epoch, step), so a restored trial continues on the
    same rates."""

    start: int
    max: int
    double_every: int = 1
    lr_rule: str = "none"
    ramp_steps: int = 0
    reference: int = 0  # lr_reference_batch; 0: start
    grow_at: tuple[int, ...] = ()
    grow_factor: int = 2
    switch_at: int = 0  # 0: no switch (the doublings)
    warmup_steps: int = 0
    decay: str = "none"
    decay_power: float = 2.0
    epochs: int = 0  # the training's length, for the decay
    grow: str = "epochs"  # or "noise": doublings where `noise_growths` says
    noise_growths: tuple[int, ...] = ()  # epochs from which the noise scale doubled it

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, workers: int = 1,
                    default_batch: int = 256, default_epochs: int | None = None,
                    source: str = SOURCE) -> BatchSchedule:
        """The schedule a trial config asks for, checked as `check_trial_config` does
        (`epochs` from the config, else `default_epochs`: the trainable's default)."""
        return cls(**resolve(config, source, workers, default_batch, default_epochs))

    def global_batch(self, epoch: int) -> int:
        return self._doubled(epoch) * self.grow_factor ** self._growths(epoch)

    def grown(self, epoch: int) -> BatchSchedule:
        """This schedule with the batch doubled from `epoch` on (the noise scale's call;
        the trainable keeps `noise_growths` in its checkpoint)."""
        if self.grow != "noise" or self._doubled(epoch) >= self.max:
            return self
        return dataclasses.replace(self, noise_growths=(*self.noise_growths, epoch))

    def _doubled(self, epoch: int) -> int:
        if self.grow == "noise":
            doublings = sum(1 for at in self.noise_growths if at <= epoch)
            return min(self.max, self.start * 2 ** doublings)
        if self.switch_at:
            return self.max if epoch >= self.switch_at else self.start
        return min(self.max, self.start * 2 ** (epoch // self.double_every))

    def _growths(self, epoch: int) -> int:
        return sum(1 for at in self.grow_at if at <= epoch)

    def steps(self, epoch: int, items: int) -> int:
        """Optimizer steps of an epoch over `items` rows (the last partial batch dropped)."""
        return items // self.global_batch(epoch)

    def first_epoch(self, epoch: int) -> int:
        """The epoch at which this epoch's global batch began (cheap: called every step)."""
        if self.grow == "noise":
            changed = max((at for at in self.noise_growths if at <= epoch), default=0)
        elif self.switch_at:
            changed = self.switch_at if epoch >= self.switch_at and self.max > self.start else 0
        else:
            changed = (-(-self._doubled(epoch) // self.start) - 1).bit_length() * self.double_every
        return max([changed, *(at for at in self.grow_at if at <= epoch)])

    def lr(self, lr: float, epoch: int, step: int, items: int) -> float:
        """The rate at this step of this epoch, given `lr` at the reference batch."""
        rate = self._ramped(lr, epoch, step, items)
        if self.warmup_steps:
            rate *= min(1.0, (_steps_before(self, epoch, items) + step + 1) / self.warmup_steps)
        if self.decay != "none" and self.epochs:
            progress = min(1.0, (epoch + (step + 1) / self.steps(epoch, items)) / self.epochs)
            rate *= ((1.0 - progress) ** self.decay_power if self.decay == "poly"
                     else 0.5 * (1.0 + math.cos(math.pi * progress)))
        return rate

    def _ramped(self, lr: float, epoch: int, step: int, items: int) -> float:
        """The rule's rate for this epoch's batch, ramped in from the batch before it."""
        reference = self.reference or self.start
        batch = self.global_batch(epoch)
        target = lr_for_batch(lr, batch, reference, self.lr_rule)
        since = self.first_epoch(epoch)
        before = self.global_batch(since - 1) if since > 0 else reference
        done = (epoch - since) * (items // batch) + step + 1  # steps at this batch so far
        if self.ramp_steps <= 0 or before == batch or done >= self.ramp_steps:
            return target
        previous = lr_for_batch(lr, before, reference, self.lr_rule)
        return previous + (target - previous) * done / self.ramp_steps


@functools.lru_cache(maxsize=64)
def _steps_before(schedule: BatchSchedule, epoch: int, items: int) -> int:
    """Optimizer steps of the epochs before this one (the warm-up's clock), once a schedule
    and epoch: `lr` asks at every step."""
    return sum(schedule.steps(e, items) for e in range(epoch))
