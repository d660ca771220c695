"""What a growing (rasda) experiment must hold before it starts: ranks to grow into, a
checkpoint at every rung, and an allocation big enough for the largest trial."""

from __future__ import annotations

from typing import Protocol

from hpo.spec._validation import FieldProblem
from hpo.spec.schedulers import Rasda, Scheduler
from hpo.spec.slurm import SlurmSettings


class Distributed(Protocol):
    """What growth needs of hpo.spec.model.Distributed (which imports this module)."""

    @property
    def workers(self) -> int: ...
    @property
    def max_workers(self) -> int | None: ...
    @property
    def cpus_per_worker(self) -> float: ...
    @property
    def gpus_per_worker(self) -> float: ...


def rank_counts(scheduler: Rasda, workers: int, max_workers: int) -> list[int]:
    """The rank counts a trial passes through: workers x growth_factor at each rung passed,
    capped at max_workers (the last step may be smaller than the factor)."""
    counts = [workers]
    while counts[-1] < max_workers:
        counts.append(min(max_workers, counts[-1] * scheduler.growth_factor))
    return counts


def check_growth(scheduler: Scheduler, ranks: Distributed | None, checkpoint_every: int,
                 slurm: SlurmSettings) -> None:
    """Raises FieldProblem for a rasda experiment that cannot grow, or max_workers without it."""
    if not isinstance(scheduler, Rasda):
        if ranks is not None and ranks.max_workers is not None:
            raise FieldProblem("distributed.max_workers", f"only the rasda scheduler grows "
                               f"trials (scheduler.type is {scheduler.type})",
                               "use scheduler: {type: rasda, ...}, or drop max_workers")
        return
    if ranks is None:
        raise FieldProblem("scheduler.type", "rasda grows data-parallel trials, but there is "
                           "no distributed section", "add distributed: {backend: ddp, "
                           "workers: 1, max_workers: 4}, or use scheduler: {type: asha}")
    _check_max_workers(scheduler, ranks)
    if checkpoint_every == 0 or scheduler.grace_period % checkpoint_every:
        raise FieldProblem("checkpoint.frequency", f"must divide scheduler.grace_period (got "
                           f"{checkpoint_every}, grace_period {scheduler.grace_period})",
                           "a grown trial resumes from the checkpoint of the rung it passed: "
                           "use frequency: 1")
    _check_allocation(ranks, slurm)


def _check_max_workers(scheduler: Rasda, ranks: Distributed) -> None:
    top = ranks.max_workers
    if top is None:
        raise FieldProblem("distributed.max_workers", "rasda needs the most ranks a trial may "
                           "grow to", f"e.g. max_workers: {ranks.workers * 4} (ranks x "
                           f"growth_factor at each rung, up to it)")
    if top < ranks.workers:
        raise FieldProblem("distributed.max_workers", f"must be >= distributed.workers (got "
                           f"{top} < {ranks.workers})", "raise max_workers or lower workers")
    counts = rank_counts(scheduler, ranks.workers, top)
    exact = top == ranks.workers * scheduler.growth_factor ** (len(counts) - 1)
    if scheduler.batch == "grows" and not exact:
        below = counts[-2] if len(counts) > 1 else ranks.workers
        raise FieldProblem("distributed.max_workers", f"with batch: grows, the batch grows by "
                           f"growth_factor={scheduler.growth_factor} with each growth; "
                           f"{counts[-2:]} is not such a step (got max_workers {top})",
                           f"use max_workers: {below} or {below * scheduler.growth_factor}")


def _check_allocation(ranks: Distributed, slurm: SlurmSettings) -> None:
    """The largest trial must fit the job, where `slurm:` says what a node has."""
    top = ranks.max_workers or ranks.workers
    per_node = (("GPU", ranks.gpus_per_worker, slurm.gpus_per_node),
                ("CPU", ranks.cpus_per_worker, slurm.cpus_per_task))
    for key, each, node in per_node:
        if each and node and top * each > node * slurm.nodes:
            raise FieldProblem("distributed.max_workers", f"a trial may grow to {top} ranks = "
                               f"{top * each:g} {key}s, but the job has {node * slurm.nodes} "
                               f"({slurm.nodes} node(s) x {node})",
                               "lower max_workers, or ask for more nodes (slurm.nodes)")
