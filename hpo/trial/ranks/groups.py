"""The ranks of a trial: N Ray actors inside the trial's placement group.

Horovod's own `RayExecutor` places its workers in the current placement group and sets up its
Gloo/NCCL rendezvous; for DDP a few plain actors get MASTER_ADDR/RANK/WORLD_SIZE. A started
group can serve one trial after another (`reopen` between them, see hpo.trial.ranks.pool).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any, Protocol

import ray
from ray.util.placement_group import get_current_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from hpo.errors import RunError
from hpo.spec.model import Distributed


class RankGroup(Protocol):
    def start(self) -> None: ...

    def reopen(self) -> None:
        """Make the started ranks ready to init their backend once more, for a new trial."""

    def run(self, func: Callable[..., Any], args: list[Any]) -> list[ray.ObjectRef]: ...

    def shutdown(self) -> None: ...


def rank_group(spec: Distributed) -> RankGroup:
    return HorovodGroup(spec) if spec.backend == "horovod" else DdpGroup(spec)


class HorovodGroup:
    def __init__(self, spec: Distributed) -> None:
        try:
            from horovod.ray import RayExecutor
        except ImportError as exc:
            raise RunError("distributed.backend is horovod but Horovod is not installed. "
                           "Hint: run `hpo install horovod`, or use backend: ddp") from exc
        settings = RayExecutor.create_settings(timeout_s=min(spec.timeout_s, 300))
        use_gpu = spec.gpus_per_worker > 0
        self._executor = RayExecutor(
            settings, num_workers=spec.workers, cpus_per_worker=spec.cpus_per_worker,
            use_gpu=use_gpu, gpus_per_worker=spec.gpus_per_worker if use_gpu else None)
        self._env = dict(spec.env)

    def start(self) -> None:
        self._executor.start(extra_env_vars=self._env)

    def reopen(self) -> None:
        # The ranks keep their rendezvous address; the server (in this process) forgets
        # whatever a trial that ended mid-way may have left in its store.
        from horovod.runner.common.util import hosts

        coordinator = self._executor.adapter.coordinator
        plan = hosts.get_host_assignments(hosts.parse_hosts(coordinator.node_id_string),
                                          coordinator.world_size)
        coordinator.rendezvous.init(plan)

    def run(self, func: Callable[..., Any], args: list[Any]) -> list[ray.ObjectRef]:
        return self._executor.run_remote(func, args=args)

    def shutdown(self) -> None:
        adapter = getattr(self._executor, "adapter", None)
        if adapter is None:  # never started
            return
        # RayExecutor.shutdown only drops its handles: end the ranks now, not at some GC, and
        # stop the rendezvous server it left listening in this (reused) trial process.
        for worker in getattr(adapter, "workers", None) or []:
            ray.kill(worker)
        rendezvous = getattr(getattr(adapter, "coordinator", None), "rendezvous", None)
        if rendezvous is not None:
            rendezvous.stop()
        self._executor.shutdown()


@ray.remote
class _DdpRank:
    def address(self) -> tuple[str, str, int]:
        with socket.socket() as sock:  # a free port for the rendezvous, chosen on rank 0's node
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), port

    def run(self, env: dict[str, str], func: Callable[..., Any], args: list[Any]) -> Any:
        os.environ.update(env)
        return func(*args)


class DdpGroup:
    def __init__(self, spec: Distributed) -> None:
        self._spec = spec
        self._ranks: list[Any] = []
        self._envs: list[dict[str, str]] = []

    def start(self) -> None:
        spec, group = self._spec, get_current_placement_group()
        placement = PlacementGroupSchedulingStrategy(group) if group else None
        options = {"num_cpus": spec.cpus_per_worker, "num_gpus": spec.gpus_per_worker,
                   "scheduling_strategy": placement}
        start = _DdpRank.options  # type: ignore[attr-defined]  # added by @ray.remote
        self._ranks = [start(**options).remote() for _ in range(spec.workers)]
        self.reopen()

    def reopen(self) -> None:
        # A fresh rendezvous port from rank 0 for every trial: the last trial's store closed
        # its own.
        spec = self._spec
        addresses = ray.get([rank.address.remote() for rank in self._ranks])
        _, master_ip, master_port = addresses[0]
        nodes = [node for node, _, _ in addresses]
        self._envs = [{
            **spec.env, "MASTER_ADDR": master_ip, "MASTER_PORT": str(master_port),
            "RANK": str(index), "WORLD_SIZE": str(spec.workers),
            "LOCAL_RANK": str(nodes[:index].count(node)),
            "LOCAL_WORLD_SIZE": str(nodes.count(node)),
        } for index, node in enumerate(nodes)]

    def run(self, func: Callable[..., Any], args: list[Any]) -> list[ray.ObjectRef]:
        pairs = zip(self._ranks, self._envs, strict=True)
        return [rank.run.remote(env, func, args) for rank, env in pairs]

    def shutdown(self) -> None:
        for rank in self._ranks:
            ray.kill(rank)
        self._ranks = []
