"""`ray start` with its node's workers forked (hpo.ray_adapters.fast_start.fork_server): Ray's own
command, run in this process inside hpo.ray_adapters.fast_start.lean_head.lean_head, as an embedded
run starts its node, with hpo's stub (hpo.ray_adapters.fast_start.worker_stub) as the raylet's
worker command. A warm local Ray's head uses it (hpo.driver.backends.warm_head), and so does each
node of a Slurm job (hpo.cluster.node), where a fresh worker would import Ray, Tune and their
libraries from the site's shared file system (about 2 CPU-s each here, and every worker of a node at
once):

    python -m hpo.driver.backends.node_start PRIVATE_DIR PRELOAD_FILE [ray start's arguments]

A Slurm node's fork server (its socket in PRIVATE_DIR, the job's private folder on the node;
its output in the node's log) is started here, in the node's own srun step, so its forks
have the step's CPUs, memory and devices, as the raylet's own workers would. It serves the
node's first job: the study's driver, the first to connect to the job's Ray (the batch
script waits for the nodes through the GCS, which makes no job). Ray starts any other job's
workers itself, as it does where forks are not available. Once the driver has imported the
trainable, it writes PRELOAD_FILE (in the job's folder, on the shared file system) with the
heavy libraries a worker imports with it (torch:
hpo.ray_adapters.fast_start.fork_server.imported_with),
which the server then imports once for the forks it makes after, instead of each worker.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpo.cluster import own_import
from hpo.ray_adapters import gate
from hpo.ray_adapters.fast_start import fork_server, lean_head, worker_stub

PRELOAD_LOOK_S = 0.2  # a stat of a file on the shared file system, per node


def ray_start(ray_args: list[str], config: dict[str, Any], stubs_env: dict[str, str] | None,
              on_raylet: Callable[[int], None], look_fast: bool = True) -> None:
    """`ray start` with ray_args (those after `start`) in this process, inside lean_head
    (look_fast: its); `config` the head's system config (a worker node takes its head's).
    With stubs_env (what the stubs are told: fork_server.stubs_env, with Tune's variables
    where the node's workers inherit them: hpo.ray_adapters.fast_start.runtime_env), the raylet's
    worker command is the stub, and its environment has stubs_env for its workers."""
    from ray.scripts.scripts import cli

    if stubs_env is not None:  # every worker inherits them from the raylet
        os.environ.update(stubs_env)
    extra = [f"--system-config={json.dumps(config)}"] if config and "--head" in ray_args else []
    lean = gate.applied("lean-head", lambda: lean_head.lean_head(
        worker_stub.__file__ if stubs_env is not None else None, on_raylet=on_raylet,
        look_fast=look_fast))
    with lean:
        cli.main(args=["start", *ray_args, *extra], prog_name="ray", standalone_mode=False)


def main(private_dir: Path, preload_file: Path, ray_args: list[str]) -> None:
    """A Slurm node's `ray start`, its workers forked by a server of this node where forks are
    available; Ray's own command as it is otherwise."""
    # A start tried again (hpo.cluster.node) finds the socket of the one it killed.
    (private_dir / fork_server.SOCKET_NAME).unlink(missing_ok=True)
    # The server's own output (a failed preload, "not forking") goes where this node's does,
    # the experiment's Slurm log of the node: PRIVATE_DIR is removed when the node stops.
    sys.stdout.flush()
    os.environ.update(own_import.workers_env())  # the workers import this hpo, not ./hpo
    gate.check_at_start("ray start")  # the node's own warnings, in its Slurm log
    with fork_server.serving(private_dir, output=sys.stdout.fileno()) as forks:
        if forks is None or not gate.is_on("fork-workers"):
            from ray.scripts.scripts import cli

            cli.main(args=["start", *ray_args], prog_name="ray", standalone_mode=False)
            return
        serving = forks  # for mypy: not None below

        def started(raylet_pid: int) -> None:
            serving.start(raylet_pid)  # the first order: the preload comes after it
            threading.Thread(target=_preload_when_told, args=(serving, preload_file),
                             name="hpo-preload", daemon=True).start()

        # Not Tune's variables: the driver cannot tell that this node's workers have them,
        # so its trial actors carry them in their runtime env (as on any connected Ray).
        ray_start(ray_args, fork_server.NO_PRESTART, forks.env, started, look_fast=False)


def _preload_when_told(forks: fork_server.ForkServer, preload_file: Path) -> None:
    """Once the study's driver has written preload_file, have the server import what it
    names, for the forks it makes after (looked for every PRELOAD_LOOK_S, as long as the node
    runs: this thread ends with it)."""
    while True:
        try:
            modules = json.loads(preload_file.read_text())["modules"]
            break
        except FileNotFoundError:  # not yet (a shared file system's other errors: none)
            time.sleep(PRELOAD_LOOK_S)
        except (OSError, ValueError, KeyError, TypeError):
            return  # the workers import what they need themselves
    forks.preload([str(name) for name in modules])


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
