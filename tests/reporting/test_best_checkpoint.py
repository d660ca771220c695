"""checkpoint.keep_best: each trial keeps its best-scoring checkpoint in <trial>/best_checkpoint
beside Tune's newest `keep`; `hpo best DIR --checkpoint` and `hpo.load(DIR).best_checkpoint`
name the best trial's, `hpo.load_checkpoint` loads it. Real Ray runs (one embedded Ray for the
module) of a trainable whose score peaks at step 3 of 8, plus the swap on disk without Ray."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from calls import SUPPORT, cli_invoke, trial_rows
from stop_points import StopAt

import hpo
from hpo.driver.plugins.best_checkpoint import BestCheckpoint, offer, score_of
from hpo.driver.run.translate import best_checkpoint_callbacks
from hpo.errors import ConfigError, ExperimentError
from hpo.results import BEST_CHECKPOINT, BEST_RECORD, SWAPPED_OUT, kept_best
from hpo.spec.load import spec_from_dict

TRAINABLE = f"{SUPPORT / 'best_trainables.py'}:peaks"
STEPS, PEAK = 8, 3


def _spec(name: str, metric: str = "score", mode: str = "max", keep_best: bool = True,
          **constants: Any) -> dict[str, Any]:
    """Two trials (heights 1 and 2, both peaking at step 3): the second is the best."""
    return {"name": name, "trainable": TRAINABLE, "metric": metric, "mode": mode,
            "search": {"type": "grid"}, "search_space": {"height": {"choice": [1.0, 2.0]}},
            "constants": {"steps": STEPS, "peak": PEAK, **constants},
            "checkpoint": {"frequency": 1, "keep": 1, "keep_best": keep_best}}


def _trial_of(best: Path) -> Path:
    assert best.name == BEST_CHECKPOINT
    return best.parent


def _newest(trial_dir: Path) -> Path:
    """Tune's own checkpoints of a trial: with keep 1, exactly one."""
    (newest,) = sorted(trial_dir.glob("checkpoint_*"))
    return newest


def _record(best: Path) -> dict[str, Any]:
    return json.loads((best / BEST_RECORD).read_text())


# Real runs.

@pytest.mark.ray
@pytest.mark.parametrize(("metric", "mode", "saved"), [("score", "max", "hpo_state.pt"),
                                                       ("loss", "min", "hpo_state.pkl")])
def test_the_best_checkpoint_holds_the_peak_and_the_newest_the_last_step(
        tmp_path: Path, metric: str, mode: str, saved: str) -> None:
    """With torch loaded in the trial, hpo saves the state with torch; else with pickle."""
    with_torch = saved.endswith(".pt")
    result = hpo.run(_spec(f"peak-{mode}", metric, mode, torch=with_torch),
                     storage=str(tmp_path), num_cpus=2)
    best = hpo.load(result.path).best_checkpoint
    trial_dir = _trial_of(best)
    assert result.dataframe.iloc[0]["config/height"] == 2.0  # the best trial's
    assert Path(result.dataframe.iloc[0]["path"]) == trial_dir
    assert (best / saved).is_file()
    state = hpo.load_checkpoint(best)
    assert state["step"] == PEAK
    if with_torch:
        assert state["weights"].tolist() == [3.0, 3.0]
    record = _record(best)
    assert record["checkpoint"].startswith("checkpoint_")
    assert {k: record[k] for k in ("metric", "mode", "score", "training_iteration")} == {
        "metric": metric, "mode": mode, "score": 2.0 if mode == "max" else -2.0,
        "training_iteration": PEAK}
    assert hpo.load_checkpoint(_newest(trial_dir))["step"] == STEPS  # resume's, untouched
    for other in result.dataframe["path"]:  # every trial keeps its own best
        assert hpo.load_checkpoint(Path(other, BEST_CHECKPOINT))["step"] == PEAK
    code, out, err = cli_invoke(["best", str(result.path), "--checkpoint"])
    assert (code, out, err) == (0, f"{best}\n", "")


@pytest.mark.ray
def test_a_stopped_and_resumed_run_keeps_its_best_and_its_exact_steps(tmp_path: Path) -> None:
    """A stop at the peak's row, before Tune registered its checkpoint (the held stop waits
    for it): resume goes on from step 3's checkpoint, 1..8 once each, best still step 3."""
    spec = {**_spec("stopped"), "search_space": {}, "constants": {
        "steps": STEPS, "peak": PEAK, "height": 1.0}}
    with pytest.raises(hpo.RunError, match="stopped by SIGUSR1"):
        hpo.run(spec, storage=str(tmp_path), num_cpus=2,
                callbacks=[StopAt(signal.SIGUSR1, 0, PEAK, str(tmp_path / "fired"))])
    assert _record(hpo.load(tmp_path / "stopped").best_checkpoint)["training_iteration"] == PEAK
    hpo.resume(tmp_path / "stopped", num_cpus=2)
    ((rows),) = trial_rows(tmp_path / "stopped").values()
    assert [row["training_iteration"] for row in rows] == list(range(1, STEPS + 1))
    assert rows[-1]["resumed_at"] == PEAK + 1  # from the newest checkpoint, not the best
    best = hpo.load(tmp_path / "stopped").best_checkpoint
    assert hpo.load_checkpoint(best) == {"step": PEAK}
    assert hpo.load_checkpoint(_newest(_trial_of(best))) == {"step": STEPS}


@pytest.mark.ray
def test_a_class_trainable_keeps_its_best_checkpoint_too(tmp_path: Path) -> None:
    """Tune saves a class trainable's checkpoints itself: the same callback sees them."""
    spec = {**_spec("class"), "trainable": TRAINABLE.replace(":peaks", ":Peaks"),
            "search_space": {}, "constants": {"peak": PEAK, "height": 1.0},
            "stop": {"training_iteration": STEPS}}
    result = hpo.run(spec, storage=str(tmp_path), num_cpus=2)
    best = hpo.load(result.path).best_checkpoint
    assert Path(hpo.load_checkpoint(best), "step.txt").read_text() == str(PEAK)
    assert (_newest(_trial_of(best)) / "step.txt").read_text() == str(STEPS)


@pytest.mark.ray
@pytest.mark.parametrize(("case", "said"), [
    ("off", "no best checkpoint was kept (checkpoint.keep_best was off). Hint: set "
            "checkpoint: {keep_best: true}"),
    ("none", "has no checkpoint that reported 'score' yet. Hint: "),
])
def test_no_best_checkpoint_is_one_line_and_exit_2(tmp_path: Path, case: str,
                                                   said: str) -> None:
    spec = {**_spec(case, keep_best=case != "off"), "search_space": {}, "constants": {
        "steps": 2, "peak": 1, "height": 1.0, "checkpoints": case != "none"}}
    result = hpo.run(spec, storage=str(tmp_path), num_cpus=2)
    code, out, err = cli_invoke(["best", str(result.path), "--checkpoint"])
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1 and said in err, err
    with pytest.raises(ExperimentError, match="Hint: "):
        hpo.load(result.path).best_checkpoint  # noqa: B018


# Without Ray: the spec key, the first objective, the swap on disk.

def test_keep_best_is_off_by_default_and_needs_checkpoints() -> None:
    base = {"name": "a", "trainable": "m:f", "metric": "s", "mode": "max"}
    assert spec_from_dict(base).checkpoint.keep_best is False
    with pytest.raises(ConfigError, match=r"checkpoint\.keep_best: needs checkpoints, but "
                       r"frequency is 0 \(never\)\. Hint: "):
        spec_from_dict({**base, "checkpoint": {"keep_best": True, "frequency": 0}}, "x.yaml")
    with pytest.raises(ConfigError, match="did you mean 'keep_best'"):
        spec_from_dict({**base, "checkpoint": {"keep_bset": True}}, "x.yaml")


def test_with_several_objectives_the_first_one_picks_the_best() -> None:
    spec = spec_from_dict({"name": "a", "trainable": "m:f", "metric": ["loss", "ms"],
                           "mode": ["min", "max"], "search": {"type": "optuna"},
                           "checkpoint": {"keep_best": True}})
    (callback,) = best_checkpoint_callbacks(spec)
    assert isinstance(callback, BestCheckpoint)
    assert (callback.metric, callback.mode) == ("loss", "min")
    off = spec.model_copy(update={"checkpoint": spec.checkpoint.model_copy(
        update={"keep_best": False})})
    assert best_checkpoint_callbacks(off) == []


@pytest.mark.parametrize(("metrics", "score"), [
    ({"score": 2}, 2.0), ({"val": {"score": 0.5}}, None), ({"score": float("nan")}, None),
    ({"score": True}, None), ({"score": "high"}, None), ({}, None),
])
def test_the_score_is_a_finite_number_or_none(metrics: dict[str, Any],
                                              score: float | None) -> None:
    assert score_of(metrics, "score") == score


def test_a_nested_metric_is_named_with_a_slash() -> None:
    assert score_of({"val": {"score": 0.5}}, "val/score") == 0.5


def _checkpoint(folder: Path, step: int) -> Path:
    folder.mkdir()
    (folder / "hpo_iteration").write_text(str(step))
    return folder


def _offer(trial_dir: Path, step: int, score: float, mode: str = "max") -> bool:
    source = _checkpoint(trial_dir / f"checkpoint_{step:06d}", step)
    return offer(trial_dir, source, {"metric": "m", "mode": mode, "score": score,
                                     "training_iteration": step})


@pytest.mark.parametrize(("mode", "scores", "kept"), [
    ("max", [1.0, 3.0, 2.0, 3.0], 2),  # a tie keeps the earlier
    ("min", [1.0, 3.0, 0.5, 0.5], 3),
])
def test_only_a_strictly_better_checkpoint_replaces_the_best(
        tmp_path: Path, mode: str, scores: list[float], kept: int) -> None:
    for step, score in enumerate(scores, 1):
        _offer(tmp_path, step, score, mode)
    best = kept_best(tmp_path)
    assert best == tmp_path / BEST_CHECKPOINT
    assert (best / "hpo_iteration").read_text() == str(kept)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_the_copy_is_hard_linked_and_outlives_tunes_checkpoint(tmp_path: Path) -> None:
    import shutil

    _offer(tmp_path, 1, 1.0)
    source, best = tmp_path / "checkpoint_000001", tmp_path / BEST_CHECKPOINT
    assert (best / "hpo_iteration").stat().st_ino == (source / "hpo_iteration").stat().st_ino
    assert not (source / BEST_RECORD).exists()  # the record is the copy's own file
    shutil.rmtree(source)  # Tune deletes it once newer ones come
    assert (best / "hpo_iteration").read_text() == "1"


def test_a_swap_cut_short_leaves_the_previous_best_which_comes_back(tmp_path: Path) -> None:
    _offer(tmp_path, 1, 5.0)
    (tmp_path / BEST_CHECKPOINT).rename(tmp_path / SWAPPED_OUT)  # killed between the renames
    (tmp_path / ".best_checkpoint.new").mkdir()  # and a half-made copy
    assert kept_best(tmp_path) == tmp_path / SWAPPED_OUT  # readers still find the best
    assert not _offer(tmp_path, 2, 4.0)  # compared with it, and put back in place
    assert kept_best(tmp_path) == tmp_path / BEST_CHECKPOINT
    assert _offer(tmp_path, 3, 6.0)
    assert (tmp_path / BEST_CHECKPOINT / "hpo_iteration").read_text() == "3"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_load_checkpoint_gives_what_was_reported(tmp_path: Path) -> None:
    from hpo.trial import checkpoint_files

    for name in ("dict", "dir"):
        (tmp_path / name).mkdir()
    checkpoint_files.write(tmp_path / "dict", {"step": 3}, reports=3)
    assert hpo.load_checkpoint(tmp_path / "dict") == {"step": 3}
    user = tmp_path / "user"
    user.mkdir()
    (user / "model.bin").write_text("w")
    checkpoint_files.write(tmp_path / "dir", str(user), reports=1)
    assert Path(hpo.load_checkpoint(tmp_path / "dir"), "model.bin").read_text() == "w"
    assert hpo.load_checkpoint(user) == str(user)  # a Tune class trainable's own folder
    with pytest.raises(ExperimentError, match="no such checkpoint folder"):
        hpo.load_checkpoint(tmp_path / "missing")
