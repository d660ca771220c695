"""Every YAML in search_spaces/ validates and runs end to end through the real CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from calls import ROOT, cli_invoke, hpo_cli

import hpo
from hpo.results import load_results
from hpo.spec.load import load_spec
from hpo.spec.plan import trial_count

EXAMPLES = sorted((ROOT / "search_spaces").glob("*.yaml"))
# Shrink the demos for CI, keeping each scheduler's behaviour (PBT still perturbs).
SHRINK = {
    "digits-asha": ["num_samples=6", "constants.epochs=4", "scheduler.max_t=4",
                    "stop.training_iteration=4"],
    "digits-pbt": ["constants.epochs=6"],
    "digits-pb2": ["constants.epochs=6"],
    "images-horovod-asha": ["num_samples=3", "constants.epochs=2", "scheduler.max_t=2",
                            "constants.train_size=1024", "constants.val_size=256"],
    "images-ddp-pbt": ["num_samples=2", "constants.epochs=4", "constants.train_size=1024",
                       "constants.val_size=256"],
    "multi_objective": ["num_samples=4"],
    "images-ddp-noise": ["num_samples=2", "constants.epochs=3", "scheduler.max_t=3",
                         "constants.train_size=1024", "constants.val_size=256"],
    "images-ddp-rasda": ["num_samples=3", "constants.epochs=3", "scheduler.max_t=3",
                         "constants.train_size=1024", "constants.val_size=256"],
}


def test_the_demo_keeps_its_best_checkpoints() -> None:
    """docs/trainables.md's `hpo best hpo-results/digits-asha --checkpoint` needs keep_best."""
    assert load_spec(ROOT / "search_spaces" / f"{BY_CLI}.yaml").checkpoint.keep_best
    assert f"hpo best hpo-results/{BY_CLI} --checkpoint" in (
        ROOT / "docs" / "trainables.md").read_text()


def test_every_scheduler_has_an_example() -> None:
    types = {load_spec(path).scheduler.type for path in EXAMPLES}
    assert types == {"fifo", "asha", "rasda", "hyperband", "median", "pbt", "pb2"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_validates(path: Path) -> None:
    # In-process: a subprocess each spent seconds importing torch and Ray again; the
    # subprocess CLI is the one of tests/spec/test_bad_input.py.
    code, out, err = cli_invoke(["validate", str(path)])
    assert code == 0, err
    assert f"{path}: OK" in out


# Through the real CLI (`hpo run`, `hpo results`); the others through hpo.run on one embedded
# Ray (a CLI run spends about 6 s starting and stopping its own Ray).
BY_CLI = "digits-asha"


@pytest.fixture(scope="module")
def shared_ray() -> Iterator[None]:
    yield
    hpo.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs(path: Path, storage: Path, shared_ray: None) -> None:
    spec = load_spec(path, SHRINK.get(path.stem))
    exp_dir = storage / spec.name
    if path.stem == BY_CLI:
        sets = [arg for s in SHRINK.get(path.stem, []) for arg in ("--set", s)]
        done = hpo_cli("run", str(path), "--storage", str(storage), *sets)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "best config" in done.stdout
        table = hpo_cli("results", str(exp_dir), "--format", "csv", "-o",
                        str(storage / "r.csv"))
        assert table.returncode == 0, table.stderr
        frame = pd.read_csv(storage / "r.csv")
        best = hpo_cli("best", str(exp_dir), "--checkpoint")  # docs/trainables.md's example
        assert best.returncode == 0, best.stderr
        assert (Path(best.stdout.strip()) / "hpo_best.json").is_file()
    else:
        hpo.run(spec, storage=str(storage), source=str(path), keep_ray=True)
        frame = load_results(exp_dir)
    assert len(frame) == trial_count(spec)
    # Synchronous HyperBand leaves the trials it cut PAUSED when the experiment ends.
    finished = {"TERMINATED", "PAUSED"} if spec.scheduler.type == "hyperband" else {"TERMINATED"}
    assert set(frame["status"]) <= finished
    metric, mode = spec.objectives[0]
    assert frame[f"best_{metric}"].notna().all()
    if spec.scheduler.type in ("pbt", "pb2"):  # a trial given another's checkpoint ends apart:
        # it trains on with its own new lr and momentum (it kept the copied ones, and its
        # last rows were the other trial's, digit for digit). Two trials that end alike must
        # hold the same values: two clones of one trial may be perturbed alike.
        mutated = [f"config/{name}" for name in spec.scheduler.hyperparam_mutations]
        held = frame[mutated].apply(tuple, axis=1)
        alike = frame.assign(held=held).groupby("val_loss")["held"].nunique()
        assert (alike == 1).all(), frame[["trial_id", "val_loss", *mutated]]
    key = frame[f"last_{metric}" if len(spec.objectives) > 1 else f"best_{metric}"]
    # several objectives: the Pareto front first, then the rest, each part best first
    parts = frame.groupby("pareto_front", sort=False) if "pareto_front" in frame else [(0, frame)]
    for _, part in parts:
        column = key[part.index]
        ordered = (column.is_monotonic_decreasing if mode == "max"
                   else column.is_monotonic_increasing)
        assert ordered, "results are sorted by the metric, best first"
