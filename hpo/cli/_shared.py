"""What every `hpo` command shares: the consoles, --debug, the one-line error, the results table."""

from __future__ import annotations

import functools
import math
import traceback
from collections.abc import Callable
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hpo.driver.storage_faults import storage_error
from hpo.errors import HpoError


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    # Pipes and CI logs: wide enough that tables and messages are never cut or wrapped.
    return console if console.is_terminal else Console(stderr=stderr, width=250)


out, err = _console(), _console(stderr=True)
state = {"debug": False}

SetOption = typer.Option(None, "--set", metavar="KEY=VALUE",
                         help="Override a YAML key, e.g. --set num_samples=4 (repeatable).")


def guarded(command: Callable[..., Any]) -> Callable[..., Any]:
    """Print an HpoError as one line (traceback only with --debug) and exit with its code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (HpoError, OSError) as exc:
            error = exc if isinstance(exc, HpoError) else storage_error(exc)
            if error is None:  # not a full or read-only disk: a bug, with its traceback
                raise
            if state["debug"]:
                traceback.print_exc()
            err.print(f"[red]error:[/red] {escape(str(error))}", highlight=False, soft_wrap=True)
            raise typer.Exit(error.exit_code) from None

    return wrapper


def finish(result: Any) -> None:
    print_table(result.dataframe.head(10))
    out.print("[bold]best config[/bold]")
    out.print(yaml.safe_dump(result.best_config, sort_keys=False).rstrip(), highlight=False)
    out.print(f"experiment folder: {result.path}", highlight=False, soft_wrap=True)
    if result.errors:
        err.print(f"[red]error:[/red] {escape(result.errors_summary())}", highlight=False,
                  soft_wrap=True)
        raise typer.Exit(1)


def print_table(frame: Any) -> None:
    """The results as a terminal table: config keys without prefix, no paths/hostnames."""
    shown = [c for c in frame.columns if c not in ("path", "hostname")]
    table = Table(*[c.removeprefix("config/") for c in shown], box=None)
    for _, row in frame[shown].iterrows():
        table.add_row(*[cell(v) for v in row])
    out.print(table)


def cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)
