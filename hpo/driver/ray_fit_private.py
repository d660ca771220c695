"""What hpo changes in Tune's fit for a run's speed (issue 36), and one fix of Tune's synch
PBT: every reach into Ray's private parts for them, in one place, as read from Ray 2.60.0.

Ray names none of these public; tests/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - TuneController._maybe_reuse_cached_actor(self, trial), which gives an actor kept for reuse
    to a trial (stopping the trial's own, started or not), wrapped for a block
    (cached_actors_to_waiting_trials) with what it reads: the controller's ._trial_to_actor,
    ._resetting_trials, ._actor_cache.has_cached_object(key), ._resources_to_pending_trials
    (a placement group factory -> its pending trials), ._staged_trials and
    ._actor_manager.is_actor_started(tracked_actor), and ._schedule_trial_pause (below) to
    note the trials paused;
  - ray.air._internal.usage.tag_callbacks(callbacks), which Tune's run calls to count the
    callbacks for Ray's usage telemetry, replaced for a block (no_callback_census);
  - RayActorManager._try_start_actors(self, max_actors=None), which creates the Ray actor of
    each pending actor whose resources are ready, taking them from the lists in
    ._resource_request_to_pending_actors (a resource request -> its pending actors, the
    first first), each created one into ._live_actors_to_ray_actors_resources with its
    `__ray_ready__` future in ._tracked_actors_to_state_futures (a tracked actor -> its
    pending start and stop futures; the start's leaves when it resolves), wrapped for a
    block (staggered_actor_starts);
  - TuneController._schedule_trial_pause(self, trial, should_checkpoint), wrapped for a
    block to drop what it leaves in ._cached_trial_decisions (a trial id -> the decision
    to take once its save resolves) (no_stop_left_by_a_pause);
  - TuneController._maybe_execute_queued_decision(self, trial, after_save=False), which acts
    on the decision in ._queued_trial_decisions (after a batch of results, and after a save
    resolves, when ._process_trial_save has queued the decision it cached), wrapped for a
    block with what it reads: Trial.is_saving (no_train_during_a_save);
  - ray.train.constants._get_ray_train_session_dir(), where StorageContext stages a run's
    files in ._get_session_path(): <that>/<._timestamp, date_str() to the second>/<name>
    (staged_apart).
Ray is imported only when one of these is called.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpo.cluster.slurm_env import usable_cpus
from hpo.driver.ray_private import method_params, replaced, sets_or_defines

RAY_VERSION = "2.60.0"  # the version these were read from


@contextlib.contextmanager
def faster_fit(start_cap: int) -> Iterator[None]:
    """Tune's fit, changed for speed and with synch PBT fixed while the block runs (each part
    below)."""
    with cached_actors_to_waiting_trials(), no_callback_census(), \
            staggered_actor_starts(start_cap), no_stop_left_by_a_pause(), \
            no_train_during_a_save():
        yield


def start_cap() -> int:
    """How many trial actors may start at once: the CPU cores of the cluster's nodes, each
    node's Ray CPUs, and on this machine no more than this process may use (an embedded
    Ray's CPUs are logical: --cpus 32 on 2 cores)."""
    import ray

    here = ray.util.get_node_ip_address()
    mine = usable_cpus() or os.cpu_count() or 1  # no affinity mask on macOS
    cores = [min(cpus, mine) if node["NodeManagerAddress"] == here else cpus
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
    Tune went on starting processes and stopping them before their first trial (issue 36: 68
    worker processes for 32 slots, most of the CPU of a run of 2 s trials).

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


@contextlib.contextmanager
def no_callback_census() -> Iterator[None]:
    """While the block runs, Tune's fit does not count the run's callbacks by class for Ray's
    usage telemetry (ray.air._internal.usage.tag_callbacks, called whenever callbacks are
    given: hpo always gives them). Counting imports Ray's MLflow, W&B, Comet and Aim
    integrations, MLflow itself among them: 1.1-1.2 s on the way to the first trial, for
    classes hpo's run does not use (its own MLflow callback imports MLflow when asked for)."""
    from ray.air._internal import usage

    with replaced(usage, "tag_callbacks", lambda _original: lambda callbacks: False):
        yield


@contextlib.contextmanager
def no_stop_left_by_a_pause() -> Iterator[None]:
    """While the block runs, a trial paused without a save (PBT's exploit) keeps no decision
    queued for a save it was making; restored after.

    Synch PBT pauses each trial at the sync point with a save, and the last to arrive
    exploits the others. Pausing one whose save is still in flight stops its actor, which
    drops the save, but Tune 2.60 first queues STOP for after it. The STOP stays and ends
    the trial at its first save once resumed, and synch PBT then waits for it forever
    (ray-project/ray#57906; open PR #61448). Tune's pause_trial means to drop any queued
    decision ("we will overrule this decision with PAUSE"). Seen here with fast worker
    starts under load: a 4-trial synch PBT run hung in 1 of 3 runs."""
    from ray.tune.execution.tune_controller import TuneController

    def dropping(original: Any) -> Any:
        def pause(self: Any, trial: Any, should_checkpoint: bool = True) -> None:
            original(self, trial, should_checkpoint)
            if not should_checkpoint and trial.status == "PAUSED":
                self._cached_trial_decisions.pop(trial.trial_id, None)
        return pause

    with replaced(TuneController, "_schedule_trial_pause", dropping):
        yield


@contextlib.contextmanager
def no_train_during_a_save() -> Iterator[None]:
    """While the block runs, a batch of results whose last row starts a save leaves the
    decision of its earlier rows for after the save, as one row alone does; restored after.

    Tune 2.60 caches the decision of a row that starts a save, and acts on it when the save
    resolves. Each earlier row of the batch queued CONTINUE, which Tune acted on at once:
    a train call went to the actor behind the save, and another after the save, so from
    then on the trial had two train calls in flight, the second past the trial's end
    ("Should not have reached here") and past any stop. Left queued, the earlier rows'
    decision joins the cached one when the save resolves (STOP before PAUSE before
    CONTINUE, Tune's own precedence), and Tune acts on the two together."""
    from ray.tune.execution.tune_controller import TuneController

    def after_saves(original: Any) -> Any:
        def execute(self: Any, trial: Any, after_save: bool = False) -> None:
            if after_save or not trial.is_saving:
                original(self, trial, after_save)
        return execute

    with replaced(TuneController, "_maybe_execute_queued_decision", after_saves):
        yield


def staged_apart(name: str, timeout_s: float = 2.0) -> None:
    """Return once a run named `name` starting now gets a staging folder of its own.

    Tune stages a run's files on the driver in <Ray session>/artifacts/<the time, to the
    second>/<name>/ and copies that folder to storage: a run of the same name in the same
    second on the same Ray (a kept Ray, runs of a second) took the last run's trial folders
    into its own experiment (seen in the full suite). While this second's folder exists,
    this waits for the next second."""
    from ray.train.constants import _get_ray_train_session_dir
    from ray.tune.utils import date_str

    deadline = time.monotonic() + timeout_s
    while Path(_get_ray_train_session_dir(), date_str(), name).exists() \
            and time.monotonic() < deadline:
        time.sleep(0.02)  # for the clock's next second: at most one


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
    from ray.air._internal import usage
    from ray.air.execution._internal.actor_manager import RayActorManager
    from ray.tune.execution.tune_controller import TuneController, _ObjectCache
    from ray.tune.experiment import Trial

    gaps = [f"TuneController.{name}" for name in ("_trial_to_actor", "_resetting_trials",
                                                   "_actor_cache", "_actor_manager",
                                                   "_resources_to_pending_trials",
                                                   "_staged_trials", "_cached_trial_decisions",
                                                   "_queued_trial_decisions")
            if not sets_or_defines(TuneController, name)]
    if list(inspect.signature(usage.tag_callbacks).parameters) != ["callbacks"]:
        gaps.append("ray.air._internal.usage.tag_callbacks(callbacks)")
    if method_params(TuneController, "_maybe_reuse_cached_actor") != ["self", "trial"]:
        gaps.append("TuneController._maybe_reuse_cached_actor(self, trial)")
    if method_params(TuneController, "_schedule_trial_pause") != ["self", "trial",
                                                                    "should_checkpoint"]:
        gaps.append("TuneController._schedule_trial_pause(self, trial, should_checkpoint)")
    if method_params(TuneController, "_maybe_execute_queued_decision") != [
            "self", "trial", "after_save"] or "self._queue_decision(trial, decision)" not in \
            inspect.getsource(TuneController._process_trial_save):
        gaps.append("TuneController._maybe_execute_queued_decision(self, trial, after_save)")
    if not isinstance(inspect.getattr_static(Trial, "is_saving", None), property):
        gaps.append("Trial.is_saving")
    if method_params(_ObjectCache, "has_cached_object") != ["self", "key"]:
        gaps.append("_ObjectCache.has_cached_object(self, key)")
    if method_params(RayActorManager, "is_actor_started") != ["self", "tracked_actor"]:
        gaps.append("RayActorManager.is_actor_started(self, tracked_actor)")
    if method_params(RayActorManager, "_try_start_actors") != ["self", "max_actors"]:
        gaps.append("RayActorManager._try_start_actors(self, max_actors)")
    gaps += _staging_gaps()
    gaps += [f"RayActorManager.{name}" for name in ("_resource_request_to_pending_actors",
                                                      "_live_actors_to_ray_actors_resources",
                                                      "_tracked_actors_to_state_futures")
             if not sets_or_defines(RayActorManager, name)]
    return gaps


def _staging_gaps() -> list[str]:
    from ray.train import constants
    from ray.train._internal.storage import StorageContext

    gaps = []
    if not callable(getattr(constants, "_get_ray_train_session_dir", None)):
        gaps.append("ray.train.constants._get_ray_train_session_dir")
    if "_get_ray_train_session_dir(), self._timestamp, self.experiment_dir_name" not in \
            " ".join(inspect.getsource(StorageContext._get_session_path).split()):
        gaps.append("StorageContext._get_session_path(session dir, _timestamp, name)")
    if "self._timestamp = date_str()" not in inspect.getsource(StorageContext.__init__):
        gaps.append("StorageContext.__init__(_timestamp = date_str())")
    return gaps
