"""The Python API with Python objects: functions, closures, partials and Ray Tune classes as
trainables, large objects by reference, Tune callbacks, and the embedded Ray kept between runs
(real Ray, tiny trials; one Ray serves the whole module)."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from ray import tune
from ray.tune.utils.mock_trainable import MyTrainableClass

import hpo

pytestmark = pytest.mark.slow
CPUS = 2


@pytest.fixture(scope="module", autouse=True)
def _one_ray_for_the_module() -> Iterator[None]:
    yield
    hpo.shutdown()


def _reports(frame: Any) -> list[dict[str, Any]]:
    """Every result of every trial, read from the trial folders."""
    return [json.loads(line) for folder in frame["path"]
            for line in Path(folder, "result.json").read_text().splitlines()]


def _spec(tmp_path: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "metric": "score", "mode": "max", "storage": str(tmp_path),
            "search_space": {"x": {"grid": [1, 2]}}, **extra}


def train(config: dict[str, Any], offset: float = 0.0) -> None:
    for step in (1, 2):
        hpo.report({"score": config["x"] * step + offset})


def _closure(offset: float) -> Callable[[dict[str, Any]], None]:
    def scored(config: dict[str, Any]) -> None:
        train(config, offset)
    return scored


@pytest.mark.parametrize(("trainable", "best", "named"), [
    (train, 4.0, "train"),
    (_closure(10.0), 14.0, "scored"),
    (functools.partial(train, offset=100.0), 104.0, "train"),
])
def test_functions_closures_and_partials_tune(tmp_path: Path, trainable: Any, best: float,
                                              named: str) -> None:
    result = hpo.run(_spec(tmp_path, "fn"), trainable=trainable, num_cpus=CPUS)
    assert result.dataframe["best_score"].max() == best
    assert result.best_config == {"x": 2}
    saved = yaml.safe_load((result.path / "hpo-spec.yaml").read_text())
    assert saved["trainable"] == f"<python>:{named}"  # the YAML copy names it, results read it


def test_a_callable_inside_the_spec_dict(tmp_path: Path) -> None:
    result = hpo.run(_spec(tmp_path, "in-dict", trainable=train), num_cpus=CPUS)
    assert result.errors == 0 and result.best_config == {"x": 2}


def _fails_first(config: dict[str, Any]) -> None:
    if not Path(config["marker"]).exists():
        raise RuntimeError("boom before the marker")
    train(config)


def test_cli_resume_refuses_a_python_trainable_and_python_resume_takes_it(
        tmp_path: Path) -> None:
    spec = {**_spec(tmp_path, "res"), "constants": {"marker": str(tmp_path / "ok")}}
    with pytest.raises(hpo.RunError):  # every trial failed: the run is unfinished
        hpo.run(spec, trainable=_fails_first, num_cpus=CPUS)
    path = tmp_path / "res"
    with pytest.raises(hpo.ExperimentError,
                       match=r"hpo\.resume\('.*res', trainable=_fails_first\)"):
        hpo.resume(path, keep_ray=False)  # what `hpo resume` calls
    (tmp_path / "ok").touch()
    assert hpo.resume(path, trainable=_fails_first, num_cpus=CPUS).best_config["x"] == 2
    # finished: it needs no trainable, nothing runs (`hpo resume` said "give the trainable")
    assert hpo.resume(path, keep_ray=False).finished_already


def _fails(config: dict[str, Any]) -> None:
    raise RuntimeError(f"boom {config['x']}")


def test_a_failed_python_run_hints_at_python_resume(tmp_path: Path) -> None:
    # `hpo resume DIR` would refuse a Python trainable: the hint is the Python call
    with pytest.raises(hpo.RunError, match=r"hpo\.resume\('.*fails', trainable=\.\.\.\)` "
                                           r"retries them"):
        hpo.run(_spec(tmp_path, "fails"), trainable=_fails, num_cpus=CPUS)


def test_a_wrong_trainable_is_one_config_error(tmp_path: Path) -> None:
    class NotATrainable:
        pass

    for bad, says in ((42, "got int '42'"), (NotATrainable, "is not a ray.tune.Trainable")):
        with pytest.raises(hpo.ConfigError, match="trainable: .*" + says) as caught:
            hpo.run(_spec(tmp_path, "bad"), trainable=bad)
        assert "\n" not in str(caught.value)


def test_a_class_on_ranks_is_refused_before_anything_starts(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "cls-ranks", distributed={"backend": "ddp", "workers": 2})
    with pytest.raises(hpo.ConfigError, match="distributed: cannot run a Ray Tune class"):
        hpo.run(spec, trainable=MyTrainableClass)
    assert not (tmp_path / "cls-ranks").exists()


def test_a_class_runs_unchanged_with_asha_and_checkpoint_frequency(tmp_path: Path) -> None:
    """Ray's own example class (no reset_config: hpo turns actor reuse off for it), cut by
    ASHA, saved by Tune every second step; the text form names it as the YAML would."""
    spec = _spec(tmp_path, "cls", trainable="ray.tune.utils.mock_trainable:MyTrainableClass",
                 metric="episode_reward_mean", num_samples=1,
                 search_space={"width": {"grid": [1, 2, 4, 8]}}, max_concurrent=1,
                 scheduler={"type": "asha", "max_t": 4, "grace_period": 1,
                            "reduction_factor": 2, "time_attr": "training_iteration"},
                 checkpoint={"frequency": 2, "keep": None})
    frame = hpo.run(spec, num_cpus=CPUS).dataframe
    assert set(frame["status"]) == {"TERMINATED"} and frame["iterations"].max() == 4
    assert frame["iterations"].min() < 4  # ASHA cut at least one
    longest = Path(frame.loc[frame["iterations"].idxmax(), "path"])
    assert sorted(p.name for p in longest.glob("checkpoint_*")) == [
        "checkpoint_000000", "checkpoint_000001"]  # after steps 2 and 4


class Resettable(tune.Trainable):
    """A PBT-ready class: reset_config lets a reused actor take the next trial's config."""

    def setup(self, config: dict[str, Any], data: np.ndarray | None = None) -> None:
        self.value, self.resets = 0.0, 0
        self.total = float(data.sum()) if data is not None else 0.0

    def step(self) -> dict[str, Any]:
        time.sleep(0.2)  # the population runs side by side: PBT compares them
        self.value += self.config["lr"]
        return {"score": self.value, "resets": self.resets, "total": self.total}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        return {"value": self.value}

    def load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.value = checkpoint["value"]

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.resets += 1
        return True


def test_a_class_under_pbt_exploits_with_reset_config(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "pbt", num_samples=4, search_space={"lr": {"uniform": [0.1, 1.0]}},
                 stop={"training_iteration": 6}, search={"type": "random", "seed": 0},
                 resources={"cpus_per_trial": 0.5},
                 # synch: the population waits at each perturbation, so the exploit does
                 # not hang on the order in which trials arrive there (flaky under load)
                 scheduler={"type": "pbt", "perturbation_interval": 2, "synch": True,
                            "hyperparam_mutations": {"lr": {"uniform": [0.1, 1.0]}}})
    result = hpo.run(spec, trainable=Resettable, num_cpus=CPUS)
    assert result.errors == 0 and set(result.dataframe["iterations"]) == {6}
    exploits = (result.path / "pbt_global.txt").read_text().splitlines()
    assert exploits, "PBT cloned no trial"
    # an exploit reset a reused actor
    assert max(row["resets"] for row in _reports(result.dataframe)) >= 1


def test_a_class_without_reset_config_refuses_explicit_actor_reuse(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "reuse", reuse_actors=True)
    with pytest.raises(hpo.ConfigError, match="reuse_actors: MyTrainableClass has no "
                                              "reset_config"):
        hpo.run(spec, trainable=MyTrainableClass, num_cpus=CPUS)


def with_data(config: dict[str, Any], data: np.ndarray, scale: float) -> None:
    hpo.report({"score": float(data.sum()) * scale * config["x"],
                "shared": not data.flags.writeable})  # a view of Ray's store, not a copy


def test_large_objects_reach_functions_and_classes_by_reference(tmp_path: Path) -> None:
    import ray

    data = np.ones(1000)
    result = hpo.run(_spec(tmp_path, "params"), trainable=with_data,
                     parameters={"data": data, "scale": 0.5}, num_cpus=CPUS)
    assert sorted(result.dataframe["best_score"]) == [500.0, 1000.0]
    assert {row["shared"] for row in _reports(result.dataframe)} == {True}
    assert set(result.dataframe.columns) & {"config/data", "config/scale"} == set()
    bound = hpo.with_parameters(Resettable, data=data)
    spec = _spec(tmp_path, "cls-params", search_space={"lr": {"grid": [0.1, 0.2]}},
                 stop={"training_iteration": 1})
    frame = hpo.run(spec, trainable=bound, num_cpus=CPUS).dataframe
    assert list(frame["config/lr"]) == [0.2, 0.1] and len(frame) == 2
    assert {row["total"] for row in _reports(frame)} == {1000.0}
    # the run's objects are freed when it ends, though its Ray is kept
    assert not [a for a in ray.util.list_named_actors() if a.startswith("hpo-objects-")]


class Seen(tune.Callback):
    def __init__(self) -> None:
        self.results: list[float] = []

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        self.results.append(result["score"])


def test_callbacks_reach_tune(tmp_path: Path) -> None:
    seen = Seen()
    hpo.run(_spec(tmp_path, "cb"), trainable=train, callbacks=[seen], num_cpus=CPUS)
    assert sorted(seen.results) == [1.0, 2.0, 2.0, 4.0]


def test_a_second_run_reuses_the_embedded_ray_until_shutdown(tmp_path: Path) -> None:
    import ray

    hpo.run(_spec(tmp_path, "one"), trainable=train, num_cpus=CPUS)
    session = ray.get_runtime_context().get_node_id()
    temp = Path(ray._private.worker._global_node.get_session_dir_path())
    hpo.run(_spec(tmp_path, "two"), trainable=train, num_cpus=CPUS)
    assert ray.get_runtime_context().get_node_id() == session  # the same Ray, not a new one
    assert "one" not in (tmp_path / "two" / "hpo.log").read_text()  # each run logs its own
    hpo.shutdown()
    assert not ray.is_initialized() and not temp.exists()
    hpo.run(_spec(tmp_path, "three"), trainable=train, num_cpus=CPUS, keep_ray=False)
    assert not ray.is_initialized()


def fails_after_reporting(config: dict[str, Any]) -> None:
    hpo.report({"score": config["x"]})
    raise ValueError("boom in the trainable")


def test_failed_trials_are_a_warning_with_their_cause_from_python(tmp_path: Path) -> None:
    """From Python the run returns what the trials reported, and says that they failed and
    why (the `hpo` command's error line, which it exits 1 after): silent before."""
    said = r"2 trial\(s\) failed after their retries .*First: ValueError: boom in the trainable"
    with pytest.warns(hpo.TrialErrorsWarning, match=said):
        result = hpo.run(_spec(tmp_path, "fails"), trainable=fails_after_reporting,
                         num_cpus=CPUS)
    assert result.errors == 2 and result.best_config == {"x": 2}


def test_a_ray_this_process_started_is_used_and_left_running(tmp_path: Path) -> None:
    """A notebook that called `ray.init` before `hpo.run`: hpo runs on that Ray, as Tune does,
    and leaves it running for the notebook (Ray's "called ray.init twice" error before)."""
    import ray

    hpo.shutdown()
    ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
    try:
        node = ray.get_runtime_context().get_node_id()
        first = hpo.run(_spec(tmp_path, "one"), trainable=train, num_cpus=CPUS)
        with pytest.warns(UserWarning, match="num_cpus=1 is not applied"):
            second = hpo.run(_spec(tmp_path, "two"), trainable=train, num_cpus=1)
        assert ray.is_initialized() and ray.get_runtime_context().get_node_id() == node
        assert first.best_config["x"] == second.best_config["x"] == 2
        assert "running on the Ray this process's ray.init started" in \
            (tmp_path / "two" / "hpo.log").read_text()
    finally:
        ray.shutdown()


def ranks_with_data(config: dict[str, Any], data: np.ndarray) -> None:
    from hpo import dist

    Path(config["out"], f"rank{dist.rank()}").write_text(
        f"{data.sum():g} {'shared' if not data.flags.writeable else 'copy'}")
    hpo.report({"score": float(data.sum())})


def test_each_rank_of_a_data_parallel_trial_gets_the_objects(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    spec = _spec(tmp_path, "ranks", search_space={}, constants={"out": str(out)},
                 distributed={"backend": "ddp", "workers": 2})
    hpo.run(spec, trainable=hpo.with_parameters(ranks_with_data, data=np.ones(10)),
            num_cpus=CPUS)
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        "rank0": "10 shared", "rank1": "10 shared"}  # read from the store, not pickled in


def test_a_yaml_file_without_a_trainable_takes_one_from_python(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({k: v for k, v in _spec(tmp_path, "yaml").items()}))
    result = hpo.run(space, trainable=train, num_cpus=CPUS)
    assert result.path == tmp_path / "yaml" and result.best_config == {"x": 2}
