"""A run from Python beside what a notebook does with Ray itself: an interrupt inside a run,
its own `ray.shutdown()` and `ray.init()` after a run kept Ray, a `cluster=` beside its own
Ray, and a callback that raises (real embedded Ray)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ray import tune

import hpo
from hpo.cluster.auth import RayCluster

pytestmark = pytest.mark.slow
CPUS = 2
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_ray_left() -> Iterator[None]:
    import ray

    yield
    hpo.shutdown()
    ray.shutdown()
    hpo.shutdown()  # what the kept Ray left for the notebook's own Ray, now ended


def _spec(tmp_path: Path, name: str) -> dict[str, Any]:
    return {"name": name, "metric": "score", "mode": "max", "storage": str(tmp_path),
            "search_space": {"x": {"grid": [1, 2]}}}


def train(config: dict[str, Any]) -> None:
    for step in (1, 2, 3):
        time.sleep(0.1)
        hpo.report({"score": config["x"] * step})


class Raising(tune.Callback):
    def __init__(self, act: Callable[[], Any]) -> None:
        self.act = act

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        self.act()


def _interrupt() -> None:
    raise KeyboardInterrupt


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ray_of", ["hpo", "the notebook"])
def test_an_interrupt_inside_a_run_leaves_no_trial_holding_the_next_runs_cpus(
        tmp_path: Path, ray_of: str) -> None:
    """Tune ends its trials after an Exception only: after a KeyboardInterrupt their actors
    and placement groups held both CPUs, and the next run on that Ray waited forever."""
    import ray

    if ray_of == "the notebook":
        ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
    with pytest.raises(KeyboardInterrupt):
        hpo.run(_spec(tmp_path, "interrupted"), trainable=train, num_cpus=CPUS,
                callbacks=[Raising(_interrupt)])
    result = hpo.run(_spec(tmp_path, "next"), trainable=train, num_cpus=CPUS)
    assert result.errors == 0 and result.best_config == {"x": 2}


@pytest.mark.parametrize("first", ["hpo.shutdown()", "the next run"])
def test_a_notebooks_own_ray_after_a_kept_run_is_its_own(tmp_path: Path, first: str) -> None:
    """`ray.shutdown(); ray.init()` after a run kept Ray: hpo.shutdown() and the next run
    leave the notebook's Ray working (closing the kept Ray's leftovers put Ray's auth settings
    back under it, and Ray aborted the process), and `cluster=` beside it is refused at once."""
    import ray

    hpo.run(_spec(tmp_path, "kept"), trainable=train, num_cpus=CPUS)
    ray.shutdown()
    ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
    node = ray.get_runtime_context().get_node_id()
    if first == "hpo.shutdown()":
        hpo.shutdown()
        assert ray.cluster_resources()["CPU"] == CPUS  # it still answers
    result = hpo.run(_spec(tmp_path, "on-its-own"), trainable=train, num_cpus=CPUS)
    hpo.shutdown()
    assert result.best_config == {"x": 2}
    assert ray.get_runtime_context().get_node_id() == node
    assert ray.cluster_resources()["CPU"] == CPUS
    assert "running on the Ray this process's ray.init started" in \
        (tmp_path / "on-its-own" / "hpo.log").read_text()
    cluster = RayCluster(address="127.0.0.1:1", node_ip="127.0.0.1",
                         token_file=tmp_path / "token")
    with pytest.raises(hpo.ConfigError, match=r"cluster: this process is connected to a Ray "
                       r"of its own .*Hint: ray\.shutdown\(\) first"):
        hpo.run(_spec(tmp_path, "elsewhere"), trainable=train, cluster=cluster)
    assert not (tmp_path / "elsewhere").exists()


def test_a_process_that_ends_on_the_notebooks_own_ray_exits_cleanly(tmp_path: Path) -> None:
    """At exit the notebook's Ray ends before what the kept Ray left for it (its token's
    folder): exit code 0, and no hpo folder left in the temp dir."""
    temp = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))  # Ray's socket paths: <= 107 bytes
    script = textwrap.dedent(f"""
        import json, ray, hpo
        from tests.driver.test_python_beside_ray import _spec, train
        from pathlib import Path
        hpo.run(_spec(Path({str(tmp_path)!r}), "kept"), trainable=train, num_cpus={CPUS})
        ray.shutdown()
        ray.init(num_cpus={CPUS}, include_dashboard=False, log_to_driver=False)
        hpo.run(_spec(Path({str(tmp_path)!r}), "mine"), trainable=train, num_cpus={CPUS})
        print(json.dumps(ray.cluster_resources()["CPU"]))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=240, env={**os.environ, "TMPDIR": str(temp)})
    left = [p.name for p in temp.iterdir() if p.name.startswith("hpo-")]
    shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == CPUS
    assert left == []


def _library_error() -> None:
    json.loads("{not json")  # raised inside the json module


def _value_error() -> None:
    raise ValueError("my callback broke\nsecond line")


@pytest.mark.parametrize(("act", "said"), [
    (_value_error, r"ValueError: my callback broke"),
    (_library_error, r"JSONDecodeError: Expecting property name .*"),
])
def test_a_callbacks_error_ends_the_run_in_one_line_that_says_where(
        tmp_path: Path, act: Callable[[], Any], said: str) -> None:
    """Tune wraps it in a TuneError whose message is the whole traceback; the line names the
    callback's own frame, not the library's that raised."""
    with pytest.raises(hpo.RunError, match=r"driver \(a callback, searcher or scheduler\): "
                       + said + r" \(in on_trial_result, test_python_beside_ray\.py:\d+\)"
                       ) as caught:
        hpo.run(_spec(tmp_path, "broken"), trainable=train, num_cpus=CPUS,
                callbacks=[Raising(act)])
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value.__cause__, tune.TuneError)


def test_an_hpo_error_a_callback_raises_keeps_its_own_line_and_kind(tmp_path: Path) -> None:
    def refuse() -> None:
        raise hpo.StorageError("the disk is full (as a callback may say)")

    with pytest.raises(hpo.StorageError, match="the disk is full"):
        hpo.run(_spec(tmp_path, "hpo-error"), trainable=train, num_cpus=CPUS,
                callbacks=[Raising(refuse)])


class BrokenAtSetup(tune.Callback):
    def setup(self, **info: Any) -> None:
        raise RuntimeError("broken before any trial")


def test_a_run_that_fails_before_any_trial_leaves_no_folder_to_refuse(tmp_path: Path) -> None:
    """Its folder held only hpo-spec.yaml and hpo.log: `hpo run` refused it as existing and
    `hpo resume` as no experiment, and only deleting it by hand helped."""
    with pytest.raises(RuntimeError, match="broken before any trial"):
        hpo.run(_spec(tmp_path, "again"), trainable=train, num_cpus=CPUS,
                callbacks=[BrokenAtSetup()])
    assert not (tmp_path / "again").exists()
    assert hpo.run(_spec(tmp_path, "again"), trainable=train, num_cpus=CPUS).errors == 0
