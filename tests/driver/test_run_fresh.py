"""A run that failed before any trial finished (a metric typo) can be started again with the
fixed YAML: `hpo run` says `--fresh` does it, `--fresh` does it, and `--fresh` never deletes
a finished trial (it refuses and names them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from calls import hpo_cli

from hpo.driver.guards.lease import LEASE_FILE
from hpo.driver.run.fresh import already_here, finished_trials, start_again
from hpo.errors import ExperimentError
from hpo.spec.load import spec_from_dict

SPEC = """
name: typo
trainable: tests/support/study_trainables.py:steady
metric: {metric}
mode: max
num_samples: 2
max_concurrent: 2
search_space:
  x: {{uniform: [0.0, 1.0]}}
constants: {{steps: 2, sleep: 0.0}}
search: {{type: random, seed: 3}}
"""


@pytest.mark.slow
def test_a_failed_run_starts_again_with_fresh(tmp_path: Path) -> None:
    space, storage = tmp_path / "typo.yaml", tmp_path / "results"
    space.write_text(SPEC.format(metric="scor"))
    assert hpo_cli("run", str(space), "--storage", str(storage)).returncode != 0
    exp_dir = storage / "typo"
    assert (exp_dir / "hpo-spec.yaml").is_file()  # the failed run's folder stays

    space.write_text(SPEC.format(metric="score"))  # fixed
    again = hpo_cli("run", str(space), "--storage", str(storage))
    assert again.returncode == 2, again.stderr
    assert "`hpo run --fresh` starts it again" in again.stderr

    fresh = hpo_cli("run", str(space), "--storage", str(storage), "--fresh")
    assert fresh.returncode == 0, fresh.stderr
    assert "--fresh: emptied" in fresh.stderr
    assert "metric: score" in (exp_dir / "hpo-spec.yaml").read_text()
    done = finished_trials(exp_dir)
    assert done is not None and len(done) == 2

    kept = sorted(p.name for p in exp_dir.iterdir())
    refused = hpo_cli("run", str(space), "--storage", str(storage), "--fresh")
    assert refused.returncode == 2
    assert "--fresh: 2 trial(s) finished here" in refused.stderr
    assert all(trial in refused.stderr for trial in done)
    assert sorted(p.name for p in exp_dir.iterdir()) == kept  # nothing deleted


def _failed_folder(exp_dir: Path, done: bool) -> None:
    """A folder as a run leaves it that failed before Tune's first snapshot: the spec, the
    lease, one trial folder with a report (its last, where `done`)."""
    trial = exp_dir / "train_1"
    trial.mkdir(parents=True)
    (exp_dir / "hpo-spec.yaml").write_text("name: typo\nmetric: score\nmode: max\n")
    (exp_dir / LEASE_FILE).write_text("held by the caller")
    (trial / "result.json").write_text(json.dumps({"score": 1.0, "done": done}) + "\n")


def test_fresh_empties_a_folder_without_a_finished_trial_and_keeps_the_lease(
        tmp_path: Path) -> None:
    _failed_folder(tmp_path, done=False)
    assert finished_trials(tmp_path) == []
    start_again(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [LEASE_FILE]


def test_fresh_refuses_where_it_cannot_tell_what_finished(tmp_path: Path) -> None:
    _failed_folder(tmp_path, done=True)
    assert finished_trials(tmp_path) is None
    with pytest.raises(ExperimentError, match="--fresh: cannot tell which trials finished"):
        start_again(tmp_path)
    assert (tmp_path / "train_1" / "result.json").is_file()


def test_the_hint_offers_fresh_only_where_no_trial_finished(tmp_path: Path) -> None:
    spec = spec_from_dict({"name": "typo", "trainable": "tests/support/study_trainables.py:steady",
                           "metric": "score", "mode": "max",
                           "search_space": {"x": {"uniform": [0.0, 1.0]}}}, "<test>")
    _failed_folder(tmp_path / "a", done=False)
    assert "--fresh" in str(already_here(tmp_path / "a", spec))
    _failed_folder(tmp_path / "b", done=True)
    assert "--fresh" not in str(already_here(tmp_path / "b", spec))
