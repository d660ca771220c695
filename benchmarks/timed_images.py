"""`trainables.images:train` with the wall-clock time of each report added (`wall`), so a
benchmark can read when a run's first result came to the millisecond (Ray's own `timestamp`
has 1 s resolution). Used as a file trainable by benchmarks/startup_ab.py."""

from __future__ import annotations

import time
from typing import Any

import hpo
import trainables.images as images

_report = hpo.report


def _timed_report(metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    return _report({**metrics, "wall": time.time()}, *args, **kwargs)


def train(config: dict[str, Any]) -> None:
    images.hpo.report = _timed_report  # type: ignore[attr-defined]  # the module calls it
    images.train(config)
