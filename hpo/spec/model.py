"""The validated, immutable experiment spec: what one YAML file asks for."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from hpo.errors import ConfigError
from hpo.spec._validation import FieldProblem, Strict, unwritable
from hpo.spec.distributions import Distribution
from hpo.spec.growth import check_growth
from hpo.spec.objectives import check_metric, check_mode, check_objectives, pairs
from hpo.spec.schedulers import Fifo, Pb2, Pbt, Scheduler
from hpo.spec.searchers import Random, Searcher
from hpo.spec.slurm import SlurmSettings
from hpo.spec.storage import check_storage
from hpo.spec.tracking import Tracking

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_TRAINABLE = re.compile(r"^[^:\s]+:[A-Za-z_][A-Za-z0-9_]*$")
#: What hpo-spec.yaml says for a trainable passed from Python (it cannot hold the object).
PYTHON_TRAINABLE = "<python>"


def target(trainable: Any) -> Any:
    """What a partial or a wrapper (hpo.with_parameters, functools.wraps) finally calls."""
    while True:
        inner = (trainable.func if isinstance(trainable, functools.partial)
                 else getattr(trainable, "__wrapped__", None))
        if inner is None or inner is trainable:
            return trainable
        trainable = inner


def is_class_trainable(trainable: Any) -> bool:
    """A Ray Tune class trainable (a tune.Trainable subclass), told without importing Ray."""
    found = target(trainable)
    return isinstance(found, type) and any(
        base.__name__ == "Trainable" and base.__module__.startswith("ray.tune.")
        for base in found.__mro__)


def _whole_gpus_above_one(value: float) -> float:
    # Ray can give a fraction of one GPU (trials packed on it) or whole GPUs, never 1.5.
    if value > 1 and not float(value).is_integer():
        raise FieldProblem("", f"a fraction above one GPU cannot be given (got {value:g})",
                           "use a fraction below 1 to pack trials on a GPU, or whole GPUs")
    return value


class Resources(Strict):
    cpus_per_trial: PositiveFloat = 1
    gpus_per_trial: NonNegativeFloat = 0  # below 1: one-process trials share a GPU

    _gpus = field_validator("gpus_per_trial")(_whole_gpus_above_one)


class CheckpointPolicy(Strict):
    frequency: NonNegativeInt = 1  # keep every Nth report's checkpoint; 0: never
    keep: PositiveInt | None = 2  # newest checkpoints kept per trial; null: all (PBT default)
    # Also keep each trial's best-scoring checkpoint, beside the newest `keep`, in
    # <trial>/best_checkpoint: best by the study's metric and mode (with several objectives,
    # the first one, which also orders `hpo results`).
    keep_best: bool = False

    @model_validator(mode="after")
    def _best_needs_checkpoints(self) -> CheckpointPolicy:
        if self.keep_best and self.frequency == 0:
            raise FieldProblem("keep_best", "needs checkpoints, but frequency is 0 (never)",
                               "set frequency: 1 (or N), or drop keep_best")
        return self


class FailurePolicy(Strict):
    max_failures: Annotated[int, Field(ge=-1)] = 0  # retries per trial; -1: unlimited


class Distributed(Strict):
    """Data-parallel trials: each trial runs the trainable on `workers` ranks."""

    backend: Literal["horovod", "ddp"]
    workers: PositiveInt
    max_workers: PositiveInt | None = None  # the most ranks the rasda scheduler grows a trial to
    cpus_per_worker: PositiveFloat = 1
    gpus_per_worker: NonNegativeFloat = 0
    timeout_s: PositiveFloat = 1800  # rank 0 silent this long (a hung rank): the trial fails
    env: dict[str, str] = Field(default_factory=dict)  # e.g. HOROVOD_CYCLE_TIME, NCCL_*

    @field_validator("gpus_per_worker")
    @classmethod
    def _own_gpus(cls, value: float) -> float:
        # NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), 25 s into the run.
        if 0 < value < 1:
            raise FieldProblem("", f"ranks would share a GPU (got {value:g})",
                               "every rank needs a whole GPU: use 1 (or 0 for CPU ranks); "
                               "to pack trials on a GPU, use one-process trials with "
                               "resources.gpus_per_trial below 1")
        return _whole_gpus_above_one(value)


class Spec(Strict):
    """One experiment; see search_spaces/ for examples of every key."""

    name: str
    trainable: str | Callable[..., Any]  # text to import, or a function/class from Python
    # A list of metrics (and one mode each): a Pareto front, searched by Optuna (objectives).
    metric: str | list[str]
    mode: Literal["max", "min"] | list[Literal["max", "min"]]
    num_samples: PositiveInt = 1
    max_concurrent: PositiveInt | None = None
    search_space: dict[str, Distribution] = Field(default_factory=dict)
    constants: dict[str, Any] = Field(default_factory=dict)
    scheduler: Scheduler = Field(default_factory=lambda: Fifo(type="fifo"))
    search: Searcher = Field(default_factory=lambda: Random(type="random"))
    resources: Resources = Field(default_factory=Resources)
    distributed: Distributed | None = None
    stop: dict[str, float] = Field(default_factory=dict)
    time_budget_s: PositiveFloat | None = None
    checkpoint: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    failure: FailurePolicy = Field(default_factory=FailurePolicy)
    storage: str = "./hpo-results"
    reuse_actors: bool = True  # one worker process serves many trials (no re-import per trial)
    optuna_storage: str | None = None  # mirror trials into an Optuna study: journal file or URL
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)  # `hpo slurm` only
    tracking: Tracking = Field(default_factory=Tracking)  # MLflow / W&B runs per trial

    @model_validator(mode="before")
    @classmethod
    def _population_keeps_checkpoints(cls, data: Any) -> Any:
        # PBT/PB2 clone checkpoints that a trial recorded many saves ago (paused trials take
        # turns): deleting old ones breaks exploits, so they keep all unless told otherwise.
        if not isinstance(data, dict) or not isinstance(data.get("scheduler"), dict):
            return data
        checkpoint = data.get("checkpoint", {})
        population = data["scheduler"].get("type") in ("pbt", "pb2")
        if population and isinstance(checkpoint, dict) and "keep" not in checkpoint:
            data = {**data, "checkpoint": {**checkpoint, "keep": None}}
        return data

    @field_validator("name")
    @classmethod
    def _folder_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise FieldProblem("", f"not a usable folder name: {value!r}",
                               "use letters, digits, '.', '_' and '-'")
        return value

    _metric = field_validator("metric", mode="before")(check_metric)
    _mode = field_validator("mode", mode="before")(check_mode)

    @model_validator(mode="after")
    def _several_objectives(self) -> Spec:
        check_objectives(self.metric, self.mode, self.search.type, self.scheduler.type)
        return self

    @property
    def objectives(self) -> list[tuple[str, str]]:
        """(metric, mode) of each objective: one, or several for a Pareto front. Where one
        is meant, `metric` and `mode` are plain text."""
        return pairs(self.metric, self.mode)

    @field_validator("trainable", mode="before")
    @classmethod
    def _import_path(cls, value: Any) -> Any:
        if isinstance(value, str) and _TRAINABLE.match(value):
            return value
        if isinstance(value, type) and not is_class_trainable(value):
            raise FieldProblem("", f"class {value.__name__} is not a ray.tune.Trainable",
                               "pass a function f(config), or subclass ray.tune.Trainable")
        if callable(value) and not isinstance(value, str):
            return value  # a function, closure, partial or Trainable class from Python
        if isinstance(value, str):
            raise FieldProblem("", f"expected 'package.module:function' or 'file.py:function', "
                               f"got {value!r}", "e.g. trainables.digits:train")
        raise FieldProblem("", "expected 'package.module:function', 'file.py:function', or a "
                           "function or Ray Tune Trainable class (got "
                           f"{type(value).__name__} {str(value)[:40]!r})",
                           "e.g. trainables.digits:train, or hpo.run(spec, trainable=train)")

    @field_validator("stop", mode="before")
    @classmethod
    def _numbers_to_stop_at(cls, value: Any) -> Any:
        for key, limit in (value.items() if isinstance(value, dict) else ()):
            # NaN compares false (a run that never stops); a bool would become 0 or 1
            if isinstance(limit, bool) or (isinstance(limit, float) and limit != limit):
                raise FieldProblem(key, f"expected a number, got {limit!r}",
                                   "e.g. stop: {training_iteration: 20}")
        return value

    @field_validator("optuna_storage")
    @classmethod
    def _optuna_storage(cls, value: str | None) -> str | None:
        if value is not None:
            check_storage(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Spec:
        for key, value in self.constants.items():
            if key in self.search_space:
                raise FieldProblem(f"constants.{key}", "is also in search_space",
                                   "keep each key in one of the two")
            if kind := unwritable(value):
                scalar = kind.startswith("numpy.") and kind != "numpy.ndarray"
                raise FieldProblem(f"constants.{key}", f"a {kind} cannot go into the "
                                   "experiment's YAML", "make it a plain number (.item())"
                                   if scalar else "pass arrays, datasets and models with "
                                   "hpo.run(..., parameters=...): they reach every trial by "
                                   "reference")
        try:
            self.search.check_space(self.search_space)
        except FieldProblem as problem:
            raise FieldProblem(f"search_space.{problem.field}", problem.message,
                               problem.hint) from None
        try:
            self.search.check_points(self.search_space, self.num_samples)
        except FieldProblem as problem:
            raise FieldProblem(f"search.{problem.field}", problem.message,
                               problem.hint) from None
        self._check_population_checkpoints()
        self._check_node_gpus()
        check_growth(self.scheduler, self.distributed, self.checkpoint.frequency, self.slurm)
        if self.distributed and is_class_trainable(self.trainable):
            raise FieldProblem("distributed", "cannot run a Ray Tune class trainable "
                               f"({target(self.trainable).__name__}) on ranks",
                               "a class trainable runs as a one-process trial: drop "
                               "distributed, or write a function that calls hpo.report")
        if self.distributed and self.resources.model_fields_set:
            raise FieldProblem("resources", "cannot be combined with distributed",
                               "a data-parallel trial takes distributed.workers x "
                               "cpus_per_worker/gpus_per_worker; drop resources")
        return self

    def _check_node_gpus(self) -> None:
        """A rank or a trial runs on one node: it cannot have more GPUs than the job asks per
        node (known when `slurm.gpus_per_node` is given; Ray's nodes are checked when it
        starts)."""
        per_node = self.slurm.gpus_per_node
        if not per_node:
            return
        if self.distributed:
            path, need = "distributed.gpus_per_worker", self.distributed.gpus_per_worker
        else:
            path, need = "resources.gpus_per_trial", self.resources.gpus_per_trial
        if need > per_node:
            raise FieldProblem(path, f"one {'rank' if self.distributed else 'trial'} asks for "
                               f"{need:g} GPUs but a node has {per_node} (slurm.gpus_per_node)",
                               "a rank or one-process trial runs on one node: ask for at "
                               "most a node's GPUs, and use more ranks (distributed.workers)")

    def with_slurm(self, settings: SlurmSettings, source: str) -> Spec:
        """This spec with its `slurm:` settings merged with a site profile and the command
        line, checked again for what depends on them."""
        spec = self.model_copy(update={"slurm": settings})
        try:
            spec._check_node_gpus()
            check_growth(spec.scheduler, spec.distributed, spec.checkpoint.frequency, settings)
            if settings.gpu_vendor == "amd" and spec.distributed and \
                    spec.distributed.backend == "horovod" and spec.distributed.gpus_per_worker:
                raise FieldProblem("distributed.backend", "horovod cannot run on these AMD GPUs "
                                   "(it does not build on ROCm 6; slurm.gpu_vendor: amd)",
                                   "use distributed: {backend: ddp}: the same training")
        except FieldProblem as problem:
            raise ConfigError(source, problem.field, problem.message, problem.hint) from None
        return spec

    def _check_population_checkpoints(self) -> None:
        scheduler, every = self.scheduler, self.checkpoint.frequency
        if not isinstance(scheduler, (Pbt, Pb2)):
            return
        # Perturbations counted in seconds cannot line up with report counts: only check those
        # counted in iterations.
        by_iteration = scheduler.time_attr == "training_iteration"
        if every == 0 or (by_iteration and scheduler.perturbation_interval % every):
            raise FieldProblem("checkpoint.frequency",
                               f"must divide scheduler.perturbation_interval (got {every}, "
                               f"interval {scheduler.perturbation_interval:g})",
                               "PBT clones checkpoints at every perturbation; use frequency: 1")
        keep = self.checkpoint.keep
        if keep is not None and keep <= 2:
            raise FieldProblem("checkpoint.keep", f"too few for {scheduler.type} (got {keep})",
                               "PBT clones other trials' older checkpoints; omit keep (keeps "
                               "all) or keep more than 2")
