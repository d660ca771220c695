"""The built-wheel cache: HPO_WHEEL_CACHE/<key>/horovod-*.whl (default ~/.cache/hpo/wheels).

A key's folder appears whole or not at all: the wheel is copied into a temporary folder beside
it and the folder renamed into place, which is atomic on one file system (shared ones
included). When two jobs publish the same key at once, the first rename wins and the second
job uses that wheel; readers never see a half-written one. A wheelhouse (DIR/horovod/, for
offline nodes) has the same layout.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from pathlib import Path

# The compiler part of a key (plan.cache_key): "...-cp312-gcc12.2.0-x86_64-r2".
_COMPILER = re.compile(r"-(gcc|clang)(\d+)[\w.+]*-(?=[^-]+-r\d+$)")


def cache_root() -> Path:
    configured = os.environ.get("HPO_WHEEL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "hpo" / "wheels"


def lookup(root: Path, key: str) -> Path | None:
    wheels = sorted((root / key).glob("horovod-*.whl"))
    return wheels[0] if wheels else None


def lookup_compatible(root: Path, key: str) -> Path | None:
    """The wheel of `key`, else one built alike by an older compiler of the same family.

    A wheel built with GCC 12 runs where GCC 13's libstdc++ is (the library stays backward
    compatible), so an offline node with a newer compiler can use a login node's wheel.
    """
    exact = lookup(root, key)
    mine = _COMPILER.search(key)
    if exact or not mine:
        return exact
    found = []
    for entry in entries(root):
        theirs = _COMPILER.search(entry.name)
        if theirs and theirs[1] == mine[1] and int(theirs[2]) <= int(mine[2]) and \
                _COMPILER.sub("-", entry.name) == _COMPILER.sub("-", key):
            found.append((int(theirs[2]), entry.name))
    return lookup(root, max(found)[1]) if found else None


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
