"""Data-parallel trials on real Horovod (Gloo) and real torch DDP, inside real Ray Tune."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dp_trainables
import numpy as np
import pytest
from calls import SUPPORT, trial_rows

import hpo

pytestmark = pytest.mark.slow
TRAINABLES = str(SUPPORT / "dp_trainables.py")
BACKENDS = ["horovod", "ddp"]


def _spec(tmp_path: Path, name: str, func: str, backend: str | None, **extra: Any) -> dict:
    spec = {"name": name, "trainable": f"{TRAINABLES}:{func}", "metric": "loss",
            "mode": "min", "storage": str(tmp_path), **extra}
    if backend:
        spec["distributed"] = {"backend": backend, "workers": 2, **spec.get("distributed", {})}
    return spec


def test_two_ranks_average_gradients_like_one_rank_with_the_global_batch(
        tmp_path: Path) -> None:
    weights = {}
    for backend in [None, *BACKENDS]:
        out = tmp_path / f"{backend}.npy"
        spec = _spec(tmp_path, f"step-{backend}", "one_step", backend,
                     constants={"batch_size": 32, "out": str(out)})
        result = hpo.run(spec, num_cpus=2)
        ((row,),) = trial_rows(result.path).values()
        assert result.dataframe.iloc[0]["status"] == "TERMINATED"
        assert (row["ranks"], row["backend"]) == ((2, backend) if backend else (1, "none"))
        weights[backend] = np.load(out)
        folder = Path(result.dataframe.iloc[0]["path"])
        if not backend:  # the trial's own process: Tune's capture
            assert "rank 0 of 1: stdout" in (folder / "stdout").read_text()
            assert "rank 0 of 1: stderr" in (folder / "stderr").read_text()
        else:  # each rank's output is kept in the trial folder
            for rank in (0, 1):
                log = (folder / f"rank-{rank}.log").read_text()
                for stream in ("stdout", "stderr", "fd 2"):
                    assert f"rank {rank} of 2: {stream}" in log, (backend, rank, log)
    expected = dp_trainables.first_step_weights(32)  # this process: one rank, batch 32
    initial = dp_trainables.initial_weights()
    assert not np.allclose(expected, initial, rtol=1e-3, atol=1e-4)  # the step moved them
    for backend in [None, *BACKENDS]:  # summed gradients would double the step, dropped halve
        np.testing.assert_allclose(weights[backend], expected, rtol=1e-5, atol=1e-6)


def test_asha_over_two_rank_horovod_trials(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "asha", "regression", "horovod", num_samples=6, max_concurrent=2,
                 search_space={"lr": {"loguniform": [1e-4, 1e-2]}},
                 constants={"epochs": 4}, search={"type": "random", "seed": 1},
                 scheduler={"type": "asha", "max_t": 4, "grace_period": 1,
                            "reduction_factor": 2})
    result = hpo.run(spec, num_cpus=4)
    frame = result.dataframe
    assert len(frame) == 6 and set(frame["status"]) == {"TERMINATED"}
    assert {row["ranks"] for rows in trial_rows(result.path).values() for row in rows} == {2}
    assert frame["iterations"].min() < 4 <= frame["iterations"].max()  # ASHA cut some


def test_pbt_restores_two_rank_trials_from_other_trials_checkpoints(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "pbt", "regression", "ddp", num_samples=4,
                 search_space={"lr": {"loguniform": [1e-4, 1e-2]}},
                 constants={"epochs": 4}, search={"type": "random", "seed": 0},
                 scheduler={"type": "pbt", "perturbation_interval": 2, "synch": True,
                            "quantile_fraction": 0.25,
                            "hyperparam_mutations": {"lr": {"loguniform": [1e-4, 1e-2]}}})
    result = hpo.run(spec, num_cpus=4)
    assert set(result.dataframe["status"]) == {"TERMINATED"}
    rows = [row for trial in trial_rows(result.path).values() for row in trial]
    # synchronous PBT exploits the worst trial at epoch 2: its ranks restart from a checkpoint
    restored = [row for row in rows if row["start"] > 0]
    assert restored and {row["ranks"] for row in restored} == {2}
    assert all(row["start"] == 2 for row in restored)


@pytest.mark.parametrize("backend", BACKENDS)
def test_killed_rank_fails_the_trial_which_resumes_from_its_checkpoint(
        tmp_path: Path, backend: str) -> None:
    spec = _spec(tmp_path, f"kill-{backend}", "regression", backend,
                 constants={"epochs": 4, "kill_rank": 1, "kill_epoch": 2,
                            "marker_dir": str(tmp_path)},
                 failure={"max_failures": 1})
    result = hpo.run(spec, num_cpus=2)
    assert (tmp_path / "killed-1").exists()  # the rank really died
    (rows,) = trial_rows(result.path).values()
    assert result.dataframe.iloc[0]["status"] == "TERMINATED"
    assert [row["epoch"] for row in rows] == [0, 1, 2, 3]  # nothing lost, nothing twice
    assert [row["start"] for row in rows] == [0, 0, 2, 2]  # resumed from epoch 1's checkpoint
    assert len({row["pid"] for row in rows}) == 2  # new rank processes after the failure


def test_hung_rank_fails_the_trial_within_the_timeout(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "hang", "regression", "ddp",
                 constants={"epochs": 3, "hang_rank": 1, "hang_epoch": 0},
                 distributed={"timeout_s": 10})
    # rank 1 never joins the first allreduce, so rank 0 blocks and never reports
    with pytest.raises(hpo.RunError, match="RankFailure: no report from rank 0 for 10 s"):
        hpo.run(spec, num_cpus=2)


def test_a_metric_reported_as_a_tensor_fails_the_trial_at_the_report(tmp_path: Path) -> None:
    """Each rank refuses it in hpo.report (Tune wrote it as the text 'tensor(0.5000)')."""
    spec = _spec(tmp_path, "tensor", "tensor_loss", "ddp")
    with pytest.raises(hpo.RunError) as failed:
        hpo.run(spec, num_cpus=2)
    assert "the metric 'loss' was reported as a Tensor (tensor(0.5000)), not a number. " \
        "Hint: report a number, e.g. hpo.report({'loss': float(...)})" in str(failed.value)
    assert "\n" not in str(failed.value)
