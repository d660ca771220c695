"""A bad `optuna_storage:` value is one line naming the key, exit 2, and nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hpo.cli import app

runner = CliRunner()
SPEC = {"name": "mirror", "trainable": "tests/support/study_trainables.py:steady",
        "metric": "score", "mode": "max", "search_space": {"x": {"uniform": [0.0, 1.0]}},
        "constants": {"steps": 1, "sleep": 0.0}}


@pytest.mark.parametrize(("value", "expected"), [
    ("{tmp}/missing/journal.log", "folder {tmp}/missing does not exist. Hint: create it"),
    ("{tmp}", "is a folder. Hint: name a file"),
    ("{tmp}/optuna.db", "optuna.db looks like an SQLite file but was given as a journal path. "
                        "Hint: write sqlite:///{tmp}/optuna.db"),
    ("sqlit:///{tmp}/o.db", "unknown database 'sqlit' in 'sqlit:///{tmp}/o.db'. Hint: did you "
                            "mean 'sqlite'?"),
    ("sqlite://", "an in-memory SQLite database keeps nothing"),
    ("sqlite:///{tmp}/missing/o.db", "folder {tmp}/missing does not exist"),
    ("postgresql://user@host:notaport/db", "not a database URL"),
])
def test_bad_optuna_storage(tmp_path: Path, value: str, expected: str) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**SPEC, "optuna_storage": value.format(tmp=tmp_path)}))
    done = runner.invoke(app, ["run", str(space), "--storage", str(tmp_path / "results")])
    assert done.exit_code == 2, done.output
    assert done.stderr.startswith(f"error: {space}: optuna_storage: "), done.stderr
    assert expected.format(tmp=tmp_path) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists(), "nothing started"


def test_good_values_validate(tmp_path: Path) -> None:
    for value in (str(tmp_path / "journal.log"), f"sqlite:///{tmp_path}/optuna.db",
                  "postgresql://user:pw@db.example.org:5432/optuna"):
        space = tmp_path / "space.yaml"
        space.write_text(yaml.safe_dump({**SPEC, "optuna_storage": value}))
        done = runner.invoke(app, ["validate", str(space)])
        assert done.exit_code == 0, done.output
    assert not list(tmp_path.glob("journal.log*")) and not (tmp_path / "optuna.db").exists()
