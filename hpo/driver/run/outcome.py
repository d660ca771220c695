"""What a run leaves, as its caller gets it: the folder, the table and the winner
(RunResult), or one line that says why not (a stop, failed trials, no metric, a metric the
trials did not report)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpo.errors import RunError
from hpo.results import best_config, load_results, never_a_number
from hpo.spec.model import PYTHON_TRAINABLE, Spec
from hpo.spec.plan import trial_count
from hpo.trial.cost import REPORT_TIME, Totals

if TYPE_CHECKING:
    import pandas as pd

LOG_FILE = "hpo.log"


@dataclass
class RunResult:
    """What a finished (or stopped) run leaves: its folder, its table and the winner."""

    path: Path
    dataframe: pd.DataFrame
    best_config: dict[str, Any] = field(default_factory=dict)
    resume_hint: str = ""  # how to resume it: the CLI's command, or hpo.resume from Python
    finished_already: bool = False  # resume found every trial finished: nothing ran

    @property
    def errors(self) -> int:
        """Trials that failed after their retries."""
        return int((self.dataframe["status"] == "ERROR").sum())

    def errors_summary(self) -> str:
        """One line: how many trials failed, which, and the last line of the first one's
        error (a trial's own OSError says its path there)."""
        failed = self.dataframe[self.dataframe["status"] == "ERROR"]
        first = Path(failed.iloc[0]["path"]) / "error.txt" if len(failed) else None
        lines = first.read_text().strip().splitlines() if first and first.exists() else []
        # a cause with a hint of its own (hpo's errors raised in a trial): one Hint, its first
        cause, _, hint = (lines[-1] if lines else "").partition(" Hint: ")
        cause = f" First: {cause[:200]}" if cause else ""
        hint = hint[:200]
        names = ", ".join(failed["trial_id"].astype(str).head(5))
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        return (f"{self.errors} trial(s) failed after their retries ({names}{more}).{cause} "
                f"Hint: {hint + '; ' if hint else ''}see error.txt in the trial folders; "
                f"{self.resume_hint} retries them")


def missing_metric(tune_said: str, spec: Spec) -> str:
    """One line for Tune's strict metric check (it stops the run at the first result without
    the metric): which metric, what the trial did report, and the closest of those."""
    names = [metric for metric, _ in spec.objectives]
    said, _, result = tune_said.partition("Result:")  # the metric, then the result it got
    missing = [n for n in names if f"`{n}`" in said or f"'{n}'" in said] or names
    found = dict.fromkeys(re.findall(r"'([^'/]+)':", result))  # flat keys, in their order
    reported = trials_own(list(found))
    example = ", ".join(f"'{name}': ..." for name in missing)
    if not reported:
        return (f"a trial reported results without the metric '{missing[0]}'. Hint: include "
                f"it in every report, e.g. hpo.report({{{example}}})")
    close = difflib.get_close_matches(missing[0], reported, n=1, cutoff=0.6)
    guess = f"did you mean '{close[0]}'? " if close else ""
    return (f"a trial reported {', '.join(map(repr, reported))} but not the metric "
            f"'{missing[0]}'. Hint: {guess}fix `metric:` in the YAML, or report it: "
            f"hpo.report({{{example}}})")


def trials_own(keys: list[str]) -> list[str]:
    """The keys of a result the trial itself reported: not those Tune or hpo add."""
    from ray.tune.result import AUTO_RESULT_KEYS, DEBUG_METRICS, DONE, SHOULD_CHECKPOINT

    hpo_added = {*(field.name for field in dataclasses.fields(Totals)), REPORT_TIME}
    added = {*AUTO_RESULT_KEYS, *DEBUG_METRICS, DONE, SHOULD_CHECKPOINT, *hpo_added}
    return [key for key in keys if key not in added and key.split("/")[0] not in added]


def resume_hint(exp_dir: Path, spec: Spec) -> str:
    """`hpo resume DIR`, or from Python where the trainable is a Python object (which the
    CLI cannot import): `hpo.resume(DIR, trainable=...)`."""
    if isinstance(spec.trainable, str) and not spec.trainable.startswith(PYTHON_TRAINABLE):
        return f"`hpo resume {exp_dir}`"
    return f"`hpo.resume('{exp_dir}', trainable=...)`"


def outcome(exp_dir: Path, spec: Spec, frame: pd.DataFrame | None = None) -> RunResult:
    frame = load_results(exp_dir) if frame is None else frame
    # A stop (Ctrl+C, SIGTERM, USR1; hpo.driver.guards.stops): Tune saved its state and returned.
    # (synchronous HyperBand leaves the trials it cut PAUSED; rasda, those held for want of
    # walltime, to be resumed by the requeued job)
    started = ["RUNNING", *(["PAUSED"] if spec.scheduler.type != "hyperband" else [])]
    statuses = list(frame["status"]) if len(frame) else []
    not_started = 0 if spec.time_budget_s else max(trial_count(spec) - len(frame), 0)
    had_started = sum(status in started for status in statuses)
    waiting = statuses.count("PENDING") + not_started
    if had_started + waiting:
        from hpo.driver.guards.stops import stopped_by  # imports ray.tune: after Ray started
        from hpo.driver.plugins.progress import unfinished_line

        by = f" by {stopped_by()}" if stopped_by() else ""
        raise RunError(f"the run stopped{by} with {unfinished_line(had_started, waiting)}. "
                       f"Hint: {resume_hint(exp_dir, spec)} continues it")
    metric = frame.attrs.get("metric", "")
    result = RunResult(exp_dir, frame, resume_hint=resume_hint(exp_dir, spec))
    if frame.empty or frame[f"best_{metric}"].isna().all():
        if result.errors:  # the cause is more use than "no metric"
            raise RunError(result.errors_summary())
        if said := never_a_number(frame):
            raise RunError(said)
        raise RunError(f"{exp_dir}: no trial reported the metric '{metric}'. Hint: the trainable "
                       f"must call hpo.report({{'{metric}': ...}}); see the trials' error.txt "
                       f"and {LOG_FILE}")
    result.best_config = best_config(frame)
    return result
