"""tracking: each trial as a run in a real MLflow store (read back with MLflow's client) and a
real offline W&B run directory; a resumed trial continues its MLflow run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from calls import ROOT, SUPPORT, trial_rows
from stop_points import SPEC, StopAt

import hpo
from hpo.driver.plugins.tracking import MLFLOW_RUNS_FILE
from hpo.errors import ConfigError, RunError
from hpo.spec import tracking
from hpo.spec.load import spec_from_dict

HERE = Path(__file__).resolve().parent
CPUS = 2


def fails_once(config: dict[str, Any]) -> None:
    """Reports score x * step for 3 steps with checkpoints; the first attempt fails before
    step 2 (a marker file remembers it), so `hpo resume` continues from step 1."""
    state = hpo.get_checkpoint()
    start = state["step"] + 1 if state else 1
    marker = Path(config["marker_dir"]) / f"failed-{config['x']}"
    for step in range(start, 4):
        if step == 2 and not marker.exists():
            marker.touch()
            raise RuntimeError("fails once")
        hpo.report({"score": config["x"] * step, "half": step / 2}, checkpoint={"step": step})


def _spec(tmp_path: Path, trainable: str, tracking_section: dict[str, Any],
          **constants: Any) -> dict[str, Any]:
    return {
        "name": "tracked", "trainable": trainable, "metric": "score", "mode": "max",
        "search_space": {"x": {"grid": [1, 2]}},
        "constants": {"steps": 3, "sleep": 0, **constants},
        "storage": str(tmp_path / "results"), "tracking": tracking_section,
    }


def _mlflow_runs(uri: str, name: str) -> dict[float, Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id])
    by_x = {float(run.data.params["x"]): (client, run) for run in runs}
    assert len(by_x) == len(runs), "a trial has more than one run"
    return by_x


def _history(client: Any, run: Any, metric: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, metric))


@pytest.mark.ray
def test_mlflow_run_per_trial_with_params_and_metrics(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = _spec(tmp_path, f"{SUPPORT / 'study_trainables.py'}:steady",
                 {"mlflow": {"tracking_uri": uri, "experiment_name": "exp-a",
                             "tags": {"team": "hpo"}}})
    hpo.run(spec, num_cpus=CPUS)
    runs = _mlflow_runs(uri, "exp-a")
    assert sorted(runs) == [1.0, 2.0]  # one run per trial, named by its config
    for x, (client, run) in runs.items():
        assert run.data.params["steps"] == "3"
        assert run.data.tags["team"] == "hpo"
        assert run.info.status == "FINISHED"
        assert _history(client, run, "score") == [(1, x), (2, 2 * x), (3, 3 * x)]
        assert "resumed_at" in run.data.metrics  # every reported metric, not only the objective


@pytest.mark.ray
def test_resumed_trial_continues_its_mlflow_run(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = _spec(tmp_path, f"{HERE / 'test_tracking.py'}:fails_once",
                 {"mlflow": {"tracking_uri": uri}}, marker_dir=str(tmp_path))
    with pytest.warns(hpo.TrialErrorsWarning, match="fails once"):
        assert hpo.run(spec, num_cpus=CPUS).errors == 2  # both failed at step 2
    exp_dir = tmp_path / "results" / "tracked"
    first = json.loads((exp_dir / MLFLOW_RUNS_FILE).read_text())
    assert len(first) == 2
    hpo.resume(exp_dir, num_cpus=CPUS)
    runs = _mlflow_runs(uri, "tracked")
    assert sorted(runs) == [1.0, 2.0]  # no second run for a resumed trial
    assert {run.info.run_id for _, run in runs.values()} == set(first.values())
    for x, (client, run) in runs.items():
        assert _history(client, run, "score") == [(1, x), (2, 2 * x), (3, 3 * x)]
        assert run.info.status == "FINISHED"


@pytest.mark.ray
@pytest.mark.slow
def test_a_stopped_and_resumed_trial_logs_each_step_once(tmp_path: Path) -> None:
    """Checkpoints every 5 steps, a stop at step 8: the trial goes on from step 5 and reports
    6-8 again; its MLflow run holds steps 1..12 once each, like its result.json."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = {**SPEC, "name": "tracked", "num_samples": 1, "tracking": {
        "mlflow": {"tracking_uri": uri}}, "checkpoint": {"frequency": 5, "keep": 1}}
    stop = StopAt(signal.SIGUSR1, 0, 8, str(tmp_path / "fired"))
    with pytest.raises(RunError, match="stopped by SIGUSR1"):
        hpo.run(spec, storage=str(tmp_path), num_cpus=CPUS, callbacks=[stop])
    hpo.resume(tmp_path / "tracked", num_cpus=CPUS)
    ((client, run),) = _mlflow_runs(uri, "tracked").values()
    steps = [step for step, _ in _history(client, run, "training_iteration")]
    assert steps == list(range(1, 13))
    rows = next(iter(trial_rows(tmp_path / "tracked").values()))
    assert [r["training_iteration"] for r in rows] == list(range(1, 13))


@pytest.mark.ray
def test_wandb_offline_run_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    monkeypatch.delenv("WANDB_MODE", raising=False)  # mode: offline alone needs no API key
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "wandb-dir").mkdir()
    spec = _spec(tmp_path, f"{SUPPORT / 'study_trainables.py'}:steady",
                 {"wandb": {"project": "p", "mode": "offline"}})
    hpo.run(spec, num_cpus=CPUS)
    runs = sorted((tmp_path / "wandb-dir" / "wandb").glob("offline-run-*"))
    assert len(runs) == 2  # one offline run per trial, kept after Ray's temp dir is gone
    for run in runs:
        # W&B writes its records as protobuf; the metric names and values are in there
        data = b"".join(path.read_bytes() for path in run.glob("run-*.wandb"))
        assert b"score" in data and b"training_iteration" in data and b"resumed_at" in data


def test_wandb_mode_defaults_to_offline_inside_slurm() -> None:
    wandb = tracking.Wandb(project="p")
    assert wandb.resolved_mode({"SLURM_JOB_ID": "42"}) == "offline"
    assert wandb.resolved_mode({}) == "online"
    assert tracking.Wandb(mode="online").resolved_mode({"SLURM_JOB_ID": "42"}) == "online"


@pytest.mark.parametrize("package", ["mlflow", "wandb"])
def test_missing_package_names_the_extra(package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tracking.importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec",
                        lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(ConfigError) as caught:
        spec_from_dict({"name": "t", "trainable": "trainables.digits:train", "metric": "m",
                        "mode": "max", "tracking": {package: {}}}, "exp.yaml")
    line = str(caught.value)
    assert f"tracking.{package}" in line and f"hpo[{package}]" in line
    assert "\n" not in line


def _no_wandb_login(home: Path) -> dict[str, str]:
    """This environment with a fresh HOME and none of the places W&B finds a key in."""
    drop = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_SETUP_API_KEY_HOOK", "WANDB_IDENTITY_TOKEN_FILE",
            "NETRC", "SLURM_JOB_ID", "WANDB_CONFIG_DIR", "WANDB_DIR")
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "HOME": str(home), "PYTHONUNBUFFERED": "1"}


CHECK = """
import os, sys
from hpo.errors import ConfigError, RunError
from hpo.spec.load import spec_from_dict
spec = spec_from_dict({"name": "t", "trainable": "trainables.digits:train", "metric": "m",
                       "mode": "max", "tracking": {"wandb": {"project": "p"%s}}}, "exp.yaml")
try:
    spec.tracking.check_login("exp.yaml", os.environ)
except ConfigError as exc:
    sys.exit(str(exc))
"""


def _check(env: dict[str, str], mode: str | None) -> subprocess.CompletedProcess[str]:
    code = CHECK % (f', "mode": "{mode}"' if mode else "")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)


def test_wandb_online_without_a_key_is_refused_by_the_cli(tmp_path: Path) -> None:
    env = _no_wandb_login(tmp_path / "home")
    space = tmp_path / "online.yaml"
    space.write_text(yaml.safe_dump(_spec(tmp_path, "tests/support/study_trainables.py:steady",
                                          {"wandb": {"project": "p", "mode": "online"}})))
    done = subprocess.run([sys.executable, "-m", "hpo", "run", str(space), "--cpus", "2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "tracking.wandb.mode" in lines[0] and "no W&B API key" in lines[0], lines
    assert "mode: offline" in lines[0] and "wandb login" in lines[0], lines
    assert not list((tmp_path / "results").glob("tracked/*/result.json"))  # no trial ran


def test_wandb_key_in_netrc_written_by_wandb_is_found(tmp_path: Path) -> None:
    env = _no_wandb_login(tmp_path / "home")
    refused = _check(env, "online")
    assert refused.returncode == 1 and "no W&B API key" in refused.stderr, refused.stderr
    from wandb.sdk.lib import wbauth

    saved = os.environ.get("NETRC")
    os.environ["NETRC"] = str(tmp_path / "home" / ".netrc")  # wandb writes where this says
    try:
        wbauth.write_netrc_auth(host="https://api.wandb.ai", api_key="k" * 40)
    finally:
        if saved is None:
            del os.environ["NETRC"]
        else:
            os.environ["NETRC"] = saved
    found = _check(env, "online")  # the same HOME, now with wandb's own ~/.netrc entry
    assert found.returncode == 0, found.stderr


@pytest.mark.parametrize(("mode", "extra"), [
    ("offline", {}), (None, {"SLURM_JOB_ID": "42"}), ("online", {"WANDB_API_KEY": "k" * 40}),
])
def test_wandb_without_a_login_is_fine_offline_or_with_a_key(
        tmp_path: Path, mode: str | None, extra: dict[str, str]) -> None:
    done = _check({**_no_wandb_login(tmp_path / "home"), **extra}, mode)
    assert done.returncode == 0, done.stderr
