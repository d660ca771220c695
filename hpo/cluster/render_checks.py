"""What `hpo slurm render/submit` checks on this machine before it writes a job: that the
job's venv imports hpo, and that the job fits its partition as Slurm states it. A job that
fails either would pend, start, and die (or pend forever) without a word at submit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hpo.cluster.partition import over_limits, read_partition
from hpo.errors import ConfigError
from hpo.spec.slurm import SlurmSettings


def check_venv_has_hpo(settings: SlurmSettings, workdir: str, source: str) -> str | None:
    """Refuse a slurm.venv whose python cannot import hpo (run from the job's workdir, as the
    job runs it); a warning line where the venv is not on this machine (rendered off the
    cluster: not checked). Nothing to check without slurm.venv (the job uses the
    environment that renders it)."""
    if settings.venv is None:
        return None
    python = Path(settings.venv).expanduser() / "bin" / "python"
    if not python.exists():
        return (f"slurm.venv {settings.venv}: not on this machine, so whether it imports hpo "
                "is not checked")
    cwd = workdir if Path(workdir).is_dir() else None
    try:
        done = subprocess.run([str(python), "-c", "import hpo.cli"], cwd=cwd,
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"slurm.venv {settings.venv}: could not check that it imports hpo ({exc})"
    if done.returncode:
        said = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ConfigError(source, "slurm.venv", f"{settings.venv}'s python cannot import hpo "
                          f"({said}): the job would die at its start", "install hpo into it "
                          f"({python} -m pip install hpo-hpc, or -e your clone), or leave venv "
                          "out: the job then uses the environment that renders it")
    return None


def check_partition(settings: SlurmSettings, source: str, given: set[str]) -> None:
    """Refuse a job over its partition's MaxTime or node count, as `scontrol show partition`
    states them; nothing where Slurm cannot be asked."""
    partition = read_partition(settings.partition)
    if partition is None:
        return
    for key, problem, hint in over_limits(partition, settings.time, settings.nodes):
        path = f"--{key}" if key in given else f"slurm.{key}"
        raise ConfigError(source, path, problem, hint)
