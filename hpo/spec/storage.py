"""The `optuna_storage:` value, checked when the spec is read (hpo.optuna.storage opens it).

A plain path is an Optuna JournalStorage file (append-only with lock files, so it works on
NFS/GPFS where SQLite's locking does not); anything with `://` is an SQLAlchemy URL for
Optuna's RDBStorage. Checking imports neither Ray nor Optuna, so `hpo validate` stays fast.
"""

from __future__ import annotations

from pathlib import Path

from hpo.spec._validation import FieldProblem, did_you_mean

# SQLAlchemy dialects that Optuna's RDBStorage supports.
_DIALECTS = ["sqlite", "postgresql", "mysql", "mariadb", "oracle", "mssql"]


def check_storage(value: str) -> None:
    """Reject an `optuna_storage` value that cannot work, without creating anything."""
    if "://" not in value:
        _check_journal_path(Path(value).expanduser())
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(value)
    except (ArgumentError, ValueError):  # ValueError: e.g. a port that is not a number
        raise FieldProblem("", f"not a database URL: {value!r}", "e.g. "
                           "sqlite:///optuna.db or postgresql://user@host/db") from None
    dialect = url.get_backend_name()
    if dialect not in _DIALECTS:
        raise FieldProblem("", f"unknown database '{dialect}' in {value!r}",
                           f"{did_you_mean(dialect, _DIALECTS)}; or give a file path for a "
                           "JournalStorage")
    if dialect == "sqlite" and not url.database:
        raise FieldProblem("", "an in-memory SQLite database keeps nothing",
                           "name a file: sqlite:///optuna.db")
    if dialect == "sqlite" and not Path(url.database).expanduser().parent.is_dir():
        raise FieldProblem("", f"folder {Path(url.database).parent} does not exist",
                           "create it, or point sqlite:/// at an existing folder")


def _check_journal_path(path: Path) -> None:
    if path.is_dir():
        raise FieldProblem("", f"{path} is a folder", "name a file, e.g. optuna-journal.log")
    if not path.parent.is_dir():
        raise FieldProblem("", f"folder {path.parent} does not exist",
                           "create it; the journal file itself is created on first use")
    if path.suffix in (".db", ".sqlite", ".sqlite3"):
        raise FieldProblem("", f"{path.name} looks like an SQLite file but was given as a "
                           "journal path", f"write sqlite:///{path} for SQLite, or use a "
                           ".log name for a JournalStorage (works on NFS/GPFS)")
