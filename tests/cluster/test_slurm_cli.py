"""`hpo slurm render|submit|run` without a cluster: the golden sbatch script, and bad input
ending in one line, exit 2, with nothing started."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from calls import cli_invoke
from golden_files import check_golden, with_golden_venv

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path("tests/cluster/golden/slurm-job.sbatch")
GOLDEN_ARGS = ["slurm", "render", "tests/cluster/golden/slurm-space.yaml", "--workdir",
               "/p/project/hpo", "--storage", "/p/scratch/hpo/results"]
REGENERATE = ("HPO_REGENERATE_GOLDEN=1 python -m pytest "
              "tests/cluster/test_slurm_cli.py::test_render_matches_golden_file")

GOOD = """\
name: exp
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
"""


_invoke = cli_invoke


def test_render_matches_golden_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code, text, stderr = _invoke(GOLDEN_ARGS)
    assert code == 0, stderr
    check_golden(GOLDEN, with_golden_venv(text, ROOT), REGENERATE)


def test_golden_script_asks_for_what_the_bootstrap_needs() -> None:
    text = (ROOT / GOLDEN).read_text()
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --gpus-per-node=4", "#SBATCH --signal=B:USR1@600",
                 "#SBATCH --requeue", "#SBATCH --no-kill", "#SBATCH --qos=normal",
                 "module load Stages/2025 CUDA", "source /p/project/hpo/.venv/bin/activate",
                 "cd /p/project/hpo", 'scontrol requeue "$SLURM_JOB_ID"'):
        assert line in text.splitlines() or line in text, line
    assert "sleep" not in text and "ray stop" not in text and "redis" not in text


def test_command_line_overrides_yaml_and_site(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("partition: dc-gpu\naccount: site-acct\nmodules: [Python]\n")
    space = tmp_path / "exp.yaml"
    space.write_text(GOOD + "slurm: {account: yaml-acct, nodes: 2}\n")
    code, text, stderr = _invoke(["slurm", "render", str(space), "--site", str(site),
                                  "--nodes", "3", "--no-requeue", "--workdir", "/w"])
    assert code == 0, stderr
    assert "#SBATCH --partition=dc-gpu" in text  # from the site file
    assert "#SBATCH --account=yaml-acct" in text  # the YAML beats the site file
    assert "#SBATCH --nodes=3" in text  # the command line beats both
    assert "--signal" not in text and "--requeue" not in text and "USR1" not in text
    assert "trap ':' TERM" in text  # the shell outlives scancel's SIGTERM (test_job_shell)
    assert "module load Python" in text


def test_render_writes_a_file(tmp_path: Path) -> None:
    space, target = tmp_path / "exp.yaml", tmp_path / "job.sbatch"
    space.write_text(GOOD)
    code, _, stderr = _invoke(["slurm", "render", str(space), "-o", str(target)])
    assert code == 0, stderr
    assert target.read_text().startswith("#!/bin/bash\n")


BAD = [
    ("unknown-key", "slurm: {partiton: booster}\n", [], "slurm.partiton",
     "did you mean 'partition'"),
    ("bad-time", "slurm: {time: 2h}\n", [], "slurm.time", "'2h'"),
    ("signal-after-limit", "slurm: {time: '00:05:00', signal_seconds: 600}\n", [],
     "slurm.signal_seconds", "600"),
    ("bad-sbatch-option", "slurm: {sbatch: [qos=normal]}\n", [], "slurm.sbatch",
     "'qos=normal'"),
    ("zero-nodes-yaml", "slurm: {nodes: 0}\n", [], "slurm.nodes", "0"),
    ("bad-time-option", "", ["--time", "banana"], "--time", "'banana'"),
    ("zero-nodes-option", "", ["--nodes", "0"], "--nodes", "0"),
    ("negative-gpus-option", "", ["--gpus-per-node", "-1"], "--gpus-per-node", "-1"),
    ("missing-venv", "slurm: {venv: /no/such/venv}\n", [], "slurm.venv", "/no/such/venv"),
]


@pytest.mark.parametrize(("yaml_tail", "options", "path", "value"),
                         [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_slurm_input_is_one_line(tmp_path: Path, yaml_tail: str, options: list[str],
                                     path: str, value: str) -> None:
    space = tmp_path / "exp.yaml"
    space.write_text(GOOD + yaml_tail)
    code, stdout, stderr = _invoke(["slurm", "render", str(space), *options])
    line = stderr.strip()
    assert code == 2 and "\n" not in line and "Traceback" not in stdout + stderr, stderr
    assert str(space) in line and f"{path}: " in line and value in line, line
    assert "Hint:" in line and stdout == "", line


def test_bad_site_file_names_the_site_file(tmp_path: Path) -> None:
    site, space = tmp_path / "site.yaml", tmp_path / "exp.yaml"
    site.write_text("acount: x\n")
    space.write_text(GOOD)
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site", str(site)])
    assert code == 2 and f"{site}: acount: unknown key" in stderr and "Hint:" in stderr


def test_submit_without_sbatch_starts_nothing(tmp_path: Path) -> None:
    space = tmp_path / "exp.yaml"
    space.write_text(GOOD)
    code, stdout, stderr = _invoke(["slurm", "submit", str(space)],
                                   env={"PATH": str(tmp_path)})
    assert code == 2 and "sbatch not found" in stderr and "Hint:" in stderr
    assert stdout == ""


def test_run_outside_a_job_starts_nothing(tmp_path: Path) -> None:
    space, jobs = tmp_path / "exp.yaml", tmp_path / "jobs"
    space.write_text(GOOD + f"slurm: {{job_dir: {jobs}}}\n")
    no_slurm = {k: "" for k in os.environ if k.startswith("SLURM")}
    code, _, stderr = _invoke(["slurm", "run", str(space), "--storage", str(tmp_path / "r")],
                              env=no_slurm)
    assert code == 2 and "not inside a Slurm job" in stderr and "Hint:" in stderr
    assert "\n" not in stderr.strip()
    assert not jobs.exists() and not (tmp_path / "r").exists()


def test_the_job_runs_the_hpo_that_rendered_it(tmp_path: Path) -> None:
    from hpo.cluster.sbatch import JobPython

    venv = JobPython.of(None, "s.yaml", prefix="/p/venv", base_prefix="/usr",
                        executable="/p/venv/bin/python")
    assert venv.lines[-1] == "source /p/venv/bin/activate" and venv.python == "python"
    (tmp_path / "conda-meta").mkdir()
    conda = JobPython.of(None, "s.yaml", prefix=str(tmp_path), base_prefix=str(tmp_path),
                         executable=f"{tmp_path}/bin/python")
    assert conda.python == f"{tmp_path}/bin/python"  # absolute: no site python can hide it
    assert conda.lines[-1] == f'export PATH={tmp_path}/bin:"$PATH"'
    site = JobPython.of(None, "s.yaml", prefix="/usr", base_prefix="/usr",
                        executable="/usr/bin/python3.11")
    assert site == JobPython((), "/usr/bin/python3.11")
    (tmp_path / "v" / "bin").mkdir(parents=True)
    (tmp_path / "v" / "bin" / "activate").touch()
    chosen = JobPython.of(str(tmp_path / "v"), "s.yaml", prefix="/p/venv", base_prefix="/usr")
    assert chosen.lines == (f"source {tmp_path}/v/bin/activate",)


def test_the_venv_is_activated_after_the_modules(tmp_path: Path) -> None:
    # A site Python module put first on PATH would hide a venv activated before it.
    space = tmp_path / "exp.yaml"
    space.write_text(GOOD + "slurm: {modules: [Python]}\n")
    code, text, stderr = _invoke(["slurm", "render", str(space)])
    assert code == 0, stderr
    lines = text.splitlines()
    activate = f"source {sys.prefix}/bin/activate"
    assert lines.index("module load Python") < lines.index(activate)
    assert "python -m hpo slurm run" in text


def test_a_script_rendered_elsewhere_finds_its_space_from_the_workdir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job cds into --workdir first. SPACE is named as the job finds it from there: by
    its absolute path when rendered on the cluster in another folder, relative to the workdir
    when inside it, and as given when the workdir is not here (rendered off the cluster, which
    is also one warning line); a relative workdir is taken from here."""
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "exp.yaml").write_text(GOOD.replace("tests/", f"{ROOT}/tests/"))
    monkeypatch.chdir(tmp_path / "x")
    other = tmp_path / "other"

    def space_named(*args: str) -> tuple[str, list[str], str]:
        code, text, stderr = _invoke(["slurm", "render", "exp.yaml", *args])
        assert code == 0, stderr
        (run,) = [line.split() for line in text.splitlines() if " slurm run " in line]
        return run[run.index("run") + 1], text.splitlines(), stderr

    space, lines, stderr = space_named("--workdir", str(other))  # off the cluster
    assert space == "exp.yaml" and f"cd {other}" in lines
    (warning,) = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert f"--workdir {other}: no such folder here" in warning
    other.mkdir()
    space, lines, stderr = space_named("--workdir", "../other")  # here, another folder
    assert space == str(tmp_path / "x" / "exp.yaml") and f"cd {other}" in lines
    assert "warning" not in stderr
    space, lines, _ = space_named("--workdir", str(tmp_path))  # SPACE below the workdir
    assert space == "x/exp.yaml" and f"cd {tmp_path}" in lines


@pytest.mark.parametrize("command", ["render", "submit"])
def test_a_script_written_into_a_missing_folder_makes_it(tmp_path: Path, command: str) -> None:
    space, target = tmp_path / "exp.yaml", tmp_path / "new" / "deeper" / "job.sbatch"
    space.write_text(GOOD)
    _invoke(["slurm", command, str(space), "--workdir", str(tmp_path), "-o", str(target)])
    assert target.read_text().startswith("#!/bin/bash\n")  # submit: kept before sbatch runs


def test_a_script_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    space, in_the_way = tmp_path / "exp.yaml", tmp_path / "a_file"
    space.write_text(GOOD)
    in_the_way.write_text("")
    target = in_the_way / "job.sbatch"
    code, stdout, stderr = _invoke(["slurm", "render", str(space), "--workdir", str(tmp_path),
                                    "-o", str(target)])
    line = stderr.strip()
    assert code == 2 and stdout == "" and "\n" not in line, stderr
    assert f"-o {target}: cannot make its folder {in_the_way}" in line and "Hint:" in line
