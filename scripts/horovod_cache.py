"""The built-wheel cache: HPO_WHEEL_CACHE/<key>/horovod-*.whl (default ~/.cache/hpo/wheels).

A key's folder appears whole or not at all: the wheel is copied into a temporary folder beside
it and the folder renamed into place, which is atomic on one file system (shared ones
included). When two jobs publish the same key at once, the first rename wins and the second
job uses that wheel; readers never see a half-written one.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path


def cache_root() -> Path:
    configured = os.environ.get("HPO_WHEEL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "hpo" / "wheels"


def lookup(root: Path, key: str) -> Path | None:
    wheels = sorted((root / key).glob("horovod-*.whl"))
    return wheels[0] if wheels else None


def publish(root: Path, key: str, wheel: Path) -> Path:
    """Put `wheel` into the cache under `key`; returns the cached wheel (maybe another job's)."""
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        shutil.copyfile(wheel, staging / wheel.name)
        staging.chmod(0o755)  # mkdtemp makes it private; a shared cache serves other users
        try:
            os.rename(staging, root / key)
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    cached = lookup(root, key)
    if cached is None:
        raise RuntimeError(f"{root / key} exists without a Horovod wheel: remove that folder")
    return cached


def discard(root: Path, key: str) -> None:
    """Remove a key's folder (a rebuild): renamed away first, so no reader sees it half gone."""
    trash = root / f".{key}.old.{os.getpid()}"
    try:
        os.rename(root / key, trash)
    except OSError:  # none there, or a read-only cache: publishing will say so
        return
    shutil.rmtree(trash, ignore_errors=True)


def entries(root: Path) -> list[Path]:
    """The published key folders (temporary ones start with a dot)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
