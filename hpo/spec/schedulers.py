"""The scheduler section: one small model per YAML `scheduler.type`, validated here and built
into Ray's scheduler by the driver (hpo.driver.schedulers.from_spec).

Options keep Ray's names; defaults use `training_iteration` as the time axis everywhere so
that `max_t`, `grace_period` and `perturbation_interval` all count epochs (reports).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from hpo.spec._validation import FieldProblem, Strict
from hpo.spec.distributions import Distribution

TimeAttr = Literal["training_iteration", "time_total_s"]


class _Scheduler(Strict):
    def decision_points(self) -> list[int] | None:
        """The training iterations at which this scheduler may stop a trial, where its every
        decision is STOP or CONTINUE; None where it may pause one, or decides on other rows
        (hpo.trial.batched batches a trial's results between these points)."""
        return None


def _rung_count(ratio: float, reduction_factor: float, bracket: int) -> int:
    """How many rungs Ray's ASHA bracket `bracket` has (async_hyperband._Bracket)."""
    return int(math.log(ratio) / math.log(reduction_factor) - bracket + 1)


def _check_grace(grace_period: int, max_t: int) -> None:
    if grace_period > max_t:
        raise FieldProblem("grace_period", f"must be <= max_t (got {grace_period} > {max_t})",
                           "lower grace_period or raise max_t")


class Fifo(_Scheduler):
    """Run every trial to its stop condition (no early stopping)."""

    type: Literal["fifo"]

    def decision_points(self) -> list[int] | None:
        """FIFO decides nothing by itself (see _Scheduler.decision_points)."""
        return []


class Asha(_Scheduler):
    """Asynchronous successive halving (ASHA)."""

    type: Literal["asha"]
    time_attr: TimeAttr = "training_iteration"
    max_t: PositiveInt = 100
    grace_period: PositiveInt = 1
    reduction_factor: Annotated[float, Field(gt=1)] = 4
    brackets: PositiveInt = 1
    stop_last_trials: bool = True

    @model_validator(mode="after")
    def _grace_within_max_t(self) -> Asha:
        _check_grace(self.grace_period, self.max_t)
        return self

    def decision_points(self) -> list[int] | None:
        """Every bracket's rungs (as Ray's _Bracket places them) and max_t, as iterations."""
        if self.time_attr != "training_iteration":
            return None
        rungs = {math.ceil(self.grace_period * self.reduction_factor ** (k + s))
                 for s in range(self.brackets)
                 for k in range(_rung_count(self.max_t / self.grace_period,
                                            self.reduction_factor, s))}
        return sorted(rungs | {self.max_t})


class Rasda(_Scheduler):
    """ASHA whose promoted trials grow: at each rung passed, a data-parallel trial resumes
    from its checkpoint on `growth_factor` times its ranks (up to distributed.max_workers).
    `batch: fixed` keeps the global batch (growth only speeds the trial up); `batch: grows`
    multiplies it with the ranks (RASDA's implicit growth, as batch_schedule.grow_at)."""

    type: Literal["rasda"]
    max_t: PositiveInt = 100
    grace_period: PositiveInt = 1
    reduction_factor: Annotated[int, Field(ge=2)] = 2
    growth_factor: Annotated[int, Field(ge=2)] = 2
    batch: Literal["fixed", "grows"] = "fixed"

    @model_validator(mode="after")
    def _grace_within_max_t(self) -> Rasda:
        _check_grace(self.grace_period, self.max_t)
        return self

    def milestones(self) -> list[int]:
        """The rungs' iterations, as Ray's ASHA places them (one bracket: its _Bracket)."""
        count = _rung_count(self.max_t / self.grace_period, self.reduction_factor, 0)
        return [self.grace_period * self.reduction_factor ** k for k in range(count)]


class HyperBand(_Scheduler):
    """Synchronous HyperBand; every bracket waits for its slowest trial."""

    type: Literal["hyperband"]
    time_attr: TimeAttr = "training_iteration"
    max_t: PositiveInt = 81
    reduction_factor: Annotated[float, Field(gt=1)] = 3
    stop_last_trials: bool = True


class Median(_Scheduler):
    """Median stopping rule: stop trials worse than the median of the others so far."""

    type: Literal["median"]
    time_attr: TimeAttr = "training_iteration"
    grace_period: Annotated[float, Field(ge=0)] = 1
    min_samples_required: PositiveInt = 3
    min_time_slice: Annotated[float, Field(ge=0)] = 0
    hard_stop: bool = True


def _check_mutations(mutations: dict[str, Distribution]) -> None:
    if not mutations:
        raise FieldProblem("hyperparam_mutations", "needs at least one hyperparameter",
                           "e.g. hyperparam_mutations: {lr: {loguniform: [1.0e-4, 1.0e-1]}}")
    for name, dist in mutations.items():
        if dist.kind == "grid":
            raise FieldProblem(f"hyperparam_mutations.{name}", "grid cannot be mutated",
                               "use choice")


class Pbt(_Scheduler):
    """Population based training: clone the best trials' checkpoints and perturb them."""

    type: Literal["pbt"]
    time_attr: TimeAttr = "training_iteration"
    perturbation_interval: PositiveFloat = 4
    burn_in_period: Annotated[float, Field(ge=0)] = 0
    hyperparam_mutations: dict[str, Distribution]
    quantile_fraction: Annotated[float, Field(ge=0, le=0.5)] = 0.25
    resample_probability: Annotated[float, Field(ge=0, le=1)] = 0.25
    perturbation_factors: tuple[PositiveFloat, PositiveFloat] = (1.2, 0.8)
    synch: bool = False

    @model_validator(mode="after")
    def _mutations_usable(self) -> Pbt:
        _check_mutations(self.hyperparam_mutations)
        return self


class Pb2(_Scheduler):
    """PB2: PBT whose explore step is a GP bandit over continuous bounds."""

    type: Literal["pb2"]
    time_attr: TimeAttr = "training_iteration"
    perturbation_interval: PositiveFloat = 4
    hyperparam_mutations: dict[str, Distribution]
    quantile_fraction: Annotated[float, Field(ge=0, le=0.5)] = 0.25
    synch: bool = False

    @model_validator(mode="after")
    def _bounds_only(self) -> Pb2:
        _check_mutations(self.hyperparam_mutations)
        for name, dist in self.hyperparam_mutations.items():
            if dist.bounds is None or dist.kind.startswith("q"):
                raise FieldProblem(f"hyperparam_mutations.{name}",
                                   f"PB2 needs continuous bounds, got {dist.kind}",
                                   "use {uniform: [low, high]} or {loguniform: [low, high]}")
        return self


Scheduler = Annotated[Fifo | Asha | Rasda | HyperBand | Median | Pbt | Pb2,
                     Field(discriminator="type")]
SCHEDULER_TYPES = ("fifo", "asha", "rasda", "hyperband", "median", "pbt", "pb2")
