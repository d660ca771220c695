"""Each way of getting a Ray for a run, behind one protocol (RayBackend: start, address,
close), one module each:
    ray_session  the embedded private Ray a run starts, and the connection to a running one
                 (a Slurm job's cluster, a warm local Ray): `backend_for` picks one
    kept_ray     the embedded Ray a run from Python leaves running for the next run
    users_ray    the Ray this process's own `ray.init` started (a notebook's)
    warm_head    a warm local Ray (`hpo local up`), with warm_forks its runs' fork servers
    node_start   a Slurm node's `ray start` (hpo.cluster.node launches it)
    forks_ahead  the fork server `hpo run` starts ahead of its Ray
    ray_log      Ray's log records into the run's hpo.log
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from hpo.cluster.auth import RayCluster


class RayBackend(Protocol):
    """One way of getting a Ray for a run."""

    def start(self) -> dict[str, float]:
        """Start the Ray, or connect to it; its resources."""
        ...

    def address(self) -> str | None:
        """Where other processes reach it (None: this process's own, not shared)."""
        ...

    def close(self, failed: BaseException | None = None) -> None:
        """Stop it, keep it, or disconnect, as its owner expects (`failed`: why the run
        ended early, if it did: an embedded Ray is not kept after an interrupt)."""
        ...


class _Session:
    """A RayBackend over a session context manager that yields the Ray's resources."""

    def __init__(self, session: contextlib.AbstractContextManager[dict[str, float]],
                 address: str | None) -> None:
        self._session, self._address = session, address

    def start(self) -> dict[str, float]:
        return self._session.__enter__()

    def address(self) -> str | None:
        return self._address

    def close(self, failed: BaseException | None = None) -> None:
        if failed is None:
            self._session.__exit__(None, None, None)
        else:
            self._session.__exit__(type(failed), failed, failed.__traceback__)


def backend_for(cluster: RayCluster | None, log_file: Path, num_cpus: int | None = None,
                keep: bool = False) -> RayBackend:
    """The run's Ray: a connection to `cluster`, else an embedded one (kept, the process's
    own, or started now: hpo.driver.backends.ray_session.embedded_ray)."""
    from hpo.driver.backends.ray_session import connected_ray, embedded_ray

    if cluster is not None:
        return _Session(connected_ray(cluster, log_file), cluster.address)
    return _Session(embedded_ray(log_file, num_cpus=num_cpus, keep=keep), None)
