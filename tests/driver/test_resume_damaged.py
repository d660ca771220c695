"""`hpo resume` of an experiment whose state a full disk or a crash left cut short or damaged:
one line naming the file, exit code 2, before Tune reads it (Tune would log the error and
start the experiment afresh over the old one)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from calls import hpo_cli

from hpo.driver.guards.storage_faults import check_resumable
from hpo.errors import ExperimentError

pytestmark = pytest.mark.ray

SPEC = """
name: small
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
search_space:
  x: {grid: [1, 2]}
constants: {steps: 2, sleep: 0.0}
checkpoint: {frequency: 1, keep: 1}
"""
CUTS: dict[str, Callable[[bytes], bytes]] = {
    "half": lambda data: data[:len(data) // 2],
    "empty": lambda data: b"",
    "one byte short": lambda data: data[:-1],
}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished experiment; each test damages its own copy."""
    root = tmp_path_factory.mktemp("damaged")
    space = root / "small.yaml"
    space.write_text(SPEC)
    done = hpo_cli("run", str(space), "--storage", str(root / "results"), "--cpus", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "results" / "small"


def _damaged(experiment: Path, tmp_path: Path, pattern: str, cut: str) -> tuple[Path, Path]:
    copy = tmp_path / "small"
    shutil.copytree(experiment, copy)
    target = max(copy.glob(pattern))  # the newest, as Tune takes it
    target.write_bytes(CUTS[cut](target.read_bytes()))
    return copy, target


def test_a_whole_state_passes(experiment: Path) -> None:
    check_resumable(experiment)


@pytest.mark.parametrize("cut", CUTS)
@pytest.mark.parametrize("pattern", ["experiment_state-*.json", "tuner.pkl",
                                     "basic-variant-state-*.json"])
def test_a_damaged_state_file_is_named(experiment: Path, tmp_path: Path, pattern: str,
                                       cut: str) -> None:
    copy, target = _damaged(experiment, tmp_path, pattern, cut)
    with pytest.raises(ExperimentError) as caught:
        check_resumable(copy)
    assert caught.value.exit_code == 2
    assert str(caught.value) == (
        f"{target}: cut short or damaged (a full disk or a crash while it was written); `hpo "
        "resume` cannot continue from it. Hint: restore it from a backup")


def test_an_older_whole_state_is_offered(experiment: Path, tmp_path: Path) -> None:
    copy, target = _damaged(experiment, tmp_path, "experiment_state-*.json", "half")
    older = copy / "experiment_state-2000-01-01_00-00-00.json"
    shutil.copy(next(experiment.glob("experiment_state-*.json")), older)
    with pytest.raises(ExperimentError, match=f"Hint: restore it from a backup, or move it "
                       f"away to continue from the older {older.name} "):
        check_resumable(copy)


@pytest.mark.slow
def test_resume_of_a_cut_short_state_is_one_line(experiment: Path, tmp_path: Path) -> None:
    copy, target = _damaged(experiment, tmp_path, "experiment_state-*.json", "half")
    damaged = target.read_bytes()
    done = hpo_cli("resume", str(copy), "--cpus", "2")
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [
        f"error: {target}: cut short or damaged (a full disk or a crash while it was written); "
        "`hpo resume` cannot continue from it. Hint: restore it from a backup"], done.stderr
    # Tune never ran: no fresh experiment over the old one
    assert target.read_bytes() == damaged
    assert sorted(copy.glob("experiment_state-*.json")) == [target]
