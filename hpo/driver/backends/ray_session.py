"""An embedded Ray private to one run (its own temp dir, token and no dashboard), or a
connection to an already running cluster (a Slurm job's own) by explicit address and token.
A run from Python may keep its embedded Ray for the next run in the same process (a notebook
skips Ray's start-up); `shutdown()` ends it.

Token auth is on with a per-run token in a 0600 file (so other users on a shared login node
cannot attach), and nothing is written to ~/.ray (which would flip later `ray start`s of the
same user into token mode). Ray's own log lines go to the experiment's log file
(hpo.driver.backends.ray_log). The embedded Ray starts without the three helper processes a
one-machine run never uses (see _lean_head). A run on a warm local Ray (hpo.cluster.warm)
starts a fork server for its job on that Ray's node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpo.cluster import own_import
from hpo.cluster.auth import RayCluster, environ_overlay, new_token, token_env
from hpo.cluster.run_dir import private_run_dir
from hpo.cluster.slurm_env import rocm_visible
from hpo.driver.backends import forks_ahead, kept_ray, warm_forks
from hpo.driver.backends.ray_log import log_ray_to, stop_logging
from hpo.driver.backends.users_ray import users_ray
from hpo.errors import ConfigError
from hpo.ray_adapters import gate
from hpo.ray_adapters.fast_start import fork_server, lean_head, runtime_env
from hpo.ray_adapters.gcs import loopback_kept


def _lean_head(forks: fork_server.ForkServer | None,
               agent_port: int) -> contextlib.AbstractContextManager[None]:
    """`ray.init` without the autoscaler monitor (a fixed local node has nothing to scale),
    the log monitor (workers' logs stay in files: log_to_driver=False) and the dashboard's
    head process (with include_dashboard=False it still starts, serves only Ray's usage
    statistics, and `ray.init` waits for it). On 2 cores the monitors cost 1 s before the
    first result and 2 s a run, the dashboard process 0.9 s of `ray.init`
    (docs/benchmarks.md). `ray start` has switches for the monitors
    (--no-monitor, --include-log-monitor=false) and none for the dashboard process; `ray.init`
    has none at all, so they are set for this call only. With a fork server, the raylet's
    worker command is its stub (hpo.ray_adapters.fast_start.fork_server). `ray.init` also sees the
    node registered within 20 ms instead of Ray's 1 s look (hpo.ray_adapters.fast_start.lean_head).
    Its runtime-env agent gets agent_port, held for it, and starts once asked
    (runtime_env_private)."""
    def started(raylet_pid: int) -> None:
        runtime_env.note_raylet(raylet_pid)
        if forks is not None:
            forks.start(raylet_pid)

    if not gate.is_on("lean-head"):  # Ray's own start: its raylet's pid is not told
        return contextlib.nullcontext()

    return lean_head.lean_head(forks.setup_worker if forks else None,
                                       on_raylet=started, agent_port=agent_port)


# Ray 2.60 on AMD GPUs fails at `import ray` (in any thread: the trainable is imported beside
# ray.init) when ROCR_VISIBLE_DEVICES is set alone, as LUMI's Slurm does: add HIP's 0..n-1,
# before anything imports ray. It selects what ROCR already selects, so it stays set.
os.environ.update(rocm_visible(os.environ))


def _import_ray_local_only() -> None:
    """Ray's gRPC servers listen on loopback only when the node's IP is 127.0.0.1, and
    `ray.init` keeps a loopback IP only in a local-only Ray (Ray's own switch,
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, read once at `import ray`): so the embedded Ray binds
    to 127.0.0.1. The switch is unset at once: a Slurm job's srun'd `ray start`s inherit this
    environment and would refuse to join. In a process that imported ray before hpo, the
    embedded Ray's start sets the switch's constant for its block instead (loopback_kept)."""
    if "ray" in sys.modules:
        return
    saved = os.environ.get(LOCAL_ONLY)
    os.environ[LOCAL_ONLY] = "0"
    try:
        import ray  # noqa: F401
    finally:
        if saved is None:
            del os.environ[LOCAL_ONLY]
        else:
            os.environ[LOCAL_ONLY] = saved


LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_import_ray_local_only()


# The fork server of the embedded Ray while it runs (None without one).
_forks: fork_server.ForkServer | None = None


def starts_per_core() -> int:
    """How many trial actors may start at once for each core: more where workers are forked
    (hpo.ray_adapters.fast_start.fork_server), where a start costs little CPU."""
    return fork_server.STARTS_PER_CORE if _forks is not None and _forks.forking else 1


# Where the nodes of the Slurm job whose Ray this process is connected to look for the
# libraries to preload (hpo.driver.backends.node_start), while connected (None otherwise).
_nodes_preload: Path | None = None


def preload_for(trainable: Any) -> None:
    """Have the Ray's workers start with the heavy libraries a worker imports with this
    trainable (its torch), where fork servers make them: this process's (an embedded or a
    warm Ray's), or a Slurm job's nodes', told through the job's folder."""
    if _forks is not None:
        _forks.preload_for(trainable)
    elif _nodes_preload is not None:
        from hpo.cluster.node import write_json

        try:
            write_json(_nodes_preload, {"modules": fork_server.imported_with(trainable)})
        except OSError as error:  # only a speed-up: the workers import what they need
            logging.getLogger("hpo.cluster").warning(
                "the nodes' fork servers were not told what to import (%s)", error)


@contextlib.contextmanager
def _nodes_told(cluster: RayCluster) -> Iterator[None]:
    """preload_for tells the cluster's nodes while the block runs (where they listen)."""
    global _nodes_preload
    _nodes_preload = Path(cluster.preload_file) if cluster.preload_file else None
    try:
        yield
    finally:
        _nodes_preload = None


def _start(num_cpus: int | None, num_gpus: int | None) -> contextlib.ExitStack:
    """A private local Ray; closing the returned stack shuts it down and removes its files."""
    import ray

    stack = contextlib.ExitStack()
    try:
        run_dir, forks = _run_dir_and_forks(stack)
        _set_forks(forks)
        stack.callback(_set_forks, None)
        stack.callback(runtime_env.note_raylet, None)
        agent_port = stack.enter_context(runtime_env.reserved_port())
        workers_env = {**runtime_env.TUNE_DEFAULT_ENV, **(forks.env if forks else {}),
                       **own_import.workers_env()}  # they import this hpo, not ./hpo
        # loopback_kept: on 127.0.0.1 also where ray was imported before hpo (a notebook that
        # builds its search space with ray.tune), which _import_ray_local_only cannot reach.
        with _lean_head(forks, agent_port), environ_overlay(workers_env), loopback_kept():
            # Ray makes its temp dir world-writable (made for a shared /tmp/ray): give it a
            # child of the private run dir, so nobody else can enter it at any time.
            ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                     _temp_dir=str(run_dir / "r"), log_to_driver=False,
                     logging_level=logging.WARNING,
                     _system_config={**lean_head.NODE_CONFIG,
                                     **(fork_server.system_config() if forks else {})})
    except BaseException:
        stack.close()  # undo what was done
        raise
    stack.callback(kept_ray.shutdown_if_on, kept_ray.node_id())
    return stack


def _run_dir_and_forks(stack: contextlib.ExitStack) -> tuple[Path, fork_server.ForkServer | None]:
    """The run's private folder, its token set, and a fork server: those `hpo run` started
    ahead (forks_ahead.start_ahead), or new ones; the stack ends them."""
    ahead = forks_ahead.taken_ahead()
    if ahead is not None:
        held, run_dir, forks = ahead
        stack.enter_context(held)
    else:
        run_dir = stack.enter_context(private_run_dir())
        forks = stack.enter_context(fork_server.serving(run_dir))
    if forks is not None and not (gate.is_on("fork-workers") and gate.is_on("lean-head")):
        forks = None  # the checks found a mismatch: a server started ahead idles until the end
    stack.enter_context(token_env(new_token(run_dir)))
    return run_dir, forks


@contextlib.contextmanager
def _job_forks(cluster: RayCluster) -> Iterator[None]:
    """On a warm local Ray (hpo.cluster.warm): this driver's job's fork server
    (hpo.driver.backends.warm_forks) while the block runs; none where the node has no stubs."""
    if not cluster.fork_socket:
        yield
        return
    import ray

    job = ray.get_runtime_context().get_job_id()
    with warm_forks.job_server(cluster, job) as forks, contextlib.ExitStack() as stack:
        if forks is not None:
            _set_forks(forks)
            stack.callback(_set_forks, None)
            runtime_env.note_raylet(cluster.raylet_pid)
            stack.callback(runtime_env.note_raylet, None)
        yield


def _set_forks(forks: fork_server.ForkServer | None) -> None:
    global _forks
    _forks = forks


def shutdown() -> None:
    """End the embedded Ray a run kept (no-op when none is kept)."""
    kept_ray.shutdown()


@contextlib.contextmanager
def embedded_ray(log_file: Path, num_cpus: int | None = None, num_gpus: int | None = None,
                 keep: bool = False) -> Iterator[dict[str, float]]:
    """Start a private local Ray (or reuse the one an earlier run kept, if started alike, or
    the one this process's own `ray.init` started), yield its resources; then shut it down and
    remove its files, or with `keep`, leave it running for the next run in this process."""
    import ray

    stack = kept_ray.take((num_cpus, num_gpus))
    if stack is None and ray.is_initialized():
        with users_ray(log_file, num_cpus) as resources:
            yield resources
        return
    stack = stack or _start(num_cpus, num_gpus)
    handler = log_ray_to(log_file)
    interrupted = False
    try:
        yield ray.cluster_resources()
    except BaseException as exc:
        # Tune ends its trial actors after an Exception only: after a KeyboardInterrupt (a
        # callback's, or one in a thread) they would hold a kept Ray's CPUs, and the next
        # run would wait for them forever
        interrupted = not isinstance(exc, Exception)
        raise
    finally:
        if keep and not interrupted and _forks is not None:
            _forks.report()  # what its server wrote, while hpo.log takes it
        try:
            if keep and not interrupted:
                kept_ray.keep(stack, (num_cpus, num_gpus))
            else:
                stack.close()  # Ray's stop and its fork server's last words go to hpo.log too
        finally:
            stop_logging(handler)


def check_connectable(cluster: RayCluster | None, source: str) -> None:
    """A run on `cluster` takes this process's one Ray connection: refused before anything
    starts where the process's own `ray.init` holds it (Ray's "called ray.init twice")."""
    import ray

    if cluster is not None and ray.is_initialized() and not kept_ray.connected():
        raise ConfigError(source, "cluster", "this process is connected to a Ray of its own "
                          "(its ray.init)", "ray.shutdown() first, or leave cluster= out to "
                          "run on that Ray")


@contextlib.contextmanager
def connected_ray(cluster: RayCluster, log_file: Path) -> Iterator[dict[str, float]]:
    """Connect to a running cluster by explicit address (never auto-detection), yield its
    resources, disconnect (the cluster itself is left running for its owner to stop)."""
    import ray

    shutdown()  # an embedded Ray kept by an earlier run: one connection per process
    loopback = loopback_kept() if cluster.node_ip == "127.0.0.1" else \
        contextlib.nullcontext()
    with token_env(cluster.token_file):
        with loopback:  # a warm local Ray's
            ray.init(address=cluster.address, _node_ip_address=cluster.node_ip,
                     log_to_driver=False, logging_level=logging.WARNING)
        handler = log_ray_to(log_file)
        logging.getLogger("hpo.cluster").info("connected to Ray at %s", cluster.address)
        for note in cluster.notes:
            logging.getLogger("hpo.cluster").warning(note)
        try:
            with _job_forks(cluster), _nodes_told(cluster):
                yield ray.cluster_resources()
        finally:
            try:
                ray.shutdown()
            finally:  # else this run's log would take the next connected run's records
                stop_logging(handler)
