"""Mirror a Ray Tune run into an Optuna study (`optuna_storage:` in the YAML).

Every trial becomes an Optuna trial with its params, one intermediate value per report and
the last reported metric as its value (several objectives: a value each, and no intermediate
values, which Optuna keeps for one objective only), so `optuna-dashboard STORAGE` shows a Ray
Tune run.
The mirror is a Tune callback on the driver: trainables and workers never touch the storage.
Tune pickles callbacks into the experiment folder, so `hpo resume` continues the same study.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ray.tune import Callback

from hpo.optuna.storage import open_storage

_ID = "ray_trial_id"


def mirror_for(spec: Any, source: str, study_name: str) -> list[Any]:
    """The mirror callback of a fresh run with `optuna_storage`, its study opened.

    Opening it here, before Ray starts, turns an unreachable database or a study name that is
    already taken into a one-line error instead of a failure mid-run.
    """
    from hpo.errors import ConfigError
    from hpo.optuna.space import space_to_optuna

    mirror = OptunaMirror(spec.optuna_storage, study_name, spec.metric, spec.mode,
                          space_to_optuna(spec.search_space))
    try:
        mirror.open(fresh=True)
    except Exception as exc:  # any failure to open the user's storage is bad input
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(source, "optuna_storage", f"cannot use it: {cause}",
                          "check the path/URL; for a name already taken use --name") from exc
    return [mirror]


class OptunaMirror(Callback):
    """A Tune callback that writes each trial's config, reports and end into a study."""

    def __init__(self, storage: str, study_name: str, metric: str | list[str],
                 mode: str | list[str], space: dict[str, Any]) -> None:
        # An absolute journal path: `hpo resume` may run from another folder.
        self.storage = storage if "://" in storage else str(Path(storage).expanduser().resolve())
        self.study_name, self.metric, self.mode, self.space = study_name, metric, mode, space
        self._reset()

    def _reset(self) -> None:
        self._storage: Any = None
        self._study_id = -1
        self._ids: dict[str, int] = {}  # Ray trial id -> Optuna trial id (unfinished ones)
        self._done: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def open(self, fresh: bool) -> None:
        """Create (or load, on resume) the study; a fresh run refuses a study with trials."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no study banners in the live view
        self._storage = open_storage(self.storage)
        modes = [self.mode] if isinstance(self.mode, str) else self.mode
        study = optuna.create_study(storage=self._storage, study_name=self.study_name,
                                    directions=["maximize" if m == "max" else "minimize"
                                                for m in modes], load_if_exists=True)
        trials = study.get_trials(deepcopy=False)
        if fresh and trials:
            raise ValueError(f"study '{self.study_name}' there already has {len(trials)} "
                             "trial(s)")
        self._study_id = self._storage.get_study_id_from_name(self.study_name)
        for trial in trials:
            ray_id = trial.user_attrs.get(_ID)
            if trial.state.is_finished():
                self._done.add(ray_id)
            else:
                self._ids[ray_id] = self._storage.get_trial_id_from_study_id_trial_number(
                    self._study_id, trial.number)

    def setup(self, **info: Any) -> None:
        if self._storage is None:  # restored by `hpo resume`
            self.open(fresh=False)

    def _trial_id(self, trial: Any) -> int:
        """The Optuna trial of a Ray trial, created on first sight."""
        from optuna.trial import TrialState, create_trial

        from hpo.optuna.space import split_params

        if trial.trial_id in self._ids:
            return self._ids[trial.trial_id]
        # A retried trial whose earlier attempt was closed as failed gets a new Optuna trial.
        self._done.discard(trial.trial_id)
        params, dists = split_params(trial.config, self.space)
        template = create_trial(state=TrialState.RUNNING, params=params, distributions=dists,
                                user_attrs={_ID: trial.trial_id, "config": _jsonable(trial.config)})
        self._ids[trial.trial_id] = self._storage.create_new_trial(self._study_id, template)
        return self._ids[trial.trial_id]

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if trial.trial_id not in self._done:
            self._trial_id(trial)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        if not isinstance(self.metric, str):
            return
        value, step = result.get(self.metric), result.get("training_iteration")
        if _number(value) and isinstance(step, int) and trial.trial_id not in self._done:
            self._storage.set_trial_intermediate_value(self._trial_id(trial), step, value)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        last = trial.last_result or {}
        values: list[Any] = [last.get(m) for m in ([self.metric] if isinstance(self.metric, str)
                                                   else self.metric)]
        self._finish(trial, [float(v) for v in values] if all(map(_number, values)) else None)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._finish(trial, None)

    def _finish(self, trial: Any, values: list[float] | None) -> None:
        from optuna.trial import TrialState

        if trial.trial_id in self._done:
            return
        trial_id = self._trial_id(trial)
        # PBT changes the config while a trial runs: keep the one the value belongs to.
        self._storage.set_trial_user_attr(trial_id, "config", _jsonable(trial.config))
        state = TrialState.COMPLETE if values else TrialState.FAIL
        self._storage.set_trial_state_values(trial_id, state, values)
        del self._ids[trial.trial_id]
        self._done.add(trial.trial_id)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value)


def _jsonable(config: dict[str, Any]) -> Any:
    return json.loads(json.dumps(config, default=repr))
