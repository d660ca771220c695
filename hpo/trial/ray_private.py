"""Every reach of the trial side into Ray's private parts, in one place, as read from Ray 2.60.0.

Ray names none of these public; tests/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - ray.train._internal.session.get_session(): the _TrainSession of the trial running in this
    process (None outside Tune), with
      .storage (a StorageContext: .trial_fs_path, the trial's folder in the experiment folder,
      and .trial_working_directory, its working directory on this node) and
      .last_report_time (time.time() when the session started or last reported),
      .continue_lock (a Semaphore the training thread acquires after each report, to wait
      until Tune asks for the next one) and ._first_report (True: Tune's next get_next()
      does not release continue_lock, as at a session's start).
Ray is imported only when one of these is called (`import hpo` must not import Ray).
"""

from __future__ import annotations

import inspect
from typing import Any

RAY_VERSION = "2.60.0"  # the version these were read from


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


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    from ray.train._internal import session
    from ray.train._internal.storage import StorageContext

    gaps = []
    get_session = getattr(session, "get_session", None)
    if not callable(get_session) or any(
            p.default is p.empty for p in inspect.signature(get_session).parameters.values()):
        gaps.append("ray.train._internal.session.get_session()")
    train = getattr(session, "_TrainSession", None)
    source = inspect.getsource(train) if train is not None else ""
    gaps += [f"_TrainSession.{name}" for name in ("storage", "last_report_time",
                                                   "continue_lock", "_first_report")
             if f"self.{name} =" not in source]
    get_next = inspect.getsource(train.get_next) if hasattr(train, "get_next") else ""
    if "if not self._first_report:\n" not in get_next or "self.continue_lock.release()" \
            not in get_next:
        gaps.append("_TrainSession.get_next() releasing continue_lock unless _first_report")
    gaps += [f"StorageContext.{name}" for name in ("trial_fs_path", "trial_working_directory")
             if not isinstance(inspect.getattr_static(StorageContext, name, None), property)]
    return gaps
