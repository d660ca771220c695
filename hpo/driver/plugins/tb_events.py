"""tensorboardX's SummaryWriter, writing its events in the caller's thread, flushed on a timer.

tensorboardX hands every event to a writer thread through a multiprocessing.Queue of 10: each
scalar is pickled, sent through a pipe and unpickled again, all inside the driver process, and
`add_scalar` blocks whenever the thread falls 10 events behind. With Ray's logger writing every
numeric field of every result, that was most of the driver's time per result once results came
in batches (a profile of the driver). Here the same events go to tensorboardX's own EventsWriter at
once: 20 us a scalar instead of 84 (benchmarked on this box).

Ray's logger adds each numeric field of a result as its own event; here a result's plain
scalars go out as one event with many values (as TensorFlow's merged summaries; TensorBoard
reads each value), written at the flush Ray asks for after the result (result throughput
x1.70 against one event a field: `python -m benchmarks ab --mode throughput`, median of 3
pairs).

Ray's logger flushes after every result (an fsync each time); here a flush runs at most every
FLUSH_S, and closing always flushes, without an fsync (as result.json's rows). The record of
truth is result.json, written row by row: a crash of the driver loses what TensorBoard got
since its last flush, a trial's end or a stop nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import numbers
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


class _TorchHidden(importlib.abc.MetaPathFinder):
    """`import torch` fails in the thread that made this finder, and only there."""

    def __init__(self) -> None:
        self._thread = threading.get_ident()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" and threading.get_ident() == self._thread:
            raise ModuleNotFoundError("torch is hidden from tensorboardX", name=name)


@contextlib.contextmanager
def _torch_hidden() -> Iterator[None]:
    """tensorboardX's writer imports torch if it can (2.9 CPU-s, in the driver, on the way to
    the first trial), only to take torch tensors as arrays: the driver hands it numbers. A
    torch the process has already imported stays."""
    finder = _TorchHidden()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


with _torch_hidden():
    from tensorboardX import SummaryWriter
    from tensorboardX.proto.event_pb2 import Event, SessionLog
    from tensorboardX.proto.summary_pb2 import Summary
    from tensorboardX.record_writer import masked_crc32c
    from tensorboardX.summary import _clean_tag
    from tensorboardX.writer import FileWriter

FLUSH_S = 5.0  # TensorBoard's events reach the disk at least this often, and at each close


class _EventFile:
    """tensorboardX's EventsWriter (its file's name, first event and records), whose flush
    hands the bytes to the operating system without an fsync. tensorboardX fsyncs at every
    flush: at each trial's end and on the timer, a blocking wait in the driver's loop (py-spy:
    4.7% of its busy samples at about 12 trial ends a second on this machine's busy disk; an
    fsync on the idle disk takes 0.17 ms, one on a parallel file system more) that
    result.json, the record of truth, does not take either."""

    def __init__(self, prefix: str, suffix: str) -> None:
        name = f"{prefix}.out.tfevents.{str(time.time())[:10]}.{socket.gethostname()}{suffix}"
        self._file = open(name, "wb")  # noqa: SIM115  closed by close()
        self.write_event(Event(wall_time=time.time(), file_version="brain.Event:2"))

    def write_event(self, event: Event) -> None:
        data = event.SerializeToString()
        header = struct.pack("Q", len(data))
        self._file.write(b"".join((header, struct.pack("I", masked_crc32c(header)), data,
                                   struct.pack("I", masked_crc32c(data)))))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class _EventsNow:
    """tensorboardX's EventFileWriter interface, writing in the caller's thread."""

    def __init__(self, logdir: str, filename_suffix: str) -> None:
        self._logdir, self._suffix = logdir, filename_suffix
        self._events: _EventFile | None = None
        self.reopen()

    def get_logdir(self) -> str:
        return self._logdir

    def add_event(self, event: Event) -> None:
        if self._events is not None:
            self._events.write_event(event)

    def flush(self) -> None:
        if self._events is not None:
            self._events.flush()

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None

    def reopen(self) -> None:  # a new file (after a close), as tensorboardX's does
        if self._events is None:
            self._events = _EventFile(os.path.join(self._logdir, "events"), self._suffix)


class _FileWriterNow(FileWriter):
    def __init__(self, logdir: str, filename_suffix: str) -> None:  # no thread, no queue
        self.event_writer = _EventsNow(str(logdir), filename_suffix)
        self._default_metadata: dict[str, Any] = {}
        atexit.register(self.event_writer.close)  # as tensorboardX's own


class TimedSummaryWriter(SummaryWriter):
    """SummaryWriter whose events are written in the caller's thread, a step's plain scalars as
    one event at the next flush (Ray's logger asks after every result) or step, and whose
    flush to disk runs at most every FLUSH_S."""

    file_writer: FileWriter | None  # tensorboardX's attributes, which _get_file_writer sets
    all_writers: dict[str, FileWriter] | None

    def __init__(self, logdir: str, clock: Callable[[], float] = time.monotonic,
                 **options: Any) -> None:
        self._clock = clock
        self._flushed = clock()
        self._scalars: list[Any] = []  # Summary.Values of one step, not yet written
        self._step: int | None = None
        super().__init__(logdir, **options)

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None,
                   walltime: float | None = None, display_name: str | None = "",
                   summary_description: str | None = "") -> None:
        """A plain number joins its step's one event; anything else is tensorboardX's."""
        if (walltime is not None or display_name or summary_description
                or not isinstance(scalar_value, numbers.Real)):
            super().add_scalar(tag, scalar_value, global_step, walltime, display_name,
                               summary_description)
            return
        if global_step != self._step:
            self._write_scalars()
        self._scalars.append(Summary.Value(tag=_clean_tag(tag),
                                           simple_value=float(scalar_value)))
        self._step = global_step

    def _write_scalars(self) -> None:
        if self._scalars:
            self._get_file_writer().add_summary(Summary(value=self._scalars), self._step)
            self._scalars = []

    def close(self) -> None:
        self._write_scalars()
        super().close()

    def _get_file_writer(self) -> FileWriter:
        # tensorboardX's, with the file writer above (it marks purge_step the same way)
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = _FileWriterNow(self.logdir, self._filename_suffix)
            if self.purge_step is not None:
                self.file_writer.add_event(
                    Event(step=self.purge_step, file_version="brain.Event:2"))
                self.file_writer.add_event(
                    Event(step=self.purge_step, session_log=SessionLog(status=SessionLog.START)))
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
        return self.file_writer

    def flush(self) -> None:
        self._write_scalars()
        if self._clock() - self._flushed >= FLUSH_S:
            super().flush()
            self._flushed = self._clock()
