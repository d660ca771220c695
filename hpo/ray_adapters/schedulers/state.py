"""A scheduler's decisions survive a stop: its state is saved with each experiment snapshot
and put back on the resumed run's trials before the first of them runs, as read from Ray 2.60.

Tune saves no scheduler with the experiment (ray-project/ray#30838): on a resume it unpickles
the scheduler as it was built at the start, every record is lost, and each restored trial is
judged again at its first report. Tune does save its callbacks' state (Callback.get_state)
beside its experiment state at each snapshot, and on a resume (TuneController.resume) gives
it back (set_state) before it re-adds the trials, each through the scheduler's on_trial_add,
which files it as a new trial. So set_state only keeps the saved state; the first
on_step_begin, which Tune calls before it starts any trial, puts it back over what
on_trial_add filed, with each trial named by its ID given as the resumed run's Trial of that ID
(hpo.ray_adapters.schedulers.carried).

What each kind carries: hpo.ray_adapters.schedulers.{asha, hyperband, median, pbt, rasda}.
Another scheduler's state (a user's own) is not carried: the resume says so in one line.
"""

from __future__ import annotations

import logging
from typing import Any

from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from hpo.ray_adapters.schedulers import asha, hyperband, median, pbt, rasda
from hpo.ray_adapters.schedulers.carried import Kind, UnknownTrial, dumps, loads, put_back
from hpo.ray_adapters.schedulers.paused import Watch, pause_again, paused_gaps, watch_adds

_log = logging.getLogger("hpo.ray")
KINDS = (rasda.KIND, asha.KIND, hyperband.KIND, median.KIND, pbt.KIND)  # subclasses first


def kind_of(scheduler: TrialScheduler) -> Kind | None:
    """What is carried for this scheduler; None: nothing (FIFO decides nothing) or unknown."""
    return next((kind for kind in KINDS if kind.applies(scheduler)), None)


def not_carried(scheduler: TrialScheduler) -> str | None:
    """The one line a resume says where this scheduler's state is not carried; else None."""
    if kind_of(scheduler) is not None or \
            type(scheduler).on_trial_result is FIFOScheduler.on_trial_result:  # FIFO
        return None
    return (f"the {type(scheduler).__name__}'s decisions before the stop are not carried "
            f"over: it judges the restored trials afresh")


class SchedulerState(Callback):
    """Carries the scheduler's state in Tune's snapshot of the callbacks' states."""

    def __init__(self, scheduler: TrialScheduler) -> None:
        self._scheduler = scheduler
        self._kind = kind_of(scheduler)
        self._trials: list[Trial] = []  # the controller's, as the last step gave them
        self._saved: dict[str, Any] | None = None  # set_state's, until it is put back
        self._view = Watch(None)  # the controller as the scheduler's on_trial_add saw it

    def __getstate__(self) -> dict[str, Any]:  # pickled with the experiment: nothing held
        return {"_scheduler": self._scheduler, "_kind": None, "_trials": [], "_saved": None,
                "_view": Watch(None)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._kind = kind_of(self._scheduler)

    def get_state(self) -> dict[str, Any] | None:
        if self._saved is not None:  # not put back yet: what was saved still stands
            return self._saved
        if self._kind is None:
            return {"kind": None}  # a state, so that set_state runs and says what is lost
        return {"kind": self._kind.name,
                "attrs": dumps(self._scheduler, self._kind.attrs(self._scheduler)),
                "extra": self._kind.extra(self._scheduler, self._trials),
                "paused": [t.trial_id for t in self._trials if t.status == Trial.PAUSED]}

    def set_state(self, state: dict[str, Any]) -> None:
        line = not_carried(self._scheduler)
        if line is not None:
            _log.warning("resume: %s", line)
        if self._kind is not None and state.get("kind") == self._kind.name:
            self._saved = state
            self._view = watch_adds(self._scheduler)

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        self._trials = trials
        if self._saved is not None:
            saved, self._saved = self._saved, None
            self._view.stop(self._scheduler)
            self._put_back(saved, trials)

    def _put_back(self, saved: dict[str, Any], trials: list[Trial]) -> None:
        assert self._kind is not None
        by_id = {trial.trial_id: trial for trial in trials}
        try:
            values = loads(saved["attrs"], by_id)
        except UnknownTrial as exc:
            _log.warning("resume: the %s's decisions before the stop are not carried over: "
                         "trial %s is gone", self._kind.name, exc.args[0])
            return
        known = self._kind.known
        live = {trial.trial_id for trial in trials if not trial.is_finished()}
        unknown = sorted(live - known(values)) if known is not None else []
        if unknown:
            _log.warning("resume: the %s's decisions before the stop are not carried over: "
                         "it never saw unfinished trial %s", self._kind.name, unknown[0])
            return
        put_back(self._scheduler, values)
        if self._kind.after is not None:
            self._kind.after(self._scheduler, by_id)
        if self._kind.apply_extra is not None:
            self._kind.apply_extra(self._scheduler, saved.get("extra"), by_id)
        if self._view.seen is not None:  # Tune re-added trials: each was PENDING again
            pause_again(self._view.seen, [by_id[i] for i in saved.get("paused", ())
                                          if i in by_id])


def missing() -> list[str]:
    """What carrying the state reads of Tune that the installed Ray lacks: the callbacks'
    state, given back before the trials are re-added, and each step's on_step_begin before
    any trial starts."""
    import inspect

    from ray.tune.execution.tune_controller import TuneController

    gaps = []
    if not hasattr(Callback, "get_state") or not hasattr(Callback, "set_state"):
        gaps.append("Callback.get_state/set_state")
    resume = inspect.getsource(TuneController.resume)
    if not 0 <= resume.find("self._callbacks.restore_from_dir") < \
            resume.find("self._requeue_restored_trials"):
        gaps.append("TuneController.resume: callbacks restored before the trials are re-added")
    gaps += paused_gaps()
    step = inspect.getsource(TuneController.step)
    if not 0 <= step.find("self._callbacks.on_step_begin") < step.find("self._maybe_add_actors"):
        gaps.append("TuneController.step: on_step_begin before any trial starts")
    return gaps


def scheduler_gaps() -> list[str]:
    """The registry's check (hpo.ray_adapters.registry, "scheduler-state"): this module's and
    every kind's reads of Ray."""
    return missing() + [gap for module in (asha, hyperband, median, pbt, rasda)
                        for gap in module.missing()]
