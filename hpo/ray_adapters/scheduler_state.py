"""A scheduler's decisions survive a stop: its state is saved with each experiment snapshot
and restored before the trials are re-added, as read from Ray 2.60.

Tune saves no scheduler with the experiment (ray-project/ray#30838): on a resume it unpickles
the scheduler as it was built at the start, every score recorded at a rung is lost, and each
restored trial is judged again at its first report. Tune does save its callbacks' state
(Callback.get_state) beside its experiment state at each snapshot, written to a temporary file
and renamed, and restores it (set_state) before it re-adds the trials: the callback here
carries the scheduler's state in it. Its one reach below Ray's public API: ASHA's
`_trial_info` (trial ID -> bracket), given back to each restored trial as it starts, since
`on_trial_add` draws the bracket anew.

What is carried, per scheduler: ASHA (and so each of its brackets' rungs) through Tune's own
`save`/`restore`. Not carried (the resume says so in one line): HyperBand, median stopping,
PBT and PB2, RASDA: their state is keyed by Trial objects or holds the driver's handles.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

from ray.tune import Callback
from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler, TrialScheduler

_log = logging.getLogger("hpo.ray")
ASHA = "asha"


def _kind(scheduler: TrialScheduler) -> str | None:
    """The kind of state carried for this scheduler, or None (nothing to carry: FIFO)."""
    if isinstance(scheduler, AsyncHyperBandScheduler) and not hasattr(scheduler, "gated"):
        return ASHA  # not RASDA's subclass: its growth records are its own
    return None


def not_carried(scheduler: TrialScheduler) -> str | None:
    """The one line a resume says where this scheduler's state is not carried; else None."""
    if _kind(scheduler) is not None or \
            type(scheduler).on_trial_result is FIFOScheduler.on_trial_result:  # FIFO
        return None
    return (f"the {type(scheduler).__name__}'s decisions before the stop are not carried "
            f"over: it judges the restored trials afresh")


class SchedulerState(Callback):
    """Carries the scheduler's state in Tune's snapshot of the callbacks' states."""

    def __init__(self, scheduler: TrialScheduler) -> None:
        self._scheduler = scheduler
        self._brackets: dict[str, Any] = {}  # restored trial ID -> its bracket

    def get_state(self) -> dict[str, Any] | None:
        if _kind(self._scheduler) != ASHA:
            return {"kind": None}  # a state, so that set_state runs and says what is lost
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "scheduler.pkl")
            self._scheduler.save(path)  # Tune's own: a pickle of the scheduler's state
            with open(path, "rb") as file:
                return {"kind": ASHA, "state": file.read()}

    def set_state(self, state: dict[str, Any]) -> None:
        line = not_carried(self._scheduler)
        if line is not None:
            _log.warning("resume: %s", line)
        if state.get("kind") != ASHA or _kind(self._scheduler) != ASHA:
            return
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "scheduler.pkl")
            with open(path, "wb") as file:
                file.write(state["state"])
            self._scheduler.restore(path)
        self._brackets = dict(self._scheduler._trial_info)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any,
                       **info: Any) -> None:
        bracket = self._brackets.pop(trial.trial_id, None)
        if bracket is not None:  # on_trial_add drew it anew: the one it was judged in
            self._scheduler._trial_info[trial.trial_id] = bracket


def missing() -> list[str]:
    """What the carried state reads of Ray that the installed Ray lacks."""
    import inspect

    gaps = []
    source = inspect.getsource(AsyncHyperBandScheduler)
    for needed in ("self._trial_info[trial.trial_id] = self._brackets[idx]",
                   "save_object = self.__dict__", "self.__dict__.update(save_object)"):
        if needed not in source:
            gaps.append(f"AsyncHyperBandScheduler: {needed}")
    if not hasattr(Callback, "get_state") or not hasattr(Callback, "set_state"):
        gaps.append("Callback.get_state/set_state")
    return gaps
