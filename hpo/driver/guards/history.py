"""A trial's history on disk is exactly the steps its state holds: 1..N, each once, in order.

A trial that restarts (`hpo resume`, a retry after a failure, a paused trial's turn, a PBT
exploit) goes on from its last checkpoint. Rows it reported after that checkpoint are reported
again: with `checkpoint.frequency` > 1 by design, and after a stop that came between a row and
its checkpoint. So when a trial starts, the rows of result.json and progress.csv that lie past
its checkpoint's iteration (all of them, when it starts without one) are cut, and the log says
so. The cut file replaces the old one in one rename: a failed write keeps the old file.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from pathlib import Path
from typing import Any

_log = logging.getLogger("hpo.history")
ITERATION = "training_iteration"


def restored_iteration(trial: Any) -> int:
    """The iteration of the checkpoint `trial` (a Tune Trial) starts from; 0 for none."""
    latest = trial.latest_checkpoint_result
    if latest is None or latest.checkpoint is None:
        return 0
    return int((latest.metrics or {}).get(ITERATION, 0))


def _json_rows_upto(text: str, last: int) -> tuple[list[str], int]:
    """The lines of a result.json to keep, and how many were dropped (a line cut short by a
    crash parses as nothing and is dropped too)."""
    kept, dropped = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            iteration = int(json.loads(line).get(ITERATION, 0))
        except (ValueError, AttributeError, TypeError):
            iteration = last + 1
        if iteration <= last:
            kept.append(line)
        else:
            dropped += 1
    return kept, dropped


def _csv_rows_upto(text: str, last: int) -> tuple[list[str], int]:
    """The lines of a progress.csv to keep (its header first), and how many were dropped."""
    lines = text.splitlines()
    if not lines:
        return [], 0
    header = next(csv.reader([lines[0]]))
    if ITERATION not in header:
        return lines, 0
    column = header.index(ITERATION)
    kept, dropped = [lines[0]], 0
    for line in lines[1:]:
        row = next(csv.reader(io.StringIO(line)), [])
        try:
            fits = int(float(row[column])) <= last
        except (IndexError, ValueError):
            fits = False
        if fits:
            kept.append(line)
        else:
            dropped += 1
    return kept, dropped


def cut_after(path: Path, last: int) -> int:
    """Drop the rows of `path` (result.json or progress.csv) past iteration `last`; returns
    how many were dropped."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return 0
    rows = _csv_rows_upto if path.suffix == ".csv" else _json_rows_upto
    kept, dropped = rows(text, last)
    if dropped:
        partial = path.with_name(f".{path.name}.cut")
        partial.write_text("".join(f"{line}\n" for line in kept))
        os.replace(partial, path)
    return dropped


def cut_trial_file(path: Path, trial: Any) -> None:
    """Cut a (re)starting trial's history file back to the checkpoint it starts from."""
    last = restored_iteration(trial)
    dropped = cut_after(path, last)
    if dropped:
        _log.warning("trial %s restarts from its checkpoint at iteration %d: %d row(s) of %s "
                     "after it are dropped (they are reported again)", trial.trial_id, last,
                     dropped, path.name)
