"""A partition's limits as Slurm itself states them (`scontrol show partition --oneliner`):
what `hpo slurm render/submit` checks a job against where Slurm is reachable, for the
partitions no site profile lists. A job over them would be accepted and pend forever.

Parsing is pure (`parse_partitions`, `over_limits`); `read_partition` asks Slurm, and says
nothing (None) where there is no Slurm to ask.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from hpo.spec.slurm import time_seconds

_UNLIMITED = {"UNLIMITED", "INFINITE", "NONE", "N/A"}


@dataclass(frozen=True)
class Partition:
    """The limits of one partition that a job's shape can exceed."""

    name: str
    default: bool = False
    max_time: str | None = None  # as Slurm writes it; None: unlimited
    max_nodes: int | None = None  # the most nodes a job may have there; None: unlimited

    @property
    def max_time_s(self) -> int | None:
        try:
            return None if self.max_time is None else time_seconds(self.max_time)
        except ValueError:  # a form this parser does not read: not checked
            return None


def _count(value: str | None) -> int | None:
    if value is None or value.upper() in _UNLIMITED or not value.isdigit():
        return None
    return int(value)


def _partition(fields: dict[str, str]) -> Partition:
    # a job can have at most MaxNodes nodes, and never more than the partition has
    counts = [n for n in (_count(fields.get("MaxNodes")), _count(fields.get("TotalNodes")))
              if n is not None]
    max_time = fields.get("MaxTime")
    return Partition(fields["PartitionName"], fields.get("Default") == "YES",
                     None if max_time is None or max_time.upper() in _UNLIMITED else max_time,
                     min(counts) if counts else None)


def parse_partitions(text: str) -> dict[str, Partition]:
    """Each `PartitionName=...` line of `scontrol show partition --oneliner`, by name."""
    found = {}
    for line in text.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "PartitionName" in fields:
            found[fields["PartitionName"]] = _partition(fields)
    return found


def chosen(partitions: dict[str, Partition], name: str | None) -> Partition | None:
    """The partition a job lands in: the one named, else the default one."""
    if name is not None:
        return partitions.get(name)
    return next((p for p in partitions.values() if p.default), None)


def over_limits(partition: Partition, time: str, nodes: int) -> list[tuple[str, str, str]]:
    """What of (time, nodes) the partition refuses: (key, problem, hint) each."""
    found = []
    limit = partition.max_time_s
    if limit is not None and time_seconds(time) > limit:
        found.append(("time", f"{time} is over partition {partition.name}'s MaxTime of "
                      f"{partition.max_time} (scontrol show partition): the job would pend "
                      "forever", f"ask for at most {partition.max_time}"))
    if partition.max_nodes is not None and nodes > partition.max_nodes:
        found.append(("nodes", f"{nodes} nodes, but a job in partition {partition.name} can "
                      f"have at most {partition.max_nodes} (scontrol show partition: MaxNodes, "
                      "TotalNodes): it would pend forever", f"ask for at most "
                      f"{partition.max_nodes}, or another partition (--partition)"))
    return found


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def read_partition(name: str | None, run: Runner = subprocess.run) -> Partition | None:
    """The partition a job named `name` (None: the default) lands in, as Slurm states it;
    None where Slurm cannot be asked or does not know it (sbatch then says so itself)."""
    if shutil.which("scontrol") is None:
        return None
    try:
        done = run(["scontrol", "show", "partition", "--oneliner", *([name] if name else [])],
                   capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode:
        return None
    return chosen(parse_partitions(done.stdout), name)
