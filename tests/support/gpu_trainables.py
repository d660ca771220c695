"""A trainable that records which GPUs Ray gave it (loaded by file path like a user's own).

Every process (a one-process trial, or each rank of a data-parallel one) writes one JSON
marker with its host, CUDA_VISIBLE_DEVICES and ray.get_gpu_ids(), then waits until `expect`
markers exist: the processes hold their GPUs at the same time, so distinct ids mean Ray
handed out distinct GPUs, not one GPU in turn. Nothing touches a GPU (there is none).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import ray

import hpo
from hpo import dist


def record_gpus(config: dict[str, Any]) -> None:
    markers = Path(config["marker_dir"])
    me = f"{socket.gethostname()}-{os.getpid()}"
    (markers / f".{me}").write_text(json.dumps({
        "host": socket.gethostname(), "rank": dist.rank(),
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "ray": [str(g) for g in ray.get_gpu_ids()]}))
    (markers / f".{me}").rename(markers / f"{me}.json")
    deadline = time.monotonic() + 120
    while len(list(markers.glob("*.json"))) < config["expect"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(list(markers.glob('*.json')))} markers")
        time.sleep(0.2)
    hpo.report({"score": 1.0})
