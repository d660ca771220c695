"""Warm ranks (issue 16.2): the overhead of one more data-parallel trial with rank reuse and
without, measured side by side in one run of this script.

    python benchmarks/rank_reuse.py                  # 2 CPU ranks, Horovod and DDP
    python benchmarks/rank_reuse.py --trials 8 --repeats 3
    python benchmarks/rank_reuse.py --device cuda    # DDP (NCCL) on 1 GPU rank; exit 1 unless
                                                     # the warm GPU rank was reused

Each run is a real `hpo run` of N sequential trials of a trivial trainable (on a GPU one
matmul, which leaves cuBLAS's workspace allocated, then one allreduce and one report); reuse
on and off (HPO_RANK_REUSE=0) alternate, so both see the same machine load. Overhead of a
trial = the wall time from rank 0's last report of the trial before to rank 0's start of the
trainable in this one (Tune's scheduling, the trial actor's reset, getting ranks, the backend's
init), averaged over trials 2..N; the trial's own work is not in it. Tune's own actor reuse is
on in both (hpo's default). With reuse on, trials 2..N must run on the first trial's rank
processes (rank 0's pid): else the script fails, naming the pids.
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
    env_with_root,
    hpo_run_command,
    log,
    machine,
    median,
    run_timed,
    text_table,
    versions,
)


def trivial(config: dict[str, Any]) -> None:
    """The benchmark's trainable: on a GPU one matmul (its cuBLAS workspace stays allocated),
    then one allreduce and one report."""
    import torch

    import hpo
    from hpo import dist

    start = time.time()
    if config["device"] == "cuda":
        x = torch.ones(256, 256, device=dist.device())
        (x @ x).sum().item()
    if config["model"]:  # one step of a model wrapped by hpo (DDP), as real trainables do
        layer = torch.nn.Linear(256, 256).to(dist.device())
        model, optimizer = dist.prepare(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
        model(torch.ones(8, 256, device=dist.device())).sum().backward()
        optimizer.step()
    value = dist.allreduce_mean(float(dist.rank()))
    hpo.report({"loss": value, "start": start, "end": time.time(),
                "rank_pid": os.getpid()})  # "pid" is Tune's: the trial process's


def _run(tmp: Path, name: str, args: argparse.Namespace, backend: str,
         reuse: bool) -> tuple[float, float]:
    """One `hpo run`: (mean overhead of trials 2..N in s, others' CPU s meanwhile)."""
    import yaml

    gpus = 1 if args.device == "cuda" else 0
    spec = {"name": name, "trainable": f"{Path(__file__).resolve()}:trivial", "metric": "loss",
            "mode": "min", "num_samples": args.trials, "max_concurrent": 1,
            "constants": {"device": args.device, "model": args.model},
            "distributed": {"backend": backend, "workers": args.workers,
                            "cpus_per_worker": 1, "gpus_per_worker": gpus}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = env_with_root(HPO_RANK_REUSE="1" if reuse else "0")
    timed = run_timed(hpo_run_command(path, tmp / "results", name, cpus=args.cpus), cwd=ROOT,
                      env=env, timeout_s=1800)
    if timed.returncode:
        raise SystemExit(f"{name} failed:\n{timed.stderr[-2000:]}")
    rows = [json.loads(result.read_text().splitlines()[0])
            for result in (tmp / "results" / name).glob("*/result.json")]
    rows.sort(key=lambda row: row["start"])
    gaps = [row["start"] - before["end"] for before, row in zip(rows, rows[1:], strict=False)]
    pids = [row["rank_pid"] for row in rows]
    log(f"  {name}: {timed.wall_s:.1f}s wall, gaps {[round(gap, 2) for gap in gaps]}, "
        f"rank 0 pids {pids}, others' CPU {timed.other_cpu_s:.0f}s")
    if reuse and len(set(pids)) != 1:
        raise SystemExit(f"FAIL: {name}: the warm {args.device} ranks were not reused: rank 0 "
                         f"ran in processes {pids} (one pid expected). A rank is handed on only "
                         "when its trial left no GPU memory (hpo.trial.ranks.fresh); see the trial "
                         "logs under " + str(tmp / "results" / name))
    return sum(gaps) / len(gaps), timed.other_cpu_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--workers", type=int, help="ranks per trial (2 on CPUs, 1 on GPUs)")
    parser.add_argument("--backends", default=None,
                        help="comma-separated (horovod,ddp on CPUs; ddp on GPUs)")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--model", action="store_true",
                        help="each trial also trains one step of a DDP-wrapped model")
    args = parser.parse_args()
    gpu = args.device == "cuda"
    args.workers = args.workers or (1 if gpu else 2)
    backends = (args.backends or ("ddp" if gpu else "horovod,ddp")).split(",")
    overheads: dict[tuple[str, bool], list[float]] = {}
    others: list[float] = []
    with tempfile.TemporaryDirectory(prefix="hpo-bench-reuse-") as tmp:
        for repeat in range(args.repeats):
            for backend in backends:
                for reuse in (True, False) if repeat % 2 == 0 else (False, True):
                    name = f"{backend}-{'reuse' if reuse else 'fresh'}-{repeat}"
                    gap, other = _run(Path(tmp), name, args, backend, reuse)
                    overheads.setdefault((backend, reuse), []).append(gap)
                    others.append(other)
    rows = []
    for backend in backends:
        warm, cold = median(overheads[backend, True]), median(overheads[backend, False])
        rows.append([backend, f"{cold:.2f}", f"{warm:.2f}", f"{cold / warm:.1f}x"])
    where = machine()  # names the GPU too, where torch sees one
    log(f"\n{where}; {versions()}; {args.trials} trials per run, {args.repeats} repeats "
        f"(medians); others' CPU per run: {min(others):.0f}-{max(others):.0f} s")
    log(text_table([f"{args.workers} {args.device} ranks", "s per more trial, new ranks",
                    "with warm ranks", "less"], rows))
    log(f"PASS: every run with reuse on reused its warm {args.device} ranks")



if __name__ == "__main__":
    main()
