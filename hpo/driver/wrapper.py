"""The Tune trainable of a one-process trial: the user's function inside hpo's session (the
data-parallel one is hpo.ranks.trial)."""

from __future__ import annotations

import functools
import itertools
import os
import sys
from pathlib import Path
from typing import Any

from hpo import session
from hpo.session import Trainable, tune_storage


def with_session(func: Trainable, checkpoint_every: int, cpus: float = 1) -> Trainable:
    """Wrap a trainable so `hpo.report` knows the checkpoint policy and torch uses the trial's
    CPUs; Ray sees `func(config)`."""

    @functools.wraps(func)
    def run_trial(config: dict[str, Any]) -> Any:
        _keep_earlier_output()
        _use_cpus(cpus)
        try:
            with session.trial_session(checkpoint_every):
                return func(config)
        finally:  # Tune copies the output files out when a trial ends, before it flushes them
            sys.stdout.flush()
            sys.stderr.flush()

    return run_trial


def _use_cpus(cpus: float) -> None:
    """Ray fixes OMP_NUM_THREADS when a worker process starts (1 for a reused actor whatever
    the trial asks), and torch reads it once: give torch the trial's own CPUs, as a standalone
    script on those CPUs would have them (a torch imported later reads the variable)."""
    threads = max(1, int(cpus))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _keep_earlier_output() -> None:
    """A trial that runs again in a fresh working dir (`hpo resume`, a Slurm requeue, a retry on
    another node) would have its kept stdout/stderr replaced by the new, shorter ones when it
    ends: move those aside as stdout.1, stdout.2, ... (on the same node Tune appends instead)."""
    storage = tune_storage()
    if storage is None:
        return
    for name in ("stdout", "stderr"):
        kept = Path(storage.trial_fs_path, name)
        local = Path(storage.trial_working_directory, name)
        if kept.exists() and (not local.exists() or local.stat().st_size < kept.stat().st_size):
            free = (kept.with_name(f"{name}.{n}") for n in itertools.count(1))
            kept.rename(next(path for path in free if not path.exists()))
