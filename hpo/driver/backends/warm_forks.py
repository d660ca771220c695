"""The fork server of one run's job on a warm local Ray (hpo.cluster.warm), whose raylet's
worker stubs look for each job's own server (hpo.ray_adapters.fast_start.worker_stub's {job}).

The run starts that server, so the server and its forks have what the run's process has
where the environment does not set it: its cgroups (a Slurm step's CPUs, memory and
devices), CPU affinity, resource limits and namespaces. Forks are made only where those are
the raylet's, whose own workers would have the raylet's; the server starts in the raylet's
environment (its variables, read at its interpreter's start and its imports: thread counts,
library paths, the hash seed), not the run's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from hpo.cluster.auth import RayCluster
from hpo.cluster.run_dir import private_run_dir
from hpo.driver.backends import forks_ahead
from hpo.ray_adapters.fast_start import fork_server, raylet_env, worker_stub

# A Slurm step's part of a cgroup path (v1: /slurm/uid_1/job_2/step_0; v2:
# /system.slice/slurmstepd.scope/job_2/step_0/user/task_0): what a step confines.
_SLURM_STEP = re.compile(r"job_\d+/step_[^/\n]+")
_NAMESPACES = ("mnt", "pid", "user", "ipc", "uts")


def slurm_steps(cgroup: str) -> set[str]:
    """The Slurm steps a /proc/<pid>/cgroup text names (none outside a Slurm job)."""
    return set(_SLURM_STEP.findall(cgroup))


def confined_alike(pid: int) -> bool:
    """Whether this process runs confined as process `pid` (a raylet this process did not
    start) is: the same Slurm step, CPU affinity, resource limits and namespaces. Other
    cgroups (a login's or a terminal's systemd scope) confine nothing a worker would see."""
    try:
        return (slurm_steps(_read("self", "cgroup")) == slurm_steps(_read(pid, "cgroup"))
                and os.sched_getaffinity(0) == os.sched_getaffinity(pid)
                and _read("self", "limits") == _read(pid, "limits")
                and all(os.readlink(f"/proc/self/ns/{ns}") == os.readlink(f"/proc/{pid}/ns/{ns}")
                        for ns in _NAMESPACES))
    except OSError:  # the raylet is gone, or not this user's to read
        return False


def _read(pid: int | str, name: str) -> str:
    return Path(f"/proc/{pid}/{name}").read_text()


def start_ahead(cluster: RayCluster) -> None:
    """Start this run's server ahead (forks_ahead.start_ahead), where the warm Ray's stubs
    ask for one and its forks would be what the raylet's workers are."""
    if cluster.fork_socket and confined_alike(cluster.raylet_pid):
        try:
            env = raylet_env.workers_env(cluster.raylet_pid)
        except OSError:  # the raylet ended meanwhile: the run finds no Ray
            return
        forks_ahead.start_ahead(env)


@contextlib.contextmanager
def job_server(cluster: RayCluster, job: str) -> Iterator[fork_server.ForkServer | None]:
    """The fork server of this driver's job (hex id `job`) while the block runs, linked where
    the warm node's stubs look for that job's; None where the raylet is gone or runs confined
    apart from this process, or the server cannot start: Ray then starts the workers."""
    log = logging.getLogger("hpo.cluster")
    if not confined_alike(cluster.raylet_pid):
        forks_ahead.end_ahead()
        log.info("workers start as Ray starts them: the warm Ray's raylet (pid %d) is gone, or "
                 "runs in another Slurm step, on other CPUs, or with other limits or "
                 "namespaces than this run", cluster.raylet_pid)
        yield None
        return
    with contextlib.ExitStack() as stack:
        try:
            forks = _server(stack, cluster.raylet_pid)
            if forks is not None:
                forks.start(cluster.raylet_pid, job,
                            link=Path(cluster.fork_socket.replace(worker_stub.JOB.decode(), job)))
        except OSError as error:  # no temp folder, the raylet gone, the warm folder gone
            log.warning("workers start as Ray starts them: no fork server for this run (%s)",
                        error)
            forks = None
        yield forks


def _server(stack: contextlib.ExitStack, raylet_pid: int) -> fork_server.ForkServer | None:
    """The server `hpo run` started ahead (start_ahead), or a new one in the raylet's
    environment; the stack ends it."""
    ahead = forks_ahead.taken_ahead()
    if ahead is not None:
        stack.enter_context(ahead[0])
        return ahead[2]
    run_dir = stack.enter_context(private_run_dir())
    return stack.enter_context(fork_server.serving(run_dir, raylet_env.workers_env(raylet_pid)))
