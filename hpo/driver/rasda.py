"""RASDA (Aach et al., FGCS 2026): ASHA whose promoted trials grow their data-parallel ranks.

Ray's ASHA decides at each rung whether a trial goes on; here a trial that goes on past a
rung is paused on that rung's checkpoint, gets `growth_factor` times its ranks (up to
max_workers and to what is free) and resumes: its reports go on from the rung, never restart.
With `batch: grows` the global batch grows with the ranks, written into the trial's config as
`batch_schedule.grow_at` (hpo.large_batch), so the same config on one rank trains the same.

Ray's ResourceChangingScheduler cannot serve: it refuses reuse_actors, which hpo's rank reuse
needs, and it offers paused trials only after pending ones (FIFO order); here grown trials
are offered first (Tune still starts pending trials beside them where the cluster has room).
Inside Slurm, a `guard` (hpo.driver.walltime) keeps a promoted trial from starting a rung
that cannot finish before the allocation ends: it is held on its rung's checkpoint, and when
only held trials are left the run stops for the requeue.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from ray.tune.experiment import Trial
from ray.tune.schedulers import AsyncHyperBandScheduler, TrialScheduler

from hpo.large_batch import SCHEDULE
from hpo.ranks.trial import rank_count, rank_placement
from hpo.spec.growth import rank_counts

if TYPE_CHECKING:
    from ray.tune.execution.tune_controller import TuneController

    from hpo.spec.model import Distributed
    from hpo.spec.schedulers import Rasda

log = logging.getLogger("hpo.rasda")
GROW_AT, GROW_FACTOR = f"{SCHEDULE}.grow_at", f"{SCHEDULE}.grow_factor"


class Guard(Protocol):
    """What the scheduler asks the allocation's clock (hpo.driver.walltime.WalltimeGuard)."""

    def record(self, trial_id: str, ranks: int, result: dict[str, Any]) -> None: ...

    def allows(self, trial_id: str, iterations: int, ranks: int) -> bool: ...

    def stop_run(self, reason: str) -> None: ...


def ranks_of(trial: Trial) -> int:
    return rank_count(trial.placement_group_factory)


class RasdaScheduler(AsyncHyperBandScheduler):
    def __init__(self, options: Rasda, ranks: Distributed, guard: Guard | None = None,
                 metric: str | None = None, mode: str | None = None) -> None:
        super().__init__(time_attr="training_iteration", metric=metric, mode=mode,
                         max_t=options.max_t, grace_period=options.grace_period,
                         reduction_factor=options.reduction_factor, brackets=1)
        self._counts = rank_counts(options, ranks.workers, ranks.max_workers or ranks.workers)
        self._factor, self._grows = options.growth_factor, options.batch == "grows"
        self._bundle = {"CPU": ranks.cpus_per_worker, "GPU": ranks.gpus_per_worker}
        self._milestones = options.milestones()  # rising
        self._guard = guard
        self._resize: dict[str, int] = {}  # trial id -> the ranks it resumes on
        self._held: set[str] = set()  # paused for want of time: resumed by the next job

    def on_trial_add(self, tune_controller: TuneController, trial: Trial) -> None:
        super().on_trial_add(tune_controller, trial)
        # A resumed experiment (requeue, `hpo resume`) rebuilds each trial's resources from
        # the trainable's: give a grown trial back the ranks of the rungs it passed.
        done = int((trial.last_result or {}).get("training_iteration", 0))
        if done and trial.status in (Trial.PENDING, Trial.PAUSED):
            ranks = self._affordable(tune_controller, trial, self._counts[self._step(done)])
            if ranks > ranks_of(trial):
                trial.update_resources(rank_placement(ranks, self._bundle))

    def on_trial_result(self, tune_controller: TuneController, trial: Trial,
                        result: dict[str, Any]) -> str:
        if self._guard is not None:
            self._guard.record(trial.trial_id, ranks_of(trial), result)
        passed = self._rungs_passed(trial)
        action = super().on_trial_result(tune_controller, trial, result)
        if action != TrialScheduler.CONTINUE or self._rungs_passed(trial) == passed:
            return action
        return self._promote(tune_controller, trial, result)

    # A trial that ends (completes, is stopped, errors or is removed while paused) gives up
    # its pending growth: left in _resize, _affordable would count it as taken for good.
    def on_trial_complete(self, tune_controller: TuneController, trial: Trial,
                          result: dict[str, Any]) -> None:
        self._forget(trial)
        super().on_trial_complete(tune_controller, trial, result)

    def on_trial_error(self, tune_controller: TuneController, trial: Trial) -> None:
        # Also called before Tune retries a failed trial (max_failures): it restarts from a
        # checkpoint on the ranks it holds, as an ungrown trial.
        self._forget(trial)
        super().on_trial_error(tune_controller, trial)

    def on_trial_remove(self, tune_controller: TuneController, trial: Trial) -> None:
        self._forget(trial)
        super().on_trial_remove(tune_controller, trial)

    def _forget(self, trial: Trial) -> None:
        self._resize.pop(trial.trial_id, None)
        self._held.discard(trial.trial_id)

    def _rungs_passed(self, trial: Trial) -> int:
        bracket = self._trial_info.get(trial.trial_id)
        if bracket is None:
            return 0
        return sum(1 for _, recorded in bracket._rungs if trial.trial_id in recorded)

    def _promote(self, tune_controller: TuneController, trial: Trial,
                 result: dict[str, Any]) -> str:
        """A trial that passed a rung: grow it (pause, resize, resume) or let it go on."""
        done = int(result["training_iteration"])
        step = self._step(done)
        now = ranks_of(trial)
        ranks = self._affordable(tune_controller, trial, self._counts[step])
        batch_grows = self._grows and len(self._grow_at(trial)) < step
        grows = ranks > now or batch_grows
        if grows:  # recorded first: a trial held below resumes grown in the next allocation
            self._resize[trial.trial_id] = max(ranks, now)
            if batch_grows:
                trial.set_config({**trial.config, GROW_AT: [*self._grow_at(trial), done],
                                  GROW_FACTOR: self._factor})
            log.info("rasda: %s passed a rung at iteration %d: %d -> %d ranks", trial, done,
                     now, max(ranks, now))
        next_rung = next((m for m in self._milestones if m > done), self._max_t)
        if self._guard is not None and not self._guard.allows(
                trial.trial_id, next_rung - done, max(ranks, now)):
            log.info("rasda: %s holds at iteration %d: the next rung would not finish in "
                     "this allocation", trial, done)
            self._held.add(trial.trial_id)
            return TrialScheduler.PAUSE
        return TrialScheduler.PAUSE if grows else TrialScheduler.CONTINUE

    def _step(self, done: int) -> int:
        """The growth step due after `done` iterations: the rungs passed, up to the cap.
        Counted from the milestones, not from ASHA's records: a resumed experiment's
        scheduler has recorded only the rungs passed since."""
        return min(sum(1 for m in self._milestones if m <= done), len(self._counts) - 1)

    @staticmethod
    def _grow_at(trial: Trial) -> list[int]:
        return list(trial.config.get(GROW_AT) or [])

    def _affordable(self, tune_controller: TuneController, trial: Trial, target: int) -> int:
        """The largest reachable rank count up to `target` that the cluster can give now,
        counting what this trial holds as its own."""
        free = {key: self._total(tune_controller, key) for key in ("CPU", "GPU")}
        for other in tune_controller.get_trials():
            if other is trial:
                continue
            # Tune starts every pending trial it can, whatever the scheduler picks: they count
            # as taken, and so do other trials' growths not applied yet.
            held = other.status in (Trial.RUNNING, Trial.PENDING)
            grown = self._resize.get(other.trial_id)
            if grown is not None:
                need = rank_placement(grown, self._bundle).required_resources
            elif held:
                need = other.placement_group_factory.required_resources
            else:
                continue
            for key in free:
                free[key] -= need.get(key, 0)
        fits = [n for n in self._counts if n <= target and all(
            n * self._bundle[key] <= free[key] for key in free)]
        return max(fits, default=ranks_of(trial))

    @staticmethod
    def _total(tune_controller: TuneController, key: str) -> float:
        updater = tune_controller._resource_updater
        return float(updater.get_num_cpus() if key == "CPU" else updater.get_num_gpus())

    def choose_trial_to_run(self, tune_controller: TuneController) -> Trial | None:
        """A grown trial (Tune also starts pending trials in the same pass, as far as the
        cluster holds them: this scheduler cannot keep them back); held ones never."""
        self._apply_resizes(tune_controller)
        trials = tune_controller.get_trials()
        for trial in trials:
            if trial.status == Trial.PAUSED and trial.trial_id not in self._held:
                return trial
        for trial in trials:
            if trial.status == Trial.PENDING:
                return trial
        paused = any(t.status == Trial.PAUSED for t in trials)
        running = any(t.status == Trial.RUNNING for t in trials)
        if paused and not running and self._guard is not None:
            # Only held trials are left: checkpoint and requeue now, as at Slurm's walltime
            # warning, rather than idle until it.
            self._guard.stop_run("no rung fits before the allocation ends")
        return None

    def _apply_resizes(self, tune_controller: TuneController) -> None:
        # A trial pausing is still RUNNING until its checkpoint is saved: resize it after.
        for trial in tune_controller.get_trials():
            ranks = self._resize.get(trial.trial_id)
            if ranks is not None and trial.status == Trial.PAUSED:
                if ranks != ranks_of(trial):
                    trial.update_resources(rank_placement(ranks, self._bundle))
                del self._resize[trial.trial_id]

    def debug_string(self) -> str:
        return f"RASDA (ranks {self._counts}) over {super().debug_string()}"

    def __getstate__(self) -> dict[str, Any]:
        # The holds belong to this allocation; the guard pickles as "the current run's", so
        # a requeued job's scheduler gets that job's end.
        return {**self.__dict__, "_held": set()}
