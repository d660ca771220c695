"""A trainable whose import stops the run: the driver imports it while Ray starts (in a
thread beside `ray.init`), so the stop lands inside Ray's start, every time."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import hpo

if os.getpid() == int(os.environ.get("HPO_TEST_STOP_DRIVER_AT_IMPORT", "0")):
    os.kill(os.getpid(), signal.SIGINT)


def steady(config: dict[str, Any]) -> None:
    for step in range(1, 4):
        time.sleep(0.2)
        hpo.report({"score": config["x"] * step})
