"""The Tune trainable of a data-parallel trial: get ranks (warm ones when the last trial in this
process left them, see hpo.trial.ranks.pool), relay rank 0's reports."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError, RayTaskError

from hpo.ray_adapters import gate, train_session
from hpo.spec.model import Distributed
from hpo.trial import cost
from hpo.trial.ranks import blame, pool
from hpo.trial.ranks.channel import Files, pack_folder, unpack_folder
from hpo.trial.ranks.rank import RankEnd, run_rank
from hpo.trial.session import Trainable, checkpoint_in_transit, trial_folder

PEER_GRACE_S = 5.0  # for the other ranks to end once one failed: whose error came first


class RankFailure(RuntimeError):
    """A rank died, raised, or went silent: the trial fails and Tune may retry it."""


def distributed_trainable(func: Trainable, spec: Distributed, checkpoint_every: int,
                          metrics: tuple[str, ...] = ()) -> Any:
    """`func` wrapped as one Tune trial of `spec.workers` ranks, with its placement group."""
    from ray import tune

    @functools.wraps(func)
    def run_trial(config: dict[str, Any]) -> None:
        # metered from here: a reused trial process's session still holds the last trial's
        # report time, which the cost would otherwise start from
        if gate.is_on("trial-reports"):
            train_session.artifact_syncs_timed_first()
        with cost.metered():
            _run_ranks(func, config, spec, checkpoint_every, metrics)

    bundle = {"CPU": spec.cpus_per_worker, "GPU": spec.gpus_per_worker}
    return tune.with_resources(run_trial, rank_placement(spec.workers, bundle))


def rank_placement(ranks: int, bundle: dict[str, float]) -> Any:
    """A data-parallel trial's PlacementGroupFactory: the trial process itself only relays (an
    empty head bundle), then one bundle per rank, packed on as few nodes as fit them."""
    from ray import tune

    return tune.PlacementGroupFactory([{}] + [dict(bundle) for _ in range(ranks)],
                                      strategy="PACK")


def _run_ranks(func: Trainable, config: dict[str, Any], spec: Distributed,
               checkpoint_every: int, metrics: tuple[str, ...] = ()) -> None:
    spec = spec.model_copy(update={"workers": trial_ranks(spec.workers)})
    ranks = pool.acquire(spec)
    running: list[ray.ObjectRef] = []
    try:
        threads = max(1, int(spec.cpus_per_worker))
        args = [func, config, spec.backend, ranks.channel, _restored_files(), checkpoint_every,
                threads, trial_folder(), metrics]
        running = ranks.group.run(run_rank, args)
        ends = _relay(ranks.channel, running, spec.timeout_s, spec.workers)
    except SystemExit:  # Tune stopped or paused the trial: it ends this thread in tune.report
        pool.release_stopped(ranks, running)
        raise
    except BaseException:  # a failed or hung rank: its group is never handed on
        pool.close(ranks)
        raise
    pool.release(ranks, ends)


def trial_ranks(default: int) -> int:
    """The trial's rank count, from its own resources (a scheduler may have given it more
    rank bundles than `distributed.workers`); `default` outside Tune."""
    from ray import tune

    try:
        resources = tune.get_context().get_trial_resources()
    except Exception:  # no Tune session in this process
        resources = None
    return rank_count(resources) if resources is not None else default


def rank_count(resources: Any) -> int:
    """Non-empty rank bundles of a PlacementGroupFactory, the relay's head bundle excluded."""
    bundles = resources.bundles if resources.head_bundle_is_empty else resources.bundles[1:]
    return sum(1 for bundle in bundles if any(bundle.values()))


def _restored_files() -> ray.ObjectRef | None:
    from ray import tune

    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        return ray.put(pack_folder(Path(folder)))  # sent once, read by every rank


def _relay(channel: Any, ranks: list[ray.ObjectRef], timeout_s: float,
           count: int) -> list[RankEnd]:
    """Hand rank 0's reports to Tune (with the trial's rank count) until every rank has
    returned; fail on any rank error."""
    pending_take = channel.take.remote()
    ends: dict[ray.ObjectRef, RankEnd] = {}
    while len(ends) < len(ranks):
        running = [ref for ref in ranks if ref not in ends]
        ready, _ = ray.wait([pending_take, *running], num_returns=1, timeout=timeout_s)
        if not ready:
            raise RankFailure(f"no report from rank 0 for {timeout_s:g} s (a rank hangs?). "
                              "Hint: raise distributed.timeout_s if an epoch takes longer")
        if ready[0] == pending_take:
            metrics, files = ray.get(pending_take)
            _report({**metrics, "ranks": count}, files)
            channel.ack.remote()
            pending_take = channel.take.remote()
            continue
        try:
            ends[ready[0]] = ray.get(ready[0])
        except Exception as exc:
            rank, error, cause = _first_failure(ranks, {ranks.index(ready[0]): exc}, channel)
            raise RankFailure(f"rank {rank} failed: {error}") from (cause or exc)
    return [ends[ref] for ref in ranks]


def _first_failure(ranks: list[ray.ObjectRef], failed: dict[int, Exception], channel: Any
                   ) -> tuple[int, str, Exception | None]:
    """The rank whose own error began the trial's failure (hpo.trial.ranks.blame), its error
    in one line, and that error where it reached the relay. The peers get PEER_GRACE_S to end
    too. Blamed first: the first rank the channel noted with an error of its own (each notes
    its error before it leaves the group, even one whose error is still on its way); then a
    rank whose process died (it noted nothing, and cut its peers off); then the first noted;
    then the first to reach the relay."""
    done, _ = ray.wait(ranks, num_returns=len(ranks), timeout=PEER_GRACE_S)
    for ref in done:
        try:
            ray.get(ref)
        except Exception as exc:
            failed.setdefault(ranks.index(ref), exc)
    try:
        noted: list[tuple[int, bool, str]] = ray.get(channel.failures.remote())
    except RayError:  # the channel's process is gone too
        noted = []
    own = [rank for rank, is_own, _ in noted if is_own]
    died = sorted(rank for rank, exc in failed.items() if not isinstance(exc, RayTaskError))
    rank = (own or died or [rank for rank, _, _ in noted] or list(failed))[0]
    said = {noted_rank: error for noted_rank, _, error in noted}.get(rank)
    cause = failed.get(rank)
    return rank, said if said is not None else blame.described(failed[rank]), cause


def _report(metrics: dict[str, Any], files: Files | None) -> None:
    from ray import tune


    # The relay holds the trial's placement group: it adds the cost of all ranks (no energy:
    # their GPUs are in other processes, maybe on other nodes).
    totals = cost.current()
    metrics = cost.added(metrics, totals)
    if files is None:
        tune.report(metrics)
        return
    with checkpoint_in_transit() as folder:
        checkpoint = tune.Checkpoint.from_directory(unpack_folder(files, folder))
        cost.record(checkpoint, totals)
        tune.report(metrics, checkpoint=checkpoint)
