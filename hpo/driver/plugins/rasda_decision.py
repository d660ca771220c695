"""RASDA's growth decision as a value: what a trial does after a result, from what the rungs,
the cluster and the allocation's clock say. Pure (no Ray): hpo.driver.plugins.rasda applies it.

A trial that passed a rung is due `counts[step]` ranks. It grows (pauses, resumes on more
ranks from the rung's checkpoint) only when the cluster can place the grown trial now, after
the work queued before it: a grown trial that waits in Ray's queue holds devices idle. Until
then it runs on at its size with the growth due, and new trials are held back (the gate in
hpo.driver.plugins.rasda_gate), so devices that free up wait for it. After `patience` more results
(about one iteration) it takes what is free, or drops the growth: devices never wait longer.

Example:
    >>> decide(Due(counts=(1, 2, 4), step=1, ranks=1), free=1).action
    'grow'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Action = Literal["continue", "grow", "hold"]
NO_CHECKPOINT = "it reports no checkpoint to resume from"


@dataclass(frozen=True)
class Due:
    """What the rung records say a trial is due.

    counts: the rank counts of the schedule (hpo.spec.growth.rank_counts), rising.
    step: the growth step due after the rungs passed (index into counts).
    ranks: the ranks the trial runs on now.
    batch_behind: with `batch: grows`, the batch has grown fewer times than `step`: it grows
        at the next restart even where no rank is free.
    at_rung: this result passed a rung (else the trial waits with a growth due).
    waited: results reported since the growth became due (0 at the rung).
    checkpoint: where the trial's latest checkpoint is: saved with this result ("here"),
        with an earlier one, or "none". A pause resumes from it, so only "here" may pause:
        from an earlier one the steps since would be trained and reported twice.
    """

    counts: Sequence[int]
    step: int
    ranks: int
    batch_behind: bool = False
    at_rung: bool = True
    waited: int = 0
    checkpoint: Literal["here", "earlier", "none"] = "here"

    @property
    def target(self) -> int:
        return max(self.counts[min(self.step, len(self.counts) - 1)], self.ranks)


@dataclass(frozen=True)
class Decision:
    """continue: run on at `ranks` (`due`: a growth still wanted, which holds new trials
    back); grow: pause and resume on `ranks`; hold: pause until the next allocation, to
    resume on `ranks`."""

    action: Action
    ranks: int
    due: int = 0
    reason: str = ""


def decide(due: Due, free: int, pending: int = 0, patience: int = 1,
           fits: Callable[[int], bool] | None = None) -> Decision:
    """The decision after a result of a trial that ASHA lets go on.

    free: rank slots free in the cluster beyond the trial's own; pending: slots that work
    queued before this growth takes first (pending trials, earlier growths); fits: whether
    the next rung ends in this allocation on so many ranks, a restart included where they
    differ from `due.ranks` (the walltime guard; None: no guard).
    """
    now, target = due.ranks, due.target
    room = free - pending
    reachable = max((c for c in due.counts if now < c <= target and c - now <= room),
                    default=now)
    if target == now and not due.batch_behind:
        wish = Decision("continue", now, reason="nothing due")
    elif reachable == target:
        wish = Decision("grow", target, reason=f"{target - now} slot(s) free")
    elif due.waited < patience:
        wish = Decision("continue", now, due=target,
                        reason=f"waits for {target - now - max(room, 0)} slot(s)")
    elif reachable > now or due.batch_behind:
        wish = Decision("grow", reachable, reason="takes what is free")
    else:
        wish = Decision("continue", now, reason="no slot freed in time: growth dropped")
    return _resumable(_within_walltime(wish, due, fits), due)


def _resumable(wish: Decision, due: Due) -> Decision:
    """A pause needs a checkpoint saved with this result: otherwise the trial runs on, its
    growth still due if a later result can carry one; with no checkpoint ever, dropped."""
    if wish.action == "continue" or due.checkpoint == "here":
        return wish
    if due.checkpoint == "none":
        return Decision("continue", due.ranks, reason=NO_CHECKPOINT)
    return Decision("continue", due.ranks, due=wish.ranks,
                    reason="waits for a result with a checkpoint")


def _within_walltime(wish: Decision, due: Due, fits: Callable[[int], bool] | None
                     ) -> Decision:
    """A grown rung that would not end in this allocation runs on ungrown if that ends; a
    rung that ends on neither is held (at a rung only: between rungs the trial already
    runs a rung that the guard allowed)."""
    if fits is None or fits(wish.ranks):
        return wish
    if wish.action == "grow" and not due.batch_behind and fits(due.ranks):
        return Decision("continue", due.ranks, reason="a grown rung would not end in time")
    if not due.at_rung:
        return Decision("continue", due.ranks, reason="the growth would not end in time")
    return Decision("hold", max(wish.ranks, wish.due),
                    reason="the next rung would not end in this allocation")


def free_slots(total: Mapping[str, float], taken: Sequence[Mapping[str, float]],
               bundle: Mapping[str, float]) -> int:
    """Whole rank bundles left of `total` after `taken` (resource dicts, as Ray's
    `required_resources`)."""
    left = {key: total.get(key, 0.0) - sum(t.get(key, 0.0) for t in taken) for key in bundle}
    sizes = [left[key] / each for key, each in bundle.items() if each > 0]
    return max(0, int(min(sizes))) if sizes else 0
