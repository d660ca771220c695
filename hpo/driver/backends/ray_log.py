"""The driver's Ray log records in the run's log file (hpo.log, in the experiment folder),
in hpo's words where Ray's would send the user to Ray's own API, and a full file system
there noted as the run's storage fault instead of a traceback per line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from hpo.driver.guards import storage_faults

# Ray's loggers and hpo's driver-side ones (rasda's growths and walltime holds, stops, cut
# histories, trials that lost their node, nodes short of CPUs, what the workers' fork server
# wrote) go to hpo.log.
_RAY_LOGGERS = ("ray", "ray.tune", "ray.train", "ray.data", "hpo.rasda", "hpo.stops",
                "hpo.history", "hpo.node_loss", "hpo.cluster", "hpo.forks")


class RunLog(logging.FileHandler):
    """hpo.log, which lies on the experiment's file system: when that is full, a failed write
    is noted as the run's storage fault instead of Python's "--- Logging error ---" traceback
    on stderr (one per Ray log line: hundreds), and the log goes quiet. The records are also
    watched for Ray's own reports of storage faults (the experiment snapshot's sync, a trial's
    checkpoint upload; a trial's own OSError is left to Tune's retries)."""

    _broken = False

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.propagated: dict[str, bool] = {}  # each logger's propagate before this log

    def emit(self, record: logging.LogRecord) -> None:
        watch = storage_faults.current()
        if watch and record.levelno >= logging.WARNING:
            watch.note(watch.reported(record))
        if not self._broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        fault = storage_faults.classify(sys.exc_info()[1])
        watch = storage_faults.current()
        if fault is None:
            super().handleError(record)
        elif watch:
            watch.note(storage_faults.Fault(fault.errno, self.baseFilename))
        self._broken = fault is not None

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            if storage_faults.classify(exc) is None:
                raise


class InHposWords(logging.Filter):
    """Ray's lines that send the user to Ray's own API or knobs, in hpo's words: Tune's
    "snapshotting has been triggered multiple times" warning once (it repeats in every
    checkpointing run), its `Tuner.restore(...)` hint not at all (the run's last line says
    how to resume)."""

    SNAPSHOTS = ("the experiment state is saved often: Tune saves it after every "
                 "checkpoint.keep checkpoints of any trial (a larger checkpoint.keep, or a "
                 "larger checkpoint.frequency, saves it less often)")

    def __init__(self) -> None:
        super().__init__()
        self._snapshots_said = False

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "snapshotting has been triggered multiple times" in text:
            if self._snapshots_said:
                return False
            self._snapshots_said = True
            record.msg, record.args = self.SNAPSHOTS, ()
        elif "Resume experiment with:" in text:
            record.msg, record.args = text.split("\nResume experiment with:")[0], ()
        return True


def log_ray_to(log_file: Path) -> RunLog:
    """Send the driver's Ray log records to the run's log file instead of the terminal."""
    handler = RunLog(log_file)
    handler.addFilter(InHposWords())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("hpo.rasda", "hpo.cluster"):  # their INFO lines: growths, the Ray used
        if logging.getLogger(name).level == logging.NOTSET:
            logging.getLogger(name).setLevel(logging.INFO)
    for name in _RAY_LOGGERS:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            if isinstance(old, logging.StreamHandler) and not isinstance(
                    old, logging.FileHandler):
                logger.removeHandler(old)
        handler.propagated[name] = logger.propagate
        logger.addHandler(handler)
        logger.propagate = False
    return handler


def stop_logging(handler: RunLog) -> None:
    """The run's end: its log takes no more records (a kept Ray, or a connected cluster,
    serves the next run, which logs to its own folder), and hpo's loggers pass theirs on as
    before it (Ray's own stderr handler stays removed)."""
    for name in _RAY_LOGGERS:
        logger = logging.getLogger(name)
        logger.removeHandler(handler)
        if not any(isinstance(other, RunLog) for other in logger.handlers):
            logger.propagate = handler.propagated.get(name, logger.propagate)
    handler.close()
