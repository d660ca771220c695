"""Warm ranks: a data-parallel trial reuses the rank processes that the previous trial in the
same trial process left (imports done, backend libraries loaded), as Tune's actor reuse does
for the trial process itself: 0.3 s (DDP) or 0.6 s (Horovod) instead of 6-12 s for a 2-rank
trial on 2 CPU cores (`python -m benchmarks rank-reuse`).

Tune hands a reused trial actor on with its placement group (TuneController caches actors
per PlacementGroupFactory), so ranks started inside that group stay valid for the next trial.
A trial process has one placement group, so at most one group waits here. It is handed on
only when its shape (backend, rank count, resources per rank, env, placement group) is the
one asked for and every rank ended clean (hpo.trial.ranks.rank.RankEnd); a group whose trial
failed or hung is shut down. `HPO_RANK_REUSE=0` in the trial's environment turns reuse off
(every trial starts new ranks: a benchmark's baseline).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import get_current_placement_group

from hpo.spec.model import Distributed
from hpo.trial.ranks.channel import ReportChannel
from hpo.trial.ranks.groups import RankGroup, rank_group
from hpo.trial.ranks.rank import RankEnd

# How long the next trial waits for a stopped trial's ranks to wind down; longer and it starts
# new ones. Every rank learns the stop at its report (hpo.trial.session), so they leave together
# within milliseconds; the wait costs time only when a rank hangs.
WIND_DOWN_S = 5.0
log = logging.getLogger("hpo.trial.ranks")

Shape = tuple[Any, ...]


@dataclass
class Ranks:
    """A started rank group and its report channel, as one trial uses them."""

    shape: Shape
    group: RankGroup
    channel: Any  # ReportChannel actor handle
    ending: list[ray.ObjectRef] = field(default_factory=list)  # a stopped trial's rank tasks


_parked: Ranks | None = None


def shape(spec: Distributed) -> Shape:
    group = get_current_placement_group()
    return (spec.backend, spec.workers, spec.cpus_per_worker, spec.gpus_per_worker,
            spec.timeout_s, tuple(sorted(spec.env.items())), group.id.hex() if group else None)


def acquire(spec: Distributed) -> Ranks:
    """Ranks for a trial of `spec.workers` ranks: the parked ones when they fit, else new."""
    global _parked
    parked, _parked = _parked, None
    if parked is not None:
        if parked.shape == shape(spec) and _wound_down(parked) and _reopened(parked):
            return parked
        close(parked)
    group = rank_group(spec)
    channel = ReportChannel.remote()  # type: ignore[attr-defined]  # added by @ray.remote
    ranks = Ranks(shape(spec), group, channel)
    try:
        group.start()
    except BaseException:
        close(ranks)
        raise
    return ranks


def release(ranks: Ranks, ends: list[RankEnd]) -> None:
    """After a trial whose ranks all returned: park them for the next trial if clean."""
    if all(end.clean for end in ends):
        _park(ranks)
        return
    for end in ends:
        if end.cuda_bytes > end.idle_cuda_bytes:  # says why the next trial starts new ranks
            log.warning("hpo: rank process %d not reused: its trial left %d bytes of GPU "
                        "memory allocated (%d before its first trial)", end.pid,
                        end.cuda_bytes, end.idle_cuda_bytes)
    close(ranks)


def release_stopped(ranks: Ranks, running: list[ray.ObjectRef]) -> None:
    """After Tune stopped the trial: tell rank 0 (the others follow at their next collective)
    and park the ranks; the next trial checks they wound down clean (kept quick: Tune gives
    a stopped trial's thread 2 s before it refuses the actor to the next trial)."""
    ranks.channel.stop.remote()
    ranks.ending = list(running)
    _park(ranks)


def close(ranks: Ranks) -> None:
    ranks.group.shutdown()
    ray.kill(ranks.channel)


def close_parked() -> None:
    """Shut the parked ranks down now (their trial process ending does it too)."""
    global _parked
    parked, _parked = _parked, None
    if parked is not None:
        close(parked)


def _park(ranks: Ranks) -> None:
    global _parked
    if os.environ.get("HPO_RANK_REUSE", "1") == "0":
        close(ranks)
        return
    close_parked()
    _parked = ranks


def _wound_down(ranks: Ranks) -> bool:
    ending, ranks.ending = ranks.ending, []
    if not ending:
        return True
    done, running = ray.wait(ending, num_returns=len(ending), timeout=WIND_DOWN_S)
    if running:
        return False
    try:
        return all(end.clean for end in ray.get(done))
    except Exception:  # a rank raised or died: not a group to hand on
        return False


def _reopened(ranks: Ranks) -> bool:
    try:
        ray.get(ranks.channel.reset.remote(), timeout=WIND_DOWN_S)
        ranks.group.reopen()
    except Exception:  # a rank or the channel gone: start new ones
        return False
    return True
