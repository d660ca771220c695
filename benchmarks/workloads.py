"""Synthetic trainables for benchmarks/overhead.py: one hpo version and one plain Ray Tune
version of each, doing exactly the same work.

The hpo versions report through `hpo.report` (as every hpo user's trainable does); the raw
versions call `ray.tune.report` directly. `hpo` is imported inside the hpo functions only, so
the raw Ray Tune workers never import it.

Config keys:
    sleep_s (1.0)   sleep_once: seconds to sleep before the single report
    rate (50)       stream: reports per second
    duration_s (20) stream: seconds of reporting (rate * duration_s reports in all)
    reports (5000)  burst: reports sent as fast as the driver takes them
"""

from __future__ import annotations

import time
from typing import Any


def _stream_plan(config: dict[str, Any]) -> tuple[int, float]:
    rate = float(config.get("rate", 50))
    duration = float(config.get("duration_s", 20))
    return int(round(rate * duration)), 1.0 / rate


def sleep_once(config: dict[str, Any]) -> None:
    """hpo: sleep, then report one result."""
    import hpo

    time.sleep(float(config.get("sleep_s", 1.0)))
    hpo.report({"score": 1.0})


def stream(config: dict[str, Any]) -> None:
    """hpo: report `rate` results per second for `duration_s` seconds (a fixed count of
    reports, each after sleeping 1/rate s, so any per-report cost adds to the wall time)."""
    import hpo

    count, pause = _stream_plan(config)
    for i in range(count):
        time.sleep(pause)
        hpo.report({"score": float(i)})


def burst(config: dict[str, Any]) -> None:
    """hpo: `reports` results without a pause, each with its wall time: the rate at which
    the driver takes results (a report blocks until the driver has taken it)."""
    import hpo

    for i in range(int(config.get("reports", 5000))):
        hpo.report({"score": float(i), "wall": time.time()})


def raw_sleep_once(config: dict[str, Any]) -> None:
    """Plain Ray Tune: the same as sleep_once."""
    from ray import tune

    time.sleep(float(config.get("sleep_s", 1.0)))
    tune.report({"score": 1.0})


def raw_stream(config: dict[str, Any]) -> None:
    """Plain Ray Tune: the same as stream."""
    from ray import tune

    count, pause = _stream_plan(config)
    for i in range(count):
        time.sleep(pause)
        tune.report({"score": float(i)})
