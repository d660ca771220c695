"""What a trainable calls while it runs: `report` and `get_checkpoint` (the public API).

A checkpoint is whatever the trainable hands over: a dict of state (saved with torch.save if
torch is loaded, else pickle) or a directory path; `get_checkpoint` gives the same kind back,
its GPU tensors on the trial's own device (dist.device). Ray Tune's own `ray.tune.report` /
`ray.tune.get_checkpoint` keep working unchanged.

A checkpoint in transit lives in a temporary folder (hpo-ckpt-*, hpo-restore-* in TMPDIR):
removed once Tune has it, or when the trial ends (a restored folder handed to the trainable),
or when the process exits; those of a process killed first go with the next one's on the node.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import numbers
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hpo.errors import not_a_number
from hpo.ray_adapters import train_session
from hpo.trial import checkpoint_files, cost

Trainable = Callable[[dict[str, Any]], Any]  # what `trainable:` names: f(config)


class RankLink(Protocol):
    """How a data-parallel rank reaches its trial (see hpo.trial.ranks.rank)."""

    main: bool  # rank 0: the only rank whose reports reach the scheduler

    def send(self, metrics: dict[str, Any], checkpoint: Path | None) -> None:
        """Hand rank 0's report (and checkpoint folder) to the trial, wait until it goes on."""

    def follow(self) -> None:
        """On the other ranks: wait for the scheduler's decision on rank 0's same report, so
        that all ranks stop together (a DDP rank would wait in its next collective)."""

    def restored(self) -> Path | None:
        """A local copy of the checkpoint the trial was started from, if any."""


@dataclass
class _Trial:
    checkpoint_every: int = 1  # attach every Nth report's checkpoint; 0: never
    reports: int = 0
    link: RankLink | None = None  # set on the ranks of a data-parallel trial
    restored: list[Path] = field(default_factory=list)  # removed when the trial ends
    metrics: tuple[str, ...] = ()  # the objectives: each reported must be a number


_current: ContextVar[_Trial | None] = ContextVar("hpo_trial", default=None)


@contextlib.contextmanager
def trial_session(checkpoint_every: int, link: RankLink | None = None,
                  metrics: tuple[str, ...] = ()) -> Iterator[None]:
    trial = _Trial(checkpoint_every, link=link, metrics=metrics)
    token = _current.set(trial)
    try:
        yield
    finally:
        _current.reset(token)
        for folder in trial.restored:
            remove_scratch(folder)


@dataclass
class _LocalLink:
    """The RankLink of a trainable run outside Ray: reports are kept in a list."""

    main: bool = True
    reports: list[dict[str, Any]] = field(default_factory=list)

    def send(self, metrics: dict[str, Any], checkpoint: Path | None) -> None:
        self.reports.append(metrics)

    def follow(self) -> None:
        pass

    def restored(self) -> Path | None:
        return None


@contextlib.contextmanager
def local_trial(checkpoint_every: int = 0,
                metrics: tuple[str, ...] = ()) -> Iterator[list[dict[str, Any]]]:
    """Run a trainable in this process, outside Ray and any trial (a standalone baseline, a
    quick check): `hpo.report` appends its metrics to the list yielded, refusing any of
    `metrics` that is not a number, as in a trial; checkpoints are written (every
    `checkpoint_every`th report, as in a trial; 0: never) and dropped.

    Example:
        >>> with local_trial() as reports:
        ...     train({"epochs": 2})
        >>> reports[-1]["val_loss"]
    """
    link = _LocalLink()
    with trial_session(checkpoint_every, link, metrics):
        yield link.reports


def _trial() -> _Trial:
    trial = _current.get()
    if trial is None:  # a plain Ray Tune run calling hpo.report: keep every checkpoint
        trial = _Trial()
        _current.set(trial)
    return trial


def report(metrics: Mapping[str, Any], checkpoint: Any = None) -> None:
    """Report one iteration's metrics, optionally with a checkpoint (dict or directory).

    Example:
        >>> hpo.report({"val_accuracy": acc}, checkpoint={"model": model.state_dict()})
    """
    trial = _trial()
    for name in trial.metrics:  # here, the trial's error names its own line of code
        if not is_number(metrics.get(name)):
            raise TypeError(not_a_number(name, metrics[name]))
    trial.reports += 1
    every = trial.checkpoint_every
    if checkpoint is not None and (every == 0 or trial.reports % every):
        checkpoint = None
    if trial.link is not None:
        if trial.link.main:  # the others' reports are copies; their checkpoints, not written
            _send_from_rank(trial.link, dict(metrics), checkpoint, trial.reports)
        else:
            trial.link.follow()
        return
    _to_tune(metrics, checkpoint, trial.reports)


def is_number(value: Any) -> bool:
    """What a metric may be: a number (a NumPy scalar or 0-d array too: they reach
    result.json as numbers), or None (not reported this time). Not a str or a tensor: those
    reach it as text, which no table, scheduler or searcher ranks; nor a bool, which the
    results table does not rank either (hpo.results)."""
    if value is None or (isinstance(value, numbers.Real) and not isinstance(value, bool)):
        return True
    kind = getattr(getattr(value, "dtype", None), "kind", None)  # NumPy's; a tensor has none
    return getattr(value, "ndim", None) == 0 and kind in ("i", "u", "f")


def _to_tune(metrics: Mapping[str, Any], checkpoint: Any, reports: int) -> None:
    """tune.report, with the trial's cost so far in the result and in the checkpoint."""
    from ray import tune  # here, not above: a linked process may never need Ray

    with contextlib.ExitStack() as stack:
        saved = checkpoint
        if checkpoint is not None and not isinstance(checkpoint, tune.Checkpoint):
            saved = tune.Checkpoint.from_directory(stack.enter_context(
                _written(checkpoint, reports)))
        totals = cost.current()  # after the checkpoint was written: its time counts too
        if saved is not None:
            cost.record(saved, totals)
        tune.report(cost.added(metrics, totals), checkpoint=saved)


def _send_from_rank(link: RankLink, metrics: dict[str, Any], checkpoint: Any,
                    reports: int) -> None:
    if checkpoint is None:
        link.send(metrics, None)
        return
    from ray import tune

    with contextlib.ExitStack() as stack:
        if isinstance(checkpoint, tune.Checkpoint):  # sent as its folder, like a path
            checkpoint = str(stack.enter_context(checkpoint.as_directory()))
        link.send(metrics, stack.enter_context(_written(checkpoint, reports)))


@contextlib.contextmanager
def _written(checkpoint: Any, reports: int) -> Iterator[Path]:
    """A temporary folder holding the checkpoint as hpo stores it (tune.report has copied it
    to storage before it returns)."""
    with checkpoint_in_transit() as folder:
        checkpoint_files.write(folder, checkpoint, reports)
        yield folder


def get_checkpoint() -> Any:
    """The trial's latest checkpoint as it was reported (a dict, or a local directory path).

    Returns None when the trial starts fresh. A checkpoint written by plain Ray Tune code
    comes back as the path of a local copy of its directory.
    """
    local = _local_copy_of_checkpoint()
    if local is None:
        return None
    if (local / checkpoint_files.ITERATION).exists():
        _trial().reports = int((local / checkpoint_files.ITERATION).read_text())
    if not checkpoint_files.holds_state(local):
        return checkpoint_files.as_path(local)
    try:
        return checkpoint_files.load_state(local)
    finally:
        remove_scratch(local)


def _local_copy_of_checkpoint() -> Path | None:
    from ray import tune

    link = _trial().link
    if link is not None:
        return link.restored()
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None
    local = restore_folder()
    with checkpoint.as_directory() as folder:
        shutil.copytree(folder, local, dirs_exist_ok=True)
    return local


def tune_storage() -> Any:
    """Ray Tune's storage context of the trial running in this process (None outside Tune)."""
    return train_session.trial_storage()


def trial_folder() -> str | None:
    """The running trial's folder in the experiment folder (None outside Tune)."""
    storage = tune_storage()
    return storage.trial_fs_path if storage else None


# Checkpoints in transit: folders named hpo-ckpt|restore-<pid>@<host>@..., so that the first
# scratch folder a process makes on a node can remove those a killed process left there.
_made: set[Path] = set()  # this process's, not removed yet
_OWNED = re.compile(r"hpo-(?:ckpt|restore)-(\d+)@(.+)@[^@]*")  # pid, host


def scratch_folder(kind: str) -> Path:
    """A new temporary folder (kind: hpo-ckpt or hpo-restore) for a checkpoint in transit."""
    _sweep_dead_owners()
    folder = Path(tempfile.mkdtemp(prefix=f"{kind}-{os.getpid()}@{socket.gethostname()}@"))
    _made.add(folder)
    return folder


@contextlib.contextmanager
def checkpoint_in_transit() -> Iterator[Path]:
    """A scratch folder for a checkpoint on its way to tune.report (which copies it to
    storage before it returns), removed after."""
    folder = scratch_folder("hpo-ckpt")
    try:
        yield folder
    finally:
        remove_scratch(folder)


def restore_folder() -> Path:
    """A scratch folder for a restored checkpoint, removed when the current trial ends."""
    folder = scratch_folder("hpo-restore")
    _trial().restored.append(folder)
    return folder


def remove_scratch(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    _made.discard(folder)


@atexit.register
def _remove_all_scratch() -> None:  # the process ends with a trial still in it
    for folder in list(_made):
        remove_scratch(folder)


@functools.cache  # once per process
def _sweep_dead_owners() -> None:
    for folder in Path(tempfile.gettempdir()).glob("hpo-*@*@*"):
        owner = _OWNED.fullmatch(folder.name)
        if owner and owner[2] == socket.gethostname() and not _alive(int(owner[1])):
            with contextlib.suppress(OSError):
                if folder.stat().st_uid == os.getuid():
                    shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True
