"""How Tune's fit starts trial actors and gives kept ones to new trials, as hpo changes it for
a run's speed: every reach into Ray's private parts for it, in one place, as read
from Ray 2.60.0.

Ray names none of these public; tests/driver/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - TuneController._maybe_reuse_cached_actor(self, trial), which gives an actor kept for reuse
    to a trial (stopping the trial's own, started or not), wrapped for a block
    (cached_actors_to_waiting_trials) with what it reads: the controller's ._trial_to_actor,
    ._resetting_trials, ._actor_cache.has_cached_object(key), ._resources_to_pending_trials
    (a placement group factory -> its pending trials), ._staged_trials and
    ._actor_manager.is_actor_started(tracked_actor), and
    ._schedule_trial_pause(self, trial, should_checkpoint) wrapped to note the trials paused;
  - RayActorManager._try_start_actors(self, max_actors=None), which creates the Ray actor of
    each pending actor whose resources are ready, taking them from the lists in
    ._resource_request_to_pending_actors (a resource request -> its pending actors, the
    first first), each created one into ._live_actors_to_ray_actors_resources with its
    `__ray_ready__` future in ._tracked_actors_to_state_futures (a tracked actor -> its
    pending start and stop futures; the start's leaves when it resolves), wrapped for a
    block (staggered_actor_starts).
Ray is imported only when one of these is called.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

from hpo.cluster.slurm_env import usable_cores
from hpo.ray_adapters.reading import method_params, replaced, sets_or_defines


def start_cap(per_core: int = 1) -> int:
    """How many trial actors may start at once: the CPU cores of the cluster's nodes, each
    node's Ray CPUs, and on this machine no more than per_core for each core this process
    may use (an embedded Ray's CPUs are logical: --cpus 32 on 2 cores)."""
    import ray

    here = ray.util.get_node_ip_address()
    mine = usable_cores()
    cores = [min(cpus, mine * per_core) if node["NodeManagerAddress"] == here else cpus
             for node in ray.nodes() if node["Alive"]
             for cpus in [int(node["Resources"].get("CPU", 0))]]
    return max(1, sum(cores))


@contextlib.contextmanager
def staggered_actor_starts(cap: int) -> Iterator[None]:
    """While the block runs, at most `cap` trial actors start at once (created, their
    `__ray_ready__` not yet resolved); the others wait their turn in the actor manager's
    queue (their resources reserved, as Tune reserves them for any actor it has asked for),
    and may be served by an actor Tune keeps for reuse meanwhile; restored after.

    A trial actor's start costs its worker 1-2 CPU-s (importing ray.tune and the
    trainable). Tune asks for every slot's actor at once, and each worker then shares the
    node's cores with all the others: on 2 cores, the first of 8 trials ran 11.5 s after
    launch, all of them within the same second. Taken `cap` at a time, the first ran at
    6.2 s, and a short trial's actor serves the next trial before most workers exist."""
    from ray.air.execution._internal.actor_manager import RayActorManager

    starting: dict[Any, dict[Any, Any]] = {}  # a manager -> {its starting actor: the future}

    def capped(original: Any) -> Any:
        def try_start(self: Any, max_actors: int | None = None) -> int:
            mine = starting.setdefault(self, {})
            _forget_started(self, mine)
            room = cap - len(mine)
            if room <= 0:
                return 0
            before = set(self._live_actors_to_ray_actors_resources)
            with _queues_cut_to(self._resource_request_to_pending_actors, room):
                started = int(original(self, max_actors))
            for actor in self._live_actors_to_ray_actors_resources.keys() - before:
                mine[actor] = next(iter(self._tracked_actors_to_state_futures[actor]))
            return started
        return try_start

    with replaced(RayActorManager, "_try_start_actors", capped):
        yield


def _forget_started(manager: Any, starting: dict[Any, Any]) -> None:
    """Drop the actors whose start resolved, failed or was stopped."""
    for actor, future in list(starting.items()):
        if future not in manager._tracked_actors_to_state_futures.get(actor, ()):
            del starting[actor]


@contextlib.contextmanager
def _queues_cut_to(queues: dict[Any, list[Any]], room: int) -> Iterator[None]:
    """While the block runs, the queues together hold their first `room` entries only; the
    rest go back behind what is left in each, in their order."""
    held = {}
    for key, queue in queues.items():
        held[key], queue[:] = queue[room:], queue[:room]
        room -= len(queue)
    try:
        yield
    finally:
        for key, rest in held.items():
            queues[key].extend(rest)


@contextlib.contextmanager
def cached_actors_to_waiting_trials() -> Iterator[None]:
    """While the block runs, an actor Tune keeps for reuse (reuse_actors) goes to a pending
    trial still waiting for its resources, never to one whose own actor is already up or
    coming up, unless the trial was paused in this run; restored after.

    Tune gave it to the trial it chose, stopping that trial's starting actor. The resources
    so freed started an actor for the next trial, which the next kept actor took over in turn:
    where a worker takes longer to start than a trial to run (short trials, or a busy node),
    Tune went on starting processes and stopping them before their first trial (68 worker
    processes for 32 slots, most of the CPU of a run of 2 s trials).

    A paused trial resuming (as after PBT's exploit) takes the kept actor as in Tune: it
    resets to the trial's config instead of a new setup, which PBT's reuse is for (with
    forked workers under load, no exploit reused one otherwise)."""
    from ray.tune.execution.tune_controller import TuneController

    paused: weakref.WeakSet[Any] = weakref.WeakSet()

    def noting(original: Any) -> Any:
        def pause(self: Any, trial: Any, should_checkpoint: bool = True) -> None:
            paused.add(trial)
            original(self, trial, should_checkpoint)
        return pause

    def to_waiting(original: Any) -> Any:
        def reuse(self: Any, trial: Any) -> bool:
            if trial in paused or not _own_actor_up(self, trial):
                return bool(original(self, trial))
            # every pending trial of its shape (the pending list drops those whose actor
            # was requested); the oldest first, as Tune's FIFO would take them
            shape = trial.placement_group_factory
            waiting = [other for other in self._resources_to_pending_trials.get(shape, ())
                       if other is not trial and _waits(self, other)]
            if waiting:
                original(self, min(waiting, key=lambda other: other.trial_id))
            return False
        return reuse

    with replaced(TuneController, "_maybe_reuse_cached_actor", to_waiting), \
            replaced(TuneController, "_schedule_trial_pause", noting):
        yield


def _own_actor_up(controller: Any, trial: Any) -> bool:
    """Whether a kept actor could serve this trial and its own actor is started or starting."""
    own = controller._trial_to_actor.get(trial)
    return (own is not None and trial not in controller._resetting_trials
            and controller._actor_cache.has_cached_object(trial.placement_group_factory)
            and controller._actor_manager.is_actor_started(own))


def _waits(controller: Any, trial: Any) -> bool:
    """Whether a pending trial is staged and its own actor still waits for resources."""
    own = controller._trial_to_actor.get(trial)
    return (trial.status == "PENDING" and trial in controller._staged_trials
            and own is not None and trial not in controller._resetting_trials
            and not controller._actor_manager.is_actor_started(own))


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    from ray.air.execution._internal.actor_manager import RayActorManager
    from ray.tune.execution.tune_controller import TuneController, _ObjectCache

    gaps = [f"TuneController.{name}" for name in ("_trial_to_actor", "_resetting_trials",
                                                   "_actor_cache", "_actor_manager",
                                                   "_resources_to_pending_trials",
                                                   "_staged_trials")
            if not sets_or_defines(TuneController, name)]
    if method_params(TuneController, "_maybe_reuse_cached_actor") != ["self", "trial"]:
        gaps.append("TuneController._maybe_reuse_cached_actor(self, trial)")
    if method_params(TuneController, "_schedule_trial_pause") != ["self", "trial",
                                                                    "should_checkpoint"]:
        gaps.append("TuneController._schedule_trial_pause(self, trial, should_checkpoint)")
    if method_params(_ObjectCache, "has_cached_object") != ["self", "key"]:
        gaps.append("_ObjectCache.has_cached_object(self, key)")
    if method_params(RayActorManager, "is_actor_started") != ["self", "tracked_actor"]:
        gaps.append("RayActorManager.is_actor_started(self, tracked_actor)")
    if method_params(RayActorManager, "_try_start_actors") != ["self", "max_actors"]:
        gaps.append("RayActorManager._try_start_actors(self, max_actors)")
    gaps += [f"RayActorManager.{name}" for name in ("_resource_request_to_pending_actors",
                                                      "_live_actors_to_ray_actors_resources",
                                                      "_tracked_actors_to_state_futures")
             if not sets_or_defines(RayActorManager, name)]
    return gaps
