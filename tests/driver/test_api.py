"""The Python API: hpo.run on a dict spec in-process (real embedded Ray), then results."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import hpo
from hpo.results import load_results

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _end_the_kept_ray() -> Iterator[None]:
    """hpo.run keeps its Ray for the next run; later modules expect none running."""
    yield
    hpo.shutdown()


def test_run_returns_dataframe_and_best_config(tmp_path: Path) -> None:
    spec = {
        "name": "api", "trainable": "tests/support/study_trainables.py:steady",
        "metric": "score", "mode": "max", "num_samples": 3,
        "search_space": {"x": {"choice": [0.1, 0.5, 0.9]}},
        "constants": {"steps": 3, "sleep": 0.0},
        "search": {"type": "random", "seed": 0}, "storage": str(tmp_path),
    }
    result = hpo.run(spec)
    assert result.path == tmp_path / "api"
    assert len(result.dataframe) == 3 and result.errors == 0
    best_x = result.dataframe["config/x"].max()
    assert result.best_config == {"steps": 3, "sleep": 0.0, "x": best_x}
    assert result.dataframe.iloc[0]["best_score"] == pytest.approx(best_x * 3)
    # the folder alone reproduces the same table, and keeps the spec for resume
    assert load_results(result.path).equals(result.dataframe)
    saved = yaml.safe_load((result.path / "hpo-spec.yaml").read_text())
    assert saved["trainable"].endswith("tests/support/study_trainables.py:steady")
    assert Path(saved["trainable"].split(":")[0]).is_absolute()


def test_trial_output_and_files_are_kept_in_the_trial_folder(tmp_path: Path) -> None:
    """Whatever a trial prints or writes into its working directory outlives the run's
    temp dir: a trial the stop rule cut, then one that ran to its end in the same reused
    worker process, with a last line printed and not flushed."""
    spec = {
        "name": "out", "trainable": "tests/support/study_trainables.py:chatty",
        "metric": "score", "mode": "max", "max_concurrent": 1,
        "search_space": {"x": {"grid": [2, 1]}}, "constants": {"steps": 3},
        "stop": {"score": 4}, "storage": str(tmp_path),
    }
    frame = hpo.run(spec).dataframe.set_index("config/x")
    assert frame["iterations"].to_dict() == {1: 3, 2: 2}  # x=2 was stopped at score 4
    for x, trial_dir in frame["path"].items():
        folder = Path(trial_dir)
        assert f"stdout of trial x={x}" in (folder / "stdout").read_text()
        assert f"stderr of trial x={x}" in (folder / "stderr").read_text()
        assert (folder / "artifact.txt").read_text() == f"x={x}"
    assert "done x=1" in Path(frame.loc[1, "path"], "stdout").read_text()


def test_existing_experiment_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "exists").mkdir()
    (tmp_path / "exists" / "hpo-spec.yaml").write_text("name: exists\n")
    spec = {"name": "exists", "trainable": "tests/support/study_trainables.py:steady",
            "metric": "score", "mode": "max", "storage": str(tmp_path)}
    with pytest.raises(hpo.ExperimentError, match="already exists.*`hpo resume .*--name"):
        hpo.run(spec)
    # a trainable from Python: the hint is Python's, which the run can be resumed with
    spec.pop("trainable")
    with pytest.raises(hpo.ExperimentError,
                       match=r"already exists.*hpo\.resume\('.*', trainable=.*name="):
        hpo.run(spec, trainable=lambda config: None)
    assert (tmp_path / "exists" / "hpo-spec.yaml").read_text() == "name: exists\n"


def test_seed_repeats_ashas_bracket_draws(tmp_path: Path) -> None:
    """With one trial at a time, `search.seed` makes the whole ASHA run repeat: which
    trials were cut, and when, depends on the bracket ASHA drew for each trial."""
    spec = {
        "trainable": "tests/support/study_trainables.py:steady", "metric": "score", "mode": "max",
        "num_samples": 12, "max_concurrent": 1,
        "search_space": {"x": {"uniform": [0.0, 1.0]}},
        "constants": {"steps": 9, "sleep": 0.0},
        "scheduler": {"type": "asha", "max_t": 9, "grace_period": 1, "reduction_factor": 3,
                      "brackets": 3},
        "search": {"type": "random", "seed": 3}, "storage": str(tmp_path),
    }

    def iterations_per_trial(name: str) -> list[tuple[float, int]]:
        frame = hpo.run({**spec, "name": name}).dataframe.sort_values("config/x")
        return list(zip(frame["config/x"], frame["iterations"], strict=True))

    first = iterations_per_trial("one")
    assert iterations_per_trial("two") == first
    assert {iterations for _, iterations in first} - {9}, "ASHA cut no trial"


def threads_seen(config: dict) -> None:
    import torch

    hpo.report({"threads": torch.get_num_threads()})


def test_a_trial_gets_the_torch_threads_of_its_cpus(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray sets a worker's OMP_NUM_THREADS only when the environment has none, and HPC module
    files often set OMP_NUM_THREADS=1: the trial's torch ran on one thread while the trial
    held two CPUs."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = {"name": "threads", "trainable": f"{__file__}:threads_seen", "metric": "threads",
            "mode": "max", "num_samples": 2, "resources": {"cpus_per_trial": 2},
            "storage": str(tmp_path)}
    result = hpo.run(spec, num_cpus=2)
    assert list(result.dataframe["last_threads"]) == [2, 2]


@pytest.mark.parametrize(("search", "space"), [
    ({"type": "random", "seed": 0}, {"x": {"uniform": [0.0, 1.0]}}),
    ({"type": "grid"}, {"x": {"grid": [0.1, 0.2, 0.3, 0.4]}}),
    ({"type": "optuna", "seed": 0}, {"x": {"uniform": [0.0, 1.0]}})],
    ids=["random", "grid", "optuna"])
def test_max_concurrent_holds_with_every_searcher(tmp_path: Path, search: dict[str, object],
                                                  space: dict[str, object]) -> None:
    spec = {
        "name": "one-at-a-time", "trainable": "tests/support/study_trainables.py:timed",
        "metric": "score", "mode": "max", "num_samples": 1 if search["type"] == "grid" else 4,
        "max_concurrent": 1, "search": search, "search_space": space,
        # 2 s a trial: longer than a worker's start, so two trials let run would overlap
        "constants": {"steps": 4, "sleep": 0.5}, "storage": str(tmp_path),
    }
    frame = hpo.run(spec, num_cpus=2).dataframe
    assert len(frame) == 4
    spans = sorted(zip(frame["started"], frame["now"], strict=True))  # first start, last report
    # one at a time: each trial started after the one before it had reported its last step
    assert all(later[0] > earlier[1] for earlier, later in itertools.pairwise(spans)), spans
