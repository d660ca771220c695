"""hpo's per-epoch time against the same trainable standalone, side by side in one run.

    python benchmarks/trial_vs_standalone.py                      # CPU, about 3 minutes
    python benchmarks/trial_vs_standalone.py --device cuda        # a GPU node, one command
    python benchmarks/trial_vs_standalone.py --markdown docs/benchmarks.md

Each round runs `trainables.images` twice, in an order that alternates from round to round
(drift on a shared machine hits both sides alike): once as the one trial of a real `hpo run`
(checkpoint every epoch, hpo's default) and once standalone, a plain process calling the same
function with `hpo.report` collecting into a list (`hpo.trial.session.local_trial`: no Ray, no
checkpoint). Both get the same torch threads (the trial's CPUs). An epoch's time is the wall
time between two reports, so the hpo side pays for its reports and checkpoints; the first
epoch (start-up, warm-up) is left out. Also shown: `train_s`, the training steps alone.
The last line printed is the summary (benchmarks/gpu.py shows it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
    run_timed,
    text_table,
    versions,
    wait_until_quiet,
    write_section,
)

# Epochs of a few seconds each (shorter ones would measure the report, not the loop).
CONFIGS = {
    "cpu": {"image_size": 16, "width": 16, "train_size": 16384, "val_size": 1024,
            "batch_size": 256, "lr": 0.05, "epochs": 5},
    "cuda": {"image_size": 32, "width": 32, "train_size": 131072, "val_size": 4096,
             "batch_size": 256, "lr": 0.05, "epochs": 6},
}


def timed(config: dict[str, Any]) -> None:
    """`trainables.images:train` with each report stamped: its wall time, the torch threads
    and the device (the trainable file of the hpo side, and the standalone side's body)."""
    import torch

    import hpo
    from hpo import dist
    from trainables import images

    report = hpo.report

    def stamped(metrics: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        extra = {"wall": time.time(), "threads": torch.get_num_threads(),
                 "device": str(dist.device())}
        report({**metrics, **extra}, *args, **kwargs)

    hpo.report = stamped  # type: ignore[assignment]  # images calls hpo.report
    try:
        images.train(config)
    finally:
        hpo.report = report  # type: ignore[assignment]


def standalone_child(config: dict[str, Any], threads: int) -> None:
    """The standalone side, in its own process: prints its reports as JSON."""
    import torch

    from hpo.trial.session import local_trial

    torch.set_num_threads(threads)
    with local_trial() as reports:
        timed(config)
    print(json.dumps(reports))


def run_standalone(config: dict[str, Any], args: argparse.Namespace) -> tuple[list[dict], float]:
    env = env_with_root()
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, __file__, "--child", json.dumps(config), "--cpus", str(args.cpus)]
    timed_run = run_timed(cmd, cwd=ROOT, env=env, timeout_s=args.timeout)
    if timed_run.returncode:
        raise SystemExit(f"standalone failed:\n{timed_run.stderr[-3000:]}")
    return json.loads(timed_run.stdout.strip().splitlines()[-1]), timed_run.other_cpu_s


def run_hpo(config: dict[str, Any], args: argparse.Namespace, tmp: Path,
            name: str) -> tuple[list[dict], float, float]:
    spec = {"name": name, "trainable": f"{Path(__file__).resolve()}:timed",
            "metric": "val_accuracy", "mode": "max", "constants": config,
            "resources": {"cpus_per_trial": args.cpus,
                          "gpus_per_trial": 1 if args.device == "cuda" else 0}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    cmd = hpo_run_command(path, tmp / "runs", name, cpus=args.cpus)
    timed_run = run_timed(cmd, cwd=ROOT, env=env_with_root(),
                          timeout_s=args.timeout)
    if timed_run.returncode:
        raise SystemExit(f"hpo run failed:\n{timed_run.stderr[-3000:]}")
    (result,) = (tmp / "runs" / name).glob("*/result.json")
    rows = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
    return rows, timed_run.wall_s, timed_run.other_cpu_s


def epoch_times(rows: list[dict]) -> list[float]:
    """Wall time between successive reports: every epoch but the first."""
    return [b["wall"] - a["wall"] for a, b in zip(rows, rows[1:], strict=False)]


def measure(args: argparse.Namespace, config: dict[str, Any], tmp: Path, side: str,
            name: str) -> tuple[list[dict], float, float | None, int]:
    """One side's run, repeated (up to 3 times) while other processes disturb it: its rows,
    the other processes' CPU seconds, the hpo run's wall, and the runs thrown away."""
    for tries in range(3):
        wait_until_quiet(timeout_s=args.quiet_timeout, log=log)  # others' load is drift
        wall = None
        if side == "hpo":
            rows, wall, other = run_hpo(config, args, tmp, f"{name}-{tries}")
        else:
            rows, other = run_standalone(config, args)
        if other <= args.max_other_cpu:
            break
        log(f"  {name} {side}: other processes used {other:.1f} CPU s; measuring again")
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
            log(f"  round {index} {side}: epochs " + ", ".join(
                f"{t:.3f}" for t in got["epoch"][-1]) + f" s (other CPU {other:.1f} s)")
    return {"sides": sides, "walls": walls, "dropped": dropped}


def summarise(args: argparse.Namespace, config: dict[str, Any], found: dict[str, Any],
              took_s: float) -> str:
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
    table = text_table(header, rows)
    print(table)
    summary = (f"hpo/standalone speed {ratio:.3f} (median of {len(quiet)} undisturbed rounds; "
               f"epoch {med['hpo']:.3f} s in hpo vs {med['standalone']:.3f} s standalone; "
               "per round "
               + ", ".join(f"{r:.3f}" for r in per_round) + f"; {args.device})")
    command = "python benchmarks/trial_vs_standalone.py " + " ".join(sys.argv[1:])
    markdown = "\n".join([
        f"## A trial against the same trainable standalone ({args.device}, {args.cpus} CPU)", "",
        f"Command: `{command}` (run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"took {took_s / 60:.1f} min). Machine: {machine()}; {versions()}.", "",
        f"`trainables.images` with `{json.dumps(config)}`; {args.rounds} rounds, the order "
        "alternating; an epoch is the wall time between two reports (the first left out), "
        "so the hpo side includes its reports and a checkpoint each epoch. hpo/standalone "
        "speed = standalone epoch / hpo epoch, the median over the rounds that no other "
        f"process disturbed ({len(quiet)} of {len(per_round)}): **{ratio:.3f}** (per round "
        + ", ".join(f"{r:.3f}" for r in per_round) + f"). Whole `hpo run` wall {wall:.1f} s "
        f"for {compute:.1f} s of trial time (median). Runs measured again because other "
        f"processes used more than {args.max_other_cpu:g} CPU s meanwhile: {found['dropped']}.",
        "", md_table(header, rows)])
    if args.markdown:
        write_section(args.markdown, f"trial-vs-standalone-{args.device}-{args.cpus}cpu", markdown)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2,
                        help="the trial's CPUs, and the threads of both sides")
    parser.add_argument("--config", default="{}", help="JSON overrides of the trainable config")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--max-other-cpu", type=float, default=3.0,
                        help="measure a run again when other processes used more CPU s")
    parser.add_argument("--quiet-timeout", type=float, default=300,
                        help="wait this long at most for a quiet machine before each run")
    parser.add_argument("--markdown", type=Path, help="rewrite this script's section there")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        standalone_child(json.loads(args.child), args.cpus)
        return
    config = {**CONFIGS[args.device], **json.loads(args.config)}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hpo-bench-tvs-") as tmp:
        found = rounds(args, config, Path(tmp))
    print(summarise(args, config, found, time.monotonic() - started))


if __name__ == "__main__":
    main()
