"""Spec -> Ray Tune, in one place: the trainable with its resources, the param space, the
Tuner with its scheduler, searcher, callbacks and storage. Each scheduler, searcher and
distribution turns itself into Ray's object (`build()`, `to_tune()`); this module composes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpo.driver.trainable import load_trainable
from hpo.driver.wrapper import with_session
from hpo.ranks import check_backend
from hpo.spec.distributions import Distribution
from hpo.spec.model import Spec
from hpo.spec.searchers import Grid


def trainable(spec: Spec, source: str) -> Any:
    """The user's function as a Tune trainable that asks for its trial's resources."""
    from ray import tune

    func = load_trainable(spec.trainable, source)
    check_backend(spec, source)
    if spec.distributed:
        from hpo.ranks.trial import distributed_trainable

        return distributed_trainable(func, spec.distributed, spec.checkpoint.frequency)
    need = {"cpu": spec.resources.cpus_per_trial, "gpu": spec.resources.gpus_per_trial}
    return tune.with_resources(with_session(func, spec.checkpoint.frequency,
                                                need["cpu"]), need)


def param_space(spec: Spec) -> dict[str, Any]:
    """Ray Tune's param_space: the domains of search_space plus the constants."""
    as_grid = isinstance(spec.search, Grid)
    space = {
        name: Distribution(kind="grid", args=dist.args).to_tune()
        if as_grid and dist.kind == "choice" else dist.to_tune()
        for name, dist in spec.search_space.items()
    }
    return {**spec.constants, **space}


def tuner(spec: Spec, trainable: Any, exp_dir: Path, extra_callbacks: list[Any]) -> Any:
    """The Tuner of a fresh run (resume uses Tuner.restore with the same trainable)."""
    from ray import tune

    from hpo.driver.progress import LiveProgress
    from hpo.driver.trial_logs import trial_loggers

    tune_config = tune.TuneConfig(
        metric=spec.metric, mode=spec.mode, num_samples=spec.num_samples,
        max_concurrent_trials=spec.max_concurrent, reuse_actors=spec.reuse_actors,
        scheduler=spec.scheduler.build(), search_alg=spec.search.build(spec.metric, spec.mode),
        time_budget_s=spec.time_budget_s,
    )
    run_config = tune.RunConfig(
        name=exp_dir.name, storage_path=str(exp_dir.parent), stop=spec.stop or None,
        verbose=0, log_to_file=True,
        # Ray would add its own loggers, which lose restarted trials' rows and scalars.
        callbacks=[LiveProgress(spec.metric, spec.mode, spec.num_samples), *trial_loggers(),
                   *extra_callbacks],
        checkpoint_config=tune.CheckpointConfig(num_to_keep=spec.checkpoint.keep),
        failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures),
        # A trial's stdout/stderr (Tune's log_to_file) and the files it writes into its
        # working dir live in Ray's temp dir, deleted after the run: copy them into the trial
        # folder (in the background after the first result and every 5 min, blocking when
        # the trial ends), but not at every checkpoint: that copy would block the trial.
        sync_config=tune.SyncConfig(sync_artifacts=True, sync_artifacts_on_checkpoint=False),
    )
    return tune.Tuner(trainable, param_space=param_space(spec), tune_config=tune_config,
                      run_config=run_config)
