"""Opening the `optuna_storage:` of a spec (checked by hpo.spec.storage when it was read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def open_storage(value: str) -> Any:
    """Optuna's storage for a journal file path or an RDB URL."""
    import optuna

    if "://" in value:
        return optuna.storages.RDBStorage(value)
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    return JournalStorage(JournalFileBackend(str(Path(value).expanduser().resolve())))
