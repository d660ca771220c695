"""Spec -> Ray Tune, in one place: the trainable with its resources, the param space, the
Tuner with its scheduler, searcher, callbacks and storage. Each searcher and distribution turns
itself into Ray's object (`build()`, `to_tune()`), the scheduler is built by
hpo.driver.schedulers.from_spec; this module composes them."""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpo.driver.guards import walltime
from hpo.driver.run import preflight
from hpo.driver.run.trainable import resets_config, resolve
from hpo.driver.schedulers.from_spec import scheduler
from hpo.spec.distributions import Distribution
from hpo.spec.model import Spec, is_class_trainable
from hpo.spec.searchers import Grid, Optuna
from hpo.trial.batched import MAX_ROWS, batching
from hpo.trial.one_process import call_with_objects, class_with_objects, with_session

_BUFFER_ENV = "TUNE_RESULT_BUFFER_LENGTH"


def user_trainable(spec: Spec, source: str,
                   parameters: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """The user's function or class and its objects (imported while Ray starts: no Ray yet)."""
    func, objects = resolve(spec.trainable, source, parameters)
    preflight.with_trainable(spec, source, func)
    return func, objects


def import_ahead() -> None:
    """Import what the Tuner needs (Tune, the trial loggers with tensorboardX, the seedable
    schedulers), while `ray.init` waits for Ray's processes."""
    import hpo.driver.plugins.tb_events  # noqa: F401
    import hpo.driver.plugins.trial_logs  # noqa: F401
    import hpo.driver.schedulers.seedable  # noqa: F401


def trainable(spec: Spec, func: Any, holder: str | None = None) -> Any:
    """The user's function or class as a Tune trainable that asks for its trial's resources;
    `holder` names the run's objects in Ray's store (hpo.trial.one_process.objects_in_store)."""
    from ray import tune

    name = getattr(func, "__name__", "trainable")
    if is_class_trainable(func):
        need = {"cpu": spec.resources.cpus_per_trial, "gpu": spec.resources.gpus_per_trial}
        return tune.with_resources(class_with_objects(func, holder) if holder else func, need)
    if holder:  # bound by name, never by value: a rank gets the refs, not a pickled copy
        func = functools.partial(call_with_objects, func, holder)
    metrics = tuple(metric for metric, _ in spec.objectives)  # hpo.report checks them
    if spec.distributed:
        from hpo.trial.ranks.trial import distributed_trainable

        wrapped = distributed_trainable(func, spec.distributed, spec.checkpoint.frequency,
                                        metrics)
    else:
        need = {"cpu": spec.resources.cpus_per_trial, "gpu": spec.resources.gpus_per_trial}
        wrapped = tune.with_resources(with_session(func, spec.checkpoint.frequency,
                                                   need["cpu"], metrics), need)
    wrapped.__name__ = name  # Tune names trials after it (a partial has no name of its own)
    ends = result_batch_ends(spec)  # with_resources gave back the function itself
    if ends is None:
        return wrapped
    return batching(wrapped, ends, trains_on=set(spec.stop) <= {"training_iteration"})


def result_batch_ends(spec: Spec) -> list[int] | None:
    """The iterations at which a function trial's batch of results must end (its scheduler's
    decision points and the stop's training_iteration); None: each result alone, as the
    scheduler may pause a trial or decide on any row (hpo.trial.batched)."""
    points = spec.scheduler.decision_points()
    if points is None:
        return None
    stop_at = spec.stop.get("training_iteration")
    return sorted({*points, math.ceil(stop_at)}) if stop_at is not None else points


@contextlib.contextmanager
def result_batches(spec: Spec) -> Iterator[None]:
    """Let Tune ask trials for batches of results (read when Tune's controller starts) where
    the spec's trainable batches them."""
    if result_batch_ends(spec) is None:
        yield
        return
    old = os.environ.get(_BUFFER_ENV)
    os.environ[_BUFFER_ENV] = str(MAX_ROWS)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(_BUFFER_ENV, None)
        else:
            os.environ[_BUFFER_ENV] = old


def param_space(spec: Spec) -> dict[str, Any]:
    """Ray Tune's param_space: the domains of search_space plus the constants."""
    as_grid = isinstance(spec.search, Grid)
    space = {
        name: Distribution(kind="grid", args=dist.args).to_tune()
        if as_grid and dist.kind == "choice" else dist.to_tune()
        for name, dist in spec.search_space.items()
    }
    return {**spec.constants, **space}


def _scheduler_state(chosen: Any) -> list[Any]:
    """The callback that carries the scheduler's state across a stop (where the gate lets)."""
    from hpo.ray_adapters import gate

    if not gate.is_on("scheduler-state"):
        return []
    from hpo.ray_adapters.schedulers.state import SchedulerState

    return [SchedulerState(chosen)]


def tracking_callbacks(spec: Spec, exp_dir: Path) -> list[Any]:
    """MLflow / W&B loggers of spec.tracking (their modules import the packages: only then)."""
    if not (spec.tracking.mlflow or spec.tracking.wandb):
        return []
    from hpo.driver.plugins.tracking import callbacks

    return callbacks(spec, exp_dir)


def best_checkpoint_callbacks(spec: Spec) -> list[Any]:
    """checkpoint.keep_best: each trial's best checkpoint, kept by hpo beside Tune's newest
    `keep` (Tune keeps either the newest or the best-scoring, not both); by the first
    objective."""
    if not spec.checkpoint.keep_best:
        return []
    from hpo.driver.plugins.best_checkpoint import BestCheckpoint

    metric, mode = spec.objectives[0]
    return [BestCheckpoint(metric, mode)]


def searcher(spec: Spec, evaluated: list[tuple[dict[str, Any], list[float]]] | None = None
             ) -> Any:
    """Ray's search algorithm, given every objective; `evaluated`: an earlier experiment's
    (config, objective values) for Optuna to learn from before its first suggestion
    (search.warm_start)."""
    if not evaluated:
        return spec.search.build(spec.metric, spec.mode)
    from hpo.driver.plugins.warm_start import WarmOptunaSearch

    assert isinstance(spec.search, Optuna)  # the spec allows warm_start with Optuna only
    return spec.search.build(spec.metric, spec.mode, searcher_class=WarmOptunaSearch,
                             evaluated=evaluated)


def tuner(spec: Spec, trainable: Any, exp_dir: Path, extra_callbacks: list[Any],
          evaluated: list[tuple[dict[str, Any], list[float]]] | None = None) -> Any:
    """The Tuner of a fresh run (resume uses Tuner.restore with the same trainable);
    `extra_callbacks`: the Optuna mirror's and the user's own Tune callbacks; `evaluated`:
    see `searcher`."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from hpo.driver.guards.stops import HeldStop
    from hpo.driver.plugins.ended_copy import EndedTrialsCopied
    from hpo.driver.plugins.progress import LiveProgress
    from hpo.driver.plugins.stop_keys import StopKeysReported
    from hpo.driver.plugins.trial_logs import trial_loggers
    from hpo.spec.plan import trial_count

    a_class = isinstance(trainable, type)
    # A class without reset_config cannot serve a second trial in its actor (hpo's default).
    reuse = spec.reuse_actors and (not a_class or resets_config(trainable))
    # Tune takes one metric: several go to the Optuna searcher only (its study's directions).
    single = len(spec.objectives) == 1
    chosen, search = scheduler(spec, walltime.current()), searcher(spec, evaluated)
    limit = spec.max_concurrent
    if hasattr(chosen, "gated"):  # rasda: no new trial while a growth waits (it applies limit)
        search, limit = chosen.gated(search, limit), None
    elif limit and isinstance(search, BasicVariantGenerator):  # random and grid search
        # Tune applies max_concurrent_trials to a Searcher only; it drops it (with a warning)
        # for the generator of random and grid search, which takes the limit itself.
        search.max_concurrent, limit = limit, None
    tune_config = tune.TuneConfig(
        metric=spec.metric if single else None, mode=spec.mode if single else None,
        num_samples=spec.num_samples, max_concurrent_trials=limit, reuse_actors=reuse,
        scheduler=chosen, search_alg=search, time_budget_s=spec.time_budget_s,
    )
    run_config = tune.RunConfig(
        name=exp_dir.name, storage_path=str(exp_dir.parent), stop=spec.stop or None,
        verbose=0, log_to_file=True,
        # Ray would add its own loggers, which lose restarted trials' rows and scalars.
        # HeldStop first: the live view's last frame shows the trials a stop left open.
        # StopKeysReported before it: a result without a stop key ends the run unrecorded.
        # SchedulerState first: Tune matches saved callback states by position.
        callbacks=[*_scheduler_state(chosen),
                   *([StopKeysReported(list(spec.stop))] if spec.stop else []), HeldStop(),
                   LiveProgress(spec.objectives, trial_count(spec)), *trial_loggers(),
                   *tracking_callbacks(spec, exp_dir), *best_checkpoint_callbacks(spec),
                   *extra_callbacks, EndedTrialsCopied()],
        # A class trainable is saved by Tune every `frequency` steps; a function reports its
        # own checkpoints (hpo.report keeps every Nth). Tune keeps the newest `keep` (a trial
        # restarts from the newest); keep_best's best one is hpo's (best_checkpoint_callbacks).
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=spec.checkpoint.keep,
            checkpoint_frequency=spec.checkpoint.frequency if a_class else 0),
        failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures),
        # A trial's stdout/stderr (Tune's log_to_file) and the files it writes into its
        # working dir live in Ray's temp dir, deleted after the run: copy them into the trial
        # folder (in the background after the first result and every 5 min, blocking when
        # the trial ends), but not at every checkpoint: that copy would block the trial.
        sync_config=tune.SyncConfig(sync_artifacts=True, sync_artifacts_on_checkpoint=False),
    )
    return tune.Tuner(trainable, param_space=param_space(spec), tune_config=tune_config,
                      run_config=run_config)
