"""`hpo slurm render|submit|run|check`: sbatch scripts from the YAML, and what runs in them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import typer

from hpo.cli import SetOption, _finish, _guarded, err, out
from hpo.errors import ConfigError, SlurmEnvironmentError

slurm_app = typer.Typer(no_args_is_help=True, help="Run experiments on a Slurm cluster.")

Site = typer.Option(None, "--site", help="Site defaults (YAML with slurm: keys).")
Storage = typer.Option(None, help="Results root (default: the YAML's storage).")
Name = typer.Option(None, help="Experiment folder name (default: the YAML's name).")


def _settings(space: Path, overrides: list[str] | None, site: Path | None,
              options: dict[str, Any], check_import: bool = True) -> tuple[Any, Any]:
    """The validated spec and its merged slurm settings; nothing is started."""
    from hpo.slurm_spec import merged_settings
    from hpo.trainable import load_trainable
    from hpo.yaml_io import load_spec

    spec = load_spec(space, overrides)
    if check_import:
        load_trainable(spec.trainable, str(space))
    return spec, merged_settings(spec.slurm, site, options, str(space))


def _render(space: Path, overrides: list[str] | None, site: Path | None, storage: str | None,
            name: str | None, workdir: Path | None, options: dict[str, Any]) -> str:
    from hpo.cluster.sbatch import render_sbatch

    spec, settings = _settings(space, overrides, site, options)
    return render_sbatch(spec.name, str(space), settings,
                         workdir=str(workdir or settings.workdir or Path.cwd()),
                         storage=storage, run_name=name,
                         site=str(site.resolve()) if site else None, overrides=overrides or [])


def _options(nodes: int | None, gpus_per_node: int | None, cpus_per_node: int | None,
             time: str | None, partition: str | None, account: str | None,
             requeue: bool | None) -> dict[str, Any]:
    return {"nodes": nodes, "gpus_per_node": gpus_per_node, "cpus_per_node": cpus_per_node,
            "time": time, "partition": partition, "account": account, "requeue": requeue}


_Nodes = typer.Option(None, "--nodes", "-N", help="Nodes (one Ray node each).")
_Gpus = typer.Option(None, "--gpus-per-node")
_Cpus = typer.Option(None, "--cpus-per-node")
_Time = typer.Option(None, "--time", "-t", help="Time limit, HH:MM:SS or D-HH:MM:SS.")
_Partition = typer.Option(None, "--partition", "-p")
_Account = typer.Option(None, "--account", "-A")
_Requeue = typer.Option(None, "--requeue/--no-requeue",
                        help="On the walltime warning: stop, requeue, resume (default on).")
_Workdir = typer.Option(None, "--workdir", help="Folder the job runs in (default: here).")


@slurm_app.command()
@_guarded
def render(space: Path, nodes: int | None = _Nodes, gpus_per_node: int | None = _Gpus,
           cpus_per_node: int | None = _Cpus, time: str | None = _Time,
           partition: str | None = _Partition, account: str | None = _Account,
           requeue: bool | None = _Requeue, workdir: Path | None = _Workdir,
           output: Path | None = typer.Option(None, "-o", "--output"),
           site: Path | None = Site, storage: str | None = Storage, name: str | None = Name,
           overrides: list[str] | None = SetOption) -> None:
    """Print (or write with -o) the sbatch script for SPACE.yaml."""
    text = _render(space, overrides, site, storage, name, workdir,
                   _options(nodes, gpus_per_node, cpus_per_node, time, partition, account,
                            requeue))
    if output is None:
        out.file.write(text)
    else:
        output.write_text(text)
        err.print(f"wrote {output}", highlight=False)


@slurm_app.command()
@_guarded
def submit(space: Path, nodes: int | None = _Nodes, gpus_per_node: int | None = _Gpus,
           cpus_per_node: int | None = _Cpus, time: str | None = _Time,
           partition: str | None = _Partition, account: str | None = _Account,
           requeue: bool | None = _Requeue, workdir: Path | None = _Workdir,
           output: Path | None = typer.Option(None, "-o", "--output",
                                              help="Also keep the script here."),
           site: Path | None = Site, storage: str | None = Storage, name: str | None = Name,
           overrides: list[str] | None = SetOption) -> None:
    """Render the sbatch script for SPACE.yaml, submit it with sbatch, print the job id."""
    text = _render(space, overrides, site, storage, name, workdir,
                   _options(nodes, gpus_per_node, cpus_per_node, time, partition, account,
                            requeue))
    if shutil.which("sbatch") is None:
        raise SlurmEnvironmentError("sbatch not found. Hint: submit from a login node of the "
                                    "cluster, or `hpo slurm render -o job.sbatch` and copy it")
    if output is not None:
        output.write_text(text)
    done = subprocess.run(["sbatch", "--parsable"], input=text, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        message = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ConfigError(str(space), "sbatch", f"rejected the job: {message}",
                          "check partition/account/time with your site's documentation")
    out.print(done.stdout.strip().split(";")[0], highlight=False)


@slurm_app.command("run")
@_guarded
def run_job(space: Path, site: Path | None = Site, storage: str | None = Storage,
            name: str | None = Name, overrides: list[str] | None = SetOption) -> None:
    """Inside an allocation (the sbatch script): start Ray on all nodes, run or resume."""
    from hpo.slurm_job import run_in_allocation

    spec, settings = _settings(space, overrides, site, {})
    spec = spec.model_copy(update={"slurm": settings})
    _finish(run_in_allocation(spec, storage=storage, name=name, source=str(space),
                              report=lambda line: err.print(line, highlight=False)))


@slurm_app.command()
@_guarded
def check(interface: str | None = typer.Option(None, help="Network interface for Ray."),
          timeout: float = typer.Option(180.0, help="Seconds to wait for all nodes.")) -> None:
    """Inside an allocation: start Ray on all nodes, report when all joined, stop it."""
    import time as clock

    from hpo.cluster.bootstrap import ClusterOptions, ray_cluster
    from hpo.cluster.slurm_env import Allocation

    started = clock.monotonic()
    alloc = Allocation.from_env(os.environ)
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"hpo-check-{alloc.job_id}"
    with ray_cluster(alloc, ClusterOptions(interface, startup_timeout_s=timeout), logs) as c:
        out.print(f"ready: {len(alloc.nodes)} node(s) after "
                  f"{clock.monotonic() - started:.2f} s; head {c.address}; "
                  f"epoch {clock.time():.3f}", highlight=False)
