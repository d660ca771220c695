"""The keys of hpo's large-batch recipe, checked: `batch_size`, `lr_reference_batch`,
`batch_schedule` and its flat `batch_schedule.*` form (searched keys), the removed keys.
Every bad value fails in one line naming its key path, the value and a hint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpo.errors import ConfigError

LR_RULES = ("none", "sqrt", "linear")
DECAYS = ("none", "poly", "cosine")
GROWTHS = ("epochs", "noise")  # by double_every/switch_at; when B_noise passes the batch
SCHEDULE = "batch_schedule"
FIELDS = ("start", "max", "grow", "double_every", "switch_at", "lr_rule", "ramp_steps",
          "warmup_steps", "decay", "decay_power", "grow_at", "grow_factor")
_CHOICES = {"lr_rule": LR_RULES, "decay": DECAYS, "grow": GROWTHS}
_LEAST = {"ramp_steps": 0, "warmup_steps": 0, "grow_factor": 2}  # whole numbers; others >= 1

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


def resolve(config: Mapping[str, Any], source: str, workers: int,
            default_batch: int | None, default_epochs: int | None = None) -> dict[str, Any]:
    """Every schedule field, checked; with default_batch None (a check before the trial,
    where searched keys are unknown) an unknown start or epoch count stays None."""
    for key, (what, hint) in REMOVED.items():
        if key in config:
            raise ConfigError(source, key, f"removed ({key}: {config[key]!r}): {what}", hint)
    given = {name: _field(name, value, source)
             for name, value in schedule_fields(config, source).items()}
    start, top = _batches(config, given, source, workers, default_batch)
    _check_growth(given, source, workers)
    decay = given.get("decay") or "none"
    epochs = None  # the training's length matters to the decay alone
    if decay != "none":
        epochs = _whole("epochs", config.get("epochs"), source, 1) or default_epochs
        if epochs is None and default_batch is not None:  # in the trial: it must be known
            raise ConfigError(source, f"{SCHEDULE}.decay", f"{decay} decays the rate to the "
                              "end of training, whose length is unknown",
                              "set the trial's `epochs`")
    return {"start": start, "max": top, "grow": given.get("grow") or "epochs",
            "double_every": given.get("double_every") or 1,
            "switch_at": given.get("switch_at") or 0,
            "lr_rule": given.get("lr_rule") or "none", "ramp_steps": given.get("ramp_steps") or 0,
            "warmup_steps": given.get("warmup_steps") or 0, "decay": decay,
            "decay_power": given.get("decay_power") or 2.0, "epochs": epochs or 0,
            "grow_at": given.get("grow_at") or (), "grow_factor": given.get("grow_factor") or 2,
            "reference": _whole("lr_reference_batch", config.get("lr_reference_batch"),
                                source, 1) or 0}


def _check_growth(given: dict[str, Any], source: str, workers: int) -> None:
    """One way for the batch to grow: doublings, one switch, or the noise scale's call."""
    if given.get("switch_at") is not None and given.get("double_every") is not None:
        raise ConfigError(source, f"{SCHEDULE}.switch_at", "switches the batch once, to max; "
                          "double_every doubles it repeatedly",
                          "give one of batch_schedule.switch_at and batch_schedule.double_every")
    if given.get("grow") != "noise":
        return
    for key in ("double_every", "switch_at"):
        if given.get(key) is not None:
            raise ConfigError(source, f"{SCHEDULE}.{key}", "is an epoch rule, and grow: noise "
                              "lets the measured noise scale decide", f"drop {SCHEDULE}.{key}")
    if workers < 2:
        raise ConfigError(source, f"{SCHEDULE}.grow", "noise is measured from each rank's own "
                          "gradient beside their mean, which one process does not have",
                          "run the trial on distributed.workers >= 2 (backend: ddp)")


def _batches(config: Mapping[str, Any], given: dict[str, Any], source: str, workers: int,
             default_batch: int | None) -> tuple[int | None, int | None]:
    """The first and the largest global batch, each splitting over `workers` ranks."""
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
    return start, top


def schedule_fields(config: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The `batch_schedule` fields given, nested or flat (a flat, searched one wins); an
    unknown field fails in one line."""
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
    if name in _CHOICES:
        if value not in _CHOICES[name]:
            raise ConfigError(source, path, f"unknown value {value!r}",
                              _did_you_mean(str(value), _CHOICES[name]))
        return value
    if name == "decay_power":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(source, path, f"must be a number > 0 (got {value!r})",
                              "e.g. 2 (You et al.'s polynomial decay) or 1 (linear)")
        return float(value)
    return _whole(path, value, source, _LEAST.get(name, 1))


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
