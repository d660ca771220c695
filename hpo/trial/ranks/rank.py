"""What runs on each rank: the backend initialised, hpo.report wired to the trial, the trainable;
afterwards the backend shut down and the process made ready for the next trial (RankEnd)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import ray

from hpo.trial import dist, placement, session
from hpo.trial.ranks import blame, fresh
from hpo.trial.ranks.channel import Files, pack_folder, unpack_folder


class TrialStopped(BaseException):
    """Tune stopped the trial: raised on rank 0 from `hpo.report`, past `except Exception`."""


@dataclass(frozen=True)
class RankEnd:
    """How a rank's part of a trial ended: whether its process may serve the next trial."""

    pid: int
    stopped: bool  # Tune stopped the trial before the trainable returned
    backend_down: bool  # the backend was shut down (ready to init again)
    cuda_bytes: int  # GPU memory held after the trial (hpo.trial.ranks.fresh.held_cuda_bytes)
    # ... before the process's first trial, plus what the trial's DDP models may leave by
    # design (hpo.trial.dist.ddp_bucket_bytes)
    idle_cuda_bytes: int

    @property
    def clean(self) -> bool:
        return fresh.reusable(self.backend_down, self.cuda_bytes, self.idle_cuda_bytes)


@dataclass
class ChannelLink:
    """hpo.report / hpo.get_checkpoint on a rank (see hpo.trial.session.RankLink)."""

    main: bool
    channel: Any  # ReportChannel actor handle
    checkpoint: Files | None
    reports: int = 0  # this run's, to pair each rank's report with rank 0's

    def send(self, metrics: dict[str, Any], checkpoint: Path | None) -> None:
        files = pack_folder(checkpoint) if checkpoint is not None else None
        if not ray.get(self.channel.put.remote((metrics, files))):
            raise TrialStopped

    def follow(self) -> None:
        self.reports += 1
        if not ray.get(self.channel.decision.remote(self.reports)):
            raise TrialStopped

    def restored(self) -> Path | None:
        if self.checkpoint is None:
            return None
        return unpack_folder(self.checkpoint, session.restore_folder())  # removed at the end


def run_rank(func: Any, config: dict[str, Any], backend: dist.Backend, channel: Any,
             checkpoint: Files | ray.ObjectRef | None, checkpoint_every: int,
             threads: int, trial_folder: str | None, metrics: tuple[str, ...] = ()) -> RankEnd:
    """Entry point executed on every rank of a trial; its output goes to
    `<trial_folder>/rank-<rank>.log`."""
    import torch

    torch.set_num_threads(threads)  # one rank per bundle: use its CPUs, not the node's
    placement.pin_near(placement.own_gpus(), threads)  # Ray's, even where Horovod widens
    # The rank is in the environment before init (Horovod's RayExecutor, or DdpGroup), so
    # the backend's own start-up lines reach the log too.
    rank = os.environ["HOROVOD_RANK" if backend == "horovod" else "RANK"]
    with output_to(Path(trial_folder, f"rank-{rank}.log") if trial_folder else None), \
            fresh.trial_state():
        stopped = _run_trainable(func, config, backend, channel, checkpoint, checkpoint_every,
                                 int(rank), metrics)
    return RankEnd(os.getpid(), stopped, dist.backend() == "none", fresh.held_cuda_bytes(),
                   fresh.idle_cuda_bytes() + dist.ddp_bucket_bytes())


def _run_trainable(func: Any, config: dict[str, Any], backend: dist.Backend, channel: Any,
                   checkpoint: Files | ray.ObjectRef | None, checkpoint_every: int,
                   rank: int, metrics: tuple[str, ...] = ()) -> bool:
    """Run the trainable once on this rank; True when Tune stopped the trial first."""
    dist.init(backend)
    failing = False
    try:
        fresh.settle()  # the idle baseline, at this process's first trial
        if isinstance(checkpoint, ray.ObjectRef):  # nested in the arguments: not resolved
            checkpoint = ray.get(checkpoint)
        link = ChannelLink(dist.is_main(), channel, checkpoint)
        with session.trial_session(checkpoint_every, link, metrics):
            func(config)
        return False
    except TrialStopped:
        return True
    except Exception as exc:
        failing = True
        # Noted before dist.shutdown, whose end of the group fails the peers' collectives.
        # Rank 0 leaving a stopped trial fails the others' next collective: no failure.
        if _noted(channel, rank, exc):
            return True
        raise
    finally:
        # After an error, an error in leaving the group (that the failure tore down) must
        # not replace the rank's own
        with contextlib.suppress(Exception) if failing else contextlib.nullcontext():
            dist.shutdown()


def _noted(channel: Any, rank: int, exc: Exception) -> bool:
    """Note this rank's error in the channel (its own or a peer's loss); whether the trial
    was stopped. A note that fails (the channel gone) leaves the rank's error to the relay."""
    try:
        return bool(ray.get(channel.failed.remote(rank, not blame.lost_peer(exc),
                                                  blame.described(exc))))
    except Exception as note_error:  # noqa: BLE001  the rank's own error goes on
        print(f"hpo: this rank's error was not noted ({note_error})", file=sys.stderr)
        return False


@contextlib.contextmanager
def output_to(log: Path | None) -> Iterator[None]:
    """This process's stdout and stderr, Python's and native libraries' (Gloo, NCCL), appended
    to log meanwhile. Tune keeps the output of the trial's own process only, and a rank's
    process may run on another node: log is in the experiment folder, on a shared file
    system under Slurm. A log that cannot be written costs the output, not the trial."""
    out = _open_log(log) if log else None
    if out is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        out.close()


def _open_log(log: Path) -> BinaryIO | None:
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        return open(log, "ab", buffering=0)  # noqa: SIM115 (closed by output_to)
    except OSError as exc:
        print(f"hpo: this rank's output stays in Ray's worker log: {exc}", file=sys.stderr)
        return None
