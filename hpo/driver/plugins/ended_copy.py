"""An ended trial's folder reaches the experiment folder as it ends, not at the next snapshot.

Tune copies the driver's staging folder (every trial's logs: result.json, progress.csv, the
events) into the experiment folder with each experiment snapshot, and those come 10 s or
more apart (hpo.driver.guards.snapshot_deletes). At a run's end, the last snapshot then copied
the files of every trial that had ended since the one before, while the allocation waited:
1.0-1.2 s of a 640-trial run's end on 2 cores. Here the folder of a trial that the
experiment folder's snapshot names already is copied as the trial ends, in a copy thread of
its own, so the snapshot's copy finds it copied (a trial begun since waits for that copy:
copied early, its folder would be one that no snapshot names, beside its rerun after a kill).
"""

from __future__ import annotations

from typing import Any

from ray.tune import Callback

from hpo.driver.guards.snapshot_deletes import copy_ended_trial
from hpo.ray_adapters import tune_guards


class EndedTrialsCopied(Callback):
    """Last of a run's callbacks: the others have written and closed the trial's files."""

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any,
                          **info: Any) -> None:
        folders = tune_guards.trial_folders(trial)  # None: a trial stopped before its start
        if folders is not None:
            copy_ended_trial(*folders)
