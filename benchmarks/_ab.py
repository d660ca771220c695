"""What the A/B benchmarks share (startup_ab.py, throughput_ab.py): an older commit checked
out beside this one, and `hpo run` from either checkout, with the wall times its trainable
wrote into result.json."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from benchmarks._common import Timed, run_timed

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def worktree(commit: str, where: Path) -> Iterator[Path]:
    """`commit` checked out at `where` (a git worktree), removed after."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "-f", str(where), commit],
                   check=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)],
                       check=False)


def hpo_run_walls(checkout: Path, spec: Path, storage: Path, name: str,
                  timeout_s: float) -> tuple[Timed, list[float]]:
    """`python -m hpo run` from `checkout` (its own hpo package comes first on sys.path) on
    2 CPUs; the run's timing and every result row's `wall` (the trainable's clock)."""
    cmd = [sys.executable, "-m", "hpo", "run", str(spec), "--storage", str(storage),
           "--name", name, "--cpus", "2"]
    timed = run_timed(cmd, cwd=checkout, timeout_s=timeout_s)
    walls = [json.loads(line)["wall"] for f in (storage / name).glob("*/result.json")
             for line in f.read_text().splitlines() if line.strip()]
    if timed.returncode or not walls:
        raise SystemExit(f"{name} failed (rc {timed.returncode}):\n{timed.stderr[-2000:]}")
    return timed, walls
