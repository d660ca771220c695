"""A node's raylet's environment: what it is given for the worker stubs it starts
(hpo.ray_adapters.fast_start.worker_stub), and what it was started with, which its workers
start in: what the fork server (hpo.ray_adapters.fast_start.fork_server) imports Ray in, and
what a trial actor's runtime env is judged against (hpo.ray_adapters.fast_start.runtime_env)."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

from hpo.ray_adapters.fast_start import worker_stub

SETUP_WORKER = "setup_worker.py"  # ray._private.ray_constants.SETUP_WORKER_FILENAME

# How long environ_of waits for a process's exec to set its environment (a few ms at most).
ENVIRON_WAIT_S = 10.0


def stubs_env(socket_path: str) -> dict[str, str]:
    """What a node's raylet is given in its environment for the stubs it starts (each
    inherits it): where the fork server's socket is (with worker_stub.JOB for a warm node's
    per-job servers), and Ray's own setup_worker.py for a worker the server does not fork."""
    return {worker_stub.SERVER_ENV: socket_path, worker_stub.RAY_SETUP_ENV: ray_setup_worker()}


def ray_setup_worker() -> str:
    """Ray's setup_worker.py, beside its default_worker.py in ray/_private/workers/, found
    without importing Ray: `hpo run` starts the server before hpo.driver.backends.ray_session
    imports Ray, local-only (loopback), beside the server's own imports."""
    spec = importlib.util.find_spec("ray")
    places = spec.submodule_search_locations if spec is not None else None
    root = Path(places[0]) if places else Path("ray")
    return str(root / "_private" / "workers" / SETUP_WORKER)


def workers_env(raylet_pid: int) -> dict[str, str]:
    """The environment a raylet's workers start in: the raylet's own, but Ray's allocator
    (LD_PRELOAD, for the raylet alone)."""
    env = environ_of(raylet_pid)
    env.pop("LD_PRELOAD", None)
    return env


def environ_of(pid: int, wait_s: float = ENVIRON_WAIT_S) -> dict[str, str]:
    """The environment process `pid` was started with (/proc/<pid>/environ). A process still
    in its exec reads as empty: Popen returns once the exec has closed its close-on-exec
    pipe, and the kernel sets the new environment's bounds after that (3 reads in 1,000
    right after that close saw it empty, on 2 busy cores). A fork server given an empty
    environment imported Ray without RAY_AUTH_MODE, and its forks sent the GCS no token:
    read again until it is not empty (a process started with none: {} after wait_s)."""
    deadline = time.monotonic() + wait_s
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    while not raw and time.monotonic() < deadline:
        time.sleep(0.001)
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)
    return {os.fsdecode(key): os.fsdecode(value) for key, value in pairs}
