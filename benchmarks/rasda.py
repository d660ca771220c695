"""RASDA against ASHA with fixed ranks, measured through the real `hpo run` on this machine:
the same search (the same 8 configurations of `trainables.images:train`, DDP ranks) once with
ASHA on 1 rank per trial and once with RASDA growing promoted trials from 1 to 2 ranks.

    python benchmarks/rasda.py                         # one pair, prints the table
    python benchmarks/rasda.py --repeats 2 --markdown docs/benchmarks.md

Time to target: from starting the `hpo run` process to the first result (of any trial) at or
above the target, by default the best val_accuracy of the ASHA run of the pair (whole process,
start-up included; result times from Ray's `timestamp` and `time_total_s`, see
`result_times`). Rank-seconds: the sum over all results of time_this_iter_s x the ranks the
trial ran on (the `ranks` column the relay adds; without it 1, and n/a for RASDA).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import (  # noqa: E402
    env_with_root,
    hpo_run_command,
    log,
    machine,
    md_table,
    median,
    run_when_quiet,
    text_table,
    versions,
    write_section,
)
from hpo.results import trial_results  # noqa: E402

METRIC = "val_accuracy"
# About 0.4-0.6 s per epoch on 1 rank of this 2-core machine.
CONSTANTS = {"epochs": 16, "train_size": 4096, "val_size": 512, "image_size": 16, "width": 8,
             "batch_size": 128, "noise": 2.0}
LRS = [0.003, 0.006, 0.012, 0.025, 0.05, 0.1, 0.2, 0.4]
RUNGS = {"max_t": 16, "grace_period": 1, "reduction_factor": 2}
VARIANTS = ("asha", "rasda")


def spec(variant: str, name: str, max_concurrent: int | None = None) -> dict[str, Any]:
    """The experiment: a grid over the LR (the same trials in both), DDP ranks."""
    ranks: dict[str, Any] = {"backend": "ddp", "workers": 1, "cpus_per_worker": 1}
    scheduler: dict[str, Any] = {"type": "asha", **RUNGS}
    if variant == "rasda":
        ranks["max_workers"] = 2
        scheduler = {"type": "rasda", **RUNGS, "growth_factor": 2, "batch": "fixed"}
    extra = {"max_concurrent": max_concurrent} if max_concurrent else {}
    return {"name": name, **extra, "trainable": "trainables.images:train", "metric": METRIC,
            "mode": "max", "num_samples": 1, "search_space": {"lr": {"grid": LRS}},
            "constants": CONSTANTS, "scheduler": scheduler, "distributed": ranks,
            "checkpoint": {"frequency": 1, "keep": 2}}


def result_times(rows: list[dict[str, Any]]) -> list[float]:
    """Wall time of each result: Ray's `timestamp` is floor(t) and `time_total_s` is t - start,
    so a trial's start lies in [timestamp - time_total_s, +1) for every result; a trial that
    paused and resumed (time_total_s leaves the pause out) or has no consistent start gets
    timestamp + 0.5 (good to 0.5 s)."""
    low = max(r["timestamp"] - r["time_total_s"] for r in rows)
    high = min(r["timestamp"] + 1 - r["time_total_s"] for r in rows)
    if low > high:
        return [r["timestamp"] + 0.5 for r in rows]
    return [(low + high) / 2 + r["time_total_s"] for r in rows]


def measure(tmp: Path, variant: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One `hpo run`; its results read back from the experiment folder."""
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec(variant, name, args.max_concurrent)))
    cmd = hpo_run_command(path, tmp / "runs", name, cpus=2)
    env = env_with_root()
    timed = run_when_quiet(cmd, env=env, quiet_timeout=args.quiet_timeout, run_timeout=1800)
    if timed.returncode:
        raise SystemExit(f"{name} failed (rc {timed.returncode}):\n{timed.stderr[-3000:]}")
    events, rank_s, iters, relayed = [], 0.0, {}, False
    for trial_dir in sorted(p for p in (tmp / "runs" / name).iterdir() if p.is_dir()):
        rows = [r for r in trial_results(trial_dir) if isinstance(r.get(METRIC), float)]
        if not rows:
            continue
        relayed |= any("ranks" in row for row in rows)
        for when, row in zip(result_times(rows), rows, strict=True):
            ranks = int(row.get("ranks", 1))
            events.append((when - timed.start_epoch, float(row[METRIC]), ranks))
            rank_s += float(row["time_this_iter_s"]) * ranks
            iters.setdefault(ranks, []).append(float(row["time_this_iter_s"]))
    log(f"  {name}: {timed.wall_s:.1f} s wall, {len(events)} results, other CPU "
        f"{timed.other_cpu_s:.1f} s ({timed.other_top})")
    return {"variant": variant, "name": name, "wall_s": timed.wall_s, "command": " ".join(cmd),
            "other_cpu_s": timed.other_cpu_s, "events": sorted(events), "rank_s": rank_s,
            "iter_s": iters, "ranks_column": relayed}


def time_to(run: dict[str, Any], target: float) -> float:
    return next((t for t, value, _ in run["events"] if value >= target), math.inf)


def measure_pairs(args: argparse.Namespace, tmp: Path) -> list[dict[str, dict[str, Any]]]:
    """`repeats` pairs, the order alternating (ASHA first in even pairs)."""
    pairs = []
    for repeat in range(args.repeats):
        order = VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]
        pairs.append({v: measure(tmp, v, f"{v}-{repeat}", args) for v in order})
    return pairs


def _s(seconds: float) -> str:
    return "not reached" if seconds == math.inf else f"{seconds:.1f}"


def pair_row(index: int, pair: dict[str, dict[str, Any]], given: float | None) -> list[str]:
    asha, rasda = pair["asha"], pair["rasda"]
    target = given if given is not None else max(v for _, v, _ in asha["events"])
    t_asha, t_rasda = time_to(asha, target), time_to(rasda, target)
    ratio = f"{t_asha / t_rasda:.2f}" if math.inf not in (t_asha, t_rasda) else "n/a"
    grown = sum(1 for _, _, ranks in rasda["events"] if ranks > 1)
    known = rasda["ranks_column"]  # without it a grown trial's ranks are unknown
    return [str(index), f"{target:.4f}", _s(t_asha), _s(t_rasda), ratio,
            f"{asha['rank_s']:.1f}", f"{rasda['rank_s']:.1f}" if known else "n/a",
            f"{rasda['rank_s'] / asha['rank_s']:.2f}" if known else "n/a",
            f"{asha['wall_s']:.1f}",
            f"{rasda['wall_s']:.1f}", f"{len(asha['events'])} / {len(rasda['events'])}",
            str(grown), f"{asha['other_cpu_s']:.1f} / {rasda['other_cpu_s']:.1f}"]


HEADER = ["pair", "target", "ASHA: s to target", "RASDA: s to target", "ASHA/RASDA time",
          "ASHA rank-s", "RASDA rank-s", "RASDA/ASHA rank-s", "ASHA wall s", "RASDA wall s",
          "results ASHA / RASDA", "RASDA results on 2 ranks", "other CPU s ASHA / RASDA"]


def scaling(pairs: list[dict[str, dict[str, Any]]]) -> dict[int, float]:
    """Median time_this_iter_s by ranks over the RASDA runs (all results, first ones too)."""
    by_ranks: dict[int, list[float]] = {}
    for pair in pairs:
        for ranks, times in pair["rasda"]["iter_s"].items():
            by_ranks.setdefault(int(ranks), []).extend(times)
    return {ranks: median(times) for ranks, times in sorted(by_ranks.items())}


def report(args: argparse.Namespace, pairs: list[dict[str, dict[str, Any]]],
           took_s: float) -> str:
    rows = [pair_row(i, pair, args.target) for i, pair in enumerate(pairs)]
    print(text_table(HEADER, rows))
    iters = scaling(pairs)
    per_rank = ", ".join(f"{r} rank(s): {s:.3f} s" for r, s in iters.items())
    relayed = all(pair["rasda"]["ranks_column"] for pair in pairs)
    print(f"median time_this_iter_s in the RASDA runs: {per_rank}")
    command = "python benchmarks/rasda.py " + " ".join(sys.argv[1:])
    first = pairs[0]
    return "\n".join([
        "## RASDA vs ASHA: measured on this machine (CPU, 1 -> 2 DDP ranks)", "",
        f"Command: `{command}` (run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"took {took_s / 60:.1f} min). Machine: {machine()}; {versions()}.", "",
        f"Workload: `trainables.images:train` with `{json.dumps(CONSTANTS)}`, a grid of "
        f"{len(LRS)} learning rates `{LRS}` (the same 8 trials in both runs), DDP ranks of 1 "
        f"CPU each, 2 CPUs, max_concurrent {args.max_concurrent or 'unset'}. "
        f"ASHA: `{json.dumps(spec('asha', 'x')['scheduler'])}`, 1 rank per "
        f"trial. RASDA: `{json.dumps(spec('rasda', 'x')['scheduler'])}`, distributed.workers 1,"
        f" max_workers 2. Target: " + (f"{args.target}" if args.target is not None else
                                       "the best val_accuracy of the pair's ASHA run") +
        "; time to target from starting the process (whole process, start-up included). "
        "Rank-seconds: sum of time_this_iter_s x ranks over all results" +
        ("" if relayed else " (the RASDA results had no `ranks` column: n/a)") + ". "
        "Pairs run back to back, the order alternating.", "",
        md_table(HEADER, rows), "",
        f"Median time_this_iter_s in the RASDA runs: {per_rank}.", "",
        "Exact commands of the first pair (temp paths vary):",
        *[f"- {v}: `{first[v]['command']}`" for v in VARIANTS]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs")
    parser.add_argument("--target", type=float, help="default: the ASHA run's best")
    parser.add_argument("--quiet-timeout", type=float, default=300)
    parser.add_argument("--max-concurrent", type=int,
                        help="trials at a time (1: a core left free for growth)")
    parser.add_argument("--markdown", type=Path, help="write the rasda section of this file")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hpo-bench-rasda-") as tmp:
        pairs = measure_pairs(args, Path(tmp))
    text = report(args, pairs, time.monotonic() - started)
    if args.markdown:
        write_section(args.markdown, "rasda", text)


if __name__ == "__main__":
    main()
