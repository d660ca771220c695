"""PBT's and PB2's records, as read from Ray 2.60: `_trial_state` ({Trial: _PBTTrialState},
each with last_perturbation_time, last_train_time, last_score, last_result and
last_checkpoint; its order breaks ties in the quantiles), `_next_perturbation_sync` and the
counters; PB2's `data` (every trial's scores over time), `current` and
`last_exploration_time`. Keyed by Trial objects: carried with trials as IDs
(hpo.ray_adapters.schedulers.carried). A checkpoint save in flight at the stop becomes the
trial's newest checkpoint, the one the resumed trial restarts from."""

from __future__ import annotations

from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining

from hpo.ray_adapters.schedulers.carried import FUTURE, STREAMS, Kind, keys_of, lacks

ATTRS = ("_trial_state", "_next_perturbation_sync", "_num_checkpoints", "_num_perturbations")
PB2_ATTRS = ("data", "current", "last_exploration_time")
TRIAL_STATE = ("orig_tag", "last_score", "last_checkpoint", "last_perturbation_time",
               "last_train_time", "last_result")


def _is_pb2(scheduler: Any) -> bool:
    # by name: importing Ray's PB2 imports scikit-learn and SciPy
    # (hpo.driver.schedulers.seedable_bandits)
    return any(c.__name__ == "PB2" and c.__module__ == "ray.tune.schedulers.pb2"
               for c in type(scheduler).__mro__)


def _attrs(scheduler: Any) -> tuple[str, ...]:
    return ATTRS + (PB2_ATTRS if _is_pb2(scheduler) else ()) + STREAMS


def _after(scheduler: Any, trials: dict[str, Trial]) -> None:
    for trial, state in scheduler._trial_state.items():
        if state.last_checkpoint is FUTURE:
            state.last_checkpoint = trial.checkpoint


KIND = Kind("PBT", lambda scheduler: isinstance(scheduler, PopulationBasedTraining), _attrs,
            known=keys_of("_trial_state"), after=_after)


def missing() -> list[str]:
    """What PBT's and PB2's carried state reads that the installed Ray lacks."""
    import importlib.util
    import inspect
    from pathlib import Path

    from ray.tune.schedulers import pbt

    gaps = lacks(PopulationBasedTraining(hyperparam_mutations={"x": [1, 2]}), ATTRS)
    gaps += lacks(pbt._PBTTrialState(Trial("t", stub=True)), TRIAL_STATE)
    source = inspect.getsource(pbt)
    found = importlib.util.find_spec("ray.tune.schedulers.pb2")  # read, not imported
    text = Path(found.origin).read_text() if found and found.origin else ""
    gaps += [f"PB2.{name}" for name in PB2_ATTRS if f"self.{name} =" not in text]
    if "self._trial_state[trial] = _PBTTrialState(trial)" not in source:
        gaps.append("PopulationBasedTraining._trial_state as {Trial: _PBTTrialState}")
    return gaps
