"""Where the CPU of one `hpo run` goes, by process, in its start, its ramp and after: a
diagnostic for benchmarks/overhead_peers.py (the same workloads, run by peer_runs.py), not a
benchmark of its own.

Every process's CPU (utime + stime from /proc) is read every --every-s seconds while the run
runs, each process named by its class (driver, fork server, forks, stubs, raylet, GCS, Ray's
dashboard and runtime-env agents, a warm Ray's `ray start`, this sampler, other), looked at
again on its next readings (one first seen between its fork and its exec shows its parent's
command). The windows come from the trials' own clocks: "start" is the launch to the first
trial's first step, "ramp" from there to the first step of the workers-th trial, "after" the
rest. Every process counts ("other": the machine's own, kernel threads included; a warm
Ray's, started before the run, by their class). A process gone before a window's end has its
CPU counted up to its last reading; the reading itself costs CPU (all of /proc each time), so
the walls here run longer than overhead_peers.py's.

    python benchmarks/cpu_by_process.py --workload util32
    python benchmarks/cpu_by_process.py --workload scale64 --tool hpo-warm
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.overhead_peers import WORKLOADS, peer_run, warm_ray  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
Reading = tuple[float, dict[int, float]]  # when, each process's CPU seconds so far


def process_class(pid: int, parent_class: str | None) -> str | None:
    """What a process is, from its command line (None: gone already)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    classes = [(parent_class in ("fork server", "forks"), "forks"),  # also once renamed
               ("gcs_server" in name, "GCS"), (name == "raylet", "raylet"),
               ("worker_stub" in command, "stubs"),
               ("fork_server_process" in command, "fork server"),
               # by their script, then by the title each gives itself once started
               ("dashboard" in command.lower(), "dashboard agent"),
               ("runtime_env" in command or "RuntimeEnvAgent" in command, "runtime-env agent"),
               ("ray::" in command or "default_worker" in command, "workers (Ray's own)"),
               (" -m hpo run" in command or "peer_runs.py" in command, "driver"),
               ("warm_head" in command or "node_start" in command, "ray start")]
    return next((label for hit, label in classes if hit), "other")


LOOKS = 3  # a process first seen between its fork and its exec is named by its parent's line


def read_all(classes: dict[int, str | None], looks: collections.Counter[int]
             ) -> dict[int, float]:
    cpu = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if classes.get(pid) is None or looks[pid] < LOOKS:
            looks[pid] += 1
            classes[pid] = process_class(pid, classes.get(int(fields[1]))) or classes.get(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / TICK
    return cpu


def sampled(cmd: list[str], env: dict[str, str], every_s: float
            ) -> tuple[float, float, list[Reading], dict[int, str | None]]:
    """Run cmd, reading every process's CPU meanwhile: its start, end, readings, classes."""
    classes: dict[int, str | None] = {os.getpid(): "this sampler"}
    looks: collections.Counter[int] = collections.Counter({os.getpid(): LOOKS})
    start = time.time()
    readings: list[Reading] = [(start, read_all(classes, looks))]  # what each had before
    with subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) as proc:
        while proc.poll() is None:
            readings.append((time.time(), read_all(classes, looks)))
            time.sleep(every_s)
    end = time.time()
    if proc.returncode:
        raise SystemExit(f"the run failed (exit {proc.returncode}); its output: {cmd}")
    return start, end, readings, classes


def in_window(readings: list[Reading], classes: dict[int, str | None], since: float,
              until: float) -> collections.Counter[str]:
    """CPU seconds of each class between two instants (each process's last reading in it)."""
    before = {pid: cpu for when, cpus in readings if when <= since for pid, cpu in cpus.items()}
    last = {pid: cpu for when, cpus in readings if when <= until for pid, cpu in cpus.items()}
    used: collections.Counter[str] = collections.Counter()
    for pid, cpu in last.items():
        label = classes.get(pid)
        if label is not None:
            used[label] += cpu - before.get(pid, 0.0)
    return used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=[w for w in WORKLOADS if w != "throughput"],
                        default="util32")
    parser.add_argument("--tool", choices=["hpo", "hpo-warm"], default="hpo")
    parser.add_argument("--every-s", type=float, default=0.02)
    args = parser.parse_args()
    trials, _, _, workers = WORKLOADS[args.workload]
    with tempfile.TemporaryDirectory(prefix="cpu-by-process-") as work:
        cmd, env, spans = peer_run(sys.executable, args.tool, args.workload, Path(work))
        with warm_ray(args.tool, sys.executable, workers, env):
            start, end, readings, classes = sampled(cmd, env, args.every_s)
        firsts = sorted(json.loads(line)["first"] for line in spans.read_text().splitlines())
    edges = [start, firsts[0], firsts[min(workers, trials) - 1], end]
    print(f"{args.tool} {args.workload}: start {edges[1] - start:.2f} s, ramp "
          f"{edges[2] - edges[1]:.2f} s, wall {end - start:.2f} s")
    for name, since, until in zip(("start", "ramp", "after"), edges, edges[1:], strict=False):
        used = in_window(readings, classes, since, until)
        print(f"  {name}: {until - since:.2f} s, {sum(used.values()):.2f} CPU-s: " + ", ".join(
            f"{label} {cpu:.2f}" for label, cpu in used.most_common()))


if __name__ == "__main__":
    main()
