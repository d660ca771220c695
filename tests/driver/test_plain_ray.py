"""Plain Ray is a tested path: representative studies of the other modules (a run, a stop and
an exact resume, RASDA, a 2-node Slurm job, a join) run again with every speed patch off
(HPO_RAY_PATCHES=off, hpo.ray_adapters.gate), and a Ray that lacks what a speed patch reads
runs the study with that patch off.

The module's Ray starts after HPO_RAY_PATCHES is set: Ray's workers, Slurm jobs and the CLI's
subprocesses take it from the environment. `python -m pytest -m plain_ray` runs this module
(add `and not slurm` where there is no test Slurm cluster)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_api
import test_rasda
from calls import trial_rows
from patch_switch import forget_ray_and_decisions, gate_under

import hpo
from hpo.ray_adapters import checked, gate
from testing.slurm_cluster import SlurmTestCluster
from tests.cluster import test_join, test_slurm_cluster
from tests.e2e import test_exact_stops

pytestmark = [pytest.mark.plain_ray, pytest.mark.ray]  # each test runs another module's study


@pytest.fixture
def fresh_results(slurm: SlurmTestCluster) -> Iterator[None]:
    """The Slurm studies rerun here are named as in their own modules, on the same test
    cluster: their folders go before and after, so neither run resumes the other's."""
    folders = [slurm.root / "work" / "results" / name for name in ("walltime", "joined")]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    yield
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def _plain_ray() -> Iterator[None]:
    # the checks' disk cache off too: a test here removes what a check reads
    with gate_under({gate.SWITCH: "off", checked.CACHE_SWITCH: "off"}):
        yield


@pytest.fixture(autouse=True)
def _speed_off() -> None:
    assert not any(gate.is_on(name) for name, kind, _, _ in gate.table() if kind == "speed")


@pytest.mark.slow
def test_a_run(tmp_path: Path) -> None:
    test_api.test_run_returns_dataframe_and_best_config(tmp_path)


@pytest.mark.slow
def test_ray_starts_every_worker_itself(tmp_path: Path) -> None:
    """The setting reaches the run's Ray: no worker is forked by hpo's fork server."""
    result = hpo.run({"name": "plain",
                      "trainable": "tests/support/study_trainables.py:steady_forked",
                      "metric": "score", "mode": "max", "storage": str(tmp_path),
                      "search_space": {"x": {"grid": [1, 2]}},
                      "constants": {"steps": 2, "sleep": 0.0}})
    rows = [row for history in trial_rows(result.path).values() for row in history]
    assert len(rows) == 4 and not any(row["forked"] for row in rows)


@pytest.mark.slow
def test_a_stop_and_an_exact_resume(tmp_path: Path) -> None:
    test_exact_stops.test_rows_after_the_last_checkpoint_are_cut_on_resume(tmp_path)


@pytest.mark.slow
def test_a_rasda_growth(tmp_path: Path) -> None:
    test_rasda.test_a_promoted_trial_grows_and_trains_as_the_ungrown_run(tmp_path, "ddp",
                                                                          "fixed")


@pytest.mark.slurm
@pytest.mark.slow
def test_a_two_node_slurm_job_stops_and_resumes(slurm: SlurmTestCluster,
                                                outputs: list[str],
                                                fresh_results: None) -> None:
    test_slurm_cluster.test_usr1_stops_requeues_and_resumes(slurm, outputs)


@pytest.mark.slurm
@pytest.mark.slow
def test_a_join(slurm: SlurmTestCluster, outputs: list[str],
                fresh_results: None) -> None:
    test_join.test_jobs_join_a_running_study_leave_without_losing_or_doubling_work(slurm,
                                                                                   outputs)


@pytest.mark.slow
def test_a_ray_without_what_a_speed_patch_reads_runs_with_it_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork server parses Ray's worker command with setup_worker's parser: a Ray without
    it turns fork-workers off (even where HPO_RAY_PATCHES would leave it on), and Ray starts
    every worker itself; the study runs as before."""
    from ray._private.workers import setup_worker

    forget_ray_and_decisions()
    monkeypatch.delenv(gate.SWITCH)
    monkeypatch.delattr(setup_worker, "parser")
    try:
        result = hpo.run({
            "name": "gap", "trainable": "tests/support/study_trainables.py:steady_forked",
            "metric": "score", "mode": "max", "storage": str(tmp_path),
            "search_space": {"x": {"grid": [1, 2, 3]}}, "constants": {"steps": 4, "sleep": 0.0},
        })
        decision = gate.decisions()["fork-workers"]
        assert not decision.on and "setup_worker" in decision.off_why, decision
        assert gate.is_on("fit-speed") and gate.is_on("lean-head")  # the others stay on
    finally:
        forget_ray_and_decisions()
    frame = result.dataframe
    assert result.errors == 0 and set(frame["status"]) == {"TERMINATED"}, frame
    rows = trial_rows(result.path)
    assert len(rows) == 3
    for history in rows.values():
        x = history[0]["config"]["x"]
        assert [row["training_iteration"] for row in history] == [1, 2, 3, 4]
        assert [row["score"] for row in history] == [x * step for step in range(1, 5)]
        assert not any(row["forked"] for row in history)  # Ray's own workers
