"""Tune's first-in-first-out choice of the next trial, without rescanning the ended ones.

Ray's FIFOScheduler.choose_trial_to_run (ASHA's and the median rule's too) scans every trial
from the first, for a pending one and then for a paused one, at each step of Tune's loop.
Trials are added in order and end roughly in order, so in a study of thousands the scan
mostly passes trials that have ended, and the choice costs more with every trial before it
(14% of the driver's loop at 2,400 trials). Here the scan starts after the leading
run of ended trials (TERMINATED or ERROR: within one run neither starts again) and chooses
the same trial as Ray's. The count is not pickled: a resumed run can requeue ended trials,
so it starts again from the first.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, MedianStoppingRule

_ENDED = (Trial.TERMINATED, Trial.ERROR)


class SkipsEnded:
    """A mixin for a scheduler whose choice is Ray's FIFOScheduler's."""

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        trials = tune_controller.get_trials()
        ended = min(self.__dict__.get("_ended_prefix", 0), len(trials))
        while ended < len(trials) and trials[ended].status in _ENDED:
            ended += 1
        self._ended_prefix = ended
        for wanted in (Trial.PENDING, Trial.PAUSED):
            for trial in islice(trials, ended, None):
                if trial.status == wanted:
                    return trial
        return None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_ended_prefix", None)
        return state


class FifoScheduler(SkipsEnded, FIFOScheduler):
    """Ray's FIFOScheduler."""


class MedianStopping(SkipsEnded, MedianStoppingRule):
    """Ray's MedianStoppingRule."""
