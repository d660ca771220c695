"""hpo's overhead over plain Ray Tune: whole-process wall time of the real `hpo run` CLI
against a plain Ray Tune script doing the same work at Ray Tune's best settings.

Workloads (the trainables are in benchmarks/workloads.py):
  sleep   N trials (default 40) that each sleep 1 s and report once; 2 CPUs, 1 per trial
  stream  2 trials that each report 50 results/s for 20 s (1000 reports each)

Each repeat runs hpo and raw back to back (the order alternates between repeats, so slow
drift of the machine hits both sides alike); the table gives the medians and hpo/raw.
A run during which other processes used more than --max-other-cpu CPU seconds is thrown
away together with its partner and the pair is run again (up to --retries times).

Run from the repository root, with the venv active:
    python benchmarks/overhead.py                 # the full benchmark (about 7 minutes)
    python benchmarks/overhead.py --quick         # sanity run (about 1.5 minutes)
    python benchmarks/overhead.py --markdown docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import (  # noqa: E402
    Timed,
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


@dataclass
class Workload:
    key: str
    label: str
    trials: int
    constants: dict[str, Any]
    reports_per_trial: int
    ideal_s: float  # the work itself on 2 parallel slots, with zero overhead


def workloads(args: argparse.Namespace) -> list[Workload]:
    chosen = []
    if "sleep" in args.workloads:
        chosen.append(Workload(
            "sleep", f"{args.trials} trials x {args.sleep_s:g} s sleep, 1 report each",
            args.trials, {"sleep_s": args.sleep_s}, 1,
            math.ceil(args.trials / args.cpus) * args.sleep_s))
    if "stream" in args.workloads:
        count = int(round(args.rate * args.duration_s))
        chosen.append(Workload(
            "stream", f"{args.stream_trials} trials x {args.rate:g} reports/s x "
            f"{args.duration_s:g} s", args.stream_trials,
            {"rate": args.rate, "duration_s": args.duration_s}, count,
            math.ceil(args.stream_trials / args.cpus) * args.duration_s))
    return chosen


def hpo_command(work: Workload, tmp: Path, name: str, cpus: int) -> list[str]:
    spec = {
        "name": name,
        "trainable": f"benchmarks.workloads:{'sleep_once' if work.key == 'sleep' else 'stream'}",
        "metric": "score",
        "mode": "max",
        "num_samples": work.trials,
        "constants": work.constants,
        "resources": {"cpus_per_trial": 1},
    }
    yaml_path = tmp / f"{work.key}.yaml"
    yaml_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return hpo_run_command(yaml_path, tmp / "storage", name, cpus)


def raw_command(work: Workload, tmp: Path, name: str, cpus: int) -> list[str]:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "raw_tune_overhead.py"), work.key,
           "--trials", str(work.trials), "--cpus", str(cpus),
           "--storage", str(tmp / "storage"), "--name", name]
    if work.key == "sleep":
        cmd += ["--sleep-s", str(work.constants["sleep_s"])]
    else:
        cmd += ["--rate", str(work.constants["rate"]),
                "--duration-s", str(work.constants["duration_s"])]
    return cmd


def count_results(exp_dir: Path) -> tuple[int, int]:
    """(trial folders with a result.json, result lines in all of them)."""
    files = list(exp_dir.glob("*/result.json"))
    lines = sum(sum(1 for line in f.read_text().splitlines() if line.strip()) for f in files)
    return len(files), lines


def run_one(side: str, work: Workload, tmp: Path, tag: str, args: argparse.Namespace,
            env: dict[str, str]) -> Timed:
    name = f"{side}-{work.key}-{tag}"
    build = hpo_command if side == "hpo" else raw_command
    cmd = build(work, tmp, name, args.cpus)
    timed = run_when_quiet(cmd, env=env, quiet_timeout=args.quiet_timeout,
                           run_timeout=args.run_timeout)
    trials, lines = count_results(tmp / "storage" / name)
    timed.extra.update(trials=trials, results=lines, cmd=shlex.join(cmd))
    expected = (work.trials, work.trials * work.reports_per_trial)
    if timed.returncode != 0 or (trials, lines) != expected:
        log(timed.stdout[-3000:])
        log(timed.stderr[-3000:])
        raise SystemExit(f"{side} run failed or did different work: rc {timed.returncode}, "
                         f"{trials} trials / {lines} results, expected {expected}")
    timed.stdout = timed.stdout[-2000:]
    timed.stderr = timed.stderr[-2000:]
    shutil.rmtree(tmp / "storage" / name, ignore_errors=True)
    return timed


def measure(work: Workload, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    kept: dict[str, list[Timed]] = {"hpo": [], "raw": []}
    dropped: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix=f"hpo-bench-{work.key}-"))
    try:
        repeat, attempt = 0, 0
        while repeat < args.repeats:
            order = ("hpo", "raw") if repeat % 2 == 0 else ("raw", "hpo")
            pair = {}
            for side in order:
                pair[side] = run_one(side, work, tmp, f"{repeat}-{attempt}", args, env)
                t = pair[side]
                log(f"  {work.key} repeat {repeat + 1}/{args.repeats} {side}: "
                    f"{t.wall_s:6.2f} s  (other processes: {t.other_cpu_s:.1f} CPU s)")
            attempt += 1
            noisy = [s for s, t in pair.items() if t.other_cpu_s > args.max_other_cpu]
            if noisy:
                why = "; ".join(pair[s].other_top for s in noisy)
                if len(dropped) < args.retries:
                    log(f"  machine was busy during {'/'.join(noisy)} ({why}): pair run again")
                    dropped.append({s: asdict(t) for s, t in pair.items()})
                    continue
                log(f"  machine was busy during {'/'.join(noisy)} ({why}), no retries left: "
                    "pair kept")
            for side, t in pair.items():
                kept[side].append(t)
            repeat += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    hpo_t = [t.wall_s for t in kept["hpo"]]
    raw_t = [t.wall_s for t in kept["raw"]]
    return {
        "workload": asdict(work),
        "hpo_s": hpo_t,
        "raw_s": raw_t,
        "hpo_median_s": median(hpo_t),
        "raw_median_s": median(raw_t),
        "ratio": median(hpo_t) / median(raw_t),
        "pair_ratios": [h / r for h, r in zip(hpo_t, raw_t, strict=True)],
        "other_cpu_s": {s: [t.other_cpu_s for t in ts] for s, ts in kept.items()},
        "dropped_pairs": len(dropped),
        "commands": {s: ts[0].extra["cmd"] for s, ts in kept.items() if ts},
        "dropped": dropped,
    }


def rows(results: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["workload", "ideal", "hpo median", "raw median", "hpo/raw",
              "hpo runs", "raw runs", "per-pair hpo/raw"]
    body = []
    for res in results:
        body.append([
            res["workload"]["label"], f"{res['workload']['ideal_s']:.0f} s",
            f"{res['hpo_median_s']:.2f} s", f"{res['raw_median_s']:.2f} s",
            f"**{res['ratio']:.3f}**",
            ", ".join(f"{x:.2f}" for x in res["hpo_s"]),
            ", ".join(f"{x:.2f}" for x in res["raw_s"]),
            ", ".join(f"{x:.3f}" for x in res["pair_ratios"]),
        ])
    return header, body


def markdown(results: list[dict[str, Any]], argv: list[str], args: argparse.Namespace,
             started: str, took_s: float) -> str:
    header, body = rows(results)
    dropped = sum(r["dropped_pairs"] for r in results)
    other = max((x for r in results for xs in r["other_cpu_s"].values() for x in xs),
                default=0.0)
    cmds = "\n".join(f"- {r['workload']['key']}: hpo `{r['commands']['hpo']}` / raw "
                     f"`{r['commands']['raw']}`" for r in results)
    return f"""## Overhead: `hpo run` vs plain Ray Tune

Command: `{shlex.join(['python', 'benchmarks/overhead.py', *argv])}` (run {started}, took
{took_s / 60:.1f} min). Machine: {machine()}; {versions()}.

Whole-process wall time from starting the process to its exit, {args.repeats} repeats per
side, hpo and raw run back to back with the order alternating; median of the repeats.
"ideal" is the work itself on {args.cpus} parallel slots with zero overhead. Pairs thrown
away because other processes used more than {args.max_other_cpu:g} CPU s during a run:
{dropped}; the most CPU other processes used during a kept run: {other:.1f} s.

{md_table(header, body)}

Exact commands of the first repeat (temp paths vary):
{cmds}
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Wall time of `hpo run` vs plain Ray Tune on the same work.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--workloads", default="sleep,stream",
                        help="comma-separated: sleep, stream")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=40, help="sleep workload: trials")
    parser.add_argument("--sleep-s", type=float, default=1.0)
    parser.add_argument("--stream-trials", type=int, default=2)
    parser.add_argument("--rate", type=float, default=50.0, help="stream: reports per second")
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of each Ray (1 per trial)")
    parser.add_argument("--quick", action="store_true",
                        help="sanity run: 8 sleep trials, 5 s streams, 1 repeat")
    parser.add_argument("--max-other-cpu", type=float, default=2.0,
                        help="CPU seconds other processes may use during a kept run")
    parser.add_argument("--retries", type=int, default=10,
                        help="disturbed pairs that may be thrown away and run again, per "
                        "workload")
    parser.add_argument("--quiet-timeout", type=float, default=600.0,
                        help="longest wait for a quiet machine before each run (s)")
    parser.add_argument("--run-timeout", type=float, default=900.0)
    parser.add_argument("--markdown", type=Path, help="write the section into this file")
    parser.add_argument("--json", type=Path, help="write all measurements here")
    argv = sys.argv[1:]
    args = parser.parse_args()
    if args.quick:
        args.trials, args.duration_s, args.repeats = 8, 5.0, 1
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]

    env = dict(os.environ)
    # The same reporter on both sides (hpo sets it itself; the raw script sets it too).
    env["RAY_AIR_NEW_OUTPUT"] = "0"
    env.pop("RAY_AUTH_MODE", None)  # hpo sets its own; the raw side disables it

    started = time.strftime("%Y-%m-%d %H:%M %Z")
    t0 = time.monotonic()
    log(f"machine: {machine()}; {versions()}")
    results = []
    for work in workloads(args):
        log(f"workload {work.key}: {work.label} (ideal {work.ideal_s:.0f} s)")
        results.append(measure(work, args, env))
    took = time.monotonic() - t0

    header, body = rows(results)
    print()
    print(text_table(header, [[c.replace("**", "") for c in row] for row in body]))
    if args.json:
        args.json.write_text(json.dumps({"argv": argv, "results": results}, indent=2))
    if args.markdown:
        write_section(args.markdown, "overhead", markdown(results, argv, args, started, took))
        log(f"wrote the overhead section of {args.markdown}")


if __name__ == "__main__":
    main()
