"""RASDA (Aach et al., FGCS 2026): ASHA whose promoted trials grow their data-parallel ranks.

Ray's ASHA decides at each rung whether a trial goes on; here a trial that goes on past a
rung is paused on that rung's checkpoint, gets `growth_factor` times its ranks (up to
max_workers and to what is free) and resumes: its reports go on from the rung, never restart.
With `batch: grows` the global batch grows with the ranks, written into the trial's config as
`batch_schedule.grow_at` (hpo.trial.large_batch), so the same config on one rank trains the same.

Ray's ResourceChangingScheduler cannot serve: it refuses reuse_actors, which hpo's rank reuse
needs, and it offers paused trials only after pending ones (FIFO order). Here the decision is
a value (hpo.driver.plugins.rasda_decision.decide) and this class only applies it: a trial
grows when the cluster can place it now, else it runs on with its growth due while new trials
are held back (hpo.driver.plugins.rasda_gate) and Tune keeps few trials pending, so freed
devices wait for it, for about one iteration at most. Its reaches below Ray's public API are in
hpo.ray_adapters.tune_rasda. Inside Slurm, a `guard` (hpo.driver.guards.walltime) keeps a
promoted trial from starting a rung that cannot finish before the allocation ends: it is held
on its rung's checkpoint; when only held trials are left the run stops for the requeue.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any, Protocol

from ray.tune.experiment import Trial
from ray.tune.result import SHOULD_CHECKPOINT
from ray.tune.schedulers import AsyncHyperBandScheduler, TrialScheduler

from hpo.driver.plugins.rasda_decision import NO_CHECKPOINT, Decision, Due, decide, free_slots
from hpo.driver.plugins.rasda_gate import Gate, GatedSearch, gated
from hpo.ray_adapters import tune_rasda as ray_
from hpo.spec.growth import rank_counts
from hpo.trial.large_batch import SCHEDULE
from hpo.trial.ranks.trial import rank_count, rank_placement

if TYPE_CHECKING:
    from ray.tune.execution.tune_controller import TuneController

    from hpo.spec.model import Distributed
    from hpo.spec.schedulers import Rasda

log = logging.getLogger("hpo.rasda")
GROW_AT, GROW_FACTOR = f"{SCHEDULE}.grow_at", f"{SCHEDULE}.grow_factor"
# Trials Tune keeps pending with placement groups requested: each takes the next devices
# that free up. Enough to refill a cluster quickly, few enough not to outrun a growth.
PENDING_TRIALS = 2


class Guard(Protocol):
    """What the scheduler asks the allocation's clock (hpo.driver.guards.walltime.WalltimeGuard)."""

    def record(self, trial_id: str, ranks: int, result: dict[str, Any]) -> None: ...

    def allows(self, trial_id: str, iterations: int, ranks: int) -> bool: ...

    def stop_run(self, reason: str) -> None: ...


def ranks_of(trial: Trial) -> int:
    return rank_count(trial.placement_group_factory)


def _say_why_not(trial: Trial, due: Due, decision: Decision, done: int) -> None:
    """hpo.log's line for a growth due that does not happen now (a user who expects growth
    reads why): at the rung, and where it is dropped; not for each result it waits."""
    if decision.action != "continue" or decision.reason in ("nothing due", NO_CHECKPOINT) \
            or (decision.due and not due.at_rung):
        return  # a grow or a hold has a line of its own (_apply)
    log.info("rasda: %s at iteration %d runs on at %d rank(s), %d due: %s", trial, done,
             due.ranks, due.target, decision.reason)


class RasdaScheduler(AsyncHyperBandScheduler):
    def __init__(self, options: Rasda, ranks: Distributed, guard: Guard | None = None,
                 metric: str | None = None, mode: str | None = None,
                 pending_trials: int = PENDING_TRIALS) -> None:
        super().__init__(time_attr="training_iteration", metric=metric, mode=mode,
                         max_t=options.max_t, grace_period=options.grace_period,
                         reduction_factor=options.reduction_factor, brackets=1)
        self._counts = rank_counts(options, ranks.workers, ranks.max_workers or ranks.workers)
        self._factor, self._grows = options.growth_factor, options.batch == "grows"
        self._bundle = {"CPU": ranks.cpus_per_worker, "GPU": ranks.gpus_per_worker}
        self._milestones = options.milestones()  # rising
        self._guard = guard
        self._pending_trials = pending_trials
        self._resize: dict[str, int] = {}  # trial id -> the ranks it resumes on
        self._held: set[str] = set()  # paused for want of time: resumed by the next job
        self._due: dict[str, int] = {}  # trial id -> results since its growth fell due
        # trial id -> (monotonic) when its grown placement was asked for; None: still pausing
        self._growing: dict[str, float | None] = {}
        self._iteration_s: dict[str, float] = {}  # trial id -> its last iteration's seconds
        self._warned: set[str] = set()  # trials told they cannot grow without checkpoints
        self.gate = Gate()  # closed while a growth is due or under way

    def gated(self, search: Any, max_concurrent: int | None = None) -> GatedSearch:
        """The run's search algorithm, suggesting nothing while a growth waits."""
        return gated(search, self.gate, max_concurrent)

    def on_trial_add(self, tune_controller: TuneController, trial: Trial) -> None:
        super().on_trial_add(tune_controller, trial)
        if "TUNE_MAX_PENDING_TRIALS_PG" not in os.environ:  # the user's choice stands
            ray_.bound_pending_trials(tune_controller, self._pending_trials)
        # A resumed experiment (requeue, `hpo resume`) rebuilds each trial's resources from
        # the trainable's: give a grown trial back the ranks of the rungs it passed.
        done = int((trial.last_result or {}).get("training_iteration", 0))
        if done and trial.status in (Trial.PENDING, Trial.PAUSED):
            due = Due(self._counts, self._step(done), ranks_of(trial))
            free, pending = self._room(tune_controller, trial)
            ranks = decide(due, free, pending, patience=0).ranks
            if ranks > ranks_of(trial):
                trial.update_resources(rank_placement(ranks, self._bundle))

    def on_trial_result(self, tune_controller: TuneController, trial: Trial,
                        result: dict[str, Any]) -> str:
        if self._guard is not None:
            self._guard.record(trial.trial_id, ranks_of(trial), result)
        self._iteration_s[trial.trial_id] = float(result.get("time_this_iter_s") or 0.0)
        passed = ray_.rungs_passed(self, trial.trial_id)
        action = super().on_trial_result(tune_controller, trial, result)
        at_rung = ray_.rungs_passed(self, trial.trial_id) != passed
        if action != TrialScheduler.CONTINUE or not (at_rung or trial.trial_id in self._due):
            return action
        due = self._due_of(trial, result, at_rung)
        decision = decide(due, *self._room(tune_controller, trial),
                          fits=self._fits(trial, result))
        if decision.reason == NO_CHECKPOINT and trial.trial_id not in self._warned:
            self._warned.add(trial.trial_id)
            log.warning("rasda: %s cannot grow: %s. Hint: pass checkpoint= to hpo.report "
                        "(or tune.report) with every result", trial, NO_CHECKPOINT)
        return self._apply(trial, decision, due, int(result["training_iteration"]))

    # A trial that ends (completes, is stopped, errors or is removed while paused) gives up
    # its pending growth: left in _resize, _room would count it as taken for good.
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
        for record in (self._resize, self._due, self._growing, self._iteration_s):
            record.pop(trial.trial_id, None)
        for names in (self._held, self._warned, self.gate.waiting):
            names.discard(trial.trial_id)

    def _due_of(self, trial: Trial, result: dict[str, Any], at_rung: bool) -> Due:
        step = self._step(int(result["training_iteration"]))
        here = bool(result.get(SHOULD_CHECKPOINT))
        return Due(self._counts, step, ranks_of(trial),
                   batch_behind=self._grows and len(self._grow_at(trial)) < step,
                   at_rung=at_rung, waited=0 if at_rung else self._due.get(trial.trial_id, 0),
                   checkpoint="here" if here else "earlier" if trial.checkpoint else "none")

    def _fits(self, trial: Trial, result: dict[str, Any]) -> Any:
        """The guard's answer for the iterations to the next rung, on so many ranks."""
        if self._guard is None:
            return None
        done = int(result["training_iteration"])
        left = next((m for m in self._milestones if m > done), self._max_t) - done
        guard, trial_id = self._guard, trial.trial_id
        return lambda ranks: guard.allows(trial_id, left, ranks)

    def _apply(self, trial: Trial, decision: Decision, due: Due, done: int) -> str:
        """Tune's answer for a decision, and the records that carry it out."""
        trial_id, now = trial.trial_id, ranks_of(trial)
        _say_why_not(trial, due, decision, done)
        if decision.action == "continue" and decision.due:  # new trials wait with it
            self._due[trial_id] = due.waited + 1  # keeps its place: the first due goes first
            self.gate.waiting.add(trial_id)
            return TrialScheduler.CONTINUE
        self._due.pop(trial_id, None)
        self.gate.waiting.discard(trial_id)
        if decision.action == "continue":
            return TrialScheduler.CONTINUE
        # recorded first: a trial held below resumes grown in the next allocation
        self._resize[trial_id] = max(decision.ranks, now)
        if self._grows and len(self._grow_at(trial)) < self._step(done):
            trial.set_config({**trial.config, GROW_AT: [*self._grow_at(trial), done],
                              GROW_FACTOR: self._factor})
        if decision.action == "hold":
            log.info("rasda: %s holds at iteration %d: %s", trial, done, decision.reason)
            self._held.add(trial_id)
        else:
            log.info("rasda: %s at iteration %d: %d -> %d ranks (%s)", trial, done, now,
                     decision.ranks, decision.reason)
            self._growing[trial_id] = None
            self.gate.waiting.add(trial_id)
        return TrialScheduler.PAUSE

    def _step(self, done: int) -> int:
        """The growth step due after `done` iterations: the rungs passed, up to the cap.
        Counted from the milestones, not from ASHA's records: a resumed experiment's
        scheduler has recorded only the rungs passed since."""
        return min(sum(1 for m in self._milestones if m <= done), len(self._counts) - 1)

    @staticmethod
    def _grow_at(trial: Trial) -> list[int]:
        return list(trial.config.get(GROW_AT) or [])

    def _room(self, tune_controller: TuneController, trial: Trial) -> tuple[int, int]:
        """(free, pending): rank slots free beyond what `trial` holds, and those that work
        queued before its growth takes first: pending trials, other trials' growths (their
        grown size), and the growths of trials due before it."""
        held, queued = [trial.placement_group_factory.required_resources], []
        earlier = list(self._due)[:list(self._due).index(trial.trial_id)] \
            if trial.trial_id in self._due else list(self._due)
        for other in tune_controller.get_trials():
            if other is trial or other.trial_id in self._held:
                continue
            grown = self._resize.get(other.trial_id)
            need = (rank_placement(grown, self._bundle) if grown is not None
                    else other.placement_group_factory).required_resources
            if grown is not None or other.status == Trial.PENDING:
                queued.append(need)
            elif other.status == Trial.RUNNING:
                held.append(need)
                if other.trial_id in earlier:
                    queued.append(self._extra(other))
        total = ray_.cluster_total(tune_controller)
        free = free_slots(total, held, self._bundle)
        return free, free - free_slots(total, held + queued, self._bundle)

    def _extra(self, trial: Trial) -> dict[str, float]:
        """The ranks a trial due to grow still waits for, as resources."""
        step = self._step(int((trial.last_result or {}).get("training_iteration", 0)))
        extra = max(0, self._counts[step] - ranks_of(trial))
        return {key: each * extra for key, each in self._bundle.items()}

    def choose_trial_to_run(self, tune_controller: TuneController) -> Trial | None:
        """A grown trial (Tune also starts pending trials in the same pass, as far as the
        cluster holds them: few are pending, and none new while a growth waits); held ones
        never."""
        trials = tune_controller.get_trials()
        self._apply_resizes(tune_controller, trials)
        self._release_stuck(trials)
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

    def _apply_resizes(self, tune_controller: TuneController, trials: list[Trial]) -> None:
        # A trial pausing is still RUNNING until its checkpoint is saved: resize it after.
        for trial in trials:
            ranks = self._resize.get(trial.trial_id)
            if ranks is not None and trial.status == Trial.PAUSED:
                if ranks != ranks_of(trial):
                    # Tune keeps its old actor (reuse_actors) for a trial of the old shape:
                    # stopped, its devices go to the grown placement instead
                    ray_.drop_cached_actor(tune_controller, trial.placement_group_factory)
                    trial.update_resources(rank_placement(ranks, self._bundle))
                del self._resize[trial.trial_id]
                if trial.trial_id in self._growing:  # its placement is asked for now
                    self._growing[trial.trial_id] = time.monotonic()

    def _release_stuck(self, trials: list[Trial]) -> None:
        """A grown trial runs again: the gate opens for it. One whose placement group waits
        longer than about one of its iterations opens it too: devices must not idle."""
        for trial in trials:
            since = self._growing.get(trial.trial_id)
            if since is None:  # not growing, or still pausing
                continue
            patience = max(1.0, 1.5 * self._iteration_s.get(trial.trial_id, 0.0))
            if trial.status == Trial.RUNNING or time.monotonic() - since > patience:
                if trial.status != Trial.RUNNING:
                    log.info("rasda: %s still waits for its ranks: new trials may start",
                             trial)
                del self._growing[trial.trial_id]
                if trial.trial_id not in self._due:
                    self.gate.waiting.discard(trial.trial_id)

    def debug_string(self) -> str:
        return f"RASDA (ranks {self._counts}) over {super().debug_string()}"

    def __getstate__(self) -> dict[str, Any]:
        # The holds and waits belong to this allocation; the guard pickles as "the current
        # run's", so a requeued job's scheduler gets that job's end.
        return {**self.__dict__, "_held": set(), "_due": {}, "_growing": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"_warned": set(), **state})  # pickled before it was recorded
