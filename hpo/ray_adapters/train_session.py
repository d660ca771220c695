"""Every reach of the trial side into Ray's private parts, in one place, as read from Ray 2.60.0.

Ray names none of these public; tests/driver/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - ray.train._internal.session.get_session(): the _TrainSession of the trial running in this
    process (None outside Tune), with
      .storage (a StorageContext: .trial_fs_path, the trial's folder in the experiment folder,
      and .trial_working_directory, its working directory on this node) and
      .last_report_time (time.time() when the session started or last reported),
      .continue_lock (a Semaphore the training thread acquires after each report, to wait
      until Tune asks for the next one) and ._first_report (True: Tune's next get_next()
      does not release continue_lock, as at a session's start);
  - ray.train._internal.storage.StorageContext.persist_artifacts(self, force=False), called
    at every result (by the session's report and by Tune's Trainable.train): unless forced it
    ends in .syncer.sync_up_if_needed(...), which syncs only once .syncer.sync_period has
    passed since .syncer.last_sync_up_time; replaced (artifact_syncs_timed_first) by one that
    looks at that time first.
Ray is imported only when one of these is called (`import hpo` must not import Ray).
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import Any

from hpo.ray_adapters.reading import source


def train_session() -> Any:
    """Ray Train's session of the trial running in this process (None outside Tune)."""
    from ray.train._internal.session import get_session

    return get_session()


def trial_storage() -> Any:
    """The running trial's StorageContext (None outside Tune): .trial_fs_path and
    .trial_working_directory."""
    return getattr(train_session(), "storage", None)


def last_report_time() -> float | None:
    """When (time.time()) the running trial's session started or last reported (None outside
    Tune)."""
    session = train_session()
    return None if session is None else session.last_report_time


def train_on() -> None:
    """Let the running trial's training thread go on past the report Tune just took, as if
    Tune had already asked for the next one; Tune's next get_next() then waits for the row
    the trial reports meanwhile without releasing the thread a second time."""
    session = train_session()
    if session is not None:
        session.continue_lock.release()
        session._first_report = True


def artifact_syncs_timed_first() -> None:
    """Have Ray's StorageContext.persist_artifacts return at once, unless forced, while its
    syncer's period (SyncConfig.sync_period, 300 s) has not passed since the last sync. Ray
    builds the trial's working-dir and storage paths (pathlib, several times) and lists the
    working dir before it looks at that time, twice a result: 60% of a worker's time per
    result (py-spy, a trial reporting without sleeping). What it decides stays Ray's: a forced
    sync, or one once the period has passed, runs as before. Once per process."""
    from ray.train._internal.storage import StorageContext

    original = StorageContext.persist_artifacts
    if getattr(original, "timed_first", False):
        return

    @functools.wraps(original)
    def persist_artifacts(self: Any, force: bool = False) -> None:
        syncer = self.syncer
        if not force and time.time() - syncer.last_sync_up_time < syncer.sync_period:
            return None  # what sync_up_if_needed would decide, after the paths and the listing
        return original(self, force=force)

    persist_artifacts.timed_first = True  # type: ignore[attr-defined]  # read above: patched once
    StorageContext.persist_artifacts = persist_artifacts


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    return session_gaps() + speed_gaps()


def speed_gaps() -> list[str]:
    """What train_on and artifact_syncs_timed_first read that the installed Ray lacks."""
    from ray.train._internal import session

    train = getattr(session, "_TrainSession", None)
    text = source(train) if train is not None else ""
    gaps = [f"_TrainSession.{name}" for name in ("continue_lock", "_first_report")
            if f"self.{name} =" not in text]
    get_next = (source(train.get_next)
                if train is not None and hasattr(train, "get_next") else "")
    if "if not self._first_report:\n" not in get_next or "self.continue_lock.release()" \
            not in get_next:
        gaps.append("_TrainSession.get_next() releasing continue_lock unless _first_report")
    return gaps + _artifact_sync_gaps()


def session_gaps() -> list[str]:
    """What a trial reads of its session that the installed Ray lacks."""
    from ray.train._internal import session
    from ray.train._internal.storage import StorageContext

    gaps = []
    get_session = getattr(session, "get_session", None)
    if not callable(get_session) or any(
            p.default is p.empty for p in inspect.signature(get_session).parameters.values()):
        gaps.append("ray.train._internal.session.get_session()")
    train = getattr(session, "_TrainSession", None)
    text = source(train) if train is not None else ""
    gaps += [f"_TrainSession.{name}" for name in ("storage", "last_report_time")
             if f"self.{name} =" not in text]
    gaps += [f"StorageContext.{name}" for name in ("trial_fs_path", "trial_working_directory")
             if not isinstance(inspect.getattr_static(StorageContext, name, None), property)]
    return gaps


def _artifact_sync_gaps() -> list[str]:
    from ray.train._internal.storage import StorageContext
    from ray.train._internal.syncer import Syncer

    persist = inspect.unwrap(StorageContext.persist_artifacts)
    if list(inspect.signature(persist).parameters) != ["self", "force"] or \
            "self.syncer.sync_up_if_needed(" not in source(persist):
        return ["StorageContext.persist_artifacts(self, force) -> syncer.sync_up_if_needed"]
    if "if now - self.last_sync_up_time >= self.sync_period:" not in \
            source(Syncer.sync_up_if_needed):
        return ["Syncer.sync_up_if_needed: syncs once sync_period passed since last_sync_up_time"]
    return []
