"""`python -m benchmarks gpu`, the GPU path in one command, kept working on machines without a GPU:
`--cpu-check` runs its steps on the CPU (its figures are not GPU figures)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from calls import ROOT


@pytest.mark.slow
def test_gpu_benchmark_steps_run_on_the_cpu() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "gpu", "--cpu-check", "--skip", "standalone",
         "adaptive batch"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout
    for step in ("1-GPU trial", "warm rank: one more DDP trial", "1-rank ddp",
                 "1-rank horovod", "10 s trial", "4 trials on one GPU"):
        row = next(line for line in table.splitlines() if line.startswith(step))
        assert row.rstrip().endswith("yes"), row
    assert "not measurable on one GPU" in table
