"""Reading what a report run left: a page rendered by headless Chromium, TensorBoard files."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

# Chromium's log line for a page's console message, e.g.
# [1:1:1121/111825.3:INFO:CONSOLE:1] "Uncaught ReferenceError: f is not defined", source: ...
_CONSOLE = re.compile(r":(INFO|WARNING|ERROR|VERBOSE\d*):CONSOLE[^\]]*\] (.*)")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    pytest.fail("headless Chromium is needed: `bash scripts/setup.sh --test` installs it")


def _headless(page: Path, *args: str) -> subprocess.CompletedProcess:
    """One Chromium run on a fresh profile (no state shared between runs or users)."""
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
             "--window-size=1200,2400", *args, page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120)


def chromium_render(page: Path, tmp_path: Path) -> tuple[list[str], str, np.ndarray]:
    """(console errors, DOM after the scripts ran, screenshot pixels in [0, 1]) of a page."""
    import matplotlib.pyplot as plt

    shot = tmp_path / f"{page.stem}-screenshot.png"
    run = _headless(page, f"--screenshot={shot}")
    assert shot.is_file(), run.stderr[-2000:]
    dump = _headless(page, "--dump-dom")
    errors = [m.group(2) for line in (run.stderr + dump.stderr).splitlines()
              if (m := _CONSOLE.search(line)) and (m.group(1) == "ERROR" or "Uncaught" in line
                                                    or "Error" in m.group(2))]
    return errors, dump.stdout, plt.imread(shot)[..., :3]


def tensorboard_scalars(trial_dir: Path, tag: str) -> dict[int, float]:
    """step -> value of one scalar over all events files of a trial (TFRecord framing)."""
    from tensorboardX.proto.event_pb2 import Event

    values: dict[int, float] = {}
    for path in sorted(trial_dir.glob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4  # length, its crc, the record, its crc
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = value.simple_value
    return dict(sorted(values.items()))
