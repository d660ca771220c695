"""Trial actors start at most `cap` at a time
(hpo.ray_adapters.tune_actors.staggered_actor_starts): Tune asks for every slot's actor at
once, and each worker's start (1-2 CPU-s of imports) then shares the node's cores with all the
others, so that no trial ran before all were up.

Real Ray, and Ray's own actor manager as Tune drives it: each actor notes when its __init__
begins and ends (a slow start), and the order of those notes says how many started at once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray.air.execution import FixedResourceManager, ResourceRequest
from ray.air.execution._internal import RayActorManager

from hpo.driver.backends.ray_session import embedded_ray
from hpo.ray_adapters.tune_actors import staggered_actor_starts, start_cap

ACTORS = 5
START_S = 4.0  # longer than Ray takes to start a worker, even on a busy machine: without a
# cap, the starts overlap


class SlowStart:
    def __init__(self, notes: str, name: str) -> None:
        _note(notes, f"begin {name}")
        time.sleep(START_S)
        _note(notes, f"end {name}")


def _note(notes: str, line: str) -> None:
    with open(notes, "a") as out:  # one short append: whole lines, any process
        out.write(line + "\n")


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests


def _most_at_once(notes: Path) -> int:
    at_once = most = 0
    for line in notes.read_text().splitlines():
        at_once += 1 if line.startswith("begin") else -1
        most = max(most, at_once)
    return most


def _start_all(notes: Path) -> int:
    """Start ACTORS slow actors through Ray's actor manager; how many ever started at once."""
    manager = RayActorManager(FixedResourceManager({"CPU": ACTORS}))
    started: list[str] = []
    failed: list[Exception] = []
    for index in range(ACTORS):
        manager.add_actor(SlowStart, {"notes": str(notes), "name": str(index)},
                          ResourceRequest([{"CPU": 1}]),
                          on_start=lambda actor: started.append(actor.actor_id),
                          on_error=lambda actor, error: failed.append(error))
    deadline = time.monotonic() + 60
    while len(started) + len(failed) < ACTORS and time.monotonic() < deadline:
        manager.next(timeout=1)
    assert (len(started), failed) == (ACTORS, [])
    for actor in manager.live_actors:
        manager.remove_actor(actor, kill=True)
    return _most_at_once(notes)


@pytest.fixture(scope="module")
def ray_of_five(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with embedded_ray(tmp_path_factory.mktemp("ray") / "hpo.log", num_cpus=ACTORS):
        yield


@pytest.mark.slow  # 10-20 s each: five actors started one or two at a time
@pytest.mark.parametrize("cap", [1, 2])
def test_no_more_than_cap_actors_start_at_once(ray_of_five: None, tmp_path: Path,
                                               cap: int) -> None:
    with staggered_actor_starts(cap):
        most = _start_all(tmp_path / "notes")
    assert most == cap


def test_without_the_cap_every_actor_starts_at_once(ray_of_five: None, tmp_path: Path) -> None:
    assert _start_all(tmp_path / "notes") > 2  # what the cap is there for


def test_the_cap_is_the_cores_this_process_may_use(ray_of_five: None) -> None:
    assert ray.cluster_resources()["CPU"] == ACTORS
    assert start_cap() == min(ACTORS, len(os.sched_getaffinity(0)))
    # forked workers (hpo.ray_adapters.fast_start.fork_server): a few a core, never more than Ray's
    # CPUs
    assert start_cap(per_core=2) == min(ACTORS, 2 * len(os.sched_getaffinity(0)))
    assert start_cap(per_core=ACTORS) == ACTORS
