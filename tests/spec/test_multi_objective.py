"""Several objectives (`metric: [a, b]`, `mode: [max, min]`): refused where they cannot work,
one line each; searched by Optuna on real Ray, with the Pareto front in `hpo best`, the
results table, `hpo.load`, warm start and the report."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import hpo
from hpo.optuna.pareto import on_front
from hpo.reporting import build_report

HERE = Path(__file__).resolve()
TWO_GOALS = f"{HERE}:two_goals"
GOALS = {"metric": ["score", "cost"], "mode": ["max", "min"]}


def two_goals(config: dict[str, Any]) -> None:
    """A trade-off: the score grows with x, the cost with x and y (so y only costs)."""
    for step in range(1, config["steps"] + 1):
        hpo.report({"score": config["x"] * step / config["steps"],
                    "cost": config["x"] + config["y"]})


def _spec(**changes: Any) -> dict[str, Any]:
    return {"name": "two", "trainable": TWO_GOALS, **GOALS, "num_samples": 6,
            "search_space": {"x": {"uniform": [0.0, 1.0]}, "y": {"uniform": [0.0, 1.0]}},
            "constants": {"steps": 2}, "search": {"type": "optuna", "seed": 0,
                                                  "n_startup_trials": 3}, **changes}


def _cli(*args: str) -> tuple[int, str, str]:
    # conftest is imported here, not at the top: trials import this file for two_goals,
    # where tests/ is not on the path.
    from calls import cli_invoke

    return cli_invoke(list(args))


def _yaml(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


BAD = [  # (changes to the spec, the path the line names, the value or words it shows)
    ({"mode": "max"}, "mode", "one mode ('max') for 2 metrics"),
    ({"metric": "score"}, "mode", "a list of modes (['max', 'min']) for one metric"),
    ({"mode": ["max"]}, "mode", "1 modes for 2 metrics"),
    ({"mode": ["max", "min", "min"]}, "mode", "3 modes for 2 metrics"),
    ({"metric": ["score"], "mode": ["max"]}, "metric", "at least 2 metrics (got ['score'])"),
    ({"metric": ["score", "score"]}, "metric", "appears twice"),
    ({"metric": ["score", 3]}, "metric", "(got ['score', 3])"),
    ({"mode": ["max", "smallest"]}, "mode.1", "(got 'smallest')"),
    ({"search": {"type": "random"}}, "search.type", "need search.type optuna (got random)"),
    ({"scheduler": {"type": "asha", "max_t": 2, "grace_period": 1}}, "scheduler.type",
     "asha cannot stop trials early on several metrics"),
    ({"scheduler": {"type": "median"}}, "scheduler.type", "median cannot stop"),
    ({"search": {"type": "optuna", "sampler": "nsga2", "n_startup_trials": 3}},
     "search.n_startup_trials", "not a setting of the nsga2 sampler (got 3)"),
    ({"search": {"type": "optuna", "population_size": 8}}, "search.population_size",
     "not a setting of the tpe sampler (got 8)"),
]


@pytest.mark.parametrize(("changes", "path", "shown"), BAD, ids=[b[1] + ":" + b[2][:20]
                                                                 for b in BAD])
def test_bad_objectives_are_one_line(tmp_path: Path, changes: dict[str, Any], path: str,
                                     shown: str) -> None:
    source = _yaml(tmp_path, _spec(**changes))
    code, out, err = _cli("validate", str(source))
    line = err.strip()
    assert code == 2, out + err
    assert "\n" not in line and "Traceback" not in line, err
    assert line.startswith(f"error: {source}: {path}: "), line
    assert shown in line and "Hint:" in line, line


def test_valid_objectives_validate(tmp_path: Path) -> None:
    nsga = {"type": "optuna", "sampler": "nsga2", "population_size": 4}
    for spec in (_spec(), _spec(search=nsga), _spec(metric="score", mode="max")):
        code, out, err = _cli("validate", str(_yaml(tmp_path, spec)))
        assert code == 0, err
    assert "objective    max score, min cost (a Pareto front)" in _cli(
        "validate", str(_yaml(tmp_path, _spec())))[1]


def test_front_is_the_non_dominated_points() -> None:
    points = [[0.9, 2.0], [0.8, 1.0], [0.7, 3.0], [0.8, 1.0], [0.95, 5.0]]
    assert on_front(points, ["max", "min"]) == [True, True, False, True, True]
    assert on_front(points, ["min", "max"]) == [False, False, True, False, True]
    assert on_front([], ["max", "min"]) == []


def test_front_of_a_table_counts_finished_complete_trials_only() -> None:
    from hpo.results import _mark_front

    def table(status: list[str], score: list[Any], cost: list[Any]) -> pd.DataFrame:
        return pd.DataFrame({"trial_id": list("abc")[:len(status)], "status": status,
                             "last_score": score, "best_score": score, "last_cost": cost,
                             "best_cost": cost})

    goals = [("score", "max"), ("cost", "min")]
    running = table(["RUNNING", "TERMINATED", "ERROR"], [None, None, 1.0], [None, 2.0, None])
    assert _mark_front(running, goals)["pareto_front"].tolist() == [False] * 3  # none yet
    done = table(["TERMINATED"] * 3, [1.0, 2.0, 3.0], [float("inf"), 2.0, 3.0])
    marked = _mark_front(done, goals)
    assert marked["pareto_front"].tolist() == [False, True, True]
    assert list(marked.columns).index("pareto_front") == list(marked.columns).index(
        "best_cost") + 1


def _expected_front(frame: pd.DataFrame) -> set[str]:
    """Brute force, independent of Optuna: no other trial at least as good on both and
    better on one."""
    points = {row.trial_id: (row.last_score, row.last_cost) for row in frame.itertuples()}

    def beats(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] >= b[0] and a[1] <= b[1] and a != b

    return {t for t, p in points.items() if not any(beats(q, p) for q in points.values())}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from calls import hpo_cli

    tmp = tmp_path_factory.mktemp("multi")
    spec = _spec(storage=str(tmp / "results"), optuna_storage=str(tmp / "optuna.journal"))
    done = hpo_cli("run", str(_yaml(tmp, spec)), "--cpus", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pareto front:" in done.stdout and "best config on the front for score" in done.stdout
    return tmp / "results" / "two"


@pytest.mark.ray
@pytest.mark.slow
def test_run_gives_front_in_results_and_load(experiment: Path, tmp_path: Path) -> None:
    code, _, err = _cli("results", str(experiment), "--format", "csv", "-o",
                        str(tmp_path / "r.csv"))
    assert code == 0, err
    frame = pd.read_csv(tmp_path / "r.csv")
    assert len(frame) == 6 and set(frame["status"]) == {"TERMINATED"}
    for column in ("last_score", "best_score", "last_cost", "best_cost", "pareto_front"):
        assert column in frame
    assert frame["last_score"].tolist() == pytest.approx(frame["config/x"].tolist())
    front = set(frame.loc[frame["pareto_front"], "trial_id"])
    assert front == _expected_front(frame)
    # the front first, each part best first on the first objective
    assert frame["pareto_front"].tolist() == sorted(frame["pareto_front"], reverse=True)
    on = frame[frame["pareto_front"]]["last_score"]
    assert on.is_monotonic_decreasing

    results = hpo.load(experiment)
    assert set(results.pareto_front["trial_id"]) == front
    assert results.best_config["x"] == pytest.approx(on.iloc[0])
    assert {"score", "cost"} <= set(results.curves.columns)


@pytest.mark.ray
@pytest.mark.slow
def test_best_prints_the_front(experiment: Path) -> None:
    code, out, err = _cli("best", str(experiment))
    assert code == 0, err
    head, _, body = out.partition("\n")
    frame = hpo.load(experiment).trials
    front = frame[frame["pareto_front"]]
    assert head == (f"# Pareto front of score (max), cost (min): {len(front)} of 6 finished "
                    "trial(s)")
    entries = yaml.safe_load(body)
    assert [e["trial_id"] for e in entries] == list(front["trial_id"])
    for entry, (_, row) in zip(entries, front.iterrows(), strict=True):
        assert entry["score"] == pytest.approx(row["last_score"])
        assert entry["cost"] == pytest.approx(row["last_cost"])
        assert entry["config"]["x"] == pytest.approx(row["config/x"])
        assert entry["config"]["steps"] == 2


@pytest.mark.ray
@pytest.mark.slow
def test_report_shows_the_front(experiment: Path, tmp_path: Path) -> None:
    report = build_report(experiment, tmp_path / "report.html")
    page = report.html.read_text()
    assert "fig-pareto_front" in page and (tmp_path / "report_figures" /
                                           "pareto_front.png").is_file()
    front = hpo.load(experiment).pareto_front
    assert f"Pareto front ({len(front)} of 6 finished trials)" in page
    for trial_id in front["trial_id"]:
        assert f"<td>{trial_id}</td>" in page.split('id="front"')[1].split("</table>")[0]


@pytest.mark.ray
@pytest.mark.slow
def test_warm_start_gives_optuna_every_objective(experiment: Path, tmp_path: Path) -> None:
    spec = _spec(name="warm", num_samples=1, storage=str(tmp_path / "results"),
                 search={"type": "optuna", "seed": 1, "warm_start": str(experiment)})
    hpo.run(spec, num_cpus=2)
    state = pickle.loads(next((tmp_path / "results" / "warm").glob(
        "searcher-state-*.pkl")).read_bytes())
    study = state["_ot_study"]
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    earlier = hpo.load(experiment).trials
    assert len(study.trials) == 7  # the 6 earlier trials, then the new one
    told = [t.values for t in study.trials[:6]]
    for values in zip(earlier["last_score"], earlier["last_cost"], strict=True):
        assert any(t == pytest.approx(list(values)) for t in told), (values, told)


@pytest.mark.ray
@pytest.mark.slow
def test_optuna_mirror_holds_every_objective(experiment: Path) -> None:
    import optuna

    from hpo.optuna.storage import open_storage

    storage = open_storage(str(experiment.parent.parent / "optuna.journal"))
    study = optuna.load_study(study_name="two", storage=storage)
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    mirrored = {t.user_attrs["ray_trial_id"]: t.values for t in study.trials}
    frame = hpo.load(experiment).trials
    assert mirrored == {row.trial_id: pytest.approx([row.last_score, row.last_cost])
                        for row in frame.itertuples()}
    assert {t.number for t in study.best_trials} == {
        t.number for t in study.trials
        if t.user_attrs["ray_trial_id"] in set(frame.loc[frame["pareto_front"], "trial_id"])}


def test_live_view_shows_each_objective() -> None:
    from types import SimpleNamespace

    from hpo.driver.plugins.progress import LiveProgress

    view = LiveProgress([("score", "max"), ("cost", "min")], total=2)
    trial = SimpleNamespace(trial_id="t1", status="RUNNING", config={"x": 0.5})
    view.on_trial_result(1, [trial], trial, {"score": 0.25, "cost": 0.75,
                                             "training_iteration": 1})
    table = view._render([trial]).renderables[-1]
    assert [c.header for c in table.columns] == ["trial", "iter", "score", "cost", "config"]
    assert [next(iter(c.cells)) for c in table.columns][2:4] == ["0.25", "0.75"]
    assert "score (max), cost (min)" in str(view._render([trial]).renderables[1])
    # an experiment saved before several objectives existed pickled metric and mode
    old = LiveProgress.__new__(LiveProgress)
    old.__setstate__({"metric": "score", "mode": "max", "total": 3})
    assert (old.objectives, old.metric, old.total) == ([("score", "max")], "score", 3)
    assert pickle.loads(pickle.dumps(view)).objectives == view.objectives
