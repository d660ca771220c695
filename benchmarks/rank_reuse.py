"""Warm ranks (issue 16.2): the overhead of one more 2-rank trial with rank reuse and without,
Horovod and DDP, measured side by side in one run of this script.

    python benchmarks/rank_reuse.py                  # 6 trials per run, 2 repeats
    python benchmarks/rank_reuse.py --trials 8 --repeats 3

Each run is a real `hpo run` of N sequential trials of a trivial trainable (one allreduce,
one report) on 2 ranks; reuse on and off (HPO_RANK_REUSE=0) alternate, so both see the same
machine load. Overhead of a trial = the wall time from rank 0's last report of the trial
before to rank 0's start of the trainable in this one (Tune's scheduling, the trial actor's
reset, getting ranks, the backend's init), averaged over trials 2..N; the trial's own work
(its allreduce) is not in it. Tune's own actor reuse is on in both (hpo's default).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import (  # noqa: E402
    hpo_run_command,
    log,
    machine,
    median,
    run_timed,
    text_table,
    versions,
)


def trivial(config: dict[str, Any]) -> None:
    """The benchmark's trainable: no work beyond one allreduce and one report."""
    import hpo
    from hpo import dist

    start = time.time()
    value = dist.allreduce_mean(float(dist.rank()))
    hpo.report({"loss": value, "start": start, "end": time.time()})


def _run(tmp: Path, name: str, backend: str, trials: int, reuse: bool) -> tuple[float, float]:
    """One `hpo run`: (mean overhead of trials 2..N in s, others' CPU s meanwhile)."""
    import yaml

    spec = {"name": name, "trainable": f"{Path(__file__).resolve()}:trivial", "metric": "loss",
            "mode": "min", "num_samples": trials, "max_concurrent": 1,
            "distributed": {"backend": backend, "workers": 2}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HPO_RANK_REUSE": "1" if reuse else "0"}
    timed = run_timed(hpo_run_command(path, tmp / "results", name, cpus=2), cwd=ROOT, env=env,
                      timeout_s=1800)
    if timed.returncode:
        raise SystemExit(f"{name} failed:\n{timed.stderr[-2000:]}")
    rows = [json.loads(result.read_text().splitlines()[0])
            for result in (tmp / "results" / name).glob("*/result.json")]
    rows.sort(key=lambda row: row["start"])
    gaps = [row["start"] - before["end"] for before, row in zip(rows, rows[1:], strict=False)]
    log(f"  {name}: {timed.wall_s:.1f}s wall, gaps {[round(gap, 2) for gap in gaps]}, "
        f"others' CPU {timed.other_cpu_s:.0f}s")
    return sum(gaps) / len(gaps), timed.other_cpu_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    overheads: dict[tuple[str, bool], list[float]] = {}
    others: list[float] = []
    with tempfile.TemporaryDirectory(prefix="hpo-bench-reuse-") as tmp:
        for repeat in range(args.repeats):
            for backend in ("horovod", "ddp"):
                for reuse in (True, False) if repeat % 2 == 0 else (False, True):
                    name = f"{backend}-{'reuse' if reuse else 'fresh'}-{repeat}"
                    gap, other = _run(Path(tmp), name, backend, args.trials, reuse)
                    overheads.setdefault((backend, reuse), []).append(gap)
                    others.append(other)
    rows = []
    for backend in ("horovod", "ddp"):
        warm, cold = median(overheads[backend, True]), median(overheads[backend, False])
        rows.append([backend, f"{cold:.2f}", f"{warm:.2f}", f"{cold / warm:.1f}x"])
    log(f"\n{machine()}; {versions()}; {args.trials} trials per run, {args.repeats} repeats "
        f"(medians); others' CPU per run: {min(others):.0f}-{max(others):.0f} s")
    log(text_table(["2 ranks", "s per more trial, new ranks", "with warm ranks", "less"], rows))


if __name__ == "__main__":
    main()
