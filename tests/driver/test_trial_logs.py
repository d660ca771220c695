"""The per-trial loggers keep every row when a trial restarts (hpo/driver/plugins/trial_logs.py).

Ray copies result.json and progress.csv back from storage over the driver's copy each time a
trial restarts; storage lags the driver, so rows were lost (a PBT exploit at the last
perturbation once left a trial's result.json empty). Real Tune trials and storage on a real
embedded Ray (Tune's staging folder lives in the Ray session).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray.train import Checkpoint
from ray.train._internal.session import _TrainingResult
from ray.train._internal.storage import StorageContext
from ray.tune.experiment import Trial
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from report_helpers import tensorboard_events, tensorboard_scalars

from hpo.driver.backends.ray_session import embedded_ray
from hpo.driver.plugins.trial_logs import CsvLogger, JsonLogger


def _rows(file_name: str, iterations: range) -> str:
    """A result.json or progress.csv holding rows for these iterations."""
    if file_name.endswith(".csv"):
        return "training_iteration,score\n" + "".join(f"{i},0.{i}\n" for i in iterations)
    return "".join(f'{{"training_iteration": {i}, "score": 0.{i}}}\n' for i in iterations)


CHECKPOINT_AT = 3  # the trial restarts from its checkpoint at iteration 3


@pytest.fixture(scope="module", autouse=True)
def ray_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with embedded_ray(tmp_path_factory.mktemp("ray") / "hpo.log", num_cpus=1):
        yield


def _restarted_trial(tmp_path: Path) -> tuple[Trial, Path, Path]:
    """A trial with a checkpoint whose storage file is older than the driver's."""
    storage = StorageContext(storage_path=str(tmp_path / "storage"), experiment_dir_name="exp")
    trial = Trial("fn", config={}, storage=storage, stub=True)  # stub: no registered trainable
    checkpoint_dir = tmp_path / "checkpoint"
    checkpoint_dir.mkdir()
    trial.on_checkpoint(_TrainingResult(checkpoint=Checkpoint(str(checkpoint_dir)),
                                        metrics={"training_iteration": CHECKPOINT_AT}))
    trial.init_local_path()  # names the trial folder, as Tune does when it starts a trial
    local, remote = Path(trial.local_path), Path(trial.storage.trial_fs_path)
    remote.mkdir(parents=True)
    return trial, local, remote


def _restart_and_report(logger: Any, trial: Trial) -> None:
    logger.log_trial_start(trial)
    logger.log_trial_result(4, trial, {"training_iteration": 4, "score": 0.5})
    logger.log_trial_end(trial)


def _rows_before_the_new_one(file: Path) -> str:
    lines = file.read_text().splitlines(keepends=True)
    assert "0.5" in lines[-1], lines  # the restarted trial's own report is there too
    return "".join(lines[:-1])


LOGGERS = [(JsonLogger, "result.json"), (CsvLogger, "progress.csv")]
RAY_LOGGERS = [(JsonLoggerCallback, "result.json"), (CSVLoggerCallback, "progress.csv")]


@pytest.mark.parametrize(("logger_cls", "file_name"), LOGGERS)
def test_restart_keeps_the_drivers_newer_rows(tmp_path: Path, logger_cls: Any,
                                              file_name: str) -> None:
    trial, local, remote = _restarted_trial(tmp_path)
    (local / file_name).write_text(_rows(file_name, range(1, 4)))
    (remote / file_name).write_text(_rows(file_name, range(1, 2)))
    _restart_and_report(logger_cls(), trial)
    assert _rows_before_the_new_one(local / file_name) == _rows(file_name, range(1, 4))


@pytest.mark.parametrize(("logger_cls", "file_name"), LOGGERS)
def test_restart_cuts_the_rows_after_its_checkpoint(tmp_path: Path, logger_cls: Any,
                                                   file_name: str) -> None:
    """Rows 4 and 5 were reported after the checkpoint at 3 (a stop, a crash, a retry):
    the trial reports them again, so the history keeps them once."""
    trial, local, _ = _restarted_trial(tmp_path)
    (local / file_name).write_text(_rows(file_name, range(1, 6)))
    _restart_and_report(logger_cls(), trial)
    assert _rows_before_the_new_one(local / file_name) == _rows(file_name, range(1, 4))


@pytest.mark.parametrize(("logger_cls", "file_name"), LOGGERS)
def test_resume_brings_the_rows_back_from_storage(tmp_path: Path, logger_cls: Any,
                                                  file_name: str) -> None:
    """A new driver (`hpo resume`) has no copy of its own: storage's rows come back (a
    storage copy that lags the checkpoint: tests/e2e/test_exact_stops.py, the lagging copy)."""
    trial, local, remote = _restarted_trial(tmp_path)
    (remote / file_name).write_text(_rows(file_name, range(1, CHECKPOINT_AT + 1)))
    _restart_and_report(logger_cls(), trial)
    assert _rows_before_the_new_one(local / file_name) == _rows(file_name,
                                                                range(1, CHECKPOINT_AT + 1))


@pytest.mark.parametrize(("logger_cls", "file_name"), RAY_LOGGERS)
def test_rays_own_loggers_lose_the_rows(tmp_path: Path, logger_cls: Any,
                                        file_name: str) -> None:
    """Why hpo has its own: when this fails, Ray fixed it and hpo's loggers can go."""
    trial, local, remote = _restarted_trial(tmp_path)
    (local / file_name).write_text(_rows(file_name, range(1, 4)))
    (remote / file_name).write_text(_rows(file_name, range(1, 2)))
    _restart_and_report(logger_cls(), trial)
    assert _rows_before_the_new_one(local / file_name) == _rows(file_name, range(1, 2))


def test_tensorboard_writes_at_once_and_flushes_on_a_timer_and_at_close(
        tmp_path: Path) -> None:
    """Ray flushes the TensorBoard writer after every result: here at most every FLUSH_S (a
    clock the test steps), and always when the writer closes; purge_step is marked as
    tensorboardX marks it, and no writer thread is left behind."""
    import threading

    from hpo.driver.plugins import tb_events

    threads = threading.active_count()
    now = [100.0]
    writer = tb_events.TimedSummaryWriter(str(tmp_path), clock=lambda: now[0], purge_step=3,
                                          filename_suffix=".x")
    assert threading.active_count() == threads
    for step in range(3, 53):  # 50 results within FLUSH_S: nothing flushed yet
        writer.add_scalar("ray/tune/score", float(step), global_step=step)
        writer.flush()
        now[0] += tb_events.FLUSH_S / 100
    assert tensorboard_scalars(tmp_path, "ray/tune/score") == {}
    now[0] += tb_events.FLUSH_S
    writer.flush()
    assert tensorboard_scalars(tmp_path, "ray/tune/score") == {s: s for s in range(3, 53)}
    writer.add_scalar("ray/tune/score", 53.0, global_step=53)
    writer.flush()  # within FLUSH_S of the last flush
    assert 53 not in tensorboard_scalars(tmp_path, "ray/tune/score")
    writer.close()  # the close flushes what is left
    assert tensorboard_scalars(tmp_path, "ray/tune/score") == {s: s for s in range(3, 54)}
    assert _purge_marks(tmp_path) == [3]


def test_tensorboard_hands_its_events_to_the_os_without_an_fsync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush (on the timer) and a close reach the file, not the disk: tensorboardX's
    fsync at each was a blocking wait in the driver's loop at every trial's end."""
    from hpo.driver.plugins import tb_events

    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    now = [0.0]
    writer = tb_events.TimedSummaryWriter(str(tmp_path), clock=lambda: now[0])
    writer.add_scalar("ray/tune/score", 1.0, global_step=1)
    now[0] += tb_events.FLUSH_S
    writer.flush()
    assert tensorboard_scalars(tmp_path, "ray/tune/score") == {1: 1.0}
    writer.add_scalar("ray/tune/score", 2.0, global_step=2)
    writer.close()
    assert tensorboard_scalars(tmp_path, "ray/tune/score") == {1: 1.0, 2: 2.0}
    assert synced == []


def test_tensorboard_event_files_are_tensorboardxs_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hpo's event file (no fsync) holds the bytes tensorboardX's EventsWriter writes: its
    name, its first event and each record's framing and checksums."""
    import socket
    import time

    from tensorboardX.event_file_writer import EventsWriter
    from tensorboardX.proto.event_pb2 import Event

    from hpo.driver.plugins import tb_events

    monkeypatch.setattr(time, "time", lambda: 1795000000.25)
    monkeypatch.setattr(socket, "gethostname", lambda: "node-7")
    events = [Event(step=step, wall_time=1.5 * step) for step in (1, 2, 3)]
    files = []
    for writer_cls, folder in ((EventsWriter, tmp_path / "x"), (tb_events._EventFile,
                                                                 tmp_path / "hpo")):
        folder.mkdir()
        writer = writer_cls(str(folder / "events"), ".s")
        for event in events:
            writer.write_event(event)
        writer.close()
        files += list(folder.iterdir())
    theirs, ours = files
    assert ours.name == theirs.name == "events.out.tfevents.1795000000.node-7.s"
    assert ours.read_bytes() == theirs.read_bytes()


def test_tensorboard_writes_a_results_scalars_as_one_event(tmp_path: Path) -> None:
    """Each flush (Ray's, after each result) writes that result's plain numbers as one event
    with a value each, tags cleaned as tensorboardX cleans them; anything else is
    tensorboardX's own event."""
    import numpy as np

    from hpo.driver.plugins import tb_events

    writer = tb_events.TimedSummaryWriter(str(tmp_path), filename_suffix=".x")
    for step in (1, 2):
        writer.add_scalar("ray/tune/score", step * 1.5, global_step=step)
        writer.add_scalar("ray/tune/an int", np.int64(step), global_step=step)
        writer.add_scalar("ray/tune/loss", 0.25, global_step=step, display_name="loss")
        writer.flush()
    writer.close()
    events = [(event.step, [(v.tag, v.simple_value) for v in event.summary.value])
              for event in tensorboard_events(tmp_path) if event.summary.value]
    assert events == [
        (1, [("ray/tune/loss", 0.25)]), (1, [("ray/tune/score", 1.5), ("ray/tune/an_int", 1.0)]),
        (2, [("ray/tune/loss", 0.25)]), (2, [("ray/tune/score", 3.0), ("ray/tune/an_int", 2.0)]),
    ]


def _purge_marks(folder: Path) -> list[int]:
    """The steps of the SessionLog.START events (TensorBoard drops the steps after one)."""
    from tensorboardX.proto.event_pb2 import SessionLog

    return [event.step for event in tensorboard_events(folder)
            if event.session_log.status == SessionLog.START]


def test_tensorboard_writer_leaves_torch_unimported_and_importable() -> None:
    """tensorboardX's writer would import torch (2.9 CPU-s of the driver's start) only to
    take its tensors; the driver's writer loads without it, and torch still imports after,
    in the same thread and in another."""
    script = textwrap.dedent("""
        import sys, threading
        import hpo.driver.plugins.tb_events
        assert "torch" not in sys.modules, "torch came with tensorboardX"
        assert not any(type(f).__name__ == "_TorchHidden" for f in sys.meta_path)
        other = threading.Thread(target=lambda: __import__("torch"))
        other.start(); other.join()
        import torch
        print(torch.ones(2).sum().item())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "2.0"), done.stderr


def test_tensorboard_checksums_its_events_in_c() -> None:
    """tensorboardX falls back to a CRC-32C in Python (58 us an event on this box, 0.3 us in
    C) when the crc32c package is missing: it is one of hpo's dependencies."""
    from tensorboardX import crc32c

    assert crc32c.crc32c is not crc32c._crc32c


def test_result_json_rows_are_rays_own_lines(tmp_path: Path) -> None:
    """hpo encodes a row in one call: the line is the one Ray's logger writes (NumPy numbers
    and arrays, NaN, infinity, nested config, an object Ray writes as its str)."""
    import numpy as np

    result = {"score": np.float64(0.5), "n": np.int64(3), "ok": np.bool_(True),
              "arr": np.arange(3), "nan": float("nan"), "inf": float("inf"),
              "config": {"lr": 1e-3, "layers": [1, 2], "path": Path("/x")},
              "training_iteration": 1, "text": "é"}
    lines = []
    for logger in (JsonLogger(), JsonLoggerCallback()):
        trial, local, _ = _restarted_trial(tmp_path / type(logger).__name__)
        logger.log_trial_result(1, trial, result)
        logger.log_trial_end(trial)
        lines.append((local / "result.json").read_text().splitlines()[-1])
    assert lines[0] == lines[1]
    assert '"path": "/x"' in lines[0] and '"arr": [0, 1, 2]' in lines[0]
