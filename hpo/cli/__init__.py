"""The `hpo` command: parses arguments, calls the Python API, maps HpoError to exit codes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
import yaml

from hpo.cli._shared import (
    SetOption,
    err,
    exit_now,
    finish,
    front_yaml,
    guarded,
    out,
    print_table,
    state,
    trial_errors_said_by_finish,
)
from hpo.cli.install import install_app
from hpo.cli.local import local_app
from hpo.cli.slurm import slurm_app

if TYPE_CHECKING:
    from hpo.cluster.auth import RayCluster

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                  help="Tune deep-learning hyperparameters with Ray Tune, locally or on Slurm.")


def _print_versions(asked: bool) -> None:
    """hpo's version and those of the libraries a bug report needs (read from the installed
    packages' metadata: importing Ray or torch would take seconds)."""
    if not asked:
        return
    from importlib.metadata import PackageNotFoundError, version

    from hpo import __version__

    out.print(f"hpo {__version__}", highlight=False)  # its distribution is named hpo-hpc
    for package in ("ray", "torch", "horovod", "optuna"):
        try:
            found = version(package)
        except PackageNotFoundError:
            found = "not installed"
        out.print(f"{package} {found}", highlight=False)
    raise typer.Exit()


# typer 0.29 prints a flag's type (`--debug <bool>`) as if it took a value; an empty metavar
# leaves the type column blank for a flag (typer's own --help keeps its `<bool>`).
FLAG = ""


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", metavar=FLAG,
                                        help="Show tracebacks."),
             _version: bool = typer.Option(False, "--version", is_eager=True, metavar=FLAG,
                                           callback=_print_versions,
                                           help="Versions of hpo, Ray, torch, Horovod, Optuna.")
             ) -> None:
    state["debug"] = debug


@app.command()
@guarded
def validate(space: Path, overrides: list[str] | None = SetOption) -> None:
    """Check SPACE.yaml (keys, values, the trainable's import) and print the plan."""
    from hpo.cluster.own_import import check_working_folder
    from hpo.driver.run.preflight import check_batch_keys
    from hpo.driver.run.translate import user_trainable
    from hpo.spec.load import load_spec
    from hpo.spec.plan import summarize

    spec = load_spec(space, overrides)
    check_working_folder(str(space))
    check_batch_keys(spec, str(space))
    user_trainable(spec, str(space))  # imports it; checks the backend and a class's limits
    for key, value in summarize(spec).items():
        out.print(f"[bold]{key:<12}[/bold] {value}", highlight=False, soft_wrap=True)
    out.print(f"{space}: OK")


CpusOption = typer.Option(None, "--cpus", min=1, metavar="N",
                          help="CPUs of the embedded Ray (default: all).")
TimeLimit = typer.Option(
    None, "--time-limit", min=1, metavar="SECONDS",
    help="End like a Slurm job with this time limit: no rung starts that cannot finish "
    "slurm.signal_seconds before it; then the run stops, saved (`hpo resume`). Inside Slurm "
    "the allocation's end counts without it.")


@app.command()
@guarded
def run(space: Path, storage: str | None = typer.Option(None, help="Results root."),
        name: str | None = typer.Option(None, help="Experiment folder name."),
        overrides: list[str] | None = SetOption,
        cpus: int | None = CpusOption,
        time_limit: float | None = TimeLimit,
        fresh: bool = typer.Option(
            False, "--fresh", metavar=FLAG,
            help="Where <storage>/<name> holds a run none of whose trials finished (it "
            "failed, e.g. on a metric typo), empty it and start again with this YAML. "
            "Refused, naming them, where a trial finished.")) -> None:
    """Run the experiment in SPACE.yaml; its folder is <storage>/<name>."""
    from hpo.driver.guards.start_stop import start_stops

    state["ran"] = True  # see main()
    with start_stops():  # a stop while hpo imports and starts: one line, nothing left
        import hpo

        spec = hpo.load_spec(space, overrides)  # a bad spec (0.1 s): nothing started
        cluster = _warm_or_forks_ahead(cpus)
        # one process, one run: Ray ends with it (a warm one, `hpo local up`, keeps running)
        with trial_errors_said_by_finish():
            result = hpo.run(spec, storage=storage, name=name, num_cpus=cpus,
                             source=str(space), time_limit_s=time_limit, keep_ray=False,
                             cluster=cluster, fresh=fresh)
    finish(result)


def _warm_or_forks_ahead(cpus: int | None) -> RayCluster | None:
    """The warm Ray this run uses (`hpo local up`), or None: then the run starts its own. The
    run's workers' fork server starts now, while the rest of hpo is imported."""
    from hpo.cluster import warm

    cluster = warm.for_run(cpus)
    if cluster is None:
        from hpo.driver.backends.forks_ahead import start_ahead

        start_ahead()
    else:  # a warm Ray's stubs ask for this run's own server
        from hpo.driver.backends import warm_forks

        warm_forks.start_ahead(cluster)
    return cluster


@app.command()
@guarded
def resume(experiment_dir: Path,
           cpus: int | None = CpusOption,
           time_limit: float | None = TimeLimit) -> None:
    """Continue an interrupted experiment from its folder."""
    from hpo.driver.guards.start_stop import start_stops

    state["ran"] = True  # see main()
    with start_stops():  # a stop while hpo imports and starts: one line
        cluster = _warm_or_forks_ahead(cpus)
        import hpo

        with trial_errors_said_by_finish():
            result = hpo.resume(experiment_dir, num_cpus=cpus, time_limit_s=time_limit,
                                keep_ray=False, cluster=cluster)
    if result.finished_already:
        err.print(f"hpo: {result.path} has finished: all {len(result.dataframe)} trial(s) ran "
                  f"to their end, nothing to resume. Hint: `hpo best {result.path}`",
                  highlight=False, soft_wrap=True)
        return
    finish(result)


@app.command()
@guarded
def results(experiment_dir: Path,
            fmt: str | None = typer.Option(None, "--format", help="table, csv, parquet or "
                                           "json [default: from -o's extension .csv, .json or "
                                           ".parquet, else table]"),
            output: Path | None = typer.Option(None, "-o", "--output",
                                               help="Write to this file, not to stdout."),
            curves: bool = typer.Option(False, "--curves", metavar=FLAG,
                                        help="Every report instead: one row per trial and "
                                        "training_iteration.")) -> None:
    """One row per trial, best first (config, last/best metric, each reported metric,
    iterations, status, time)."""
    from hpo.cli._shared import check_format, export
    from hpo.results import load_curves, load_results

    fmt = check_format(fmt, output)
    frame = load_curves(experiment_dir) if curves else load_results(experiment_dir)
    if fmt == "table" and output is None:
        print_table(frame)
    else:
        text = export(frame, fmt, output)
        if text is not None:
            sys.stdout.write(text)


@app.command()
@guarded
def best(experiment_dir: Path,
         checkpoint: bool = typer.Option(False, "--checkpoint", metavar=FLAG,
                                         help="Print the best trial's best checkpoint folder "
                                         "instead (checkpoint.keep_best: true).")) -> None:
    """Print the best trial's config as YAML; with several objectives, the Pareto front: each
    trial on it with its objectives' values and config. --checkpoint: the folder of that
    trial's best checkpoint (the front's best on the first objective)."""
    from hpo.results import best_checkpoint, best_config, load_results

    frame = load_results(experiment_dir)
    if checkpoint:
        sys.stdout.write(f"{best_checkpoint(experiment_dir, frame)}\n")
    elif len(frame.attrs.get("objectives", [])) > 1:
        sys.stdout.write(front_yaml(frame))
    else:
        sys.stdout.write(yaml.safe_dump(best_config(frame), sort_keys=False))


@app.command()
@guarded
def report(experiment_dir: Path, output: Path | None = typer.Option(
        None, "-o", "--output", help="HTML file [default: EXPERIMENT_DIR/report.html]")) -> None:
    """One self-contained HTML report (plots, table, best config) plus the plots as PNGs."""
    from hpo.reporting import build_report

    done = build_report(experiment_dir, output)
    out.print(f"report: {done.html} ({done.trials} trials; figures in "
              f"{done.html.stem}_figures/)", highlight=False, soft_wrap=True)
    if done.unfinished:
        err.print(f"note: {done.unfinished} trial(s) unfinished: the experiment is still running "
                  "(or was interrupted); the report is a snapshot", highlight=False,
                  soft_wrap=True)


@app.command()
@guarded
def doctor(interface: str | None = typer.Option(
        None, help="Network interface for Ray (e.g. ib0), as slurm.interface."),
        site: str | None = typer.Option(
            None, "--site", help="Also check a site profile (built-in name or file): its "
            "modules in a clean login shell, and RCCL's network plugin on AMD GPUs.")) -> None:
    """What this installation can run: versions, GPUs, Horovod operations (Gloo/NCCL/MPI), and
    the address, ports and GPUs a Slurm job would use on this node."""
    from hpo.cli.doctor import diagnose

    if site is not None:  # a bad name or file: one line and exit 2, before any check runs
        from hpo.spec.slurm import SlurmSettings, merged_settings

        merged_settings(SlurmSettings(), site, {}, "--site")
    rows = diagnose(interface, site)
    for what, finding, fine in rows:
        out.print(f"{'ok ' if fine else 'NO '} {what:<18} {finding}", highlight=False,
                  markup=False, soft_wrap=True)
    if not all(fine for _, _, fine in rows):
        raise typer.Exit(1)


app.add_typer(slurm_app, name="slurm")
app.add_typer(install_app, name="install")
app.add_typer(local_app, name="local")


def main() -> None:
    """The `hpo` command. A run or resume ends without the interpreter's teardown (about 1 s
    with Ray, Tune, torch and pandas loaded: time the allocation pays); by then Ray
    has stopped and the folder is written, and the exit handlers (hpo.log, TensorBoard) run."""
    try:
        app()
    except SystemExit as exc:
        if state.get("ran"):
            exit_now(exc.code)
        raise
