"""The Tune trainable of a data-parallel trial: start the ranks, relay rank 0's reports."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import ray

from hpo.ranks.channel import Files, ReportChannel, pack_folder, unpack_folder
from hpo.ranks.groups import rank_group
from hpo.ranks.rank import run_rank
from hpo.session import Trainable, trial_folder
from hpo.spec.model import Distributed


class RankFailure(RuntimeError):
    """A rank died, raised, or went silent: the trial fails and Tune may retry it."""


def distributed_trainable(func: Trainable, spec: Distributed, checkpoint_every: int) -> Any:
    """`func` wrapped as one Tune trial of `spec.workers` ranks, with its placement group."""
    from ray import tune

    @functools.wraps(func)
    def run_trial(config: dict[str, Any]) -> None:
        _run_ranks(func, config, spec, checkpoint_every)

    # The trial process itself only relays: an empty head bundle, one bundle per rank, packed
    # on as few nodes as fit them.
    rank_bundle = {"CPU": spec.cpus_per_worker, "GPU": spec.gpus_per_worker}
    bundles = [{}] + [dict(rank_bundle) for _ in range(spec.workers)]
    return tune.with_resources(run_trial, tune.PlacementGroupFactory(bundles, strategy="PACK"))


def _run_ranks(func: Trainable, config: dict[str, Any], spec: Distributed,
               checkpoint_every: int) -> None:
    group = rank_group(spec)
    channel = ReportChannel.remote()
    try:
        group.start()
        threads = max(1, int(spec.cpus_per_worker))
        args = [func, config, spec.backend, channel, _restored_files(), checkpoint_every, threads,
                trial_folder()]
        _relay(channel, group.run(run_rank, args), spec.timeout_s)
    finally:  # also on Tune's stop/pause, which ends this thread inside tune.report
        group.shutdown()
        ray.kill(channel)


def _restored_files() -> ray.ObjectRef | None:
    from ray import tune

    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        return ray.put(pack_folder(Path(folder)))  # sent once, read by every rank


def _relay(channel: Any, ranks: list[ray.ObjectRef], timeout_s: float) -> None:
    """Hand rank 0's reports to Tune until every rank has returned; fail on any rank error."""
    pending_take = channel.take.remote()
    running = list(ranks)
    while running:
        ready, _ = ray.wait([pending_take, *running], num_returns=1, timeout=timeout_s)
        if not ready:
            raise RankFailure(f"no report from rank 0 for {timeout_s:g} s (a rank hangs?). "
                              "Hint: raise distributed.timeout_s if an epoch takes longer")
        if ready[0] == pending_take:
            _report(*ray.get(pending_take))
            channel.ack.remote()
            pending_take = channel.take.remote()
            continue
        index = ranks.index(ready[0])
        try:
            ray.get(ready[0])
        except Exception as exc:
            raise RankFailure(f"rank {index} failed: {_cause(exc)}") from exc
        running.remove(ready[0])


def _report(metrics: dict[str, Any], files: Files | None) -> None:
    from ray import tune

    if files is None:
        tune.report(metrics)
        return
    with tempfile.TemporaryDirectory(prefix="hpo-ckpt-") as tmp:
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(
            unpack_folder(files, Path(tmp))))


def _cause(exc: Exception) -> str:
    cause = getattr(exc, "cause", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"
