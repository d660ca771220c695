"""A Tune callback that checks, at every step of Tune's loop, the experiment folder's snapshot
against the checkpoints on disk (hpo.driver.guards.snapshot_deletes).

At each step's end it reads the newest experiment_state-*.json of the folder (a copy still
being written is skipped), and for every checkpoint that snapshot names notes whether it is
on disk and whether Tune has dropped it already (no longer among the trial's kept ones): the
instant where a resume needs a checkpoint that Tune no longer keeps. It also notes a trial whose
result.json in the folder lacks a row up to the iteration of the checkpoint the snapshot names:
a resume from that instant would lose the row (the copy is still running beside the watch, so
every instant of it is seen that falls between two steps). Given a marker file, it
kills its own process (SIGKILL, no stop) at the first such instant, once (the marker stays:
Tune stores the callback with the experiment, and `hpo resume` brings it back).

Run as a script, it is a killed `hpo run` for the tests:
    python tests/support/snapshot_watch.py STORAGE NAME
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from ray.tune import Callback
from ray.tune.utils.serialization import TuneFunctionDecoder

SPEC: dict[str, Any] = {
    "trainable": "tests/support/study_trainables.py:steady", "metric": "score", "mode": "max",
    "num_samples": 2, "search_space": {"x": {"uniform": [0.0, 1.0]}},
    "constants": {"steps": 12, "sleep": 0.1}, "search": {"type": "random", "seed": 5},
    "checkpoint": {"frequency": 1, "keep": 1},
}
PERIOD_S = "0.2"  # TUNE_GLOBAL_CHECKPOINT_S: Tune's snapshot period (auto: >= 10 s)


def _newest_state(exp_dir: Path) -> Path | None:
    states = sorted(exp_dir.glob("experiment_state-*.json"))
    return states[-1] if states else None


def _named_results(exp_dir: Path) -> list[Any] | None:
    """The results of the checkpoints the folder's newest snapshot names; None while it is
    unreadable."""
    newest = _newest_state(exp_dir)
    if newest is None:
        return []
    try:
        state = json.loads(newest.read_text())
    except (OSError, ValueError):  # Tune's own copy writes it in place
        return None
    named = []
    for _, runtime in state["trial_data"]:
        manager = json.loads(runtime, cls=TuneFunctionDecoder,
                             allow_cloudpickle=True)["checkpoint_manager"]
        named += manager.best_checkpoint_results
    return named


def _state_stamp(exp_dir: Path) -> tuple[int, int, int] | None:
    """The folder's newest snapshot file as (inode, mtime, size): a new copy is renamed in."""
    newest = _newest_state(exp_dir)
    try:
        seen = newest.stat() if newest else None
    except FileNotFoundError:
        return None
    return None if seen is None else (seen.st_ino, seen.st_mtime_ns, seen.st_size)


def named_checkpoints(exp_dir: Path) -> set[str] | None:
    """The checkpoint paths the folder's newest snapshot names; None while it is unreadable."""
    named = _named_results(exp_dir)
    return None if named is None else {result.checkpoint.path for result in named}


def _rows_short(named: list[Any]) -> list[str]:
    """The named checkpoints whose trial's result.json in the folder lacks one of the rows
    1..the checkpoint's iteration."""
    short = []
    for result in named:
        rows = Path(result.checkpoint.path).parent / "result.json"
        last = result.metrics["training_iteration"]
        try:
            found = [json.loads(line)["training_iteration"]
                     for line in rows.read_text().splitlines()[:last]]
        except (OSError, ValueError):  # missing, or a line cut short
            found = []
        if found != list(range(1, last + 1)):
            short.append(f"{result.checkpoint.path}: rows {found}")
    return short


class SnapshotWatch(Callback):
    def __init__(self, exp_dir: str, kill_marker: str = "") -> None:
        self.exp_dir, self.kill_marker = exp_dir, kill_marker
        self.missing: list[str] = []  # named by the folder's snapshot, not on disk
        self.dropped_named = 0  # instants where the snapshot named a checkpoint Tune dropped
        self.rows_short: list[str] = []  # named checkpoints whose rows the folder lacks

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        before = _state_stamp(Path(self.exp_dir))
        results = _named_results(Path(self.exp_dir))
        if not results:
            return
        named = {result.checkpoint.path for result in results}
        kept = {result.checkpoint.path for trial in trials
                for result in trial.run_metadata.checkpoint_manager.best_checkpoint_results}
        missing = sorted(path for path in named if not os.path.isdir(path))
        short = _rows_short(results)
        if _state_stamp(Path(self.exp_dir)) != before:
            # The copy put a newer snapshot in meanwhile, and may have deleted what the older
            # one named right after: these reads did not see one instant. The next step does.
            return
        self.missing += missing
        self.rows_short += short
        if named - kept:
            self.dropped_named += 1
            if self.kill_marker and not os.path.exists(self.kill_marker):
                Path(self.kill_marker).write_text(f"{sorted(named - kept)}\n")
                os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    import hpo

    storage, name = argv[:2]
    os.environ["TUNE_GLOBAL_CHECKPOINT_S"] = PERIOD_S
    watch = SnapshotWatch(str(Path(storage) / name), str(Path(storage) / f"{name}.killed"))
    hpo.run({**SPEC, "name": name}, storage=storage, callbacks=[watch], keep_ray=False)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from snapshot_watch import main as imported_main  # the class pickles under its module name

    imported_main(sys.argv[1:])
