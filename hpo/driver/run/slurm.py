"""Inside a Slurm batch script: start the job's Ray cluster, run or resume the experiment on
it, stop the cluster. The glue between the cluster side (hpo.cluster) and the runner.

A folder that already holds the experiment (the job was requeued after the walltime warning)
is resumed: finished trials stay, unfinished ones continue from their checkpoints. The runner's
walltime guard (hpo.driver.guards.walltime) reads the allocation's end and, when no rung fits before
it, sends the same warning to the batch shell: the requeue goes the same way.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from hpo.cluster.auth import RayCluster
from hpo.cluster.bootstrap import ray_cluster
from hpo.cluster.join import publish, sweep_left, withdraw
from hpo.cluster.slurm_env import Allocation
from hpo.driver.guards.lease import experiment_lease
from hpo.driver.run.outcome import RunResult
from hpo.driver.run.runner import resume, run
from hpo.errors import RunError
from hpo.results import SPEC_FILE
from hpo.spec.model import Spec

log = logging.getLogger("hpo.slurm")


class _StopFlag:
    """USR1 (Slurm's walltime warning, passed on by the batch shell) before Tune is running:
    remember it instead of dying. Once Tune runs, its own USR1 handler takes over."""

    def __init__(self) -> None:
        self.raised = False
        signal.signal(signal.SIGUSR1, self._set)

    def _set(self, _signum: int, _frame: object) -> None:
        self.raised = True


def run_in_allocation(spec: Spec, *, storage: str | None = None, name: str | None = None,
                      source: str = "<spec>", env: Mapping[str, str] = os.environ,
                      report: Callable[[str], None] = print) -> RunResult:
    """Run (or resume) `spec` on a Ray cluster spanning the current Slurm allocation."""
    stop_flag = _StopFlag()
    alloc = Allocation.from_env(env)
    exp_dir = Path(storage or spec.storage).expanduser().resolve() / (name or spec.name)
    started = time.monotonic()
    # The lease first: a second job on the same folder is refused before it starts Ray, and
    # a requeue of this job takes it over (run/resume below share it).
    with experiment_lease(exp_dir, env=env):
        for left in sweep_left(exp_dir, alloc.job_id):  # a cancelled job's, at the latest now
            report(f"hpo: removed {left}, left by an earlier job of this study")
        with ray_cluster(alloc, spec.slurm, exp_dir / f"slurm-{alloc.job_id}") as cluster:
            return _run_on(cluster, alloc, spec, exp_dir, started, stop_flag, source, report)


def _run_on(cluster: RayCluster, alloc: Allocation, spec: Spec, exp_dir: Path,
            started: float, stop_flag: _StopFlag, source: str,
            report: Callable[[str], None]) -> RunResult:
    """The experiment on the job's running cluster: run, or resume where it exists."""
    report(f"hpo: Ray cluster ready on {len(alloc.nodes)} node(s) "
           f"({', '.join(alloc.nodes)}) after {time.monotonic() - started:.1f} s; "
           f"head {cluster.address}")
    for note in cluster.notes:
        report(f"hpo: warning: {note}")
    if stop_flag.raised:
        raise RunError("stopped by USR1 before the experiment started. Hint: the job "
                       "requeues itself; the next run starts it")
    # other jobs may join while it runs (`hpo slurm join`); gone before Ray stops
    publish(exp_dir, alloc.job_id, cluster.token_file.parent, spec.name, spec.slurm)
    try:
        if (exp_dir / SPEC_FILE).exists():
            report(f"hpo: resuming {exp_dir} (restart {alloc.restart_count})")
            return resume(exp_dir, cluster=cluster)
        return run(spec, storage=str(exp_dir.parent), name=exp_dir.name, source=source,
                   cluster=cluster)
    finally:
        withdraw(exp_dir)
