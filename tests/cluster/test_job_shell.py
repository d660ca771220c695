"""The batch shell outlives scancel's SIGTERM until hpo has ended: Slurm signals every
process of the job, and a shell that died at once left hpo an orphan, which a site that
tracks a job's processes by their parents (proctrack/linuxproc) no longer kills after
KillWait: the cancelled job's driver ran on and held its study."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpo.cluster.sbatch import render_sbatch
from hpo.spec.slurm import SlurmSettings

# hpo's stand-in: ends 1.5 s after its SIGTERM, as hpo ends after its graceful stop
HPO = """\
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.5), sys.exit(0)))
open(sys.argv[1], "w").close()
time.sleep(60)
"""


@pytest.mark.parametrize("requeue", [True, False])
def test_the_batch_shell_waits_for_hpo_after_sigterm(tmp_path: Path, requeue: bool) -> None:
    script = render_sbatch("x", "s.yaml", SlurmSettings(requeue=requeue), workdir=str(tmp_path))
    (tmp_path / "hpo.py").write_text(HPO)
    started = tmp_path / "started"
    run = script[script.index(f"cd {tmp_path}"):].replace(
        "python -m hpo slurm run s.yaml", f"{sys.executable} hpo.py {started}")
    (tmp_path / "job.sh").write_text("#!/bin/bash\n" + run)
    shell = subprocess.Popen(["bash", str(tmp_path / "job.sh")], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not started.exists():
            assert time.monotonic() < deadline and shell.poll() is None
            time.sleep(0.05)
        os.killpg(shell.pid, signal.SIGTERM)  # as scancel: every process of the job
        time.sleep(0.7)
        assert shell.poll() is None, "the shell ended before hpo did"
        assert shell.wait(timeout=10) == 0  # hpo's own exit status
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
