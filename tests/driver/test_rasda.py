"""RASDA: trials that pass a rung resume on more ranks, with their steps continuous and, in
both batch modes, the losses of the matching ungrown run (real Ray, real Horovod and DDP).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from calls import trial_rows

import hpo
from hpo.reporting import build_report

CONFIG = {"train_size": 256, "val_size": 64, "image_size": 8, "width": 4, "classes": 4,
          "noise": 0.5, "lr": 0.1, "seed": 3, "batch_size": 32,
          "batch_schedule": {"lr_rule": "sqrt", "ramp_steps": 2}}
RUNGS = {"max_t": 3, "grace_period": 1, "reduction_factor": 2}  # rungs at 1 and 2
LOSSES = ("train_loss", "val_loss")
RTOL = 1e-3


def _spec(tmp_path: Path, name: str, backend: str, scheduler: dict[str, Any],
          workers: int = 1, max_workers: int | None = None,
          constants: dict[str, Any] | None = None) -> dict[str, Any]:
    ranks = {"backend": backend, "workers": workers, "cpus_per_worker": 1}
    if max_workers:
        ranks["max_workers"] = max_workers
    return {"name": name, "trainable": "trainables.images:train", "metric": "val_loss",
            "mode": "min", "storage": str(tmp_path),
            "constants": {**CONFIG, "epochs": RUNGS["max_t"], **(constants or {})},
            "scheduler": scheduler, "distributed": ranks}


def _rows(result: Any) -> list[dict[str, Any]]:
    ((rows,),) = [trial_rows(result.path).values()]
    return rows


def _losses(rows: list[dict[str, Any]]) -> np.ndarray:
    return np.array([[row[key] for key in LOSSES] for row in rows])


@pytest.mark.slow
@pytest.mark.parametrize("batch", ["fixed", "grows"])
@pytest.mark.parametrize("backend", ["ddp", "horovod"])
def test_a_promoted_trial_grows_and_trains_as_the_ungrown_run(
        tmp_path: Path, backend: str, batch: str) -> None:
    run = hpo.run(_spec(tmp_path, "grown", backend, {"type": "rasda", "batch": batch, **RUNGS},
                        max_workers=2), num_cpus=2)
    grown = _rows(run)
    assert [row["training_iteration"] for row in grown] == [1, 2, 3]  # never restarted
    assert [row["ranks"] for row in grown] == [1, 2, 2]
    assert "ranks.png" in {figure.name for figure in build_report(run.path).figures}
    # The ungrown twin: one rank all along, the batch growing where the grown trial's did.
    grow_at = {"batch_schedule.grow_at": [1]} if batch == "grows" else {}
    plain = _rows(hpo.run(_spec(tmp_path, "plain", backend, {"type": "fifo"},
                                constants=grow_at), num_cpus=2))
    assert [row["global_batch"] for row in grown] == [row["global_batch"] for row in plain]
    assert [row["global_batch"] for row in plain] == ([32, 64, 64] if batch == "grows"
                                                      else [32, 32, 32])
    np.testing.assert_allclose(_losses(grown), _losses(plain), rtol=RTOL)


# Scheduler decisions fed result dicts (no Ray cluster): which trial grows, when, to what.

class _Controller:
    """What the scheduler asks Tune's controller: the trials and the cluster's size."""

    def __init__(self, trials: list[Any], cpus: float) -> None:
        self.trials, self._cpus = trials, cpus
        self._resource_updater = self
        self._actor_cache = self  # nothing kept for reuse
        self.max_pending: int | None = None

    def pop_cached_object(self, key: Any) -> None:
        return None

    def update_max_pending_trials(self, count: int) -> None:
        self.max_pending = count

    def get_trials(self) -> list[Any]:
        return self.trials

    def get_num_cpus(self) -> float:
        return self._cpus

    def get_num_gpus(self) -> float:
        return 0.0


class _Guard:
    def __init__(self, allowed: bool) -> None:
        self.allowed, self.asked, self.stopped = allowed, [], []

    def record(self, trial_id: str, ranks: int, result: dict[str, Any]) -> None:
        pass

    def allows(self, trial_id: str, iterations: int, ranks: int) -> bool:
        self.asked.append((trial_id, iterations, ranks))
        return self.allowed

    def stop_run(self, reason: str) -> None:
        self.stopped.append(reason)


def _scheduler(batch: str = "fixed", guard: Any = None, max_workers: int = 4) -> Any:
    from hpo.driver.run import translate
    from hpo.spec.load import spec_from_dict

    spec = spec_from_dict({"name": "t", "trainable": "trainables.images:train",
                           "metric": "loss", "mode": "min",
                           "scheduler": {"type": "rasda", "max_t": 8, "batch": batch},
                           "distributed": {"backend": "ddp", "workers": 1,
                                           "max_workers": max_workers}})
    scheduler = translate.scheduler(spec, guard)
    scheduler.set_search_properties("loss", "min")
    return scheduler


def _trial(name: str, ranks: int = 1) -> Any:
    from ray.tune.experiment import Trial

    from hpo.trial.ranks.trial import rank_placement

    trial = Trial("t", trial_id=name, stub=True, config={"lr": 0.1})
    trial.update_resources(rank_placement(ranks, {"CPU": 1, "GPU": 0}))
    trial.set_status(Trial.RUNNING)
    return trial


def _result(iteration: int, loss: float, checkpoint: bool = True) -> dict[str, Any]:
    # should_checkpoint: Tune's mark of a result that came with a checkpoint
    return {"training_iteration": iteration, "loss": loss, "should_checkpoint": checkpoint}


def test_a_trial_passing_a_rung_pauses_and_resumes_on_twice_the_ranks_first() -> None:
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    from hpo.driver.plugins.rasda import ranks_of

    scheduler, (runner, waiting) = _scheduler(), (_trial("runner"), _trial("waiting"))
    waiting.set_status(Trial.PENDING)
    controller = _Controller([waiting, runner], cpus=8)
    for trial in (runner, waiting):
        scheduler.on_trial_add(controller, trial)
    assert scheduler.on_trial_result(controller, runner, _result(1, 0.5)) == \
        TrialScheduler.PAUSE
    assert scheduler.choose_trial_to_run(controller) is waiting  # still pausing: not yet
    runner.set_status(Trial.PAUSED)
    assert scheduler.choose_trial_to_run(controller) is runner  # grown trials go first
    assert ranks_of(runner) == 2 and "batch_schedule.grow_at" not in runner.config
    runner.set_status(Trial.RUNNING)
    # Between rungs it runs on; at the next rung (2) it doubles again, then the cap holds.
    assert scheduler.on_trial_result(controller, runner, _result(2, 0.4)) == \
        TrialScheduler.PAUSE
    runner.set_status(Trial.PAUSED)
    scheduler.choose_trial_to_run(controller)
    assert ranks_of(runner) == 4
    runner.set_status(Trial.RUNNING)
    assert scheduler.on_trial_result(controller, runner, _result(3, 0.3)) == \
        TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(controller, runner, _result(4, 0.2)) == \
        TrialScheduler.CONTINUE  # at max_workers already: no pause for nothing


def test_a_trial_below_the_cutoff_stops_as_in_asha() -> None:
    from ray.tune.schedulers import TrialScheduler

    scheduler, trials = _scheduler(), [_trial(f"t{i}") for i in range(3)]
    controller = _Controller(trials, cpus=8)
    for trial in trials:
        scheduler.on_trial_add(controller, trial)
    decisions = [scheduler.on_trial_result(controller, trial, _result(1, loss))
                 for trial, loss in zip(trials, [0.5, 0.9, 0.1], strict=True)]
    assert decisions == [TrialScheduler.PAUSE, TrialScheduler.STOP, TrialScheduler.PAUSE]


def test_growth_takes_only_what_is_free() -> None:
    from ray.tune.schedulers import TrialScheduler

    scheduler, (grower, other) = _scheduler(), (_trial("grower"), _trial("other", ranks=1))
    controller = _Controller([grower, other], cpus=2)  # the other trial holds one of two
    for trial in (grower, other):
        scheduler.on_trial_add(controller, trial)
    # fixed batch, nothing free: going on at its ranks beats waiting for a second one
    assert scheduler.on_trial_result(controller, grower, _result(1, 0.5)) == \
        TrialScheduler.CONTINUE


def test_a_growing_batch_is_written_into_the_config_at_the_rung() -> None:
    from ray.tune.experiment import Trial

    scheduler, trial = _scheduler("grows", max_workers=2), _trial("t")
    controller = _Controller([trial], cpus=8)
    scheduler.on_trial_add(controller, trial)
    scheduler.on_trial_result(controller, trial, _result(1, 0.5))
    assert trial.config["batch_schedule.grow_at"] == [1]
    assert trial.config["batch_schedule.grow_factor"] == 2
    trial.set_status(Trial.PAUSED)
    scheduler.choose_trial_to_run(controller)
    trial.set_status(Trial.RUNNING)
    scheduler.on_trial_result(controller, trial, _result(2, 0.4))  # capped: no more growth
    assert trial.config["batch_schedule.grow_at"] == [1]


def test_a_rung_that_cannot_finish_in_the_allocation_is_held() -> None:
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    from hpo.driver.plugins.rasda import ranks_of

    guard = _Guard(allowed=False)
    scheduler, trial = _scheduler(guard=guard), _trial("t")
    controller = _Controller([trial], cpus=8)
    scheduler.on_trial_add(controller, trial)
    assert scheduler.on_trial_result(controller, trial, _result(1, 0.5)) == \
        TrialScheduler.PAUSE
    # one iteration to rung 2, on the grown ranks (a restart included), then ungrown
    assert guard.asked == [("t", 1, 2), ("t", 1, 1)]
    assert scheduler.choose_trial_to_run(controller) is None
    assert guard.stopped == []  # still saving its checkpoint: not yet
    trial.set_status(Trial.PAUSED)
    assert scheduler.choose_trial_to_run(controller) is None
    assert guard.stopped  # nothing can go on in this allocation: stop and requeue now
    assert ranks_of(trial) == 2  # it resumes grown in the next allocation
    guard.stopped.clear()
    fresh = _trial("fresh")
    fresh.set_status(Trial.PENDING)
    controller.trials.append(fresh)
    # Tune starts a pending trial whatever the scheduler says: offered, and no stop meanwhile
    assert scheduler.choose_trial_to_run(controller) is fresh and guard.stopped == []


def test_the_live_view_shows_each_running_trials_ranks() -> None:
    from types import SimpleNamespace

    from hpo.driver.plugins.progress import LiveProgress

    view = LiveProgress([("loss", "min")], total=2)
    grown, plain = (SimpleNamespace(trial_id=name, status="RUNNING", config={})
                    for name in ("grown", "plain"))
    view.on_trial_result(1, [grown], grown, {"loss": 0.5, "ranks": 4, "training_iteration": 3})
    view.on_trial_result(1, [plain], plain, {"loss": 0.7, "training_iteration": 1})
    table = view._render([grown, plain]).renderables[-1]
    assert [c.header for c in table.columns][:3] == ["trial", "iter", "ranks"]
    assert list(table.columns[2].cells) == ["4", "-"]


def test_a_resumed_experiment_gives_grown_trials_their_ranks_back() -> None:
    """Tune rebuilds a restored trial's resources from the trainable's (one rank)."""
    from ray.tune.experiment import Trial

    from hpo.driver.plugins.rasda import ranks_of

    scheduler, grown, fresh = _scheduler(), _trial("grown"), _trial("fresh")
    for trial in (grown, fresh):
        trial.set_status(Trial.PAUSED if trial is grown else Trial.PENDING)
    grown.run_metadata.last_result = {"training_iteration": 3, "loss": 0.2}  # rungs 1, 2 passed
    controller = _Controller([grown, fresh], cpus=8)
    for trial in (grown, fresh):
        scheduler.on_trial_add(controller, trial)
    assert (ranks_of(grown), ranks_of(fresh)) == (4, 1)


@pytest.mark.parametrize("end", ["complete", "error", "remove"])
def test_a_trial_that_ends_before_its_growth_frees_the_ranks_it_was_to_take(end: str) -> None:
    """A growth recorded at a rung is applied once the trial is paused; a trial that errors,
    is stopped or is removed first never gets there, and must not hold its ranks for good."""
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    scheduler, (ending, later) = _scheduler(), (_trial("ending"), _trial("later"))
    controller = _Controller([ending, later], cpus=3)
    for trial in (ending, later):
        scheduler.on_trial_add(controller, trial)
    assert scheduler.on_trial_result(controller, ending, _result(1, 0.5)) == \
        TrialScheduler.PAUSE  # to resume on 2 ranks, once its checkpoint is saved
    if end == "complete":  # Tune stopped it (or it returned) while it was saving
        scheduler.on_trial_complete(controller, ending, _result(1, 0.5))
        ending.set_status(Trial.TERMINATED)
    elif end == "error":
        scheduler.on_trial_error(controller, ending)
        ending.set_status(Trial.ERROR)
    else:  # paused, then removed (the run ended) before the scheduler resized it
        ending.set_status(Trial.PAUSED)
        scheduler.on_trial_remove(controller, ending)
        ending.set_status(Trial.TERMINATED)
    # 3 CPUs, none held by the ended trial: the later trial's growth to 2 ranks fits
    assert scheduler.on_trial_result(controller, later, _result(1, 0.1)) == \
        TrialScheduler.PAUSE
    assert scheduler._resize == {"later": 2}


# The decision as a value: (rung records, ranks, free slots, pending work, walltime) -> Decision

@pytest.mark.parametrize(("due", "free", "pending", "fits", "expected"), [
    # nothing due: between rungs, or at the cap
    (dict(step=0), 8, 0, None, ("continue", 1, 0)),
    (dict(step=2, ranks=4), 8, 0, None, ("continue", 4, 0)),
    # due 2, a slot free: grow; free slots that pending trials take first do not count
    (dict(step=1), 1, 0, None, ("grow", 2, 0)),
    (dict(step=1), 1, 1, None, ("continue", 1, 2)),  # waits, new trials held back
    (dict(step=2, ranks=2), 2, 0, None, ("grow", 4, 0)),
    # patience spent (one result waited): take what is free, else drop the growth
    (dict(step=2, ranks=1, waited=1), 1, 0, None, ("grow", 2, 0)),
    (dict(step=2, ranks=1, waited=0), 1, 0, None, ("continue", 1, 4)),
    (dict(step=1, waited=1), 0, 0, None, ("continue", 1, 0)),
    # batch: grows: the batch grows at a restart even on the same ranks, once patience ends
    (dict(step=1, batch_behind=True), 0, 0, None, ("continue", 1, 2)),
    (dict(step=1, batch_behind=True, waited=1), 0, 0, None, ("grow", 1, 0)),
    # the walltime guard: a grown rung too long runs on ungrown; neither fits: hold
    (dict(step=1), 1, 0, {1}, ("continue", 1, 0)),
    (dict(step=1), 1, 0, set(), ("hold", 2, 0)),
    (dict(step=1), 0, 0, set(), ("hold", 2, 0)),  # waiting: resumes due in the next job
    (dict(step=1, at_rung=False, waited=0), 1, 0, {1}, ("continue", 1, 0)),
    (dict(step=1, at_rung=False, waited=0), 1, 0, set(), ("continue", 1, 0)),  # mid-rung
    # a pause resumes from the latest checkpoint: only one saved with this result will do
    (dict(step=1, checkpoint="earlier"), 1, 0, None, ("continue", 1, 2)),  # due, waits
    (dict(step=1, checkpoint="none"), 1, 0, None, ("continue", 1, 0)),  # can never grow
    (dict(step=1, checkpoint="earlier"), 1, 0, set(), ("continue", 1, 2)),  # nor hold
])
def test_the_growth_decision(due: dict[str, Any], free: int, pending: int,
                             fits: set[int] | None, expected: tuple[str, int, int]) -> None:
    from hpo.driver.plugins.rasda_decision import Due, decide

    decision = decide(Due(**{"counts": (1, 2, 4), "ranks": 1, **due}), free, pending,
                      fits=None if fits is None else fits.__contains__)
    assert (decision.action, decision.ranks, decision.due) == expected, decision.reason


@pytest.mark.parametrize(("total", "taken", "bundle", "slots"), [
    ({"CPU": 8, "GPU": 0}, [{"CPU": 3}], {"CPU": 1, "GPU": 0}, 5),
    ({"CPU": 64, "GPU": 16}, [{"CPU": 1, "GPU": 1}] * 15, {"CPU": 1, "GPU": 1}, 1),
    ({"CPU": 4, "GPU": 16}, [], {"CPU": 1, "GPU": 1}, 4),  # CPUs bound
    ({"CPU": 4, "GPU": 0}, [{"CPU": 6}], {"CPU": 1, "GPU": 0}, 0),  # never negative
])
def test_free_slots(total: dict[str, float], taken: list[dict[str, float]],
                    bundle: dict[str, float], slots: int) -> None:
    from hpo.driver.plugins.rasda_decision import free_slots

    assert free_slots(total, taken, bundle) == slots


def test_ray_still_has_what_rasda_reads() -> None:
    """hpo.ray_adapters.tune_rasda reads private parts of Ray: the gate turns RASDA off where
    they are gone, and a spec that asks for it is refused (tests/driver/test_ray_gate.py)."""
    from hpo.ray_adapters import tune_rasda

    assert tune_rasda.missing() == []


# Admission: a promoted trial due to grow comes before new trials.

def _full(cpus: float) -> tuple[Any, Any, Any, Any]:
    """A grower and another trial running, a third pending, on `cpus` one-CPU slots."""
    from ray.tune.experiment import Trial

    scheduler, trials = _scheduler(), [_trial("grower"), _trial("other"), _trial("queued")]
    trials[2].set_status(Trial.PENDING)
    controller = _Controller(trials, cpus=cpus)
    for trial in trials:
        scheduler.on_trial_add(controller, trial)
    return scheduler, controller, trials[0], trials


def test_a_due_growth_waits_for_freed_devices_while_new_trials_wait() -> None:
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    from hpo.driver.plugins.rasda import ranks_of

    scheduler, controller, grower, (_, other, queued) = _full(cpus=3)
    assert controller.max_pending == 2  # Tune's default would be 200 with random search
    # one slot free, but the queued trial takes it first: run on, hold new trials back
    assert scheduler.on_trial_result(controller, grower, _result(1, 0.1)) == \
        TrialScheduler.CONTINUE
    assert not scheduler.gate.open
    queued.set_status(Trial.RUNNING)
    other.set_status(Trial.TERMINATED)  # its slot frees up: nobody new takes it
    # rung 2 passed: due 4 ranks, 2 reachable: it waits one iteration for more
    assert scheduler.on_trial_result(controller, grower, _result(2, 0.1)) == \
        TrialScheduler.CONTINUE
    # none came: it takes what is free
    assert scheduler.on_trial_result(controller, grower, _result(3, 0.1)) == \
        TrialScheduler.PAUSE
    grower.set_status(Trial.PAUSED)
    assert scheduler.choose_trial_to_run(controller) is grower and ranks_of(grower) == 2
    assert not scheduler.gate.open  # until it runs on its new ranks
    grower.set_status(Trial.RUNNING)
    scheduler.choose_trial_to_run(controller)
    assert scheduler.gate.open


def test_a_growth_that_finds_no_device_in_time_is_dropped(
        caplog: pytest.LogCaptureFixture) -> None:
    from ray.tune.schedulers import TrialScheduler

    scheduler, controller, grower, _ = _full(cpus=3)
    with caplog.at_level("INFO", logger="hpo.rasda"):
        assert scheduler.on_trial_result(controller, grower, _result(1, 0.1)) == \
            TrialScheduler.CONTINUE and not scheduler.gate.open
        # one iteration later still nothing free: it goes on at its size, new trials may start
        assert scheduler.on_trial_result(controller, grower, _result(2, 0.1)) == \
            TrialScheduler.CONTINUE  # rung 2 passed: due again, waits again
        assert scheduler.on_trial_result(controller, grower, _result(3, 0.1)) == \
            TrialScheduler.CONTINUE
    assert scheduler.gate.open
    # hpo.log says why it did not grow: at each rung, and where the growth is dropped
    assert [r.getMessage().split(" at iteration ")[1] for r in caplog.records] == [
        "1 runs on at 1 rank(s), 2 due: waits for 1 slot(s)",
        "2 runs on at 1 rank(s), 4 due: waits for 3 slot(s)",
        "3 runs on at 1 rank(s), 4 due: no slot freed in time: growth dropped"]


def test_a_trial_without_checkpoints_runs_on_ungrown_and_holds_nothing_back(
        caplog: pytest.LogCaptureFixture) -> None:
    from ray.tune.schedulers import TrialScheduler

    scheduler, trial = _scheduler(), _trial("plain")
    controller = _Controller([trial], cpus=8)
    scheduler.on_trial_add(controller, trial)
    with caplog.at_level("WARNING", logger="hpo.rasda"):
        for iteration in (1, 2, 3, 4):  # rungs 1, 2 and 4 passed, 7 CPUs free
            assert scheduler.on_trial_result(
                controller, trial, _result(iteration, 0.1, checkpoint=False)) == \
                TrialScheduler.CONTINUE
            assert scheduler.gate.open
    assert [r.getMessage().count("cannot grow") for r in caplog.records] == [1]


def _noop(config: dict[str, Any]) -> None:
    pass


def test_the_gate_holds_back_random_search() -> None:
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from hpo.driver.plugins.rasda_gate import Gate, gated

    gate = Gate()
    search = gated(BasicVariantGenerator(), gate, max_concurrent=3)
    search.add_configurations({"e": {"run": _noop, "num_samples": 5, "config": {"x": 1}}})
    assert search.next_trial() is not None
    gate.waiting.add("grower")
    assert search.next_trial() is None and not search.is_finished()  # "nothing now"
    gate.waiting.clear()
    assert search.next_trial() is not None
    assert search.search.max_concurrent == 3  # Tune would drop max_concurrent_trials


def test_the_gate_holds_back_a_searcher() -> None:
    from ray.tune.search import ConcurrencyLimiter, Searcher

    from hpo.driver.plugins.rasda_gate import Gate, gated

    class Counting(Searcher):
        def suggest(self, trial_id: str) -> dict[str, Any]:
            return {"x": 1}

    gate = Gate()
    search = gated(Counting(metric="loss", mode="min"), gate, max_concurrent=2)
    assert isinstance(search.searcher, ConcurrencyLimiter)  # Tune finds max_concurrent
    search.add_configurations({"e": {"run": _noop, "num_samples": 5, "config": {}}})
    gate.waiting.add("grower")
    assert search.next_trial() is None and not search.is_finished()
    gate.waiting.clear()
    assert search.next_trial() is not None
    assert pickle_roundtrip(gate).open  # a resumed run starts open


def pickle_roundtrip(value: Any) -> Any:
    import pickle

    value.waiting.add("x")
    return pickle.loads(pickle.dumps(value))


def test_a_growing_trials_cached_actor_is_dropped_and_a_stuck_growth_opens_the_gate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With reuse_actors Tune keeps the grower's old actor and placement group for a trial
    of its old shape; the grown placement group would wait behind it."""
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    from hpo.driver.plugins import rasda

    scheduler, trial = _scheduler(), _trial("t")
    controller = _Controller([trial], cpus=8)
    dropped: list[Any] = []
    kept = {trial.placement_group_factory: ["its old actor"]}
    controller._actor_cache = type("Cache", (), {"pop_cached_object": lambda self, key: (
        kept.get(key) or [None]).pop()})()
    controller._remove_actor = lambda tracked_actor: dropped.append(tracked_actor)
    scheduler.on_trial_add(controller, trial)
    assert scheduler.on_trial_result(controller, trial, {**_result(1, 0.5),
                                                         "time_this_iter_s": 2.0}) == \
        TrialScheduler.PAUSE
    trial.set_status(Trial.PAUSED)
    clock = [100.0]
    monkeypatch.setattr(rasda.time, "monotonic", lambda: clock[0])
    assert scheduler.choose_trial_to_run(controller) is trial and dropped == ["its old actor"]
    trial.set_status(Trial.PENDING)  # its grown placement group waits in Ray's queue
    clock[0] += 2.9
    scheduler.choose_trial_to_run(controller)
    assert not scheduler.gate.open
    clock[0] += 0.2  # past 1.5 iterations: devices must not idle, new trials may start
    scheduler.choose_trial_to_run(controller)
    assert scheduler.gate.open
