"""A folder that already holds an experiment, met by `hpo run`: the one line that says what to
do, and `--fresh`, which starts it again where no trial finished.

`--fresh` never deletes a finished trial: where one finished (or where the folder's trials
cannot be read), it refuses and names them. Otherwise the folder held a run that failed
before any trial ended (a metric typo, a trainable that crashed at its first step): its
contents go, the lease the caller holds stays, and the run starts in the emptied folder.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from hpo.driver.guards.lease import LEASE_FILE
from hpo.driver.run.outcome import resume_hint
from hpo.errors import ExperimentError
from hpo.results import load_results
from hpo.spec.model import Spec

log = logging.getLogger("hpo.run")


def finished_trials(exp_dir: Path) -> list[str] | None:
    """The ids of the trials that ran to their end; None where that cannot be told (trial
    folders with results, but no readable snapshot)."""
    try:
        frame = load_results(exp_dir)
    except ExperimentError:  # no snapshot (or a damaged one)
        reported = [d for d in exp_dir.iterdir() if (d / "result.json").is_file()]
        return None if any(_ended(d / "result.json") for d in reported) else []
    if not len(frame):
        return []
    return [str(t) for t in frame.loc[frame["status"] == "TERMINATED", "trial_id"]]


def _ended(result_file: Path) -> bool:
    """A trial's result.json holds its last report (done: true)."""
    for line in reversed(result_file.read_text().splitlines()):
        try:
            return bool(json.loads(line).get("done"))
        except ValueError:
            continue
    return False


def already_here(exp_dir: Path, spec: Spec) -> ExperimentError:
    """`hpo run` into a folder that holds an experiment: resume it, or (no trial finished)
    start it again with --fresh."""
    again = ("; `hpo run --fresh` starts it again (no trial of it finished)"
             if finished_trials(exp_dir) == [] else "")
    return ExperimentError(f"{exp_dir}: an experiment already exists here. Hint: "
                           f"{resume_hint(exp_dir, spec)} continues it (with the spec it was "
                           f"started with){again}; another name starts a new one (--name; "
                           "name= in hpo.run)")


def start_again(exp_dir: Path) -> None:
    """Empty `exp_dir` (its lease, held by the caller, stays) for a fresh run, or refuse where
    a trial finished."""
    done = finished_trials(exp_dir)
    if done is None:
        raise ExperimentError(f"{exp_dir}: --fresh: cannot tell which trials finished (the "
                              "experiment's state is missing or damaged). Hint: move the folder "
                              "aside, or start under another name (--name)")
    if done:
        shown = ", ".join(done[:5]) + (f" and {len(done) - 5} more" if len(done) > 5 else "")
        raise ExperimentError(f"{exp_dir}: --fresh: {len(done)} trial(s) finished here "
                              f"({shown}); --fresh replaces only a run none of whose trials "
                              f"finished. Hint: `hpo resume {exp_dir}` continues it; another "
                              "name starts a new one (--name)")
    for entry in exp_dir.iterdir():
        if entry.name == LEASE_FILE or entry.name.startswith(f".{LEASE_FILE}."):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    log.warning("hpo: --fresh: emptied %s (no trial of its earlier run finished)", exp_dir)
