"""Data-parallel trials and the epoch inside a trial: four benchmarks, all on the built-in
trainables/images.py (the stand-in trainables are in benchmarks/trials.py).

data-parallel: scaling efficiency (Horovod and DDP side by side), an adaptive batch-size
schedule against a fixed small batch, and the start-up cost of a 2-rank trial against a
1-process trial, through `hpo run` (--only picks parts). Scaling efficiency is strong scaling:
the same global batch and epoch on 1 rank and on 2 ranks (one thread each), T1 / (2 x T2)
from the median epoch time (first epoch skipped).

rank-reuse: the overhead of one more data-parallel trial with warm ranks and without, side by
side. Each run is a real `hpo run` of N sequential trials of a trivial trainable (on a GPU
one matmul, which leaves cuBLAS's workspace allocated, then one allreduce and one report);
reuse on and off (HPO_RANK_REUSE=0) alternate, so both see the same machine load. Overhead of
a trial = the wall time from rank 0's last report of the trial before to rank 0's start of
the trainable in this one (Tune's scheduling, the trial actor's reset, getting ranks, the
backend's init), averaged over trials 2..N; the trial's own work is not in it. Tune's own
actor reuse is on in both (hpo's default). With reuse on, trials 2..N must run on the first
trial's rank processes (rank 0's pid): else it fails, naming the pids. `--device cuda`: DDP
(NCCL) on 1 GPU rank; exit 1 unless the warm GPU rank was reused.

adaptive-batch: an adaptive batch (`batch_schedule`) against a fixed small batch, on a
BigEarthNet-like multi-label workload: how soon does each reach the fixed run's best
micro-F1 minus 0.5 points? Every variant is one trial of a real `hpo run` of
`trainables.images` (synthetic multi-label patches: 19 classes, several labels each, under
noise), run one after another; a variant's time is its trial's `time_total_s` at the first
epoch whose `val_f1_micro` reaches the target (the trial's own clock). The speed-up is the
fixed run's time to the target over the variant's. `--variants` replaces the adaptive
variants (a JSON list of config overrides); the fixed run is always the workload's own
`batch_size`. `--ranks 2`: DDP over Gloo.

trial-vs-standalone: hpo's per-epoch time against the same trainable standalone. Each round
runs `trainables.images` twice, in an order that alternates from round to round: once as
the one trial of a real `hpo run` (checkpoint every epoch, hpo's default) and once
standalone, a plain process calling the same function with `hpo.report` collecting into a
list (`hpo.trial.session.local_trial`: no Ray, no checkpoint). Both get the same torch
threads (the trial's CPUs). An epoch's time is the wall time between two reports, so the hpo
side pays for its reports and checkpoints; the first epoch (start-up, warm-up) is left out.
Also shown: `train_s`, the training steps alone. The last line printed is the summary
(the gpu benchmark shows it).

    python -m benchmarks data-parallel --only scaling --rounds 3
    python -m benchmarks rank-reuse --device cuda
    python -m benchmarks adaptive-batch --ranks 2 --markdown docs/benchmarks.md
    python -m benchmarks trial-vs-standalone --device cuda --markdown docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

import benchmarks as bench

IMAGES = {"trainable": "trainables.images:train", "metric": "val_accuracy", "mode": "max"}


def _experiment(tmp: Path, name: str, constants: dict[str, Any], backend: str | None,
                workers: int, samples: int = 1, env: dict[str, str] | None = None
                ) -> tuple[list[dict], float]:
    """Run one `hpo run` of the image trainable: every result of every trial, and its wall
    time."""
    spec: dict[str, Any] = {"name": name, **IMAGES, "num_samples": samples,
                            "max_concurrent": 1, "constants": constants}
    if backend:
        spec["distributed"] = {"backend": backend, "workers": workers, "cpus_per_worker": 1,
                               "env": env or {}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    cmd = bench.hpo_run_command(path, tmp / "results", name, cpus=2)
    timed = bench.run_when_quiet(cmd, env=bench.env_with_root(),
                                 quiet_timeout=300, run_timeout=1800)
    if timed.returncode:
        raise SystemExit(f"{name} failed:\n{timed.stderr[-2000:]}")
    rows = [row for trial in bench.result_rows(tmp / "results" / name) for row in trial]
    bench.log(f"  {name}: {timed.wall_s:.1f}s wall, other CPU {timed.other_cpu_s:.1f}s")
    return rows, timed.wall_s


def scaling(tmp: Path, rounds: int) -> tuple[list[str], list[list[Any]]]:
    constants = {"epochs": 4, "batch_size": 256, "train_size": 4096, "val_size": 512,
                 "image_size": 32, "width": 32}
    epoch_s: dict[tuple[str, int], list[float]] = {}
    for repeat in range(rounds):
        for backend in ("horovod", "ddp"):
            for workers in (1, 2):
                rows, _ = _experiment(tmp, f"scale-{backend}-{workers}-{repeat}", constants,
                                      backend, workers)
                epoch_s.setdefault((backend, workers), []).extend(
                    row["time_this_iter_s"] for row in rows[1:])
    table = []
    for backend in ("horovod", "ddp"):
        t1, t2 = bench.median(epoch_s[(backend, 1)]), bench.median(epoch_s[(backend, 2)])
        table.append([backend, f"{t1:.2f}", f"{t2:.2f}", f"{t1 / (2 * t2):.2f}"])
    return ["backend", "epoch s, 1 rank", "epoch s, 2 ranks", "efficiency T1/(2 T2)"], table


def _time_to(rows: list[dict], target: float) -> float | None:
    for row in rows:
        if row["val_accuracy"] >= target:
            return float(row["time_total_s"])
    return None


BATCH_BASE = {"epochs": 10, "lr": 0.02, "noise": 2.0, "batch_size": 64, "width": 8,
              "train_size": 16384}
GROWTH = {"batch_schedule": {"max": 1024, "double_every": 2, "lr_rule": "sqrt", "ramp_steps": 50}}


def batch_schedule(tmp: Path, backend: str, overrides: dict[str, Any]
                   ) -> tuple[list[str], list[list[Any]]]:
    base = {key: value for key, value in {**BATCH_BASE, **overrides}.items()
            if key != "batch_schedule"}
    big = {**GROWTH, **overrides, **base}
    fixed, _ = _experiment(tmp, f"batch-fixed-{backend}", base, backend, 2)
    adaptive, _ = _experiment(tmp, f"batch-adaptive-{backend}", big, backend, 2)
    best_fixed = max(row["val_accuracy"] for row in fixed)
    best_adaptive = max(row["val_accuracy"] for row in adaptive)
    target = min(best_fixed, best_adaptive)  # the accuracy both reached
    table = []
    growth = big["batch_schedule"]
    switch = (f"{base['batch_size']}, doubling every {growth['double_every']} epochs to "
              f"{growth['max']}")
    for label, rows in ((f"fixed {base['batch_size']}", fixed), (switch, adaptive)):
        reached = _time_to(rows, target)
        table.append([label, f"{max(r['val_accuracy'] for r in rows):.3f}",
                      f"{rows[-1]['time_total_s']:.1f}",
                      f"{reached:.1f}" if reached is not None else "not reached"])
    t_fixed, t_adaptive = _time_to(fixed, target), _time_to(adaptive, target)
    speedup = f"{t_fixed / t_adaptive:.2f}x" if t_fixed and t_adaptive else "n/a"
    table.append([f"speed-up to accuracy {target:.3f}; accuracy lost "
                  f"{100 * (best_fixed - best_adaptive):+.1f} points", "", "", speedup])
    epochs = base["epochs"]
    return ["global batch (2 ranks)", "best accuracy", f"{epochs} epochs, s",
            "time to target, s"], table


def startup(tmp: Path, trials: int) -> tuple[list[str], list[list[Any]]]:
    tiny = {"epochs": 1, "train_size": 64, "val_size": 16, "batch_size": 32}
    table, per_trial = [], {}
    for label, backend, workers in (("1 process", None, 1), ("2 Horovod ranks", "horovod", 2),
                                    ("2 DDP ranks", "ddp", 2)):
        # trials run one after another: the extra trials of the longer run cost whole lives
        _, one = _experiment(tmp, f"start-{backend}-1", tiny, backend, workers, samples=1)
        _, many = _experiment(tmp, f"start-{backend}-{trials}", tiny, backend, workers,
                              samples=trials)
        per_trial[label] = (many - one) / (trials - 1)
        table.append([label, f"{per_trial[label]:.2f}"])
    base = per_trial["1 process"]
    for row in table:
        extra = per_trial[row[0]] - base
        # A 1-process trial with actor reuse can cost less than this estimator's noise (even
        # below zero): a ratio to it would mean nothing.
        ratio = (f"{per_trial[row[0]] / base:.2f}" if base > 0.05
                 else "n/a (1-process cost in noise)")
        row += [f"{extra:+.2f}", ratio]
    return ["trial", "s per trial", "extra s", "ratio"], table


def data_parallel_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", choices=["scaling", "batch", "startup"], action="append")
    parser.add_argument("--trials", type=int, default=8, help="startup: trials a run")
    parser.add_argument("--batch-backend", default="horovod", choices=["horovod", "ddp"])
    parser.add_argument("--batch-config", default="{}",
                        help="JSON overrides of the batch comparison's trainable config")


def data_parallel(args: argparse.Namespace) -> list[Any]:
    parts = args.only or ["scaling", "batch", "startup"]
    sections = []
    with tempfile.TemporaryDirectory(prefix="hpo-bench-dp-") as tmp:
        for part in parts:
            bench.log(f"{part} ...")
            header, rows = {"scaling": lambda: scaling(Path(tmp), args.rounds),
                            "batch": lambda: batch_schedule(Path(tmp), args.batch_backend,
                                                            json.loads(args.batch_config)),
                            "startup": lambda: startup(Path(tmp), args.trials)}[part]()
            bench.log(bench.text_table(header, rows))
            sections.append((part, header, rows))
    body = ["Horovod 0.28.1 (Gloo). Trainable: `trainables.images:train` (synthetic images); "
            "one thread per rank; each row is whole `hpo run`s of the real CLI."]
    body += [f"\n**{part}**\n\n{bench.md_table(header, rows)}" for part, header, rows in sections]
    bench.publish(args, "data-parallel", "Data-parallel trials", "\n".join(body))
    return sections


# ---------------------------------------------------------------- rank-reuse

def reuse_run(tmp: Path, name: str, args: argparse.Namespace, backend: str,
              reuse: bool) -> tuple[float, float]:
    """One `hpo run`: (mean overhead of trials 2..N in s, others' CPU s meanwhile)."""
    gpus = 1 if args.device == "cuda" else 0
    spec = {"name": name, "trainable": f"{bench.ROOT}/benchmarks/trials.py:rank_trivial",
            "metric": "loss",
            "mode": "min", "num_samples": args.trials, "max_concurrent": 1,
            "constants": {"device": args.device, "model": args.model},
            "distributed": {"backend": backend, "workers": args.workers,
                            "cpus_per_worker": 1, "gpus_per_worker": gpus}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = bench.env_with_root(HPO_RANK_REUSE="1" if reuse else "0")
    cmd = bench.hpo_run_command(path, tmp / "results", name, cpus=args.cpus)
    timed = bench.run_timed(cmd, cwd=bench.ROOT, env=env, timeout_s=1800)
    if timed.returncode:
        raise SystemExit(f"{name} failed:\n{timed.stderr[-2000:]}")
    rows = [json.loads(result.read_text().splitlines()[0])
            for result in (tmp / "results" / name).glob("*/result.json")]
    rows.sort(key=lambda row: row["start"])
    gaps = [row["start"] - before["end"] for before, row in zip(rows, rows[1:], strict=False)]
    pids = [row["rank_pid"] for row in rows]
    bench.log(f"  {name}: {timed.wall_s:.1f}s wall, gaps {[round(gap, 2) for gap in gaps]}, "
              f"rank 0 pids {pids}, others' CPU {timed.other_cpu_s:.0f}s")
    if reuse and len(set(pids)) != 1:
        raise SystemExit(f"FAIL: {name}: the warm {args.device} ranks were not reused: rank 0 "
                         f"ran in processes {pids} (one pid expected). A rank is handed on only "
                         "when its trial left no GPU memory (hpo.trial.ranks.fresh); see the trial "
                         "logs under " + str(tmp / "results" / name))
    return sum(gaps) / len(gaps), timed.other_cpu_s


def rank_reuse_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--workers", type=int, help="ranks per trial (2 on CPUs, 1 on GPUs)")
    parser.add_argument("--backends", default=None,
                        help="comma-separated (horovod,ddp on CPUs; ddp on GPUs)")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--model", action="store_true",
                        help="each trial also trains one step of a DDP-wrapped model")


def rank_reuse(args: argparse.Namespace) -> list[list[str]]:
    if args.quick:
        args.trials, args.rounds = 3, 1
    gpu = args.device == "cuda"
    args.workers = args.workers or (1 if gpu else 2)
    backends = (args.backends or ("ddp" if gpu else "horovod,ddp")).split(",")
    overheads: dict[tuple[str, bool], list[float]] = {}
    others: list[float] = []
    with tempfile.TemporaryDirectory(prefix="hpo-bench-reuse-") as tmp:
        for repeat in range(args.rounds):
            for backend in backends:
                for reuse in (True, False) if repeat % 2 == 0 else (False, True):
                    name = f"{backend}-{'reuse' if reuse else 'fresh'}-{repeat}"
                    gap, other = reuse_run(Path(tmp), name, args, backend, reuse)
                    overheads.setdefault((backend, reuse), []).append(gap)
                    others.append(other)
    rows = []
    for backend in backends:
        warm, cold = bench.median(overheads[backend, True]), bench.median(overheads[backend, False])
        rows.append([backend, f"{cold:.2f}", f"{warm:.2f}", f"{cold / warm:.1f}x"])
    where = bench.machine()  # names the GPU too, where torch sees one
    bench.log(f"\n{where}; {bench.versions()}; {args.trials} trials per run, {args.rounds} rounds "
              f"(medians); others' CPU per run: {min(others):.0f}-{max(others):.0f} s")
    bench.log(bench.text_table([f"{args.workers} {args.device} ranks",
                                "s per more trial, new ranks", "with warm ranks", "less"], rows))
    bench.log(f"PASS: every run with reuse on reused its warm {args.device} ranks")
    return rows


# ---------------------------------------------------------------- adaptive-batch

TARGET_DROP = 0.005  # half a point of micro-F1 below the fixed run's best
BATCH_WORKLOADS = {
    # 1 thread: on a shared 2-core machine a second thread mostly waits for the other load
    "cpu": {"multilabel": True, "classes": 19, "channels": 4, "image_size": 16, "noise": 1.5,
            "train_size": 32768, "val_size": 2048, "width": 8, "epochs": 16, "lr": 0.2,
            "batch_size": 64},
    # the H100 workload of ../shared/notes/gpu-node.md (32768 images, noise 3, batch 64)
    "cuda": {"multilabel": True, "classes": 19, "channels": 4, "image_size": 32, "noise": 3.0,
             "train_size": 32768, "val_size": 4096, "width": 32, "epochs": 12, "lr": 0.05,
             "batch_size": 64},
}
ADAPTIVE = {  # overrides of the workload: the batch grows from its batch_size
    # LARS (lr 3, the sqrt rule, 200-step ramps at each growth) with the papers' shape: a
    # warm-up from 0 over 300 steps and a decay to 0 at the last epoch. Without the decay the
    # same recipes levelled off (0.932) or fell apart on the GPU (0.956 -> 0.402).
    "cpu": [{"batch_schedule": {"max": 256, "double_every": 4, "lr_rule": "sqrt",
                                "ramp_steps": 200, "warmup_steps": 300, "decay": "cosine"},
             "optimizer": "lars", "lr": 3.0},
            {"batch_schedule": {"max": 256, "double_every": 3, "lr_rule": "sqrt",
                                "ramp_steps": 200, "warmup_steps": 300, "decay": "poly"},
             "optimizer": "lars", "lr": 3.0},
            # the seed's schedule: one switch to the large batch, the LR re-warmed there
            {"batch_schedule": {"max": 256, "switch_at": 6, "lr_rule": "sqrt",
                                "ramp_steps": 200, "warmup_steps": 300, "decay": "cosine"},
             "optimizer": "lars", "lr": 3.0}],
    # LARS with the batch capped at 256 or 512: on the H200 the batch grown to 1024 (every 2
    # epochs, from 64) lost the accuracy it had reached at 256 (docs/benchmarks.md)
    "cuda": [{"batch_schedule": {"max": 256, "double_every": 2, "lr_rule": "sqrt",
                                 "ramp_steps": 200, "warmup_steps": 300, "decay": "cosine"},
              "optimizer": "lars", "lr": 3.0},
             {"batch_schedule": {"max": 512, "double_every": 3, "lr_rule": "sqrt",
                                 "ramp_steps": 200, "warmup_steps": 300, "decay": "cosine"},
              "optimizer": "lars", "lr": 3.0},
             {"batch_schedule": {"max": 1024, "switch_at": 3, "lr_rule": "sqrt",
                                 "ramp_steps": 200, "warmup_steps": 300, "decay": "poly"},
              "optimizer": "lars", "lr": 3.0}],
}


# the batch doubles when the gradient noise scale measured on the ranks passes it (DDP only)
NOISE_GROWN = {"batch_schedule": {"max": 256, "grow": "noise", "lr_rule": "sqrt",
                                  "ramp_steps": 200, "warmup_steps": 300, "decay": "cosine"},
               "optimizer": "lars", "lr": 3.0}


def run_variant(args: argparse.Namespace, tmp: Path, name: str,
                config: dict[str, Any]) -> list[dict]:
    """One `hpo run` of one trial: its results, one per epoch (each row also carries the CPU
    seconds other processes used during the run, as `other_cpu_s`)."""
    gpus = 1 if args.device == "cuda" else 0
    spec = {"name": name, "trainable": "trainables.images:train", "metric": "val_f1_micro",
            "mode": "max", "constants": config}
    if args.ranks > 1:  # the seed's setting in small: a per-rank batch, an allreduce a step
        spec["distributed"] = {"backend": "ddp", "workers": args.ranks,
                               "cpus_per_worker": args.cpus, "gpus_per_worker": gpus}
    else:
        spec["resources"] = {"cpus_per_trial": args.cpus, "gpus_per_trial": gpus}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    bench.wait_until_quiet(timeout_s=args.quiet_timeout, log=bench.log)
    done = bench.run_timed(bench.hpo_run_command(path, tmp / "runs", name,
                                                 cpus=max(args.cpus * args.ranks, 1)),
                           cwd=bench.ROOT, env=bench.env_with_root(), timeout_s=3600)
    if done.returncode:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    (trial,) = bench.result_rows(tmp / "runs" / name)
    rows = [{**row, "other_cpu_s": done.other_cpu_s} for row in trial]
    bench.log(f"  {name}: F1 " + " ".join(f"{r['val_f1_micro']:.3f}" for r in rows)
              + f"; {rows[-1]['time_total_s']:.1f} s; other CPU {done.other_cpu_s:.1f} s")
    return rows


def first_reaching(rows: list[dict], target: float) -> dict | None:
    return next((row for row in rows if row["val_f1_micro"] >= target), None)


def describe(config: dict[str, Any], base: dict[str, Any]) -> str:
    changed = {key: value for key, value in config.items() if base.get(key) != value}
    return json.dumps(changed, separators=(",", ":")) if changed else (
        f"fixed {base['batch_size']}")


def table(base: dict[str, Any], runs: list[tuple[dict[str, Any], list[dict]]]
          ) -> tuple[list[str], list[list[Any]], float]:
    """One row a variant: its best and last micro-F1 (a collapse shows as last far below
    best), the epochs and the seconds to the target, the speed-up in both."""
    best_fixed = max(row["val_f1_micro"] for row in runs[0][1])
    target = best_fixed - TARGET_DROP
    fixed = first_reaching(runs[0][1], target)
    header = ["variant", "best micro-F1", "last micro-F1", "last - best (points)",
              "final batch", "epoch s (last)", f"epochs to F1 {target:.3f}",
              f"s to F1 {target:.3f}", "speed-up (epochs)", "speed-up (s)", "other CPU s"]
    rows = []
    for config, results in runs:
        best, last = (max(r["val_f1_micro"] for r in results), results[-1]["val_f1_micro"])
        reached = first_reaching(results, target)
        rows.append([describe(config, base), f"{best:.3f}", f"{last:.3f}",
                     f"{100 * (last - best):.1f}", results[-1]["global_batch"],
                     f"{results[-1]['time_this_iter_s']:.2f}",
                     reached["training_iteration"] if reached else "-",
                     f"{reached['time_total_s']:.1f}" if reached else "-",
                     _ratio(fixed, reached, "training_iteration"),
                     _ratio(fixed, reached, "time_total_s"),
                     f"{results[-1]['other_cpu_s']:.1f}"])
    return header, rows, target


def _ratio(fixed: dict | None, reached: dict | None, key: str) -> str:
    return f"{fixed[key] / reached[key]:.2f}x" if fixed and reached else "not reached"


def verdict(rows: list[list[Any]]) -> str:
    """The two conditions an adaptive batch must meet, from the table: every adaptive variant
    ends within 0.5 points of its best; the best reaches the target in no more epochs than
    the fixed run."""
    kept = all(float(row[3]) >= -100 * TARGET_DROP for row in rows[1:])
    fixed_epochs = rows[0][6]
    fewest = min((row[6] for row in rows[1:] if row[6] != "-"), default=None)
    soon = fewest is not None and fixed_epochs != "-" and fewest <= fixed_epochs
    return (f"every adaptive variant ends within {100 * TARGET_DROP:.1f} points of its best: "
            f"{'yes' if kept else 'NO'}; the best reaches the target in {fewest or '-'} "
            f"epochs against the fixed run's {fixed_epochs}: {'yes' if soon else 'NO'}")


def adaptive_batch_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--cpus", type=int, default=None,
                        help="the trial's CPUs (default: 1 on cpu, 4 on cuda)")
    parser.add_argument("--ranks", type=int, default=1,
                        help="data-parallel ranks per trial (DDP; 2 on CPU: Gloo)")
    parser.add_argument("--config", default="{}", help="JSON overrides of the workload")
    parser.add_argument("--variants", help="JSON list of adaptive variants (config overrides)")
    parser.add_argument("--quiet-timeout", type=float, default=300)


def adaptive_batch(args: argparse.Namespace) -> list[list[Any]]:
    args.cpus = args.cpus or (1 if args.device == "cpu" else 4)
    base = {**BATCH_WORKLOADS[args.device], **json.loads(args.config)}
    variants = json.loads(args.variants) if args.variants else ADAPTIVE[args.device] + (
        [NOISE_GROWN] if args.ranks > 1 else [])
    runs = []
    with tempfile.TemporaryDirectory(prefix="hpo-bench-adaptive-") as tmp:
        for index, overrides in enumerate([{}, *variants]):
            config = {**base, **overrides}
            runs.append((config, run_variant(args, Path(tmp), f"variant-{index}", config)))
    header, rows, target = table(base, runs)
    print(bench.text_table(header, rows))
    ranks = f", {args.ranks} DDP ranks" if args.ranks > 1 else ""
    section = f"adaptive-batch-{args.device}" + (f"-ddp{args.ranks}" if ranks else "")
    bench.publish(args, section,
                  f"Adaptive batch against a fixed small batch ({args.device}{ranks})",
                  "\n".join([
            f"Workload: `trainables.images` with `{json.dumps(base)}`, {args.cpus} CPU(s) per "
            f"{'rank' if ranks else 'trial'}. Target: the fixed run's best micro-F1 minus "
            f"{100 * TARGET_DROP:.1f} points = {target:.3f}; times are the trial's own clock.",
            "", bench.md_table(header, rows), "", f"Verdict: {verdict(rows)}."]))
    print(f"speed-up to F1 {target:.3f} in epochs: " + ", ".join(row[8] for row in rows[1:])
          + "; in seconds: " + ", ".join(row[9] for row in rows[1:]))
    print(verdict(rows))
    return rows


# ---------------------------------------------------------------- trial-vs-standalone

# Epochs of a few seconds each (shorter ones would measure the report, not the loop).
CONFIGS = {
    "cpu": {"image_size": 16, "width": 16, "train_size": 16384, "val_size": 1024,
            "batch_size": 256, "lr": 0.05, "epochs": 5},
    "cuda": {"image_size": 32, "width": 32, "train_size": 131072, "val_size": 4096,
             "batch_size": 256, "lr": 0.05, "epochs": 6},
}


def standalone_child(config: dict[str, Any], threads: int) -> None:
    """The standalone side, in its own process: prints its reports as JSON."""
    import torch

    from benchmarks.trials import timed_epochs
    from hpo.trial.session import local_trial

    torch.set_num_threads(threads)
    with local_trial() as reports:
        timed_epochs(config)
    print(json.dumps(reports))


def run_standalone(config: dict[str, Any], args: argparse.Namespace) -> tuple[list[dict], float]:
    env = bench.env_with_root()
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "benchmarks", "trial-vs-standalone", "--child",
           json.dumps(config), "--cpus", str(args.cpus)]
    timed_run = bench.run_timed(cmd, cwd=bench.ROOT, env=env, timeout_s=args.timeout)
    if timed_run.returncode:
        raise SystemExit(f"standalone failed:\n{timed_run.stderr[-3000:]}")
    return json.loads(timed_run.stdout.strip().splitlines()[-1]), timed_run.other_cpu_s


def run_hpo(config: dict[str, Any], args: argparse.Namespace, tmp: Path,
            name: str) -> tuple[list[dict], float, float]:
    spec = {"name": name, "trainable": f"{bench.ROOT}/benchmarks/trials.py:timed_epochs",
            "metric": "val_accuracy", "mode": "max", "constants": config,
            "resources": {"cpus_per_trial": args.cpus,
                          "gpus_per_trial": 1 if args.device == "cuda" else 0}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    cmd = bench.hpo_run_command(path, tmp / "runs", name, cpus=args.cpus)
    timed_run = bench.run_timed(cmd, cwd=bench.ROOT, env=bench.env_with_root(),
                                timeout_s=args.timeout)
    if timed_run.returncode:
        raise SystemExit(f"hpo run failed:\n{timed_run.stderr[-3000:]}")
    (rows,) = bench.result_rows(tmp / "runs" / name)
    return rows, timed_run.wall_s, timed_run.other_cpu_s


def epoch_times(rows: list[dict]) -> list[float]:
    """Wall time between successive reports: every epoch but the first."""
    return [b["wall"] - a["wall"] for a, b in zip(rows, rows[1:], strict=False)]


def measure(args: argparse.Namespace, config: dict[str, Any], tmp: Path, side: str,
            name: str) -> tuple[list[dict], float, float | None, int]:
    """One side's run, repeated (up to 3 times) while other processes disturb it: its rows,
    the other processes' CPU seconds, the hpo run's wall, and the runs thrown away."""
    for tries in range(3):
        bench.wait_until_quiet(timeout_s=args.quiet_timeout, log=bench.log)  # others' load is drift
        wall = None
        if side == "hpo":
            rows, wall, other = run_hpo(config, args, tmp, f"{name}-{tries}")
        else:
            rows, other = run_standalone(config, args)
        if other <= args.max_other_cpu:
            break
        bench.log(f"  {name} {side}: other processes used {other:.1f} CPU s; measuring again")
    return rows, other, wall, tries


def rounds(args: argparse.Namespace, config: dict[str, Any], tmp: Path) -> dict[str, Any]:
    sides: dict[str, dict[str, Any]] = {
        side: {"epoch": [], "train": [], "threads": set(), "device": set(), "other": []}
        for side in ("hpo", "standalone")}
    walls, dropped = [], 0
    for index in range(args.rounds):
        order = ("hpo", "standalone") if index % 2 == 0 else ("standalone", "hpo")
        for side in order:
            rows, other, wall, tries = measure(args, config, tmp, side, f"round-{index}")
            dropped += tries
            if wall is not None:
                walls.append((wall, sum(row["time_this_iter_s"] for row in rows)))
            got = sides[side]
            got["epoch"].append(epoch_times(rows))
            got["train"] += [row["train_s"] for row in rows[1:]]
            got["threads"] |= {row["threads"] for row in rows}
            got["device"] |= {row["device"] for row in rows}
            got["other"].append(other)
            bench.log(f"  round {index} {side}: epochs " + ", ".join(
                f"{t:.3f}" for t in got["epoch"][-1]) + f" s (other CPU {other:.1f} s)")
    return {"sides": sides, "walls": walls, "dropped": dropped}


def summarise(args: argparse.Namespace, config: dict[str, Any], found: dict[str, Any]) -> str:
    sides = found["sides"]
    med = {side: statistics.median(t for r in got["epoch"] for t in r)
           for side, got in sides.items()}
    train = {side: statistics.median(got["train"]) for side, got in sides.items()}
    header = ["side", "device", "threads", "epoch s (median)", "train_s (median)",
              "per round (median epoch s)", "other CPU s"]
    rows = [[side, ",".join(sorted(got["device"])), ",".join(map(str, sorted(got["threads"]))),
             f"{med[side]:.3f}", f"{train[side]:.3f}",
             ", ".join(f"{statistics.median(r):.3f}" for r in got["epoch"]),
             ", ".join(f"{o:.1f}" for o in got["other"])] for side, got in sides.items()]
    per_round = [statistics.median(s) / statistics.median(h) for h, s in
                 zip(sides["hpo"]["epoch"], sides["standalone"]["epoch"], strict=True)]
    # the headline: rounds that no other process disturbed (all, when every one was)
    quiet = [ratio for ratio, a, b in zip(per_round, sides["hpo"]["other"],
                                          sides["standalone"]["other"], strict=True)
             if max(a, b) <= args.max_other_cpu] or per_round
    ratio = statistics.median(quiet)
    wall, compute = statistics.median(w for w, _ in found["walls"]), statistics.median(
        c for _, c in found["walls"])
    table = bench.text_table(header, rows)
    print(table)
    summary = (f"hpo/standalone speed {ratio:.3f} (median of {len(quiet)} undisturbed rounds; "
               f"epoch {med['hpo']:.3f} s in hpo vs {med['standalone']:.3f} s standalone; "
               "per round "
               + ", ".join(f"{r:.3f}" for r in per_round) + f"; {args.device})")
    markdown = "\n".join([
        f"`trainables.images` with `{json.dumps(config)}`; {args.rounds} rounds, the order "
        "alternating; an epoch is the wall time between two reports (the first left out), "
        "so the hpo side includes its reports and a checkpoint each epoch. hpo/standalone "
        "speed = standalone epoch / hpo epoch, the median over the rounds that no other "
        f"process disturbed ({len(quiet)} of {len(per_round)}): **{ratio:.3f}** (per round "
        + ", ".join(f"{r:.3f}" for r in per_round) + f"). Whole `hpo run` wall {wall:.1f} s "
        f"for {compute:.1f} s of trial time (median). Runs measured again because other "
        f"processes used more than {args.max_other_cpu:g} CPU s meanwhile: {found['dropped']}.",
        "", bench.md_table(header, rows)])
    bench.publish(args, f"trial-vs-standalone-{args.device}-{args.cpus}cpu",
                  f"A trial against the same trainable standalone ({args.device}, {args.cpus} CPU)",
                  markdown)
    return summary


def trial_vs_standalone_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2,
                        help="the trial's CPUs, and the threads of both sides")
    parser.add_argument("--config", default="{}", help="JSON overrides of the trainable config")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--max-other-cpu", type=float, default=3.0,
                        help="measure a run again when other processes used more CPU s")
    parser.add_argument("--quiet-timeout", type=float, default=300,
                        help="wait this long at most for a quiet machine before each run")
    parser.add_argument("--child", help=argparse.SUPPRESS)


def trial_vs_standalone(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.child:
        standalone_child(json.loads(args.child), args.cpus)
        return None
    config = {**CONFIGS[args.device], **json.loads(args.config)}
    with tempfile.TemporaryDirectory(prefix="hpo-bench-tvs-") as tmp:
        found = rounds(args, config, Path(tmp))
    print(summarise(args, config, found))
    return {"config": config, "walls": found["walls"], "dropped": found["dropped"],
            "epochs": {side: got["epoch"] for side, got in found["sides"].items()}}
