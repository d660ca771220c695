"""The gate over hpo's changes below Ray's public API (hpo.ray_adapters.gate): what
HPO_RAY_PATCHES says, what a check that finds a gap turns off, and what is refused before Ray
starts. No Ray is started: a gap is made by replacing a check function."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import hpo
from hpo.driver.run import preflight
from hpo.errors import ConfigError
from hpo.ray_adapters import checked, gate, train_session, tune_fit
from hpo.ray_adapters.registry import NEWEST_RAY, PATCHES
from hpo.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPEED = {patch.name for patch in PATCHES if patch.kind == "speed"}


@pytest.fixture(autouse=True)
def fresh_gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test decides anew (decisions are cached per setting, checks kept on disk: not
    here, where checks are changed); none leaks to the next."""
    monkeypatch.delenv(gate.SWITCH, raising=False)
    monkeypatch.setenv(checked.CACHE_SWITCH, "off")
    gate.clear()
    yield
    gate.clear()


def off(setting: str = "") -> set[str]:
    return {name for name, decision in gate.decisions().items() if not decision.on}


def test_unset_every_patch_applies_to_the_ray_installed() -> None:
    assert off() == set()
    assert gate.check_at_start("spec.yaml", {"history": "storage"}) == []


def test_off_turns_every_speed_patch_off_and_keeps_fixes_and_features(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gate.SWITCH, "off")
    assert off() == SPEED
    assert all(why == f"{gate.SWITCH}=off" for name, _, _, why in gate.table() if name in SPEED)
    assert not gate.switched_on("fork-workers") and gate.switched_on("pbt-pause")
    assert gate.check_at_start() == []  # asked for: no warning


def test_named_patches_are_off_whatever_their_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gate.SWITCH, " -pbt-pause, -lean-head ")
    assert off() == {"pbt-pause", "lean-head"}
    monkeypatch.setenv(gate.SWITCH, "off,-save-race")
    assert off() == SPEED | {"save-race"}


@pytest.mark.parametrize("setting", ["-no-such-patch", "plain", "on,-fit_speed"])
def test_an_unknown_word_is_one_config_error_listing_the_names(
        monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    monkeypatch.setenv(gate.SWITCH, setting)
    with pytest.raises(ConfigError) as raised:
        gate.decisions()
    assert str(raised.value).startswith(f"{gate.SWITCH}: ")
    assert "names no patch" in str(raised.value)
    assert "-NAME with NAME one of history, " in raised.value.hint
    assert "fork-workers" in raised.value.hint


def test_a_speed_patch_whose_check_finds_a_gap_is_off_with_one_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(tune_fit, "speed_gaps", lambda: ["TuneController._gone"])
    assert off() == {"fit-speed"}
    assert gate.decisions()["fit-speed"].off_why == "Ray lacks TuneController._gone"
    with caplog.at_level(logging.WARNING, logger="hpo.ray"):
        lines = gate.check_at_start()
        assert gate.check_at_start() == lines  # the second look warns no more
    assert len(lines) == 1 and "speed patches fit-speed off" in lines[0]
    assert [r.getMessage() for r in caplog.records if r.name == "hpo.ray"] == lines


def test_several_speed_gaps_share_the_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune_fit, "speed_gaps", lambda: ["a"])
    monkeypatch.setattr(train_session, "speed_gaps", lambda: ["b"])
    lines = gate.check_at_start()
    assert len(lines) == 1 and "speed patches fit-speed, trial-reports off" in lines[0]


def test_a_check_that_raises_is_a_gap_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> list[str]:
        raise AttributeError("module 'ray' has no attribute 'x'")

    monkeypatch.setattr(train_session, "speed_gaps", broken)
    assert off() == {"trial-reports"}
    assert "AttributeError" in gate.decisions()["trial-reports"].off_why


def test_a_fix_that_does_not_apply_warns_with_its_upstream_issue(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune_fit, "fix_gaps", lambda: ["TuneController._schedule_trial_pause"])
    lines = gate.check_at_start()
    pause = next(line for line in lines if "'pbt-pause'" in line)
    assert "ray-project/ray#57906" in pause and "_schedule_trial_pause" in pause
    # the four fixes read by fix_gaps are each named, each with its own issue
    assert len(lines) == 4 and off() == {"pbt-pause", "save-race", "interrupt-cleanup",
                                         "staged-apart"}


def test_a_needed_feature_switched_off_is_refused_naming_the_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gate.SWITCH, "-rasda")
    spec = load_spec(ROOT / "search_spaces" / "images-ddp-rasda.yaml")
    assert preflight.needed_patches(spec)["rasda"] == "scheduler.type"
    with pytest.raises(ConfigError) as raised:
        gate.check_at_start("images-ddp-rasda.yaml", preflight.needed_patches(spec))
    assert raised.value.path == "scheduler.type"
    assert "'rasda'" in raised.value.message and f"remove -rasda from {gate.SWITCH}" in \
        raised.value.hint


def test_a_needed_feature_ray_lacks_is_refused_before_ray_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ray

    from hpo.ray_adapters import tune_guards

    monkeypatch.setattr(tune_guards, "snapshot_gaps", lambda: ["_delete_fs_path"])
    spec = {"name": "keep", "trainable": "tests/support/study_trainables.py:steady",
            "metric": "score", "mode": "max", "num_samples": 1,
            "search_space": {"x": {"choice": [1]}},
            "checkpoint": {"frequency": 1, "keep": 1}, "storage": str(tmp_path)}
    with pytest.raises(ConfigError) as raised:
        hpo.run(spec)
    assert raised.value.path == "checkpoint.keep" and "install a tested Ray" in \
        raised.value.hint
    assert not ray.is_initialized() and not (tmp_path / "keep").exists()


def test_a_ray_newer_than_tested_runs_with_every_speed_patch_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    newer = (NEWEST_RAY[0], NEWEST_RAY[1] + 1)
    monkeypatch.setattr(gate, "ray_version", lambda: newer)
    assert off() == SPEED
    assert not gate.switched_on("lean-head") and gate.switched_on("history")
    lines = gate.check_at_start()
    assert len(lines) == 1 and all(name in lines[0] for name in SPEED)


def test_a_patch_off_leaves_its_block_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    entered = []

    def patch() -> Iterator[None]:
        entered.append(1)
        yield

    import contextlib

    monkeypatch.setenv(gate.SWITCH, "-fit-speed")
    with gate.applied("fit-speed", contextlib.contextmanager(patch)):
        pass
    with gate.applied("save-race", contextlib.contextmanager(patch)):
        pass
    assert entered == [1]
    with pytest.raises(KeyError):
        gate.is_on("fit_speed")


def test_the_source_the_checks_read_is_inspects(monkeypatch: pytest.MonkeyPatch) -> None:
    """hpo.ray_adapters.reading cuts a block out by its lines (inspect.getsource costs seconds
    at every start): for every class and function the checks read, the same text."""
    import inspect

    from hpo.ray_adapters import reading

    read: list[object] = []
    cut = reading._source.__wrapped__
    monkeypatch.setattr(reading, "_source", lambda obj: read.append(obj) or cut(obj))
    gate.decisions()
    assert len(read) > 30
    assert [obj for obj in read if cut(obj) != inspect.getsource(obj)] == []  # type: ignore


def test_a_class_is_read_from_its_file_without_importing_it() -> None:
    """The history check reads MLflow's callback without importing mlflow (0.8 s a start)."""
    import subprocess
    import sys

    probe = ("import sys, ray.tune\n"
             "from hpo.ray_adapters import gate, reading\n"
             "text = reading.class_text('ray.air.integrations.mlflow', 'MLflowLoggerCallback')\n"
             "assert text.startswith('class MLflowLoggerCallback(') and '_trial_runs' in text\n"
             "assert reading.class_text('ray.air.integrations.mlflow', 'NoSuchClass') == ''\n"
             "assert reading.class_text('ray.no_such_module', 'X') == ''\n"
             "assert gate.is_on('history')\n"
             "print(sorted(m for m in ('mlflow', 'ray.air.integrations.mlflow') "
             "if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_checks_are_kept_on_disk_for_this_ray_and_these_adapters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first look runs every check and keeps the answer; the next process reads it and
    runs none; another Ray (or adapter, or Python) has another key, and is checked afresh."""
    monkeypatch.setenv(checked.CACHE_SWITCH, "on")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gate.clear()
    assert off() == set()
    kept = list((tmp_path / "hpo").glob("ray-checks-*.json"))
    assert len(kept) == 1 and kept[0] == checked.cache_file()
    gate.clear()  # a new process, as far as the gate knows

    def gone() -> list[str]:
        raise AssertionError("a kept check ran again")

    monkeypatch.setattr(tune_fit, "speed_gaps", gone)
    assert off() == set()
    monkeypatch.setattr(sys, "version", "another Python")  # part of the key, as Ray's files are
    gate.clear()
    monkeypatch.setattr(tune_fit, "speed_gaps", lambda: ["Ray lacks this"])
    assert off() == {"fit-speed"}
    assert len(list((tmp_path / "hpo").glob("ray-checks-*.json"))) == 2
