"""A Ray cluster over a Slurm allocation, from inside its batch script: start, wait, stop.

The head goes on the first node, one worker on each other node, each through its own srun
step (a lost node then ends only its own step). Readiness is asked of the cluster itself
(Ray's GCS: every node alive with the CPUs and GPUs it announced), with a timeout naming
the nodes that never joined. Teardown asks each node process to stop its own Ray
processes, and ends only the srun steps this process started, by their pid.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpo.cluster.auth import RayCluster, new_token, token_env
from hpo.cluster.node import (
    CONFIG_FILE,
    HEAD_FILE,
    NODES_DIR,
    PRELOAD_FILE,
    STOP_FILE,
    TOKEN_FILE,
    write_json,
)
from hpo.cluster.ray_logs import RAY_LOG_MARK
from hpo.cluster.render import srun_args
from hpo.cluster.slurm_env import Allocation, rocm_visible
from hpo.cluster.steps import Step, container_words, start_step
from hpo.errors import ClusterStartError
from hpo.ray_adapters import gcs
from hpo.spec.slurm import SlurmSettings

log = logging.getLogger("hpo.cluster")
STOP_GRACE_S = 20.0  # > the node processes' own grace (node.STOP_GRACE_S x 2)


@dataclass
class _Step:
    node: str
    log: Path
    proc: Step


def make_job_dir(root: str, job_id: str, options: SlurmSettings) -> Path:
    """A 0700 folder for this job (on the shared file system) with a fresh 0600 token."""
    base = Path(root).expanduser()
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    job_dir = base / job_id
    shutil.rmtree(job_dir, ignore_errors=True)  # a requeued job's leftovers
    job_dir.mkdir(mode=0o700)
    (job_dir / NODES_DIR).mkdir()
    new_token(job_dir)  # job_dir / TOKEN_FILE
    write_json(job_dir / CONFIG_FILE, {"interface": options.interface,
                                       "dashboard": options.dashboard,
                                       "timeout": options.startup_timeout_s,
                                       "hostname_suffix": options.hostname_suffix,
                                       "gpu_cores": options.gpu_cores})
    return job_dir


def _launch(alloc: Allocation, job_dir: Path, log_dir: Path) -> list[_Step]:
    log_dir.mkdir(parents=True, exist_ok=True)
    steps = []
    for node in alloc.nodes:
        role = "head" if node == alloc.head else "worker"
        log_file = log_dir / f"ray-{node}.log"
        args = srun_args(node, role, sys.executable, job_dir, log_file, alloc.cpus_on(node),
                         container_words())
        steps.append(_Step(node, log_file, start_step(args)))
    return steps


def gcs_listening(address: str) -> bool:
    # Ray's GcsClient blocks for 30 s on a GCS that is not up yet: knock first.
    host, _, port = address.rpartition(":")
    with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=1):
        return True
    return False


def _alive_nodes(client: Any) -> dict[str, dict[str, float]]:
    """Ray node IP -> its total resources, for the nodes the GCS holds alive."""
    infos = gcs.alive_node_infos(client, timeout=5)
    return {info.node_manager_address: dict(info.resources_total) for info in infos.values()}


def _missing(job_dir: Path, alloc: Allocation, alive: dict[str, dict[str, float]]) -> list[str]:
    """Nodes not yet in the cluster with the CPUs and GPUs they announced."""
    missing = []
    for node in alloc.nodes:
        path = job_dir / NODES_DIR / f"{node}.json"
        if not path.exists():
            missing.append(node)
            continue
        want = json.loads(path.read_text())
        have = alive.get(want["ip"])
        if (have is None or have.get("GPU", 0) != want["gpus"]
                or (want["cpus"] is not None and have.get("CPU", 0) != want["cpus"])):
            missing.append(node)
    return missing


def _check_steps(steps: list[_Step]) -> None:
    for step in steps:
        code = step.proc.poll()
        if code is not None:
            tail = _tail(step.log)
            raise ClusterStartError(f"Ray on {step.node} exited with code {code} during start-up"
                                    f"{': ' + tail.rstrip('.') if tail else ''}. Hint: see "
                                    f"{step.log}")


def _tail(path: Path) -> str:
    """The node log's last line of its own (not one of Ray's logs the node showed after)."""
    with contextlib.suppress(OSError):
        lines = [ln for ln in path.read_text(errors="replace").splitlines()
                 if ln.strip() and not ln.startswith(RAY_LOG_MARK)]
        return lines[-1][:300] if lines else ""
    return ""


def wait_ready(alloc: Allocation, job_dir: Path, steps: list[_Step], timeout: float) -> str:
    """Poll until every node joined with its resources; return the head's GCS address."""
    deadline = time.monotonic() + timeout
    missing, address, client, refused = list(alloc.nodes), None, None, ""
    while time.monotonic() < deadline:
        _check_steps(steps)
        head = job_dir / HEAD_FILE
        if address is None and head.exists():
            address = json.loads(head.read_text())["address"]
        if client is None and address is not None and gcs_listening(address):
            try:  # a GCS that listens may still refuse (seen once: our token rejected)
                client, refused = gcs.gcs_client(address), ""
            except Exception as exc:  # Ray's own errors: asked again until the deadline
                refused = f" (the head's GCS refused: {' '.join(str(exc).split())[:200]})"
        if client is not None:
            with contextlib.suppress(Exception):  # GCS still starting
                missing = _missing(job_dir, alloc, _alive_nodes(client))
            if not missing and address is not None:  # a client means an address
                return str(address)
        time.sleep(0.1)
    logs = ", ".join(str(s.log) for s in steps if s.node in missing)
    raise ClusterStartError(f"Ray cluster not ready after {timeout:.0f} s: "
                            f"{', '.join(missing)} never joined{refused}. Hint: see {logs}; raise "
                            "slurm.startup_timeout_s if the nodes are just slow")


def node_notes(job_dir: Path) -> tuple[str, ...]:
    """The lines the nodes published about their start (one per node short of CPUs)."""
    notes = []
    for path in sorted((job_dir / NODES_DIR).glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            note = json.loads(path.read_text()).get("note")
            if note:
                notes.append(str(note))
    return tuple(notes)


def stop(steps: list[_Step], job_dir: Path) -> None:
    """Ask every node process to stop Ray (a stop file: see node.py) and wait; SIGKILL to an
    srun that outstays the grace period (Slurm then kills what is left of its step)."""
    started = time.monotonic()
    (job_dir / STOP_FILE).touch()
    deadline = started + STOP_GRACE_S
    for step in steps:
        try:
            step.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            log.warning("srun step on %s did not stop; killing it", step.node)
            step.proc.kill()
            step.proc.wait()
    log.info("Ray stopped on %d node(s) in %.1f s", len(steps), time.monotonic() - started)


@contextlib.contextmanager
def ray_cluster(alloc: Allocation, options: SlurmSettings,
                log_dir: Path) -> Iterator[RayCluster]:
    """Start Ray on every node of the allocation, yield how to connect, stop it after.

    Example (inside a batch script, on the first node):
        >>> with ray_cluster(Allocation.from_env(os.environ), SlurmSettings(), logs) as c:
        ...     hpo.run("space.yaml", cluster=c)
    """
    # This process imports ray to watch the start: Ray 2.60 fails at import on AMD GPUs with
    # ROCR_VISIBLE_DEVICES alone (LUMI); HIP's 0..n-1 selects the same GPUs.
    os.environ.update(rocm_visible(os.environ))
    job_dir = make_job_dir(options.job_dir, alloc.job_id, options)
    steps: list[_Step] = []
    try:
        steps = _launch(alloc, job_dir, log_dir)
        with token_env(job_dir / TOKEN_FILE):
            address = wait_ready(alloc, job_dir, steps, options.startup_timeout_s)
        head = json.loads((job_dir / HEAD_FILE).read_text())
        yield RayCluster(address, head["ip"], job_dir / TOKEN_FILE, node_notes(job_dir),
                         preload_file=str(job_dir / PRELOAD_FILE))
    finally:
        stop(steps, job_dir)
        shutil.rmtree(job_dir, ignore_errors=True)
