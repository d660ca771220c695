"""`checkpoint.keep_best`: each trial's best-scoring checkpoint, kept beside Tune's newest ones.

Tune keeps either the newest `num_to_keep` checkpoints or, with `checkpoint_score_attribute`,
the best-scoring ones plus the latest (ray/train/_internal/checkpoint_manager.py), never
"the newest k and the best one". The newest k must stay: a trial restarts from the newest, and
hpo.driver.guards.history fills a history from the rows the newest carried. So Tune keeps its
newest k as before, and this callback keeps the best one itself: when a trial's newly saved
checkpoint scores better (by the study's metric and mode; with several objectives, the first)
than the one in `<trial>/best_checkpoint`, the checkpoint's files are hard-linked (copied where
links fail) into a fresh folder, with `hpo_best.json` (hpo.results.BEST_RECORD) saying the
score, and that folder takes the place of the old one by renames. A run killed between the two
renames leaves the previous best as `.best_checkpoint.old`, which readers take
(hpo.results.kept_best) and the next better checkpoint puts back first.

The state is the folder alone: a resumed run (Tune pickles its callbacks with the experiment)
goes on comparing against the score on disk.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any

from ray.tune import Callback
from ray.tune.utils import flatten_dict

from hpo.driver.guards import storage_faults
from hpo.results import BEST_CHECKPOINT, BEST_RECORD, SWAPPED_OUT, kept_best

_log = logging.getLogger("hpo.best_checkpoint")
_STAGED = ".best_checkpoint.new"


class BestCheckpoint(Callback):
    """After each checkpoint Tune registers, keep it as the trial's best if it scores better."""

    def __init__(self, metric: str, mode: str) -> None:
        self.metric, self.mode = metric, mode

    def on_trial_save(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        # After Tune registered the checkpoint: the latest one is never deleted, and its
        # result (the row that carried it) comes with it.
        latest = trial.latest_checkpoint_result
        if latest is None or latest.checkpoint is None:
            return
        score = score_of(latest.metrics or {}, self.metric)
        if score is None:
            return
        record = {"metric": self.metric, "mode": self.mode, "score": score,
                  "training_iteration": (latest.metrics or {}).get("training_iteration"),
                  "checkpoint": Path(latest.checkpoint.path).name}
        try:
            offer(Path(trial.path), Path(latest.checkpoint.path), record)
        except OSError as exc:  # a full disk stops the run (resumable); else the old best stays
            if not storage_faults.absorbed(exc, str(trial.path)):
                _log.warning("trial %s: its best checkpoint was not updated (%s)",
                             trial.trial_id, exc)


def score_of(metrics: dict[str, Any], metric: str) -> float | None:
    """The metric's value in a checkpoint's result (nested keys as `a/b`); None when it is
    missing or not a finite number (such a checkpoint is never the best)."""
    value = flatten_dict(metrics, delimiter="/").get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def better(score: float, than: float, mode: str) -> bool:
    """Strictly better: of equal scores, the earlier checkpoint stays the best."""
    return score > than if mode == "max" else score < than


def offer(trial_dir: Path, source: Path, record: dict[str, Any]) -> bool:
    """Make `source` the trial's best checkpoint if its score (in `record`) beats the one
    kept; returns whether it did."""
    current = _restored(trial_dir)
    if current is not None:
        kept = json.loads((current / BEST_RECORD).read_text())
        if not better(record["score"], kept["score"], record["mode"]):
            return False
    staged = trial_dir / _STAGED
    shutil.rmtree(staged, ignore_errors=True)  # a run killed while it copied
    shutil.copytree(source, staged, copy_function=_link_or_copy)
    (staged / BEST_RECORD).write_text(json.dumps(record) + "\n")
    _swap_in(trial_dir, staged)
    return True


def _restored(trial_dir: Path) -> Path | None:
    """The kept best, put back in place if a run was killed between the swap's renames."""
    current = kept_best(trial_dir)
    if current is not None and current.name == SWAPPED_OUT:
        os.rename(current, trial_dir / BEST_CHECKPOINT)
        return trial_dir / BEST_CHECKPOINT
    return current


def _swap_in(trial_dir: Path, staged: Path) -> None:
    """`staged` becomes <trial>/best_checkpoint: a folder cannot be renamed over a full one,
    so the old one steps aside first and goes after."""
    best, old = trial_dir / BEST_CHECKPOINT, trial_dir / SWAPPED_OUT
    shutil.rmtree(old, ignore_errors=True)
    if best.exists():
        os.rename(best, old)
    os.rename(staged, best)
    shutil.rmtree(old, ignore_errors=True)


def _link_or_copy(source: str, target: str) -> None:
    """A hard link (no second copy of a large model; Tune deleting its checkpoint leaves the
    link's file), or a copy where the file system has no links."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
