"""Small trainables for the tests, loaded by file path
(`tests/support/study_trainables.py:NAME`)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from ray import tune

import hpo


def steady(config: dict[str, Any]) -> None:
    """Deterministic score x * step, `sleep` s per step, resumable from its checkpoint."""
    state = hpo.get_checkpoint()
    start = state["step"] + 1 if state else 1
    for step in range(start, config["steps"] + 1):
        time.sleep(config["sleep"])
        print(f"step {step}", flush=True)
        hpo.report({"score": config["x"] * step, "resumed_at": start},
                   checkpoint={"step": step})


def steady_forked(config: dict[str, Any]) -> None:
    """Score x * step, `sleep` s per step, each report also saying whether its worker was
    forked by hpo's fork server."""
    forked = _forked()
    for step in range(1, config["steps"] + 1):
        time.sleep(config["sleep"])
        hpo.report({"score": config["x"] * step, "forked": forked})


def chatty(config: dict[str, Any]) -> None:
    """Prints to stdout and stderr, writes a file into its working directory, and prints a
    last line without flushing after its last report."""
    print(f"stdout of trial x={config['x']}", flush=True)
    print(f"stderr of trial x={config['x']}", file=sys.stderr, flush=True)
    Path("artifact.txt").write_text(f"x={config['x']}")
    for step in range(1, config["steps"] + 1):
        hpo.report({"score": config["x"] * step})
    print(f"done x={config['x']}")


def wrong_metric(config: dict[str, Any]) -> None:
    """Reports something, but never the metric the experiment asks for."""
    for step in range(3):
        hpo.report({"not_the_metric": step})


def silent(config: dict[str, Any]) -> None:
    """Returns without reporting anything."""


def crashes(config: dict[str, Any]) -> None:
    """Reports once, prints a line without flushing it, then fails."""
    hpo.report({"score": 1.0})
    print("about to fail")
    raise RuntimeError("boom in the trainable")


def placed(config: dict[str, Any]) -> None:
    """Reports where it runs: the CPUs it may use (its affinity mask), its GPUs (Ray's
    CUDA_VISIBLE_DEVICES), the Python running it and the site variables it sees
    (CXI_FORK_SAFE); `sleep` s per step."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    for step in range(1, config["steps"] + 1):
        time.sleep(config["sleep"])
        hpo.report({"score": config["x"] * step, "cpus": len(cpus),
                    "cpu_list": ",".join(map(str, cpus)),
                    "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                    "python": sys.executable,
                    "cxi_fork_safe": os.environ.get("CXI_FORK_SAFE", "unset")})


def contained(config: dict[str, Any]) -> None:
    """Reports what a process in the job's container sees: srun (absent in an image), a
    host path that is not bound (`host_only`), and the variables set for the inside only
    (FI_MR_CACHE_MONITOR) and for the job (CXI_FORK_SAFE)."""
    import os
    import shutil

    time.sleep(config["sleep"])
    hpo.report({"score": config["x"], "srun": shutil.which("srun") or "none",
                "host_only": os.path.exists(config["host_only"]),
                "fi_mr_cache_monitor": os.environ.get("FI_MR_CACHE_MONITOR", "unset"),
                "cxi_fork_safe": os.environ.get("CXI_FORK_SAFE", "unset")})


def timed(config: dict[str, Any]) -> None:
    """Reports when it started and, at each step, the time now: trials that ran at once
    overlap in these intervals."""
    started = time.time()
    for step in range(1, config["steps"] + 1):
        time.sleep(config["sleep"])
        hpo.report({"score": config["x"] * step, "started": started, "now": time.time()})


def misnamed_metric(config: dict[str, Any]) -> None:
    """Reports `scor` (a typo of the experiment's metric `score`) and `loss`."""
    for step in range(3):
        hpo.report({"scor": step, "loss": 1.0 / (step + 1)})


def _forked() -> bool:
    """Whether this worker was forked by hpo's fork server
    (hpo.ray_adapters.fast_start.fork_server)."""
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return "fork_server_process" in parent


def parent_process(config: dict[str, Any]) -> None:
    """Reports whether its worker was forked by hpo's fork server, whether it leads a process
    group of its own (as Ray starts its workers), and Tune's PL_DISABLE_FORK."""
    hpo.report({"score": 1.0, "forked": _forked(),
                "own_group": os.getpgid(0) == os.getpid(),
                "pl_disable_fork": os.environ.get("PL_DISABLE_FORK")})


def environment(config: dict[str, Any]) -> None:
    """Writes what its worker sees of Tune's env_vars and its actor's runtime env to
    config["out"]."""
    import json

    import ray

    seen = {"PL_DISABLE_FORK": os.environ.get("PL_DISABLE_FORK"),
            "runtime_env": dict(ray.get_runtime_context().runtime_env)}
    Path(config["out"]).write_text(json.dumps(seen))
    hpo.report({"score": 1.0})


def sees_ended_trials(config: dict[str, Any]) -> None:
    """x == 0 reports `steps` rows and ends; any other waits up to `wait_s` for a trial folder
    in the experiment folder `exp_dir` whose result.json holds x == 0's rows, and reports
    whether it came."""
    import json

    if config["x"] == 0:
        for step in range(int(config["steps"])):
            hpo.report({"score": float(step), "seen": True})
        return
    deadline, seen = time.monotonic() + float(config["wait_s"]), False
    while not seen and time.monotonic() < deadline:
        for results in Path(config["exp_dir"]).glob("*/result.json"):
            rows = [json.loads(line) for line in results.read_text().splitlines()]
            seen = seen or (len(rows) == int(config["steps"]) and rows[0]["config"]["x"] == 0)
        time.sleep(0.05)
    hpo.report({"score": 1.0, "seen": seen})


def text_metric(config: dict[str, Any]) -> None:
    """Reports its metric as a str, as read from a log line."""
    hpo.report({"score": "0.17"})



class TextMetricClass(tune.Trainable):
    """`text_metric` as a Ray Tune class: its results bypass hpo.report."""

    def step(self) -> dict[str, Any]:
        return {"score": "0.17", "done": True}

    def save_checkpoint(self, checkpoint_dir: str) -> None:  # Tune saves a class's own
        pass

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        pass
