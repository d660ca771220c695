"""The lease's record and its holder (hpo.driver.guards.lease): who holds a lease, the record
written for it, and whether a claimant may take it from its holder at once.

At once means without watching the record for a heartbeat: the holder's process is gone from
this host, its Slurm job was requeued (a later restart claims), or Slurm says its job has
ended (squeue, else sacct): a site whose cgroups killed the driver leaves a lease on another
host that no process holds any more, and a resubmitted job must not wait out its stale time.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from hpo.cluster.slurm_env import lookup, restart_count
from hpo.driver.guards.slurm_job import job_ended

LEASE_FILE = "hpo.lease"
PERIOD_S = 10.0
PERIOD_ENV = "HPO_LEASE_PERIOD_S"  # a shorter heartbeat, for tests
CACHE_MARGIN_S = 60.0  # NFS's default acdirmax; Lustre and GPFS revalidate sooner
_SIZE = 1024  # every record is padded to this length, so a beat rewrites it whole in place


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: enough to tell whether it is still alive, and to name it."""

    host: str
    pid: int
    started: str  # the pid's start time in clock ticks: a reused pid is not the holder
    job_id: str
    restart: int
    period_s: float
    token: str
    cluster: str = ""  # SLURM_CLUSTER_NAME: a job id means a job only on its own cluster

    def describe(self) -> str:
        job = f", Slurm job {self.job_id} (restart {self.restart})" if self.job_id else ""
        return f"host {self.host}, pid {self.pid}{job}"

    def stale_s(self) -> float:
        """How long its record must stay unchanged before a claimant takes the lease."""
        return 2 * self.period_s + CACHE_MARGIN_S


@dataclass(frozen=True)
class _Seen:
    raw: bytes  # compared whole: any change (even a torn read) counts as a sign of life
    holder: Holder


def _record(holder: Holder, beat: int) -> bytes:
    return json.dumps({**asdict(holder), "beat": beat}).encode().ljust(_SIZE - 1) + b"\n"


def _parse(raw: bytes) -> _Seen:
    try:
        data = json.loads(raw)
        data.pop("beat")
        return _Seen(raw, Holder(**data))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # not ours, or damaged
        return _Seen(raw, Holder("?", -1, "", "", 0, PERIOD_S, f"unreadable: {exc}"))


def _read(path: Path) -> _Seen | None:
    """The lease as it is now (open() revalidates NFS's cache); None if there is none."""
    try:
        return _parse(path.read_bytes())
    except FileNotFoundError:
        return None


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after its name (the state first); [] if none."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return raw[raw.rindex(")") + 2:].split()


def me(env: Mapping[str, str] = os.environ, period_s: float | None = None) -> Holder:
    """This process as a holder; the Slurm job and its restart count come from `env`."""
    pid = os.getpid()
    fields = _stat(pid)
    return Holder(socket.gethostname(), pid, fields[19] if fields else "",
                  lookup(env, "job_id") or "", restart_count(env),
                  period_s or float(env.get(PERIOD_ENV) or PERIOD_S), uuid.uuid4().hex,
                  env.get("SLURM_CLUSTER_NAME", "") if lookup(env, "job_id") else "")


def _pid_alive(holder: Holder) -> bool:
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    fields = _stat(holder.pid)
    if fields[:1] in (["Z"], ["X"]):  # ended, not reaped (a container's pid 1 may never reap)
        return False
    return not holder.started or fields[19:20] == [holder.started]


def takeover_reason(holder: Holder, claimant: Holder,
                    ended: Callable[[str], str | None] = job_ended) -> str | None:
    """Why `claimant` may take the lease from `holder` at once, without watching it.
    `ended(job_id)`: how Slurm says the job ended (None: running, or Slurm cannot say)."""
    if holder.pid > 0 and holder.host == claimant.host and not _pid_alive(holder):
        return f"its process {holder.pid} on {holder.host} is gone"
    if holder.job_id and holder.job_id == claimant.job_id and holder.restart < claimant.restart:
        return f"Slurm requeued job {holder.job_id} (restart {claimant.restart})"
    return slurm_reason(holder, claimant, ended)


def slurm_reason(holder: Holder, claimant: Holder,
                 ended: Callable[[str], str | None] = job_ended) -> str | None:
    """`holder`'s Slurm job (another than the claimant's) has ended, as Slurm says."""
    if not holder.job_id or holder.job_id == claimant.job_id or not holder.cluster or (
            holder.cluster != claimant.cluster):  # sites that share a file system
        return None
    said = ended(holder.job_id)
    return None if said is None else f"its Slurm job {holder.job_id} has ended ({said})"


def running_here(holder: Holder, claimant: Holder) -> bool:
    """Its process runs on this host, so it beats (a stopped one is watched like any other)."""
    return (holder.pid > 0 and holder.host == claimant.host and _pid_alive(holder)
            and _stat(holder.pid)[:1] not in (["T"], ["t"]))
