"""Ctrl+C (SIGINT to the process group, as a terminal sends it) or SIGTERM at any instant of
`hpo run`'s start-up: one line, exit 1, no traceback or crash, nothing left behind (no
experiment folder that the same command would then refuse, no temp files); once Tune runs,
the stop is the saved stop of docs/faults.md."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from calls import ROOT

pytestmark = pytest.mark.slow

STARTUP = "the run stopped by {} during start-up, before any trial started"


def _space(tmp_path: Path, trainable: str) -> Path:
    space = tmp_path / "space.yaml"
    space.write_text(f"""\
name: s
trainable: {trainable}
metric: score
mode: max
num_samples: 4
search_space: {{x: {{uniform: [0.0, 1.0]}}}}
constants: {{steps: 40, sleep: 0.5}}  # 40 s or more: still running at the last stop (9 s)
checkpoint: {{frequency: 1, keep: 1}}
storage: {tmp_path / "results"}
""")
    return space


def _started(tmp_path: Path, space: Path, env: dict[str, str] | None = None
             ) -> subprocess.Popen[str]:
    (tmp_path / "tmp").mkdir()
    return subprocess.Popen([sys.executable, "-m", "hpo", "run", str(space)], cwd=ROOT,
                            env={**os.environ, "TMPDIR": str(tmp_path / "tmp"), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _assert_clean(proc: subprocess.Popen[str], tmp_path: Path, signame: str) -> str:
    _, stderr = proc.communicate(timeout=300)
    last = stderr.strip().splitlines()[-1]
    assert proc.returncode == 1, (proc.returncode, stderr[-3000:])
    assert "Traceback" not in stderr and "Fatal Python error" not in stderr, stderr[-3000:]
    assert last.startswith(f"error: the run stopped by {signame}"), last
    assert list((tmp_path / "tmp").iterdir()) == []  # Ray's and hpo's temp files: gone
    # and hpo's run folder (hpo.cluster.run_dir: under that $TMPDIR when it is short, else
    # /tmp; its owner file names the driver's pid): made before `import hpo`, where a stop
    # ends the process at once
    assert [owner for owner in Path("/tmp").glob("hpo-*/owner")
            if owner.read_text().split()[0] == str(proc.pid)] == []
    exp_dir = tmp_path / "results" / "s"
    if STARTUP.format(signame) in last:
        assert not exp_dir.exists()  # the same command starts it again
    else:  # Tune was running: saved, resumable
        assert "hpo resume" in last and (exp_dir / "hpo-spec.yaml").exists()
    return last


@pytest.mark.parametrize(("delay", "sig"), [
    (0.7, signal.SIGINT), (1.0, signal.SIGINT), (3.0, signal.SIGTERM), (6.0, signal.SIGINT),
    (9.0, signal.SIGINT)])
def test_a_stop_at_any_instant_of_start_up(tmp_path: Path, delay: float, sig: int) -> None:
    proc = _started(tmp_path, _space(tmp_path, "tests/support/study_trainables.py:steady"))
    time.sleep(delay)
    # Ctrl+C reaches the process group; SIGTERM the driver alone, as `kill PID` does (to the
    # whole group it also ends Ray's own daemons under the driver, which then waits for them)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    signame = "SIGINT (Ctrl+C)" if sig == signal.SIGINT else "SIGTERM"
    _assert_clean(proc, tmp_path, signame)


def test_a_stop_inside_rays_start(tmp_path: Path) -> None:
    # The trainable stops the driver as the driver imports it, beside `ray.init`: the worst
    # instant, where an exception landing in Ray's start crashed the process (SIGSEGV).
    space = _space(tmp_path, "tests/support/start_stop_trainables.py:steady")
    last = _assert_clean(_started_with_own_pid(tmp_path, space), tmp_path, "SIGINT (Ctrl+C)")
    assert STARTUP.format("SIGINT (Ctrl+C)") in last


def _started_with_own_pid(tmp_path: Path, space: Path) -> subprocess.Popen[str]:
    """`hpo run` in a process that knows its own pid before hpo starts (exec keeps it)."""
    (tmp_path / "tmp").mkdir()
    code = ("import os, sys; os.environ['HPO_TEST_STOP_DRIVER_AT_IMPORT'] = str(os.getpid()); "
            "os.execv(sys.executable, [sys.executable, '-m', 'hpo', 'run', sys.argv[1]])")
    return subprocess.Popen([sys.executable, "-c", code, str(space)], cwd=ROOT,
                            env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
