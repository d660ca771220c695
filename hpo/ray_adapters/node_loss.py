"""A trial whose node went away is not the trial's fault: Tune retries it from its last
checkpoint without counting it against `failure.max_failures`.

Ray 2.60 counts every actor death as a trial failure except one marked preempted (a node that
ended during a preemption drain: a joined job's node that leaves, hpo.cluster.ray_drain). A
node lost without warning (scancel's SIGTERM reaching the raylet first, a crash, a network
cut) ends the trial's actor with "its node has died" and would be counted: with the default
max_failures of 0 the trial would end in ERROR. scancel's SIGTERM may also reach the trial's
own Ray worker before the node goes ("The process receives a SIGTERM": Slurm signals every
process of a step, Ray's included). While a run fits, either death counts as a preemption, up
to FORGIVEN times per trial (a trial that brings its node down again and again is failing).
Read from Ray 2.60.0's handling of a trial actor's death (Tune's hook for it is swapped in
hpo.ray_adapters.tune_guards, which tests/driver/test_ray_private.py checks) and worker.py's SIGTERM
handler (tests/cluster/test_join.py checks its text is still there).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from hpo.ray_adapters.reading import source
from hpo.ray_adapters.tune_guards import actor_error_gaps, actor_errors_handled_by

NODE_DIED = "its node has died"  # Ray's ActorDiedError text for an actor lost with its node
SIGTERMED = "The process receives a SIGTERM"  # a Ray worker's exit on a SIGTERM from outside
FORGIVEN = 3
_log = logging.getLogger("hpo.node_loss")


def lost_with_its_node(exc: BaseException) -> bool:
    """The trial's actor died with its node, or was stopped from outside (not preempted:
    Ray does not count those already)."""
    said = str(exc)
    return (NODE_DIED in said or SIGTERMED in said) and not getattr(exc, "preempted", False)


@contextlib.contextmanager
def node_losses_forgiven() -> Iterator[None]:
    """While the block runs, a trial actor lost with its node is retried, not counted."""

    def handle(trial: Any, exc: Any, counted: Callable[[Any, Any], None]) -> None:
        forgiven = getattr(trial, "_hpo_node_losses", 0)
        if lost_with_its_node(exc) and forgiven < FORGIVEN:
            trial._hpo_node_losses = forgiven + 1
            _log.warning("trial %s lost its node (or was stopped from outside); it goes on "
                         "from its last checkpoint, not counted against max_failures",
                         trial.trial_id)
            return
        counted(trial, exc)

    with actor_errors_handled_by(handle):
        yield


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks: Tune's handler of an actor's death
    and the texts of the deaths it forgives."""

    import ray._private.worker as worker

    gaps = actor_error_gaps()
    if SIGTERMED not in source(worker.Worker.main_loop):
        gaps.append(f"ray._private.worker's SIGTERM exit text {SIGTERMED!r}")
    return gaps
