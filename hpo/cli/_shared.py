"""What every `hpo` command shares: the consoles, --debug, the one-line error, the results table."""

from __future__ import annotations

import atexit
import contextlib
import functools
import math
import os
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hpo.driver.backends import forks_ahead
from hpo.driver.guards.start_stop import StoppedAtStart
from hpo.driver.guards.storage_faults import storage_error
from hpo.errors import ExperimentError, HpoError, OutputError, TrialErrorsWarning

if TYPE_CHECKING:  # pandas: imported where a table is made, not at the CLI's start
    import pandas as pd


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
            if isinstance(error, StoppedAtStart):
                forks_ahead.end_ahead()  # what `hpo run` started early: no exit handler runs
                _exit_at_once(error.exit_code)
            raise typer.Exit(error.exit_code) from None

    return wrapper


def exit_now(code: int | str | None) -> None:
    """End with `code` (as sys.exit takes it) as the interpreter would, waiting for every
    thread that is not a daemon (Tune copying a trial's output files) and running the exit
    handlers, but without freeing every module and object (about 1 s with Ray, Tune, torch
    and pandas loaded)."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # logging's flush, tensorboardX writers, hpo's own
    if isinstance(code, str):  # sys.exit("message"): printed, exit 1
        err.print(code, highlight=False, soft_wrap=True)
    _exit_at_once(1 if isinstance(code, str) else code or 0)


def _exit_at_once(code: int) -> None:
    """End without the interpreter's teardown: a stop that came while Ray started may have
    broken a call in one of Ray's C++ threads, which then aborted the process (SIGABRT) in
    the teardown after the line was printed (seen in CI). Everything is cleaned up by now:
    Ray stopped and the run's folder and temp files are gone."""
    with contextlib.suppress(OSError):  # a closed pipe: the exit code still tells
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


@contextlib.contextmanager
def trial_errors_said_by_finish() -> Iterator[None]:
    """No TrialErrorsWarning from hpo.run/resume while the block runs: `finish` says it as
    the error line, and exits 1."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrialErrorsWarning)
        yield


def finish(result: Any) -> None:
    frame = result.dataframe
    print_table(frame.head(10))
    if "pareto_front" in frame:  # several objectives: the first row is the front's best
        out.print(f"pareto front: {int(frame['pareto_front'].sum())} trial(s); `hpo best "
                  f"{result.path}` lists them", highlight=False, soft_wrap=True)
        out.print(f"[bold]best config on the front for {frame.attrs['metric']}[/bold]")
    else:
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


def front_yaml(frame: Any) -> str:
    """The Pareto front as YAML, after a comment line saying what it is: a list of
    {trial_id, each objective's last value, config}, best first on the first objective."""
    from hpo.results import front, plain, row_config

    goals = frame.attrs["objectives"]
    rows = front(frame)
    entries = [{"trial_id": row["trial_id"],
                **{metric: plain(row[f"last_{metric}"]) for metric, _ in goals},
                "config": row_config(row)} for _, row in rows.iterrows()]
    finished = int(frame["status"].eq("TERMINATED").sum())
    said = ", ".join(f"{metric} ({mode})" for metric, mode in goals)
    head = f"# Pareto front of {said}: {len(rows)} of {finished} finished trial(s)\n"
    return head + (yaml.safe_dump(entries, sort_keys=False) if entries else "[]\n")


def cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)


_BY_EXTENSION = {".csv": "csv", ".json": "json", ".parquet": "parquet"}


def check_format(fmt: str | None, output: Path | None) -> str:
    """The format to write: --format if given, else the one -o's extension names (.csv,
    .json, .parquet; any other: table). Rejects a bad combination before any folder is read."""
    if fmt is None:
        fmt = _BY_EXTENSION.get(output.suffix.lower(), "table") if output else "table"
    if fmt not in ("table", "csv", "json", "parquet"):
        raise ExperimentError(f"--format: unknown format {fmt!r}. Hint: table, csv, parquet or "
                              "json")
    if fmt == "parquet" and output is None:
        raise ExperimentError("--format parquet: needs -o FILE. Hint: -o results.parquet")
    return fmt


def write_output(output: Path, content: str | Callable[[Path], object], example: str) -> Path:
    """Write `content` (text, or a function writing the file it is given) to -o `output`,
    making its folder if missing (as `hpo report` does); one line where that cannot be."""
    output = output.expanduser()
    if output.is_dir():
        raise OutputError(f"-o {output}: is a folder. Hint: name a file in it, e.g. "
                          f"{output / example}")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, no permission: not a full disk
        why = ("a file is in the way" if isinstance(exc, (FileExistsError, NotADirectoryError))
               else exc.strerror or str(exc))
        raise OutputError(f"-o {output}: cannot make its folder {output.parent} ({why}). "
                          "Hint: name a file in a folder you can write to") from None
    try:
        content(output) if callable(content) else output.write_text(content)
    except PermissionError as exc:  # a full or read-only disk: `guarded` says StorageError
        raise OutputError(f"-o {output}: cannot write it ({exc.strerror}). Hint: name a file "
                          "in a folder you can write to") from None
    return output


def export(frame: pd.DataFrame, fmt: str, output: Path | None) -> str | None:
    """Write the table as csv/json/parquet to `output`, or return the text if no file."""
    check_format(fmt, output)
    if fmt == "parquet":
        assert output is not None  # check_format refused parquet without a file
        write_output(output, lambda path: frame.to_parquet(path, index=False), "results.parquet")
        return None
    if fmt == "table":
        text = frame.to_string(index=False) + "\n"
    elif fmt == "csv":
        text = frame.to_csv(index=False)
    else:
        text = records_json(frame)
    if output is None:
        return text
    write_output(output, text, f"results.{'txt' if fmt == 'table' else fmt}")
    return None


def records_json(frame: pd.DataFrame) -> str:
    """The rows as a JSON list of objects, each float exactly as held (Python's shortest
    repr; pandas' to_json keeps 10 or at most 15 decimals: 1.234e-12 became 0.0); NaN: null."""
    import json

    import pandas as pd

    def value(v: Any) -> Any:
        if v is None or v is pd.NA or v is pd.NaT:
            return None
        v = v.tolist() if hasattr(v, "tolist") else v  # numpy: Python's own values
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, (list, tuple)):
            return [value(item) for item in v]
        if isinstance(v, dict):
            return {str(k): value(item) for k, item in v.items()}
        return v.isoformat() if hasattr(v, "isoformat") else v  # a date or time: ISO 8601

    # Whole columns first (object arrays hold Python's floats and ints; missing and infinite
    # values become None), then the C encoder row by row: about 2x faster than a value at a
    # time (the rest is float repr, exactness's price: pandas' to_json is 6x faster, and
    # rounds). A NaN nested in a cell (a list) is left to the value-at-a-time pass.
    import numpy as np

    plain = frame.replace([np.inf, -np.inf], np.nan)
    plain = plain.astype(object).where(plain.notna(), None)
    encode = json.JSONEncoder(allow_nan=False, default=value).encode  # C, without an indent
    names = [str(name) for name in plain.columns]
    try:  # one row a line
        return "[\n" + ",\n".join(encode(dict(zip(names, row, strict=True)))
                                    for row in plain.to_numpy(object).tolist()) + "\n]\n"
    except ValueError:
        rows = ({str(k): value(v) for k, v in row.items()} for row in frame.to_dict("records"))
        return "[\n" + ",\n".join(json.dumps(row, allow_nan=False, default=str)
                                    for row in rows) + "\n]\n"
