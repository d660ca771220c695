"""`hpo slurm render/submit --name X` names the Slurm job (and so its output file) X, as it
names the experiment's folder; `hpo slurm status` of a finished study says it finished and
where its results are, not to start it."""

from __future__ import annotations

from pathlib import Path

import pytest
from calls import cli_invoke

import hpo

SPACE = """
name: from-yaml
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
num_samples: 2
search_space:
  x: {uniform: [0.0, 1.0]}
constants: {steps: 1, sleep: 0.0}
"""


def test_name_names_the_slurm_job_and_its_output(tmp_path: Path) -> None:
    space = tmp_path / "s.yaml"
    space.write_text(SPACE)
    code, text, stderr = cli_invoke(["slurm", "render", str(space), "--workdir", str(tmp_path),
                                     "--name", "second-try"])
    assert code == 0, stderr
    assert "#SBATCH --job-name=second-try" in text
    assert "#SBATCH --output=hpo-%x-%j.out" in text  # %x: the job's name
    assert "--name second-try" in text  # the folder the job runs in
    assert "from-yaml" not in text.replace(str(space), "")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    space = tmp_path_factory.mktemp("finished") / "s.yaml"
    space.write_text(SPACE)
    return hpo.run(space, storage=str(space.parent / "results")).path


@pytest.mark.parametrize("command", ["status", "join"])
def test_a_finished_study_says_it_finished(finished: Path, command: str) -> None:
    code, _, stderr = cli_invoke(["slurm", command, str(finished)])
    assert code == 5
    assert "the study has finished: all 2 trial(s) ran to their end" in stderr
    assert f"`hpo results {finished}`" in stderr and "hpo slurm submit" not in stderr


def test_a_study_that_never_ran_is_told_to_submit(tmp_path: Path) -> None:
    code, _, stderr = cli_invoke(["slurm", "status", str(tmp_path)])
    assert code == 5 and "start it with `hpo slurm submit`" in stderr
