"""A trial paused at the stop is paused again on the resume, as read from Ray 2.60.

Tune re-adds every unfinished trial of a resumed run as PENDING, and starts each PENDING trial
whatever the scheduler chooses: a trial HyperBand paused until its bracket's other trials
catch up, or PBT paused for another's turn, would run on at once, which it never would have.
Tune gives the callbacks no controller: the scheduler's on_trial_add, which Tune calls for each
re-added trial, is watched for it (on the scheduler object only, until the first step), and
the controller's `_set_trial_status` puts each trial paused at the stop back to PAUSED.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.tune.experiment import Trial


class Watch:
    """The view of the controller that the scheduler's on_trial_add was given (None: none)."""

    def __init__(self, seen: Any) -> None:
        self.seen = seen

    def stop(self, scheduler: Any) -> None:
        """The scheduler's own on_trial_add again."""
        vars(scheduler).pop("on_trial_add", None)


def watch_adds(scheduler: Any) -> Watch:
    """Keep the controller view of the next on_trial_add calls (the resume's re-adds)."""
    watch = Watch(None)
    original: Callable[..., Any] = scheduler.on_trial_add

    def on_trial_add(tune_controller: Any, trial: Trial) -> Any:
        watch.seen = tune_controller
        return original(tune_controller, trial)

    vars(scheduler)["on_trial_add"] = on_trial_add
    return watch


def pause_again(view: Any, trials: list[Trial]) -> None:
    """Each of these trials that the resume made PENDING is PAUSED again (with no actor, as a
    paused trial has: Tune starts it from its checkpoint when the scheduler chooses it)."""
    controller = getattr(view, "_tune_controller", view)
    for trial in trials:
        if trial.status == Trial.PENDING:
            controller._set_trial_status(trial, Trial.PAUSED)


def paused_gaps() -> list[str]:
    """What pausing again reads of Tune that the installed Ray lacks."""
    import inspect

    from ray.tune.execution.tune_controller import TrialRunnerWrapper, TuneController

    gaps = []
    method = getattr(TuneController, "_set_trial_status", None)
    if method is None or list(inspect.signature(method).parameters) != ["self", "trial",
                                                                       "status"]:
        gaps.append("TuneController._set_trial_status(self, trial, status)")
    if "_tune_controller" not in inspect.getsource(TrialRunnerWrapper):
        gaps.append("TrialRunnerWrapper._tune_controller")
    return gaps
