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

from hpo.ray_adapters.tune_guards import kept_checkpoint_rows

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
    """Cut a (re)starting trial's history file back to the checkpoint it starts from, and fill
    the rows up to it that the file lacks."""
    last = restored_iteration(trial)
    dropped = cut_after(path, last)
    if dropped:
        _log.warning("trial %s restarts from its checkpoint at iteration %d: %d row(s) of %s "
                     "after it are dropped (they are reported again)", trial.trial_id, last,
                     dropped, path.name)
    if last:
        fill_upto(path, last, kept_checkpoint_rows(trial), trial.trial_id)


def fill_upto(path: Path, last: int, kept: list[dict[str, Any]], trial_id: str) -> None:
    """Append the rows after the file's last one, up to `last`, from the rows that carried
    the kept checkpoints. A killed driver's storage copy can lag the experiment state: Tune
    syncs its staging folder in the background while the state file is rewritten, so the state
    may know a checkpoint whose row the copied history lacks. Rows found nowhere are named."""
    text = path.read_text() if path.exists() else ""
    present = _iterations(path, text)
    wanted = range((present[-1] if present else 0) + 1, last + 1)
    rows = [row for row in kept if int(row.get(ITERATION, 0)) in wanted]
    if rows:
        lines = _json_lines(rows) if path.suffix == ".json" else _csv_lines(text, rows)
        partial = path.with_name(f".{path.name}.fill")
        partial.write_text(text + "".join(f"{line}\n" for line in lines))
        os.replace(partial, path)
        _log.warning("trial %s: %s lacked the row(s) of iteration(s) %s, restored from the "
                     "checkpoints Tune kept", trial_id, path.name,
                     ", ".join(str(row[ITERATION]) for row in rows))
    lost = sorted(set(wanted) - {int(row[ITERATION]) for row in rows})
    if lost:
        _log.error("trial %s: the row(s) of iteration(s) %s are missing from %s and from its "
                   "kept checkpoints (the driver was killed before its copy reached the "
                   "experiment folder)", trial_id, ", ".join(map(str, lost)), path.name)


def _iterations(path: Path, text: str) -> list[int]:
    if path.suffix == ".json":
        return [int(json.loads(line).get(ITERATION, 0)) for line in text.splitlines()
                if line.strip()]
    reader = csv.DictReader(io.StringIO(text))
    return [int(float(row[ITERATION])) for row in reader if row.get(ITERATION)]


def _json_lines(rows: list[dict[str, Any]]) -> list[str]:
    from ray.tune.utils.util import SafeFallbackEncoder  # as Ray's JSON logger writes

    return [json.dumps(row, cls=SafeFallbackEncoder) for row in rows]


def _csv_lines(text: str, rows: list[dict[str, Any]]) -> list[str]:
    """CSV lines of rows as Ray's CSV logger writes them (flat, without config), in the
    file's columns, with a header first when the file has none."""
    from ray.tune.utils import flatten_dict

    flat = [flatten_dict({k: v for k, v in row.items() if k != "config"}, delimiter="/")
            for row in rows]
    header = next(csv.reader([text.splitlines()[0]])) if text.strip() else list(flat[0])
    out = io.StringIO()
    writer = csv.DictWriter(out, header, extrasaction="ignore", lineterminator="\n")
    if not text.strip():
        writer.writeheader()
    writer.writerows(flat)
    return out.getvalue().splitlines()
