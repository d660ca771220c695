"""What each patch's check found in the Ray installed, kept on disk between processes.

The checks read Ray's source and import the Tune modules they look at: about 1.3 CPU-s in a
fresh process, paid before a run's Ray starts and again in every trial worker. Their answer
changes only with Ray's install, hpo's adapters or Python, so it is kept under
$XDG_CACHE_HOME/hpo (~/.cache/hpo), keyed by all three; a new Ray or a changed adapter is
checked afresh. HPO_RAY_CHECKS_CACHE=off checks in every process and keeps nothing.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

CACHE_SWITCH = "HPO_RAY_CHECKS_CACHE"
ADAPTERS = Path(__file__).resolve().parent


def run_check(check: str) -> tuple[str, ...]:
    """The gaps a check ("module:function") finds; a check that cannot even look is a gap."""
    module, _, function = check.partition(":")
    try:
        found: Callable[[], list[str]] = getattr(importlib.import_module(module), function)
        return tuple(found())
    except Exception as exc:  # the patch cannot apply
        return (f"{check} failed: {type(exc).__name__}: {exc}",)


def gaps(check: str) -> tuple[str, ...]:
    """The gaps of one check: as kept on disk, else found now."""
    kept = _kept()
    return tuple(kept[check]) if check in kept else run_check(check)


def keep_all(checks: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Every check's gaps (kept ones as kept), written to disk where any was missing."""
    kept = _kept()
    found = {check: tuple(kept[check]) if check in kept else run_check(check)
             for check in dict.fromkeys(checks)}
    if set(found) - set(kept) and (path := cache_file()) is not None:
        _write(path, {check: list(said) for check, said in found.items()})
        _kept.cache_clear()
    return found


def cache_file() -> Path | None:
    """Where the checks of this Ray, these adapters and this Python are kept (None: off)."""
    if os.environ.get(CACHE_SWITCH, "on") == "off":
        return None
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hpo"
    return root / f"ray-checks-{_key()}.json"


@functools.cache
def _key() -> str:
    digest = hashlib.sha256(sys.version.encode())
    spec = importlib.util.find_spec("ray")  # no import of Ray: its files' place and times
    if spec is not None and spec.origin:
        ray_init = Path(spec.origin).stat()
        digest.update(f"{spec.origin} {ray_init.st_mtime_ns} {ray_init.st_size}".encode())
    for source in sorted(ADAPTERS.rglob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:20]


@functools.cache
def _kept() -> dict[str, list[str]]:
    path = cache_file()
    try:
        found = json.loads(path.read_text()) if path is not None else {}
    except (OSError, ValueError):  # none yet, or cut short: checked afresh
        return {}
    return found if isinstance(found, dict) else {}


def _write(path: Path, found: dict[str, list[str]]) -> None:
    """Whole or not at all (a temporary file renamed); a folder that cannot be written
    keeps nothing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, staged = tempfile.mkstemp(dir=path.parent, prefix=".ray-checks-")
        with os.fdopen(fd, "w") as file:
            json.dump(found, file)
        os.replace(staged, path)
    except OSError:
        return


def forget() -> None:
    """Read the disk again at the next look (tests; a new cache folder)."""
    _kept.cache_clear()
    _key.cache_clear()
