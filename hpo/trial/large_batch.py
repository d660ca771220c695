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
      ramp_steps: 50           # steps over which the LR moves to each new rate (default 0)
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

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpo.errors import ConfigError

if TYPE_CHECKING:
    import torch

LR_RULES = ("none", "sqrt", "linear")
OPTIMIZERS = ("sgd", "adam", "adamw", "lars", "lamb")
SCHEDULE = "batch_schedule"
FIELDS = ("start", "max", "double_every", "lr_rule", "ramp_steps", "grow_at", "grow_factor")
SOURCE = "trial config"  # the source named in errors raised inside a trial

# Keys of earlier versions: each fails naming what replaced it (what changed, the hint).
REMOVED = {
    "lr_scaling": ("the learning rate no longer follows the rank count",
                   "`lr` is the rate at lr_reference_batch; batch_schedule.lr_rule "
                   "(none|sqrt|linear) scales it with the global batch"),
    "big_batch_size": ("the batch grows step by step now",
                       "use batch_schedule.max: the batch doubles every "
                       "batch_schedule.double_every epochs up to it"),
    "big_batch_from_epoch": ("the batch grows step by step now",
                             "use batch_schedule.double_every (epochs between doublings)"),
    "big_batch_lr_scaling": ("renamed", "use batch_schedule.lr_rule (none|sqrt|linear)"),
    "big_batch_warmup_epochs": ("renamed", "use batch_schedule.ramp_steps (optimizer steps "
                                           "over which the LR moves to each new rate)"),
    "warmup_epochs": ("the warm-up is the ramp from the reference rate now",
                      "set lr_reference_batch below the first global batch, with "
                      "batch_schedule.lr_rule and batch_schedule.ramp_steps"),
}


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
    _resolve(config, source, workers, default_batch=None)


@dataclass(frozen=True)
class BatchSchedule:
    """A global batch that doubles every `double_every` epochs from `start` up to `max`, with
    the LR moved by `lr_rule` against the `reference` batch and ramped over `ramp_steps`
    optimizer steps at each growth (and at the start, from `lr` at the reference batch). From
    each epoch in `grow_at` on, the batch is `grow_factor` times bigger again (RASDA's growth
    with the ranks, on top of the doublings). A pure function of (epoch, step), so a restored
    trial continues on the same rates."""

    start: int
    max: int
    double_every: int = 1
    lr_rule: str = "none"
    ramp_steps: int = 0
    reference: int = 0  # lr_reference_batch; 0: start
    grow_at: tuple[int, ...] = ()
    grow_factor: int = 2

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, workers: int = 1,
                    default_batch: int = 256, source: str = SOURCE) -> BatchSchedule:
        """The schedule a trial config asks for, checked as `check_trial_config` does."""
        fields = _resolve(config, source, workers, default_batch)
        return cls(fields["start"], fields["max"], fields["double_every"], fields["lr_rule"],
                   fields["ramp_steps"], fields["reference"], fields["grow_at"],
                   fields["grow_factor"])

    def global_batch(self, epoch: int) -> int:
        return self._doubled(epoch) * self.grow_factor ** self._growths(epoch)

    def _doubled(self, epoch: int) -> int:
        return min(self.max, self.start * 2 ** (epoch // self.double_every))

    def _growths(self, epoch: int) -> int:
        return sum(1 for at in self.grow_at if at <= epoch)

    def steps(self, epoch: int, items: int) -> int:
        """Optimizer steps of an epoch over `items` rows (the last partial batch dropped)."""
        return items // self.global_batch(epoch)

    def first_epoch(self, epoch: int) -> int:
        """The epoch at which this epoch's global batch began (cheap: called every step)."""
        doublings = (-(-self._doubled(epoch) // self.start) - 1).bit_length()
        grown = [at for at in self.grow_at if at <= epoch]
        return max([doublings * self.double_every, *grown])

    def lr(self, lr: float, epoch: int, step: int, items: int) -> float:
        """The rate at this step of this epoch, given `lr` at the reference batch."""
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


def _resolve(config: Mapping[str, Any], source: str, workers: int,
             default_batch: int | None) -> dict[str, Any]:
    """Every schedule field, checked; with default_batch None an unknown start stays None."""
    for key, (what, hint) in REMOVED.items():
        if key in config:
            raise ConfigError(source, key, f"removed ({key}: {config[key]!r}): {what}", hint)
    given = {name: _field(name, value, source)
             for name, value in _schedule_fields(config, source).items()}
    batch_size = _whole("batch_size", config.get("batch_size"), source, 1)
    if batch_size is not None and given.get("start") is not None:
        raise ConfigError(source, f"{SCHEDULE}.start", "sets the first global batch, as "
                          "batch_size does", "give one of batch_size and batch_schedule.start")
    start_key = f"{SCHEDULE}.start" if given.get("start") is not None else "batch_size"
    start = given.get("start") or batch_size or default_batch
    top = given.get("max") or start
    if start is not None and top is not None and top < start:
        raise ConfigError(source, f"{SCHEDULE}.max", f"must be >= the first global batch "
                          f"(got {top} < {start})", "raise batch_schedule.max or lower the start")
    for key, batch in ((start_key, start), (f"{SCHEDULE}.max", given.get("max"))):
        # the doublings of a start that splits split too; a `max` cap may not
        if batch is not None and batch % workers:
            raise ConfigError(source, key, f"global batch {batch} does not split over "
                              f"distributed.workers={workers} ranks",
                              f"use a multiple of {workers}, or change distributed.workers")
    return {"start": start, "max": top, "double_every": given.get("double_every") or 1,
            "lr_rule": given.get("lr_rule") or "none", "ramp_steps": given.get("ramp_steps") or 0,
            "grow_at": given.get("grow_at") or (), "grow_factor": given.get("grow_factor") or 2,
            "reference": _whole("lr_reference_batch", config.get("lr_reference_batch"),
                                source, 1) or 0}


def _schedule_fields(config: Mapping[str, Any], source: str) -> dict[str, Any]:
    nested = config.get(SCHEDULE) or {}
    if not isinstance(nested, Mapping):
        raise ConfigError(source, SCHEDULE, f"expected a mapping, got {nested!r}",
                          f"write its fields as key: value pairs ({', '.join(FIELDS)})")
    flat = {key[len(SCHEDULE) + 1:]: value for key, value in config.items()
            if isinstance(key, str) and key.startswith(f"{SCHEDULE}.")}
    fields = {**nested, **flat}  # a flat (searched) value wins over the constants' one
    for name in fields:
        if name not in FIELDS:
            raise ConfigError(source, f"{SCHEDULE}.{name}", f"unknown key '{name}'",
                              _did_you_mean(str(name), FIELDS))
    return fields


def _field(name: str, value: Any, source: str) -> Any:
    path = f"{SCHEDULE}.{name}"
    if name == "grow_at":
        return _epochs(path, value, source)
    if name != "lr_rule":
        least = {"ramp_steps": 0, "grow_factor": 2}.get(name, 1)
        return _whole(path, value, source, least)
    if value not in LR_RULES:
        raise ConfigError(source, path, f"unknown rule {value!r}",
                          _did_you_mean(str(value), LR_RULES))
    return value


def _epochs(path: str, value: Any, source: str) -> tuple[int, ...]:
    """Growth epochs: whole numbers >= 1, rising."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(source, path, f"expected a list of epochs, got {value!r}",
                          "e.g. [1, 2] (the batch grows before epochs 1 and 2)")
    epochs = tuple(_whole(f"{path}[{i}]", at, source, 1) or 0 for i, at in enumerate(value))
    if list(epochs) != sorted(set(epochs)):
        raise ConfigError(source, path, f"epochs must rise (got {list(value)})",
                          "list each growth epoch once, in order")
    return epochs


def _whole(path: str, value: Any, source: str, least: int) -> int | None:
    """A whole number >= least, or None when absent (a float such as 64.0 from a quniform
    search counts as whole)."""
    if value is None:
        return None
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if number is None or not float(number).is_integer() or number < least:
        kind = {0: "a whole number >= 0", 1: "a positive whole number"}.get(
            least, f"a whole number >= {least}")
        raise ConfigError(source, path, f"must be {kind} (got {value!r})",
                          {0: "e.g. 0 or 50", 1: "e.g. 256"}.get(least, f"e.g. {least}"))
    return int(number)


def _did_you_mean(word: str, choices: tuple[str, ...]) -> str:
    from hpo.spec._validation import did_you_mean  # the spec's own wording; error path only

    return did_you_mean(word, list(choices))
