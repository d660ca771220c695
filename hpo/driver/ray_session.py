"""An embedded Ray private to one run (its own temp dir, token and no dashboard), or a
connection to an already running cluster (a Slurm job's own) by explicit address and token.

Token auth is on with a per-run token in a 0600 file (so other users on a shared login node
cannot attach), and nothing is written to ~/.ray (which would flip later `ray start`s of the
same user into token mode). Ray's own log lines go to the experiment's log file. The embedded
Ray starts without the two helper processes a one-machine run never uses (see _lean_head).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpo.cluster.auth import RayCluster, new_token, token_env
from hpo.driver.run_dir import private_run_dir


def _log_ray_to(log_file: Path) -> None:
    """Send the driver's Ray log records to the run's log file instead of the terminal."""
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("ray", "ray.tune", "ray.train", "ray.data"):
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            if isinstance(old, logging.StreamHandler) and not isinstance(
                    old, logging.FileHandler):
                logger.removeHandler(old)
        logger.addHandler(handler)
        logger.propagate = False


@contextlib.contextmanager
def _lean_head() -> Iterator[None]:
    """`ray.init` without the autoscaler monitor (a fixed local node has nothing to scale) and
    the log monitor (workers' logs stay in files: log_to_driver=False), which cost 1 s before
    the first result and 2 s a run on 2 cores (docs/benchmarks.md). `ray start` has switches
    for both (--no-monitor, --include-log-monitor=false); `ray.init` has none, so they are set
    on the parameters it builds, for this call only."""
    from ray._private.parameter import RayParams

    original = RayParams.__init__

    def lean(self: RayParams, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.no_monitor, self.include_log_monitor = True, False

    RayParams.__init__ = lean  # type: ignore[method-assign]
    try:
        yield
    finally:
        RayParams.__init__ = original  # type: ignore[method-assign]


@contextlib.contextmanager
def embedded_ray(log_file: Path, num_cpus: int | None = None,
                 num_gpus: int | None = None) -> Iterator[dict[str, float]]:
    """Start a private local Ray, yield its resources, shut it down and remove its files."""
    import ray

    with private_run_dir() as run_dir, token_env(new_token(run_dir)):
        with _lean_head():
            # Ray makes its temp dir world-writable (made for a shared /tmp/ray): give it a
            # child of the private run dir, so nobody else can enter it at any time.
            ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                     _temp_dir=str(run_dir / "r"), log_to_driver=False,
                     logging_level=logging.WARNING)
        try:
            _log_ray_to(log_file)
            yield ray.cluster_resources()
        finally:
            ray.shutdown()


@contextlib.contextmanager
def connected_ray(cluster: RayCluster, log_file: Path) -> Iterator[dict[str, float]]:
    """Connect to a running cluster by explicit address (never auto-detection), yield its
    resources, disconnect (the cluster itself is left running for its owner to stop)."""
    import ray

    with token_env(cluster.token_file):
        ray.init(address=cluster.address, _node_ip_address=cluster.node_ip,
                 log_to_driver=False, logging_level=logging.WARNING)
        _log_ray_to(log_file)
        try:
            yield ray.cluster_resources()
        finally:
            ray.shutdown()
