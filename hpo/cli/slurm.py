"""`hpo slurm render|submit|join|run|check`: sbatch scripts from the YAML, and what runs in
them."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from hpo.cli._shared import SetOption, err, finish, guarded, out, write_output
from hpo.errors import ConfigError, SlurmEnvironmentError

slurm_app = typer.Typer(no_args_is_help=True, help="Run experiments on a Slurm cluster.")

Site = typer.Option(None, "--site", help="Site defaults: a built-in profile (juwels-booster, "
                    "jureca-dc, lumi-g) or a YAML file of slurm: keys (may set base: NAME).")
Storage = typer.Option(None, help="Results root (default: the YAML's storage).")
Name = typer.Option(None, help="Experiment folder name (default: the YAML's name).")


def _settings(space: Path, overrides: list[str] | None, site: str | None,
              options: dict[str, Any], check_import: bool = True) -> tuple[Any, Any]:
    """The validated spec and its merged slurm settings; nothing is started."""
    from hpo.driver.run.trainable import load_trainable
    from hpo.spec.load import load_spec
    from hpo.spec.slurm import merged_settings

    spec = load_spec(space, overrides)
    if check_import and isinstance(spec.trainable, str):  # a YAML names it as text
        load_trainable(spec.trainable, str(space))
    settings = merged_settings(spec.slurm, site, options, str(space))
    return spec.with_slurm(settings, str(space)), settings


def _render(space: Path, overrides: list[str] | None, site: str | None, storage: str | None,
            name: str | None, workdir: Path | None, sbatch: SbatchOptions) -> str:
    from hpo.cluster.container_job import quota_warning
    from hpo.cluster.render_checks import check_partition, check_venv_has_hpo
    from hpo.cluster.sbatch import render_sbatch
    from hpo.spec.job_fit import check_fits_the_job
    from hpo.spec.site import site_argument

    spec, settings = _settings(space, overrides, site, sbatch.given())
    for warning in check_fits_the_job(spec, settings, str(space)):
        err.print(f"warning: {warning}", highlight=False, soft_wrap=True)
    check_partition(settings, str(space), set(sbatch.given()))
    _warn_billing(settings)
    _warn_idle_gpus(spec, settings)
    if (quota := quota_warning(settings)) is not None:
        err.print(f"warning: {quota}", highlight=False, soft_wrap=True)
    job_dir = _job_workdir(workdir, settings.workdir)
    # the job's name (and so its output file, hpo-%x-%j.out) is the experiment's: --name's
    text = render_sbatch(name or spec.name, _space_in(job_dir, space), settings, workdir=job_dir,
                         storage=storage, run_name=name,
                         site=site_argument(site) if site else None, overrides=overrides or [])
    said = check_venv_has_hpo(settings, job_dir, str(space))  # after render's own venv check
    if said:
        err.print(f"warning: {said}", highlight=False, soft_wrap=True)
    return text


def _space_in(workdir: str, space: Path) -> str:
    """SPACE as the job finds it after it cds into the workdir: relative to the workdir where
    it lies inside it; absolute where the workdir is here (rendered on the cluster, from another
    folder); as given where the workdir is not here (rendered off the cluster, whose copy of
    the project keeps the same layout below the workdir)."""
    absolute = os.path.abspath(space.expanduser())
    if Path(absolute).is_relative_to(workdir):
        return os.path.relpath(absolute, workdir)
    return absolute if Path(workdir).is_dir() else str(space)


def _job_workdir(given: Path | None, from_yaml: str | None) -> str:
    """The folder the job cds into, absolute (the script may be submitted from elsewhere).
    One missing here is a warning, not an error: the script may be rendered off the cluster,
    or name a file system mounted only on its compute nodes."""
    option = "--workdir" if given else "slurm.workdir"
    workdir = os.path.abspath(Path(given or from_yaml or Path.cwd()).expanduser())
    if not Path(workdir).is_dir():
        err.print(f"warning: {option} {workdir}: no such folder here; the job cds into it, "
                  "so it must exist where the job runs", highlight=False, soft_wrap=True)
    return workdir


def _warn_idle_gpus(spec: Any, settings: Any) -> None:
    """One line when the job asks for GPUs that no trial asks for (a site profile's whole
    GPU nodes under a CPU-only YAML): they are paid for and sit idle."""
    ranks = spec.distributed
    used = ranks.gpus_per_worker if ranks else spec.resources.gpus_per_trial
    if settings.gpus_per_node and not used:
        key = "distributed.gpus_per_worker" if ranks else "resources.gpus_per_trial"
        err.print(f"warning: the job asks for {settings.gpus_per_node} GPUs per node, but no "
                  f"trial uses one ({key} is 0): they would sit idle. Hint: set {key} to train "
                  "on them", highlight=False,
                  soft_wrap=True)


def _warn_billing(settings: Any) -> None:
    warning = settings.billing_warning()
    if warning:
        err.print(f"warning: {warning}", highlight=False)


@dataclass(frozen=True)
class SbatchOptions:
    """The allocation options `render` and `submit` share; None: not given (the YAML's
    `slurm:` keys, then the site file, decide)."""

    nodes: int | None = None
    gpus_per_node: int | None = None
    cpus_per_node: int | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    requeue: bool | None = None

    def given(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


_SBATCH_OPTIONS: dict[str, tuple[Any, Any]] = {  # name: (type, typer option)
    "nodes": (int | None, typer.Option(None, "--nodes", "-N", help="Nodes (one Ray node each).")),
    "gpus_per_node": (int | None, typer.Option(None, "--gpus-per-node",
                                               help="GPUs per node.")),
    "cpus_per_node": (int | None, typer.Option(None, "--cpus-per-node",
                                               help="CPUs per node (the node's one task).")),
    "time": (str | None, typer.Option(None, "--time", "-t",
                                      help="Time limit, HH:MM:SS or D-HH:MM:SS.")),
    "partition": (str | None, typer.Option(None, "--partition", "-p", help="Slurm partition.")),
    "account": (str | None, typer.Option(None, "--account", "-A",
                                         help="Slurm account to charge.")),
    "requeue": (bool | None, typer.Option(
        None, "--requeue/--no-requeue", metavar="",  # a flag: no `<bool>` in --help
        help="On the walltime warning: stop, requeue, resume (default on).")),
}


def with_sbatch_options(command: Callable[..., Any],
                        without: tuple[str, ...] = ()) -> Callable[..., Any]:
    """Give a typer command the SbatchOptions flags (but `without`); it receives them as
    `sbatch`."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "sbatch"]
    names = [name for name in _SBATCH_OPTIONS if name not in without]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                               default=_SBATCH_OPTIONS[name][1],
                               annotation=_SBATCH_OPTIONS[name][0]) for name in names]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sbatch = SbatchOptions(**{name: kwargs.pop(name) for name in names})
        return command(*args, sbatch=sbatch, **kwargs)

    wrapper.__signature__ = (  # type: ignore[attr-defined]  # what typer reads
        signature.replace(parameters=kept + added))
    wrapper.__annotations__ = {p.name: p.annotation for p in kept + added}
    return wrapper


_Workdir = typer.Option(None, "--workdir", help="Folder the job runs in (default: here; a "
                        "relative one is taken from here). Missing here: a warning.")


@slurm_app.command()
@guarded
@with_sbatch_options
def render(space: Path, sbatch: SbatchOptions, workdir: Path | None = _Workdir,
           output: Path | None = typer.Option(None, "-o", "--output",
                                              help="Write the script here, not to stdout."),
           site: str | None = Site, storage: str | None = Storage, name: str | None = Name,
           overrides: list[str] | None = SetOption) -> None:
    """Print (or write with -o) the sbatch script for SPACE.yaml."""
    text = _render(space, overrides, site, storage, name, workdir, sbatch)
    if output is None:
        out.file.write(text)
    else:
        written = write_output(output, text, "job.sbatch")
        err.print(f"wrote {written}", highlight=False)


@slurm_app.command()
@guarded
@with_sbatch_options
def submit(space: Path, sbatch: SbatchOptions, workdir: Path | None = _Workdir,
           output: Path | None = typer.Option(None, "-o", "--output",
                                              help="Also keep the script here."),
           site: str | None = Site, storage: str | None = Storage, name: str | None = Name,
           overrides: list[str] | None = SetOption) -> None:
    """Render the sbatch script for SPACE.yaml, submit it with sbatch, print the job id."""
    text = _render(space, overrides, site, storage, name, workdir, sbatch)
    if output is not None:
        write_output(output, text, "job.sbatch")
    out.print(_sbatch(text, str(space)), highlight=False)


def _sbatch(text: str, what: str) -> str:
    """Submit a script with sbatch; the job id."""
    if shutil.which("sbatch") is None:
        raise SlurmEnvironmentError("sbatch not found. Hint: submit from a login node of the "
                                    "cluster, or write the script with -o and copy it")
    done = subprocess.run(["sbatch", "--parsable"], input=text, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        message = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ConfigError(what, "sbatch", f"rejected the job: {message}",
                          "check partition/account/time with your site's documentation")
    return done.stdout.strip().split(";")[0]


@slurm_app.command()
@guarded
@functools.partial(with_sbatch_options, without=("requeue",))  # a joined job just leaves
def join(experiment: Path, sbatch: SbatchOptions, workdir: Path | None = _Workdir,
         output: Path | None = typer.Option(None, "-o", "--output",
                                            help="Also keep the script here."),
         site: str | None = Site,
         dry_run: bool = typer.Option(False, "--dry-run", metavar="",
                                      help="Print the script; submit nothing.")) -> None:
    """Submit a job whose nodes join the running study EXPERIMENT (its folder) as more Ray
    workers; they leave by themselves when the study's job ends."""
    from hpo.cluster.join import join_point, render_join
    from hpo.spec.slurm import SlurmSettings, merged_settings

    exp_dir = experiment.expanduser().resolve()
    point = join_point(exp_dir)  # refused here, before anything is submitted
    settings = merged_settings(SlurmSettings.model_validate(point.slurm), site, sbatch.given(),
                               str(exp_dir))
    _warn_billing(settings)
    text = render_join(exp_dir, point.name, settings, _job_workdir(workdir, settings.workdir))
    if output is not None:
        write_output(output, text, "job.sbatch")
    if dry_run:
        out.file.write(text)
        return
    out.print(_sbatch(text, str(exp_dir)), highlight=False)


@slurm_app.command()
@guarded
def status(experiment: Path) -> None:
    """The Slurm jobs and nodes of the running study EXPERIMENT (its folder)."""
    from hpo.cluster.join import join_point, members

    point = join_point(experiment.expanduser().resolve())
    for node in members(point):
        job = node.get("job_id") or point.job_id
        role = "head job" if str(job) == point.job_id else "joined job"
        out.print(f"{role} {job}: {node['name']} ({node['ip']}), {node['cpus']} CPUs, "
                  f"{node['gpus']} GPUs", highlight=False)


@slurm_app.command(hidden=True)
@guarded
def worker(experiment: Path) -> None:
    """Inside a join job's allocation: Ray workers joined to the study, until they leave."""
    from hpo.cluster.join import run_joined

    raise typer.Exit(run_joined(experiment.expanduser().resolve(),
                                report=lambda line: err.print(line, highlight=False)))


@slurm_app.command("run")
@guarded
def run_job(space: Path, site: str | None = Site, storage: str | None = Storage,
            name: str | None = Name, overrides: list[str] | None = SetOption) -> None:
    """Inside an allocation (the sbatch script): start Ray on all nodes, run or resume."""
    from hpo.driver.run.slurm import run_in_allocation

    spec, _ = _settings(space, overrides, site, {})
    finish(run_in_allocation(spec, storage=storage, name=name, source=str(space),
                              report=lambda line: err.print(line, highlight=False)))


@slurm_app.command()
@guarded
def check(interface: str | None = typer.Option(None, help="Network interface for Ray."),
          timeout: float = typer.Option(180.0, min=1,
                                        help="Seconds to wait for all nodes."),
          site: str | None = Site) -> None:
    """Inside an allocation: start Ray on all nodes, report when all joined, stop it."""
    import time as clock

    from hpo.cluster.bootstrap import ray_cluster
    from hpo.cluster.slurm_env import Allocation
    from hpo.spec.slurm import SlurmSettings, merged_settings

    started = clock.monotonic()
    alloc = Allocation.from_env(os.environ)
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"hpo-check-{alloc.job_id}"
    # the site's network (interface or hostname suffix) and GPU layout, as a job would use
    settings = merged_settings(SlurmSettings(), site, {"interface": interface,
                                                       "startup_timeout_s": timeout},
                               "hpo slurm check")
    with ray_cluster(alloc, settings, logs) as c:
        out.print(f"ready: {len(alloc.nodes)} node(s) after "
                  f"{clock.monotonic() - started:.2f} s; head {c.address}; "
                  f"epoch {clock.time():.3f}", highlight=False)
        for note in c.notes:
            err.print(f"warning: {note}", highlight=False)
