"""Whether a Slurm job has ended, as Slurm says: `squeue` (the controller's memory, which
keeps an ended job for MinJobAge and then forgets it), else `sacct` (the accounting
database, where a site runs one). Parsing is pure; `job_ended` asks, and says None where
the job still runs or is ending (COMPLETING: its processes may still write), or where no
Slurm answers.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

# Slurm's job states after which none of the job's processes runs (man squeue, JOB STATE
# CODES); COMPLETING is not one: processes of the job may still run.
ENDED = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
                   "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT"})
_FORGOTTEN = "Invalid job id specified"  # squeue, once MinJobAge has passed

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def state_ended(text: str) -> str | None:
    """The ended state in squeue's `%T` or sacct's `State` column (`CANCELLED by 1000`:
    the first word), None if the job has not ended (or the text says no state)."""
    words = text.split()
    if not words:
        return None
    state = words[0].rstrip("+")  # sacct: CANCELLED+ when the name was cut
    return state if state in ENDED else None


def _ask(args: list[str], run: Runner) -> subprocess.CompletedProcess[str] | None:
    if shutil.which(args[0]) is None:
        return None
    try:
        return run(args, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def job_ended(job_id: str, run: Runner = subprocess.run) -> str | None:
    """How Slurm says job `job_id` ended ("CANCELLED", "gone from squeue", ...); None while
    it runs, pends or completes, or where Slurm cannot be asked."""
    done = _ask(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], run)
    if done is not None and done.returncode == 0 and done.stdout.strip():
        state = done.stdout.strip().splitlines()[0]
        return f"squeue: {state}" if state_ended(state) else None
    forgotten = done is not None and _FORGOTTEN in done.stderr
    accounted = _ask(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], run)
    if accounted is not None and accounted.returncode == 0 and accounted.stdout.strip():
        state = accounted.stdout.strip().splitlines()[0]
        return f"sacct: {state}" if state_ended(state) else None
    return "squeue: no such job any more" if forgotten else None
