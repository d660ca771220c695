"""The `hpo` command: parses arguments, calls the Python API, maps HpoError to exit codes."""

from __future__ import annotations

import functools
import math
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hpo.errors import HpoError

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                  help="Tune deep-learning hyperparameters with Ray Tune, locally or on Slurm.")


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    # Pipes and CI logs: wide enough that tables and messages are never cut or wrapped.
    return console if console.is_terminal else Console(stderr=stderr, width=250)


out, err = _console(), _console(stderr=True)
_state = {"debug": False}

SetOption = typer.Option(None, "--set", metavar="KEY=VALUE",
                         help="Override a YAML key, e.g. --set num_samples=4 (repeatable).")


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="Show tracebacks.")) -> None:
    _state["debug"] = debug


def _guarded(command: Callable[..., Any]) -> Callable[..., Any]:
    """Print an HpoError as one line (traceback only with --debug) and exit with its code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except HpoError as exc:
            if _state["debug"]:
                traceback.print_exc()
            err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper


@app.command()
@_guarded
def validate(space: Path, overrides: list[str] | None = SetOption) -> None:
    """Check SPACE.yaml (keys, values, the trainable's import) and print the plan."""
    from hpo.distributed import check_backend
    from hpo.plan import describe
    from hpo.trainable import load_trainable
    from hpo.yaml_io import load_spec

    spec = load_spec(space, overrides)
    load_trainable(spec.trainable, str(space))
    check_backend(spec, str(space))
    for key, value in describe(spec).items():
        out.print(f"[bold]{key:<12}[/bold] {value}", highlight=False, soft_wrap=True)
    out.print(f"{space}: OK")


@app.command()
@_guarded
def run(space: Path, storage: str | None = typer.Option(None, help="Results root."),
        name: str | None = typer.Option(None, help="Experiment folder name."),
        overrides: list[str] | None = SetOption,
        cpus: int | None = typer.Option(None, help="CPUs of the embedded Ray.")) -> None:
    """Run the experiment in SPACE.yaml; its folder is <storage>/<name>."""
    from hpo.runner import run as run_experiment
    from hpo.yaml_io import load_spec

    spec = load_spec(space, overrides)
    _finish(run_experiment(spec, storage=storage, name=name, num_cpus=cpus, source=str(space)))


@app.command()
@_guarded
def resume(experiment_dir: Path, cpus: int | None = typer.Option(None)) -> None:
    """Continue an interrupted experiment from its folder."""
    from hpo.runner import resume as resume_experiment

    _finish(resume_experiment(experiment_dir, num_cpus=cpus))


def _finish(result: Any) -> None:
    _print_table(result.dataframe.head(10))
    out.print("[bold]best config[/bold]")
    out.print(yaml.safe_dump(result.best_config, sort_keys=False).rstrip(), highlight=False)
    out.print(f"experiment folder: {result.path}", highlight=False, soft_wrap=True)
    if result.errors:
        err.print(f"[red]error:[/red] {escape(result.errors_summary())}", highlight=False,
                  soft_wrap=True)
        raise typer.Exit(1)


def _print_table(frame: Any) -> None:
    """The results as a terminal table: config keys without prefix, no paths/hostnames."""
    shown = [c for c in frame.columns if c not in ("path", "hostname")]
    table = Table(*[c.removeprefix("config/") for c in shown], box=None)
    for _, row in frame[shown].iterrows():
        table.add_row(*[_cell(v) for v in row])
    out.print(table)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)


@app.command()
@_guarded
def results(experiment_dir: Path,
            fmt: str = typer.Option("table", "--format", help="table, csv, parquet or json"),
            output: Path | None = typer.Option(None, "-o", "--output")) -> None:
    """One row per trial, best first (config, last/best metric, iterations, status, time)."""
    from hpo.results import check_format, export, load_results

    check_format(fmt, output)
    frame = load_results(experiment_dir)
    if fmt == "table" and output is None:
        _print_table(frame)
    else:
        text = export(frame, fmt, output)
        if text is not None:
            sys.stdout.write(text)


@app.command()
@_guarded
def best(experiment_dir: Path) -> None:
    """Print the best trial's config as YAML."""
    from hpo.results import best_config, load_results

    sys.stdout.write(yaml.safe_dump(best_config(load_results(experiment_dir)), sort_keys=False))


@app.command()
@_guarded
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
@_guarded
def doctor(interface: str | None = typer.Option(
        None, help="Network interface for Ray (e.g. ib0), as slurm.interface.")) -> None:
    """What this installation can run: versions, GPUs, Horovod operations (Gloo/NCCL/MPI), and
    the address, ports and GPUs a Slurm job would use on this node."""
    from hpo.doctor import diagnose

    rows = diagnose(interface)
    for what, finding, fine in rows:
        out.print(f"{'ok ' if fine else 'NO '} {what:<18} {finding}", highlight=False,
                  markup=False, soft_wrap=True)
    if not all(fine for _, _, fine in rows):
        raise typer.Exit(1)


from hpo.cli_slurm import slurm_app  # noqa: E402 - it uses the helpers above

app.add_typer(slurm_app, name="slurm")


def main() -> None:
    app()
