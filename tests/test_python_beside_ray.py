"""A run from Python beside what a notebook does with Ray itself: an interrupt inside a run,
its own `ray.shutdown()` and `ray.init()` after a run kept Ray, a `cluster=` beside its own
Ray, and a callback that raises (real embedded Ray)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray import tune

import hpo
from hpo.cluster.auth import RayCluster

pytestmark = pytest.mark.slow
CPUS = 2


@pytest.fixture(autouse=True)
def _no_ray_left() -> Iterator[None]:
    import ray

    yield
    hpo.shutdown()
    ray.shutdown()


def _spec(tmp_path: Path, name: str) -> dict[str, Any]:
    return {"name": name, "metric": "score", "mode": "max", "storage": str(tmp_path),
            "search_space": {"x": {"grid": [1, 2]}}}


def train(config: dict[str, Any]) -> None:
    for step in (1, 2, 3):
        time.sleep(0.1)
        hpo.report({"score": config["x"] * step})


class Raising(tune.Callback):
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        raise self.error


@pytest.mark.timeout(240)
def test_an_interrupt_inside_a_run_leaves_no_trial_holding_the_next_runs_cpus(
        tmp_path: Path) -> None:
    """Tune ends its trials' actors after an Exception only: after a KeyboardInterrupt they
    held both CPUs of the kept Ray, and the next run waited for them forever."""
    with pytest.raises(KeyboardInterrupt):
        hpo.run(_spec(tmp_path, "interrupted"), trainable=train, num_cpus=CPUS,
                callbacks=[Raising(KeyboardInterrupt())])
    result = hpo.run(_spec(tmp_path, "next"), trainable=train, num_cpus=CPUS)
    assert result.errors == 0 and result.best_config == {"x": 2}


def test_a_notebooks_own_ray_after_a_kept_run_is_its_own(tmp_path: Path) -> None:
    """`ray.shutdown(); ray.init()` after a run kept Ray: the next run uses the notebook's
    Ray and leaves it working (closing the kept Ray's leftovers put Ray's auth settings back
    under it, and Ray aborted the process), and `cluster=` beside it is refused at once."""
    import ray

    hpo.run(_spec(tmp_path, "kept"), trainable=train, num_cpus=CPUS)
    ray.shutdown()
    ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
    node = ray.get_runtime_context().get_node_id()
    result = hpo.run(_spec(tmp_path, "on-its-own"), trainable=train, num_cpus=CPUS)
    hpo.shutdown()
    assert result.best_config == {"x": 2}
    assert ray.get_runtime_context().get_node_id() == node
    assert ray.cluster_resources()["CPU"] == CPUS  # it still answers
    assert "running on the Ray this process's ray.init started" in \
        (tmp_path / "on-its-own" / "hpo.log").read_text()
    cluster = RayCluster(address="127.0.0.1:1", node_ip="127.0.0.1",
                         token_file=tmp_path / "token")
    with pytest.raises(hpo.ConfigError, match=r"cluster: this process is connected to a Ray "
                       r"of its own .*Hint: ray\.shutdown\(\) first"):
        hpo.run(_spec(tmp_path, "elsewhere"), trainable=train, cluster=cluster)
    assert not (tmp_path / "elsewhere").exists()


def test_a_callbacks_error_ends_the_run_in_one_line_that_says_where(tmp_path: Path) -> None:
    """Tune wraps it in a TuneError whose message is the whole traceback."""
    with pytest.raises(hpo.RunError, match=r"driver \(a callback, searcher or scheduler\): "
                       r"ValueError: my callback broke \(in on_trial_result, "
                       r"test_python_beside_ray\.py:\d+\)") as caught:
        hpo.run(_spec(tmp_path, "broken"), trainable=train, num_cpus=CPUS,
                callbacks=[Raising(ValueError("my callback broke\nsecond line"))])
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value.__cause__, tune.TuneError)
