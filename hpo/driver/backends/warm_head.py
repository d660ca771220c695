"""`ray start --head` for the warm local Ray (hpo.cluster.warm): Ray's own command, run in
this process inside hpo.ray_adapters.fast_start.lean_head.lean_head, as an embedded run starts its
node: no dashboard process, a minimal dashboard agent niced. Where workers can be forked
(hpo.ray_adapters.fast_start.fork_server.available), its raylet's worker command is hpo's stub
(hpo.ray_adapters.fast_start.worker_stub), which asks the fork server of the worker's own job (each
`hpo run` on the warm Ray starts one: its workers are forks, not fresh Pythons that import Ray and
Tune again, about 2 CPU-s each), and its last line of output is the raylet's pid.

    python -m hpo.driver.backends.warm_head SOCKET [ray start's arguments]

SOCKET: where the stubs look for a job's fork server, with {job} for the job's ID.
"""

from __future__ import annotations

import os
import sys

from hpo.cluster import own_import
from hpo.cluster.warm import PID_LINE
from hpo.driver.backends import node_start
from hpo.ray_adapters.fast_start import fork_server, lean_head, raylet_env, runtime_env


def main(socket_path: str, ray_args: list[str]) -> None:
    forks = fork_server.available()
    config = {**lean_head.NODE_CONFIG, **(fork_server.system_config() if forks else {})}
    raylets: list[int] = []
    # Tune's variables too: a run on this Ray declares its trial actors without them
    # (hpo.ray_adapters.fast_start.runtime_env reads them in the raylet's environment).
    stubs_env = {**raylet_env.stubs_env(socket_path), **runtime_env.TUNE_DEFAULT_ENV}
    os.environ.update(own_import.workers_env())  # its workers import this hpo, not ./hpo
    node_start.ray_start(ray_args, config, stubs_env if forks else None, raylets.append)
    if forks:
        print(f"{PID_LINE}{raylets[0]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
