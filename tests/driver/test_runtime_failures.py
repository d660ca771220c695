"""Runs that go wrong at run time end with one clear line and a non-zero exit, never a hang."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from calls import hpo_cli

import hpo
from hpo.results import load_results
from hpo.trial.session import local_trial

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, function: str) -> tuple[int, str, str]:
    space = tmp_path / f"{function}.yaml"
    space.write_text(f"name: {function}\ntrainable: tests/support/study_trainables.py:{function}\n"
                     "metric: score\nmode: max\nnum_samples: 2\n")
    done = hpo_cli("run", str(space), "--storage", str(tmp_path / "results"), timeout=180)
    return done.returncode, done.stdout, done.stderr


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def test_metric_never_reported(tmp_path: Path) -> None:
    code, _, stderr = _run(tmp_path, "wrong_metric")
    assert code == 1
    assert "Traceback" not in stderr
    assert _last_line(stderr).startswith("error: a trial reported 'not_the_metric' but not "
                                         "the metric 'score'. Hint: fix `metric:`")


def test_a_misnamed_metric_gets_a_did_you_mean(tmp_path: Path) -> None:
    code, _, stderr = _run(tmp_path, "misnamed_metric")
    line = _last_line(stderr)
    assert code == 1 and "Traceback" not in stderr
    assert line.startswith("error: a trial reported 'scor', 'loss' but not the metric 'score'. "
                           "Hint: did you mean 'scor'?"), line
    # Tune's strict check stops the run at the first result without it: one report each
    frame = load_results(tmp_path / "results" / "misnamed_metric")
    assert (frame["iterations"].fillna(0) <= 1).all(), frame[["trial_id", "iterations"]]


def test_a_stop_key_never_reported_ends_the_run_with_a_did_you_mean(tmp_path: Path) -> None:
    """`stop: {training_iterations: 3}` (a typo): Tune warned once into hpo.log and ran every
    trial to its end; now the first result without the key ends the run with one line."""
    space = tmp_path / "typo.yaml"
    space.write_text("name: typo\ntrainable: tests/support/study_trainables.py:steady\n"
                     "metric: score\n"
                     "mode: max\nnum_samples: 2\nconstants: {steps: 20, sleep: 0.05}\n"
                     "search_space: {x: {uniform: [0, 1]}}\nstop: {training_iterations: 3}\n")
    done = hpo_cli("run", str(space), "--storage", str(tmp_path / "results"), timeout=180)
    line = _last_line(done.stderr)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert line == ("error: a trial reported 'score', 'resumed_at' but not the stop key "
                    "'training_iterations'. Hint: did you mean 'training_iteration'? fix "
                    "`stop:` in the YAML, or report it in every result (Tune checks the stop "
                    "at each)"), line
    frame = load_results(tmp_path / "results" / "typo")
    assert (frame["iterations"].fillna(0) <= 2).all(), frame[["trial_id", "iterations"]]
    # the live view's last frame: the run ended on the error, not "terminated 2"
    assert "trials  ended on an error (below)" in done.stderr, done.stderr[-2000:]


def test_nothing_reported(tmp_path: Path) -> None:
    code, _, stderr = _run(tmp_path, "silent")
    assert code == 1
    assert "no trial reported the metric 'score'" in _last_line(stderr)


def test_failing_trials_are_reported_with_their_cause(tmp_path: Path) -> None:
    code, stdout, stderr = _run(tmp_path, "crashes")
    assert code == 1
    line = _last_line(stderr)
    named = re.match(r"error: 2 trial\(s\) failed after their retries \((\w+), (\w+)\)\. ", line)
    trials = set(load_results(tmp_path / "results" / "crashes")["trial_id"])
    assert named and set(named.groups()) == trials, line  # each failed trial, by its id
    assert "First: RuntimeError: boom in the trainable Hint:" in line
    assert "ERROR" in stdout  # the results table still shows what ran
    assert "TrialErrorsWarning" not in stderr  # Python's warning: said once, as the line
    # What a failed trial printed last is kept in its folder, though it was never flushed.
    kept = [path.read_text() for path in (tmp_path / "results" / "crashes").glob("*/stdout")]
    assert len(kept) == 2 and all("about to fail" in text for text in kept), kept


def test_a_metric_reported_as_a_str_is_refused_at_the_report(tmp_path: Path) -> None:
    """It said "no trial reported the metric 'score'", which the trainable did."""
    code, _, stderr = _run(tmp_path, "text_metric")
    line = _last_line(stderr)
    assert code == 1 and "Traceback" not in stderr, stderr[-2000:]
    assert re.match(r"error: 2 trial\(s\) failed after their retries \(\w+, \w+\)\. First: "
                    r"TypeError: the metric 'score' was reported as a str \('0\.17'\), not a "
                    r"number\. Hint: report a number, e\.g\. hpo\.report\(\{'score': "
                    r"float\(\.\.\.\)\}\); see error\.txt in the trial folders; ", line), line



def test_a_class_metric_reported_as_a_str_is_said_at_the_end(tmp_path: Path) -> None:
    """A class's results bypass hpo.report: the run's end says what the trials reported."""
    code, _, stderr = _run(tmp_path, "TextMetricClass")
    assert code == 1 and "Traceback" not in stderr, stderr[-2000:]
    assert _last_line(stderr) == ("error: the metric 'score' was reported as a str ('0.17'), "
                                  "not a number. Hint: report a number, e.g. "
                                  "hpo.report({'score': float(...)})")


@pytest.mark.parametrize("value", [np.float32(0.5), np.int64(3), np.array(0.5), math.nan,
                                   None, 2, 0.5])
def test_numbers_of_every_kind_pass_the_report(value: object) -> None:
    """They reach result.json as numbers (None: not reported this time): as before."""
    with local_trial(metrics=("score",)) as reports:
        hpo.report({"score": value})
    assert reports == [{"score": value}]


@pytest.mark.parametrize(("value", "said"), [
    ("0.17", "a str ('0.17')"), (np.array([0.5]), "an ndarray (array([0.5]))"),
    ([1, 2], "a list ([1, 2])"), ("x" * 50, f"a str ('{'x' * 36}...)"),
    (True, "a bool (True)"), (np.bool_(False), "a bool (np.False_)")])
def test_what_is_no_number_is_refused_at_the_report(value: object, said: str) -> None:
    """Tune writes it into result.json as text (a tensor too), where nothing ranks it."""
    with local_trial(metrics=("score",)) as reports, pytest.raises(TypeError) as refused:
        hpo.report({"score": value, "other": "free text"})
    assert str(refused.value) == (f"the metric 'score' was reported as {said}, not a number. "
                                  "Hint: report a number, e.g. hpo.report({'score': "
                                  "float(...)})")
    assert reports == []
