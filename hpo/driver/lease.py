"""One writer per experiment folder: an exclusive lease file with a heartbeat.

`hpo run`, `hpo resume` and a Slurm job hold `<exp_dir>/hpo.lease` while they write the folder.
It must work across the nodes of a parallel file system (GPFS, Lustre, NFS), where fcntl locks
may be node-local (Lustre's `localflock`) or missing, so the lease is a file created
exclusively: written whole under a unique name, then hard-linked to `hpo.lease` (link(2) fails
with EEXIST like O_EXCL, and a reader never sees a half-written lease). The holder touches it
every PERIOD_S seconds. A lease is taken over, with a warning, when its holder is provably
gone: a dead pid on this host, an older restart of the same Slurm job (a requeue), or no
heartbeat for 2 * period + CACHE_MARGIN_S (other nodes see a file's mtime through their
attribute cache; the margin also absorbs clock skew between nodes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from hpo.errors import LeaseError

LEASE_FILE = "hpo.lease"
PERIOD_S = 10.0
CACHE_MARGIN_S = 60.0  # NFS's default acregmax; Lustre and GPFS revalidate sooner

log = logging.getLogger("hpo.lease")
_held: dict[Path, int] = {}  # leases this process holds -> nesting depth (slurm.py + run())


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

    def describe(self) -> str:
        job = f", Slurm job {self.job_id} (restart {self.restart})" if self.job_id else ""
        return f"host {self.host}, pid {self.pid}{job}"


def _start_time(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return raw[raw.rindex(")") + 2:].split()[19]


def me(env: Mapping[str, str] = os.environ, period_s: float | None = None) -> Holder:
    """This process as a holder; the Slurm job and its restart count come from `env`."""
    pid = os.getpid()
    return Holder(socket.gethostname(), pid, _start_time(pid), env.get("SLURM_JOB_ID", ""),
                  int(env.get("SLURM_RESTART_COUNT", "0") or 0), period_s or PERIOD_S,
                  uuid.uuid4().hex)


def _pid_alive(holder: Holder) -> bool:
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return not holder.started or _start_time(holder.pid) == holder.started


def takeover_reason(holder: Holder, claimant: Holder, age_s: float,
                    margin_s: float = CACHE_MARGIN_S) -> str | None:
    """Why `claimant` may take the lease from `holder` (last heartbeat `age_s` ago), or None
    while the holder may still be writing."""
    if holder.host == claimant.host and not _pid_alive(holder):
        return f"its process {holder.pid} on {holder.host} is gone"
    if holder.job_id and holder.job_id == claimant.job_id and holder.restart < claimant.restart:
        return f"Slurm requeued job {holder.job_id} (restart {claimant.restart})"
    limit = 2 * holder.period_s + margin_s
    if age_s > limit:
        return f"no heartbeat for {age_s:.0f} s (more than {limit:.0f} s)"
    return None


def _read(path: Path) -> tuple[Holder, float] | None:
    """The lease's holder and the seconds since its last heartbeat; None if it is gone."""
    try:
        text, age = path.read_text(), max(time.time() - path.stat().st_mtime, 0.0)
    except FileNotFoundError:
        return None
    try:
        return Holder(**json.loads(text)), age
    except (ValueError, TypeError) as exc:  # not ours, or damaged: judged by its age alone
        return Holder("?", -1, "", "", 0, PERIOD_S, f"unreadable: {exc}"), age


def _create(path: Path, holder: Holder) -> bool:
    """Create the lease exclusively with its whole content; False when it already exists."""
    tmp = path.with_name(f".{LEASE_FILE}.{holder.token}")
    tmp.write_text(json.dumps(asdict(holder)))
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # NFS may report a link that was made (the reply was lost)
        return tmp.stat().st_nlink == 2
    finally:
        tmp.unlink()


def _take_over(path: Path, stale: Holder, claimant: Holder) -> bool:
    """Move the stale lease aside and create ours. Two claimants may judge the same lease
    stale: only one rename succeeds, and whoever moved a fresh lease aside puts it back."""
    aside = path.with_name(f".{LEASE_FILE}.stale.{claimant.token}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    moved = _read(aside)
    if moved is not None and moved[0].token != stale.token:  # a newer holder's: give it back
        with contextlib.suppress(OSError):
            os.link(aside, path)
        aside.unlink()
        return False
    aside.unlink()
    return _create(path, claimant)


def _refusal(exp_dir: Path, holder: Holder, age_s: float, action: str) -> LeaseError:
    limit = 2 * holder.period_s + CACHE_MARGIN_S
    again = f"`hpo resume {exp_dir}`" if action == "resume" else "it"
    return LeaseError(
        f"{exp_dir}: in use by another hpo run ({holder.describe()}; heartbeat {age_s:.0f} s "
        f"ago). Hint: wait for it to end, then {again} again; --name starts a separate "
        f"experiment. If that run is gone, its lease is taken over after {limit:.0f} s "
        f"without heartbeat (or delete {exp_dir / LEASE_FILE})")


def _make_dirs(exp_dir: Path) -> list[Path]:
    """mkdir -p, returning the folders made here (innermost first), to be removed again if
    the run stops before writing anything (mkdir is atomic; the lease decides who writes)."""
    made = [p for p in (exp_dir, *exp_dir.parents) if not p.exists()]
    exp_dir.mkdir(parents=True, exist_ok=True)
    return made


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (the run wrote something), or gone: leave it
            return


def acquire(exp_dir: Path, claimant: Holder, action: str = "run", tries: int = 5) -> None:
    """Take `exp_dir`'s lease (the folder must exist), or raise LeaseError."""
    path = exp_dir / LEASE_FILE
    for _ in range(tries):  # each round loses only to a lease that changed meanwhile
        if _create(path, claimant):
            return
        found = _read(path)
        if found is None:
            continue
        holder, age = found
        reason = takeover_reason(holder, claimant, age)
        if reason is None:
            raise _refusal(exp_dir, holder, age, action)
        if _take_over(path, holder, claimant):
            log.warning("warning: %s: took over the lease of %s: %s", exp_dir,
                        holder.describe(), reason)
            return
    raise LeaseError(f"{exp_dir}: could not take the experiment's lease ({path} changed "
                     f"{tries} times). Hint: another run is starting here; try again")


def release(exp_dir: Path, claimant: Holder) -> None:
    """Remove the lease if it is still ours (a takeover may have replaced it)."""
    path = exp_dir / LEASE_FILE
    found = _read(path)
    if found is not None and found[0].token == claimant.token:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _heartbeat(path: Path, claimant: Holder, stop: threading.Event) -> None:
    """Touch the lease every period; say once if another process took it over."""
    warned = False
    while not stop.wait(claimant.period_s):
        found = _read(path)
        if found is None or found[0].token != claimant.token:
            if not warned:
                log.error("%s: this run's lease was taken over by another process", path)
                warned = True
            continue
        with contextlib.suppress(OSError):  # a full disk still allows utime; a lost mount not
            os.utime(path)


@contextlib.contextmanager
def experiment_lease(exp_dir: Path, action: str = "run",
                     env: Mapping[str, str] = os.environ) -> Iterator[None]:
    """Hold `exp_dir`'s lease for the block; nested use in one process shares it."""
    exp_dir = Path(exp_dir)
    if exp_dir in _held:
        _held[exp_dir] += 1
        try:
            yield
        finally:
            _held[exp_dir] -= 1
        return
    claimant = me(env)
    made = _make_dirs(exp_dir)
    try:
        acquire(exp_dir, claimant, action)
    except BaseException:
        _remove_empty(made)
        raise
    _held[exp_dir] = 1
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(exp_dir / LEASE_FILE, claimant, stop),
                            name="hpo-lease", daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        del _held[exp_dir]
        release(exp_dir, claimant)
        _remove_empty(made)
