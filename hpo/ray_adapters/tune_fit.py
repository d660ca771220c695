"""What hpo changes in Tune's fit for a run's speed, and one fix of Tune's synch
PBT: every reach into Ray's private parts for them, in one place, as read from Ray 2.60.0
(how trial actors start and are reused: hpo.ray_adapters.tune_actors).

Ray names none of these public; tests/driver/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - ray.air._internal.usage.tag_callbacks(callbacks), which Tune's run calls to count the
    callbacks for Ray's usage telemetry, replaced for a block (no_callback_census);
  - TuneController._schedule_trial_pause(self, trial, should_checkpoint) (its signature
    checked in hpo.ray_adapters.tune_actors), wrapped for a block to drop what it leaves
    in ._cached_trial_decisions (a trial id -> the decision to take once its save
    resolves) (no_stop_left_by_a_pause);
  - TuneController._maybe_execute_queued_decision(self, trial, after_save=False), which acts
    on the decision in ._queued_trial_decisions (after a batch of results, and after a save
    resolves, when ._process_trial_save has queued the decision it cached), wrapped for a
    block with what it reads: Trial.is_saving (no_train_during_a_save);
  - ray.train.constants._get_ray_train_session_dir(), where StorageContext stages a run's
    files in ._get_session_path(): <that>/<._timestamp, date_str() to the second>/<name>
    (staged_apart);
  - TuneController.step(self), wrapped for a block to call its .cleanup(self) (which ends
    the trials' actors and placement groups) when a step raises a BaseException that is no
    Exception (trials_ended_on_interrupt);
  - ExperimentAnalysis._fetch_trial_dataframes(self) -> {trial id: DataFrame}, which the
    analysis that Tune's run returns calls in its __init__, replaced for a block
    (no_result_frames); ResultGrid._trial_to_result takes a trial's frame from it with .get;
  - ray.tune.registry._Registry.contains(self, category, key) and .get(self, category, key),
    which ask the GCS's key-value store (and unpickle what .get finds) each time, wrapped
    for a block to answer again what they have answered in it; .register(self, category,
    key, value), .unregister(self, category, key) and ._Registry.prefix, which key them
    (registry_read_once).
Ray is imported only when one of these is called.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpo.ray_adapters.reading import method_params, replaced, sets_or_defines, source
from hpo.ray_adapters.tune_actors import cached_actors_to_waiting_trials, staggered_actor_starts


@contextlib.contextmanager
def faster_fit(start_cap: int) -> Iterator[None]:
    """Tune's fit, changed for speed while the block runs (each part below)."""
    with cached_actors_to_waiting_trials(), no_callback_census(), \
            staggered_actor_starts(start_cap), no_result_frames(), registry_read_once():
        yield


@contextlib.contextmanager
def registry_read_once() -> Iterator[None]:
    """While the block runs, Tune's registry answers from memory what it has answered in the
    block already, until that entry is registered or unregistered again. Tune looks the
    trainable up by name about three times for each trial it adds and starts, each look a
    blocking round trip to the GCS (and .get unpickles the class again): 1,042 looks for
    320 trials. Unpickled again, a class is the one cloudpickle made the first
    time (it tracks them), so the trainable found is the same; a value pickled by value (a
    function) is now one object for the block instead of a copy per look. Only the driver's
    fit thread looks, and only with Ray up (else Tune reads its own unsent entries)."""
    import ray
    from ray.tune.registry import _Registry

    known: dict[tuple[str, str, str], Any] = {}

    def remembered(original: Any) -> Any:
        def get(self: Any, category: str, key: str) -> Any:
            if not ray.is_initialized():
                return original(self, category, key)
            entry = (self.prefix, category, key)
            if entry not in known:
                known[entry] = original(self, category, key)
            return known[entry]
        return get

    def known_first(original: Any) -> Any:
        return lambda self, category, key: ray.is_initialized() and \
            (self.prefix, category, key) in known or original(self, category, key)

    def forgetting(original: Any) -> Any:
        def change(self: Any, category: str, key: str, *value: Any) -> Any:
            known.pop((self.prefix, category, key), None)
            return original(self, category, key, *value)
        return change

    with replaced(_Registry, "get", remembered), replaced(_Registry, "contains", known_first), \
            replaced(_Registry, "register", forgetting), \
            replaced(_Registry, "unregister", forgetting):
        yield


@contextlib.contextmanager
def no_result_frames() -> Iterator[None]:
    """While the block runs, the analysis Tune's fit ends with reads no trial's results.
    It loads each trial's result.json into a DataFrame for the ResultGrid that fit returns,
    which hpo drops (it reads the folder itself, hpo.results): 1.1 s of the driver's end
    with 640 trials of 20 results on 2 cores. The grid's results then have no
    metrics_dataframe."""
    from ray.tune.analysis.experiment_analysis import ExperimentAnalysis

    def none_read(_original: Any) -> Any:
        return lambda self: {}

    with replaced(ExperimentAnalysis, "_fetch_trial_dataframes", none_read):
        yield


@contextlib.contextmanager
def trials_ended_on_interrupt() -> Iterator[None]:
    """While the block runs, a KeyboardInterrupt (any BaseException that is no Exception)
    raised in a step of Tune's controller, a callback's say, ends the run's trials before it
    goes on up: tune.run calls the controller's cleanup() after an Exception only, and the
    trials' actors and placement groups held the Ray's CPUs until that Ray ended (the next
    run on a notebook's Ray waited for them forever)."""
    from ray.tune.execution.tune_controller import TuneController

    def cleaning(original: Any) -> Any:
        def step(self: Any) -> None:
            try:
                original(self)
            except Exception:
                raise
            except BaseException:
                with contextlib.suppress(Exception):
                    self.cleanup()
                raise
        return step

    with replaced(TuneController, "step", cleaning):
        yield


@contextlib.contextmanager
def no_callback_census() -> Iterator[None]:
    """While the block runs, Tune's fit does not count the run's callbacks by class for Ray's
    usage telemetry (ray.air._internal.usage.tag_callbacks, called whenever callbacks are
    given: hpo always gives them). Counting imports Ray's MLflow, W&B, Comet and Aim
    integrations, MLflow itself among them: 1.1-1.2 s on the way to the first trial, for
    classes hpo's run does not use (its own MLflow callback imports MLflow when asked for)."""
    from ray.air._internal import usage

    with replaced(usage, "tag_callbacks", lambda _original: lambda callbacks: False):
        yield


@contextlib.contextmanager
def no_stop_left_by_a_pause() -> Iterator[None]:
    """While the block runs, a trial paused without a save (PBT's exploit) keeps no decision
    queued for a save it was making; restored after.

    Synch PBT pauses each trial at the sync point with a save, and the last to arrive
    exploits the others. Pausing one whose save is still in flight stops its actor, which
    drops the save, but Tune 2.60 first queues STOP for after it. The STOP stays and ends
    the trial at its first save once resumed, and synch PBT then waits for it forever
    (ray-project/ray#57906; open PR #61448). Tune's pause_trial means to drop any queued
    decision ("we will overrule this decision with PAUSE"). Seen here with fast worker
    starts under load: a 4-trial synch PBT run hung in 1 of 3 runs."""
    from ray.tune.execution.tune_controller import TuneController

    def dropping(original: Any) -> Any:
        def pause(self: Any, trial: Any, should_checkpoint: bool = True) -> None:
            original(self, trial, should_checkpoint)
            if not should_checkpoint and trial.status == "PAUSED":
                self._cached_trial_decisions.pop(trial.trial_id, None)
        return pause

    with replaced(TuneController, "_schedule_trial_pause", dropping):
        yield


@contextlib.contextmanager
def no_train_during_a_save() -> Iterator[None]:
    """While the block runs, a batch of results whose last row starts a save leaves the
    decision of its earlier rows for after the save, as one row alone does; restored after.

    Tune 2.60 caches the decision of a row that starts a save, and acts on it when the save
    resolves. Each earlier row of the batch queued CONTINUE, which Tune acted on at once:
    a train call went to the actor behind the save, and another after the save, so from
    then on the trial had two train calls in flight, the second past the trial's end
    ("Should not have reached here") and past any stop. Left queued, the earlier rows'
    decision joins the cached one when the save resolves (STOP before PAUSE before
    CONTINUE, Tune's own precedence), and Tune acts on the two together."""
    from ray.tune.execution.tune_controller import TuneController

    def after_saves(original: Any) -> Any:
        def execute(self: Any, trial: Any, after_save: bool = False) -> None:
            if after_save or not trial.is_saving:
                original(self, trial, after_save)
        return execute

    with replaced(TuneController, "_maybe_execute_queued_decision", after_saves):
        yield


def staged_apart(name: str, timeout_s: float = 2.0) -> None:
    """Return once a run named `name` starting now gets a staging folder of its own.

    Tune stages a run's files on the driver in <Ray session>/artifacts/<the time, to the
    second>/<name>/ and copies that folder to storage: a run of the same name in the same
    second on the same Ray (a kept Ray, runs of a second) took the last run's trial folders
    into its own experiment (seen in the full suite). While this second's folder exists,
    this waits for the next second."""
    from ray.train.constants import _get_ray_train_session_dir
    from ray.tune.utils import date_str

    deadline = time.monotonic() + timeout_s
    while Path(_get_ray_train_session_dir(), date_str(), name).exists() \
            and time.monotonic() < deadline:
        time.sleep(0.02)  # for the clock's next second: at most one


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    return fix_gaps() + speed_gaps()


def speed_gaps() -> list[str]:
    """What faster_fit reads that the installed Ray lacks."""
    from ray.air._internal import usage
    from ray.tune.analysis.experiment_analysis import ExperimentAnalysis
    from ray.tune.result_grid import ResultGrid

    from hpo.ray_adapters import tune_actors

    gaps = []
    if list(inspect.signature(usage.tag_callbacks).parameters) != ["callbacks"]:
        gaps.append("ray.air._internal.usage.tag_callbacks(callbacks)")
    if method_params(ExperimentAnalysis, "_fetch_trial_dataframes") != ["self"] or \
            "self._trial_dataframes = self._fetch_trial_dataframes()" not in \
            source(ExperimentAnalysis.__init__) or \
            "self._experiment_analysis.trial_dataframes.get(trial.trial_id)" not in \
            source(ResultGrid._trial_to_result):
        gaps.append("ExperimentAnalysis._fetch_trial_dataframes(self)")
    return gaps + _registry_gaps() + tune_actors.missing()


def fix_gaps() -> list[str]:
    """What the fixes of Tune (tune_fixed, staged_apart) read that the installed Ray lacks."""
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    gaps = [f"TuneController.{name}" for name in ("_cached_trial_decisions",
                                                   "_queued_trial_decisions")
            if not sets_or_defines(TuneController, name)]
    if method_params(TuneController, "_schedule_trial_pause") != ["self", "trial",
                                                                    "should_checkpoint"]:
        gaps.append("TuneController._schedule_trial_pause(self, trial, should_checkpoint)")
    if method_params(TuneController, "_maybe_execute_queued_decision") != [
            "self", "trial", "after_save"] or "self._queue_decision(trial, decision)" not in \
            source(TuneController._process_trial_save):
        gaps.append("TuneController._maybe_execute_queued_decision(self, trial, after_save)")
    if not isinstance(inspect.getattr_static(Trial, "is_saving", None), property):
        gaps.append("Trial.is_saving")
    if method_params(TuneController, "step") != ["self"] or \
            method_params(TuneController, "cleanup") != ["self"]:
        gaps.append("TuneController.step(self), .cleanup(self)")
    return gaps + _staging_gaps()


def _registry_gaps() -> list[str]:
    from ray.tune.registry import _Registry

    wanted = {"get": ["self", "category", "key"], "contains": ["self", "category", "key"],
              "register": ["self", "category", "key", "value"],
              "unregister": ["self", "category", "key"]}
    gaps = [f"_Registry.{name}({', '.join(params)})" for name, params in wanted.items()
            if method_params(_Registry, name) != params]
    if "self.prefix" not in source(_Registry):
        gaps.append("_Registry.prefix")
    return gaps


def _staging_gaps() -> list[str]:
    from ray.train import constants
    from ray.train._internal.storage import StorageContext

    gaps = []
    if not callable(getattr(constants, "_get_ray_train_session_dir", None)):
        gaps.append("ray.train.constants._get_ray_train_session_dir")
    if "_get_ray_train_session_dir(), self._timestamp, self.experiment_dir_name" not in \
            " ".join(source(StorageContext._get_session_path).split()):
        gaps.append("StorageContext._get_session_path(session dir, _timestamp, name)")
    if "self._timestamp = date_str()" not in source(StorageContext.__init__):
        gaps.append("StorageContext.__init__(_timestamp = date_str())")
    return gaps
