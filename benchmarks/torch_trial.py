"""The peers' trial (benchmarks/trials.py:hpo_trial) with torch imported with its module and
used, as a model's trainable does: `python -m benchmarks slurm --mode forks --trainables
torch`. A fresh worker imports torch before its first step; a node's fork server, told so by
the trainable's module, imports it once for its forks. (benchmarks/trials.py imports only the
standard library at its top, so that no torch is preloaded for the plain trials.)"""

from __future__ import annotations

import json
import time
from typing import Any

import torch

import hpo


def hpo_torch_trial(config: dict[str, Any]) -> None:
    """`steps` steps that sleep and report; at its end, its span appended to config["spans"]."""
    torch.manual_seed(0)
    first = time.time()
    for step in range(1, int(config["steps"]) + 1):
        time.sleep(float(config["sleep_s"]))
        hpo.report({"score": float(config["x"]) * step})
    span = {"first": first, "last": time.time(), "steps": int(config["steps"])}
    with open(config["spans"], "a") as spans:
        spans.write(json.dumps(span) + "\n")
