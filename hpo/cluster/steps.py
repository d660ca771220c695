"""The srun steps hpo starts (each node's Ray), natively or from inside a container.

Natively a step is a child process. Inside a container (`slurm.container`) there is no srun:
the batch script on the host runs a small helper (host-steps.sh, next to this module) that
starts each step hpo asks for with the host's srun, each step's command wrapped in the same
container (`HPO_CONTAINER`: `<runtime> exec [options] <image>`). A step is then watched
through the files the helper writes: its pid (same PID namespace: Apptainer shares the
host's unless `--pid` is given) and its exit status.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from hpo.errors import SlurmEnvironmentError

HOST_STEPS = "HPO_HOST_STEPS"  # the helper's folder, exported by the batch script
CONTAINER = "HPO_CONTAINER"  # the words before a command that runs it in the job's container
_PID_WAIT_S = 30.0
_numbers = itertools.count()


class Step(Protocol):
    """What hpo asks of a running step (subprocess.Popen has it)."""

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class HostStep:
    """A step the host's helper started: watched by its files, ended by its pid."""

    def __init__(self, folder: Path, number: int) -> None:
        self.folder, self.number = folder, number
        self._rc: int | None = None

    def poll(self) -> int | None:
        if self._rc is None:
            rc = self.folder / f"{self.number}.rc"
            if rc.exists():
                self._rc = int(rc.read_text().strip() or 1)
        return self._rc

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"step {self.number}", timeout or 0)
            time.sleep(0.05)
        return code

    def kill(self) -> None:
        pid = self._pid()
        if pid is not None and self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _pid(self) -> int | None:
        path = self.folder / f"{self.number}.pid"
        deadline = time.monotonic() + _PID_WAIT_S
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return int(path.read_text()) if path.exists() else None


def start_step(srun: Sequence[str], env: Mapping[str, str] = os.environ) -> Step:
    """Start one `srun ...` step: here, or through the host's helper inside a container."""
    folder = env.get(HOST_STEPS)
    if folder:
        return _ask_host(Path(folder), list(srun))
    if shutil.which(srun[0]) is None:
        raise SlurmEnvironmentError(
            f"{srun[0]} not found: hpo runs where Slurm's commands are not (a container "
            "started by hand?). Hint: start hpo from the batch script `hpo slurm render` "
            "writes with slurm.container (its host-side helper starts the steps)")
    return subprocess.Popen(list(srun), stdin=subprocess.DEVNULL)


def _ask_host(folder: Path, srun: list[str]) -> HostStep:
    number = next(_numbers) + os.getpid() * 1000  # unique per asking process
    staged = folder / f"{number}.args.new"
    staged.write_bytes(b"".join(word.encode() + b"\0" for word in srun))
    staged.rename(folder / f"{number}.args")
    fd = _requests(folder / "requests")
    try:
        os.write(fd, f"{number}\n".encode())  # one short write to a pipe: never interleaved
    except OSError as exc:
        raise SlurmEnvironmentError(f"the batch script's step helper did not take a step "
                                    f"({exc.strerror}). Hint: see the job's output") from None
    finally:
        os.close(fd)
    return HostStep(folder, number)


def _requests(pipe: Path, wait_s: float = 30.0) -> int:
    """The helper's requests pipe, open for writing once the helper reads it: it starts in
    the background just before hpo does, and a pipe without its reader refuses (ENXIO)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() >= deadline:
                raise SlurmEnvironmentError(
                    f"the batch script's step helper is not reading {pipe} ({exc.strerror}). "
                    "Hint: see the job's output") from None
            time.sleep(0.02)


def container_words(env: Mapping[str, str] = os.environ) -> list[str]:
    """`<runtime> exec [options] <image>` where the job runs in a container, else nothing:
    the words before the command a step runs."""
    return shlex.split(env.get(CONTAINER, ""))
