"""Search efficiency on a real trainable: how soon each method finds a configuration with
val_accuracy >= a target, and how good its best one is. Workloads (--workload): digits
(trainables.digits, an MLP on scikit-learn's digits), images (trainables.images, a CNN on
noisy synthetic textures, where epochs cost more and few configurations get far), and two
variants of images: images-long (27 epochs a trial) and images-wide (the learning rate over
6 decades).

Methods (same search space, same 2 CPUs with 2 trials at a time, same number of trials):
  asha+tpe   `hpo run`, scheduler asha + search optuna (TPE), seed s
  random     `hpo run`, FIFO + random search, seed s
  optuna     Optuna native: TPESampler(seed s) + HyperbandPruner, study.optimize(n_jobs=2)
             running the same trainable (`optuna_native` below, in a child process)

Time to target = wall-clock time from starting the method's process until the first
reported epoch whose val_accuracy reaches the target (whole process: imports, Ray start-up
and everything else count). For `hpo run` the result times come from the trials'
result.json files: Ray's `timestamp` has 1 s resolution, so each trial's start is pinned
down from all its results (floor(start + time_total_s) == timestamp for every result) and
each result's time is start + time_total_s, typically good to well under 0.5 s.

--rounds is the number of seeds (0, 1, ...): each round runs every method once. Run from the
repository root, with the venv active:
    python -m benchmarks search-efficiency              # 5 seeds (about 10-15 minutes)
    python -m benchmarks search-efficiency --quick      # 1 seed, 16 trials, 10 epochs
    python -m benchmarks search-efficiency --markdown docs/benchmarks.md
    python -m benchmarks search-efficiency --workload images --markdown docs/benchmarks.md

The summary (per-seed and per-target tables, speed-up ratios against ASHA+TPE) works on
`runs`, which maps (method, seed) to one run's measurements (see run_method).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

import benchmarks as bench

METRIC = "val_accuracy"


@dataclasses.dataclass(frozen=True)
class Workload:
    """One trainable with its search problem; every method runs exactly this."""

    trainable: str
    space: dict[str, Any]
    constants: dict[str, Any]
    epochs: int
    target: float
    more_targets: str
    section: str  # the docs/benchmarks.md section it writes


WORKLOADS = {
    # Real data, but easy: about one random configuration in seven reaches 0.97, and an epoch
    # is so cheap that start-up decides the race.
    "digits": Workload(
        trainable="trainables.digits:train",
        space={
            "lr": {"loguniform": [1.0e-4, 1.0]},
            "momentum": {"uniform": [0.0, 0.99]},
            "batch_size": {"choice": [16, 32, 64, 128, 256]},
            "hidden": {"choice": [16, 32, 64, 128]},
            "depth": {"choice": [1, 2, 3]},
        },
        constants={"optimizer": "sgd", "weight_decay": 0.0},
        epochs=20, target=0.97, more_targets="0.975,0.98", section="search-efficiency"),
    # A CNN on noisy textures: an epoch costs 0.1-1 s, and few configurations get far (2 of
    # 16 random ones reached 0.9 in 12 epochs when this was set up).
    "images": Workload(
        trainable="trainables.images:train",
        space={
            "lr": {"loguniform": [1.0e-3, 1.0]},
            "momentum": {"uniform": [0.0, 0.99]},
            "batch_size": {"choice": [32, 64, 128, 256, 512]},
            "width": {"choice": [4, 8, 16, 32]},
            "weight_decay": {"loguniform": [1.0e-6, 1.0e-1]},
        },
        constants={"noise": 2.0, "train_size": 2048, "val_size": 1024},
        epochs=12, target=0.95, more_targets="0.9,0.97", section="search-efficiency-images"),
}
# The same search with 27 epochs a trial (3^3: four brackets at reduction factor 3), closer to
# real training budgets: every configuration random search tries costs more than twice as
# much, while ASHA still judges most of them after 1-3 epochs.
WORKLOADS["images-long"] = dataclasses.replace(
    WORKLOADS["images"], epochs=27, section="search-efficiency-images-long")
# The same search with the learning rate over 6 decades instead of 3, as in a first search
# on a model nobody has tuned yet (the ASHA paper's CIFAR-10 spaces give it 5): good
# configurations get rarer, which costs random search whole trials and ASHA single epochs.
WORKLOADS["images-wide"] = dataclasses.replace(
    WORKLOADS["images"], space={**WORKLOADS["images"].space, "lr": {"loguniform": [1e-5, 10.0]}},
    section="search-efficiency-images-wide")


def search_space(args: argparse.Namespace) -> dict[str, Any]:
    return WORKLOADS[args.workload].space


def problem(args: argparse.Namespace) -> Problem:
    return Problem(WORKLOADS[args.workload].trainable, search_space(args), constants(args))


def hpo_spec(method: str, name: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "trainable": WORKLOADS[args.workload].trainable,
        "metric": METRIC,
        "mode": "max",
        "num_samples": args.num_samples,
        "max_concurrent": args.cpus,
        "search_space": search_space(args),
        "constants": constants(args),
        "resources": {"cpus_per_trial": 1},
    }
    if method == "asha+tpe":
        spec["scheduler"] = {"type": "asha", "max_t": args.epochs, "grace_period": 1,
                             "reduction_factor": args.reduction_factor,
                             "brackets": args.brackets}
        spec["search"] = {"type": "optuna", "seed": seed}
    else:
        spec["search"] = {"type": "random", "seed": seed}
    return spec


def optuna_brackets(epochs: int, reduction_factor: int) -> int:
    """How many brackets Optuna's HyperbandPruner makes (min_resource 1): ASHA gets as many,
    so both spread their trials over the same early-stopping schedules."""
    return int(math.floor(math.log(epochs) / math.log(reduction_factor) + 1e-9)) + 1


def constants(args: argparse.Namespace) -> dict[str, Any]:
    return {"epochs": args.epochs, **WORKLOADS[args.workload].constants}


# ---------------------------------------------------------------- result times of hpo runs

def trial_events(result_json: Path) -> list[tuple[float, float, float]]:
    """[(wall time, val_accuracy, +- uncertainty of the time in s)] of one trial's results.

    Each line has timestamp = floor(t) and time_total_s = t - start (Ray's function
    trainable session), so start lies in [timestamp - time_total_s, +1) for every line.
    """
    rows = [json.loads(line) for line in result_json.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if isinstance(r.get(METRIC), (int, float))]
    if not rows:
        return []
    began = bench.trial_start(rows)
    if began is None:  # inconsistent (should not happen): fall back to mid-second timestamps
        return [(r["timestamp"] + 0.5, float(r[METRIC]), 0.5) for r in rows]
    start, error = began
    return [(start + r["time_total_s"], float(r[METRIC]), error) for r in rows]


def hpo_events(exp_dir: Path) -> tuple[list[tuple[float, float, float]], int]:
    events: list[tuple[float, float, float]] = []
    trials = 0
    for path in sorted(exp_dir.glob("*/result.json")):
        events += trial_events(path)
        trials += 1
    return sorted(events), trials


def optuna_events(path: Path) -> tuple[list[tuple[float, float, float]], int]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return (sorted((r["time"], float(r[METRIC]), 0.0) for r in rows),
            len({r["trial"] for r in rows}))


def time_to_target(events: list[tuple[float, float, float]], start: float,
                   target: float) -> tuple[float | None, float]:
    """(seconds from start to the first result >= target, or None; its uncertainty)."""
    for when, value, err in events:
        if value >= target:
            return when - start, err
    return None, 0.0


# ---------------------------------------------------------------- running the methods

def run_method(method: str, seed: int, tmp: Path, args: argparse.Namespace,
               env: dict[str, str]) -> dict[str, Any]:
    name = f"{method.replace('+', '-')}-s{seed}"
    if method == "optuna":
        out = tmp / f"{name}.jsonl"
        study = tmp / f"{name}.json"
        study.write_text(json.dumps({
            "trainable": WORKLOADS[args.workload].trainable, "metric": METRIC,
            "max_resource": args.epochs, "search_space": search_space(args),
            "constants": constants(args), "seed": seed, "n_trials": args.num_samples,
            "n_jobs": args.cpus, "reduction_factor": args.reduction_factor,
            "out": str(out)}))
        cmd = [sys.executable, "-c", OPTUNA_CHILD, str(study)]
    else:
        yaml_path = tmp / f"{name}.yaml"
        yaml_path.write_text(yaml.safe_dump(hpo_spec(method, name, seed, args), sort_keys=False))
        cmd = bench.hpo_run_command(yaml_path, tmp / "storage", name, args.cpus, args.hpo_set)
    timed = bench.run_when_quiet(cmd, env=env, quiet_timeout=args.quiet_timeout,
                                 run_timeout=args.run_timeout)
    if timed.returncode != 0:
        bench.log(timed.stdout[-3000:], timed.stderr[-3000:])
        raise SystemExit(f"{method} seed {seed} failed (rc {timed.returncode}): "
                         f"{shlex.join(cmd)}")
    if method == "optuna":
        events, trials = optuna_events(out)
    else:
        events, trials = hpo_events(tmp / "storage" / name)
        shutil.rmtree(tmp / "storage" / name, ignore_errors=True)
    if trials != args.num_samples:
        raise SystemExit(f"{method} seed {seed}: {trials} trials ran, expected "
                         f"{args.num_samples}")
    ttt, err = time_to_target(events, timed.start_epoch, args.target)
    by_target = {f"{t:g}": time_to_target(events, timed.start_epoch, t)[0]
                 for t in [args.target, *args.more_targets]}
    return {
        "method": method, "seed": seed, "cmd": shlex.join(cmd), "wall_s": timed.wall_s,
        "time_to_target_s": ttt, "ttt": by_target,
        "first_result_s": events[0][0] - timed.start_epoch if events else None,
        "best": max(v for _, v, _ in events),
        "epochs_run": len(events), "trials": trials, "time_error_s": err,
        "other_cpu_s": timed.other_cpu_s, "other_top": timed.other_top,
    }


def search_efficiency_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-samples", type=int, default=40)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="digits")
    parser.add_argument("--epochs", type=int, help="default: the workload's")
    parser.add_argument("--target", type=float, help="default: the workload's")
    parser.add_argument("--more-targets",
                        help="further targets scored from the same runs (comma-separated; "
                        "default: the workload's)")
    parser.add_argument("--reduction-factor", type=int, default=3)
    parser.add_argument("--brackets", type=int,
                        help="ASHA's brackets (default: as many as Optuna's HyperbandPruner "
                        "makes for the same epochs and reduction factor)")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--hpo-set", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to `hpo run --set` (repeatable), e.g. "
                        "checkpoint.frequency=0")
    parser.add_argument("--max-other-cpu", type=float, default=3.0,
                        help="CPU seconds other processes may use during a kept run")
    parser.add_argument("--retries", type=int, default=8,
                        help="runs that may be repeated in all because the machine was busy")
    parser.add_argument("--quiet-timeout", type=float, default=600.0)
    parser.add_argument("--run-timeout", type=float, default=900.0)
    parser.add_argument("--from-json", type=Path,
                        help="measure nothing: print (and with --markdown write) the summary "
                        "of a run saved with --json; the other options come from that run")


def settle(args: argparse.Namespace) -> argparse.Namespace:
    """The options of a run, with the workload's defaults and --quick applied."""
    workload = WORKLOADS[args.workload]
    args.seeds = args.rounds
    args.epochs = args.epochs or workload.epochs
    args.target = args.target or workload.target
    more = workload.more_targets if args.more_targets is None else args.more_targets
    if args.quick:
        args.seeds, args.num_samples, args.epochs = 1, 16, min(args.epochs, 10)
    args.more_targets = [float(t) for t in more.split(",") if t.strip()]
    args.brackets = args.brackets or optuna_brackets(args.epochs, args.reduction_factor)
    return args


def measure(args: argparse.Namespace) -> tuple[Runs, list[dict[str, Any]]]:
    """Every method on every seed, order rotating per seed; a disturbed run is repeated."""
    chosen = [m.strip() for m in args.methods.split(",") if m.strip()]
    methods = tuple(m for m in METHODS if m in chosen)
    env = dict(os.environ)
    env["RAY_AIR_NEW_OUTPUT"] = "0"
    env.pop("RAY_AUTH_MODE", None)
    bench.log(f"machine: {bench.machine()}; {bench.versions()}")
    runs: Runs = {}
    dropped: list[dict[str, Any]] = []
    retries = args.retries
    tmp = Path(tempfile.mkdtemp(prefix="hpo-bench-search-"))
    try:
        for i, seed in enumerate(range(args.seeds)):
            order = methods[i % len(methods):] + methods[:i % len(methods)]  # rotate
            for method in order:
                while True:
                    res = run_method(method, seed, tmp, args, env)
                    bench.log(f"  seed {seed} {method:9s} time to {args.target:g}: "
                              f"{fmt_t(res):>8s} s  best {res['best']:.4f}  "
                              f"wall {res['wall_s']:6.1f} s  "
                              f"epochs {res['epochs_run']}  (other processes: "
                              f"{res['other_cpu_s']:.1f} CPU s)")
                    if res["other_cpu_s"] > args.max_other_cpu and retries > 0:
                        retries -= 1
                        bench.log(f"  machine was busy ({res['other_top']}): run again")
                        dropped.append(res)
                        continue
                    if res["other_cpu_s"] > args.max_other_cpu:
                        bench.log(f"  machine was busy ({res['other_top']}), no retries left: kept")
                    runs[(method, seed)] = res
                    break
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return runs, dropped


def report(args: argparse.Namespace, saved: dict[str, Any]) -> None:
    runs = {(r["method"], r["seed"]): r for r in saved["runs"]}
    seeds = list(range(args.seeds))
    summary = summarise(runs, seeds, f"{args.target:g}")
    h1, r1, h2, r2 = tables(runs, seeds, summary, args)
    print()
    print(bench.text_table(h1, r1))
    print()
    print(bench.text_table(h2, r2))
    for line in speedup_lines(summary):
        print(line)
    print()
    print(bench.text_table(*targets_table(runs, seeds, args)))
    bench.publish(args, WORKLOADS[args.workload].section,
                  f"Search efficiency: `{args.workload}` (`{problem(args).trainable}`)",
                  markdown(runs, seeds, summary, args, problem(args), len(saved["dropped"])))


def search_efficiency(args: argparse.Namespace) -> dict[str, Any]:
    if args.from_json:
        from benchmarks import REGISTRY
        from benchmarks.__main__ import parser_for

        saved = json.loads(args.from_json.read_text())
        measured = parser_for(REGISTRY["search-efficiency"]).parse_args(saved["argv"][1:])
        measured.rounds = measured.rounds or REGISTRY["search-efficiency"].rounds
        measured.markdown, measured.command = args.markdown, saved["command"]
        measured.started = time.monotonic() - saved["took_s"]
        report(settle(measured), saved)
        return saved
    settle(args)
    t0 = time.monotonic()
    runs, dropped = measure(args)
    argv = shlex.split(args.command)[3:]  # past `python -m benchmarks`
    saved = {"argv": argv, "command": args.command,
             "started": time.strftime("%Y-%m-%d %H:%M %Z"), "took_s": time.monotonic() - t0,
             "runs": list(runs.values()), "dropped": dropped}
    bench.log(f"took {saved['took_s'] / 60:.1f} min")
    report(args, saved)
    return saved


# ---------------------------------------------------------------- the summary

METHODS = ("asha+tpe", "random", "optuna")
Runs = dict[tuple[str, int], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Problem:
    """What every method searched: the trainable, its search space and fixed config."""

    trainable: str
    space: dict[str, Any]
    constants: dict[str, Any]


def methods_in(runs: Runs) -> tuple[str, ...]:
    """The methods measured, in the canonical order."""
    measured = {method for method, _ in runs}
    return tuple(m for m in METHODS if m in measured)


def fmt_t(res: dict[str, Any]) -> str:
    t = res["time_to_target_s"]
    return f"{t:.1f}" if t is not None else f">{res['wall_s']:.0f} (not reached)"


def speedups(runs: Runs, seeds: list[int], slow: str,
             fast: str, key: str) -> tuple[list[str], str | None, int, int]:
    """Per-seed ratio time_to_target(slow) / time_to_target(fast) (see _seed_ratio). Returns
    the texts, their median (see censored_median), the seeds it covers, how many are bounds."""
    if slow not in methods_in(runs) or fast not in methods_in(runs):
        return ["-"] * len(seeds), None, 0, 0
    per_seed = [_seed_ratio(runs[(slow, seed)], runs[(fast, seed)], key) for seed in seeds]
    texts = [f"{r[0]}{r[1]:.2f}" if r else "n/a" for r in per_seed]
    ratios = [r for r in per_seed if r]
    bounds = sum(1 for kind, _ in ratios if kind)
    return texts, censored_median(ratios), len(ratios), bounds


def _seed_ratio(slow: dict[str, Any], fast: dict[str, Any], key: str) -> tuple[str, float] | None:
    """('', ratio) when both reached the target; a method that never did counts with its whole
    wall time, as a bound ('>' or '<'); None when neither did."""
    ts, tf = slow["ttt"][key], fast["ttt"][key]
    if ts is not None and tf is not None:
        return "", ts / tf
    if tf is not None:
        return ">", slow["wall_s"] / tf
    if ts is not None:
        return "<", ts / fast["wall_s"]
    return None


def censored_median(ratios: list[tuple[str, float]]) -> str | None:
    """The median of per-seed ratios of which some are only bounds: ('>', x) where the slower
    method never reached the target (its ratio is at least x), ('<', x) where the faster one
    never did. Dropping those seeds would drop exactly the runs one method lost, so a bound
    sorts past every exact ratio on its side, and a median that lands on one is a bound."""
    if not ratios:
        return None
    side = {"<": -math.inf, ">": math.inf}
    ordered = sorted(ratios, key=lambda r: side.get(r[0], r[1]))
    half = len(ordered) // 2
    middle = ordered[half:half + 1] if len(ordered) % 2 else ordered[half - 1:half + 1]
    kinds = {kind for kind, _ in middle if kind}
    if len(kinds) > 1:
        return None
    # every '>' ratio is at least the smallest '>' bound (and '<' at most the largest)
    loose = {k: (min if k == ">" else max)(v for kind, v in ratios if kind == k) for k in kinds}
    value = statistics.mean(loose[k] if k else v for k, v in middle)
    return f"{''.join(kinds)}{value:.2f}"


def summarise(runs: Runs, seeds: list[int],
              key: str) -> dict[str, Any]:
    per_method = {}
    for method in methods_in(runs):
        rs = [runs[(method, s)] for s in seeds]
        reached = [r["ttt"][key] for r in rs if r["ttt"][key] is not None]
        # median over all seeds, a seed that missed counting as +inf
        all_t = sorted(r["ttt"][key] if r["ttt"][key] is not None else math.inf for r in rs)
        per_method[method] = {
            "reached": f"{len(reached)}/{len(rs)}",
            "median_ttt_s": bench.median(all_t),
            "median_best": bench.median([r["best"] for r in rs]),
            "median_wall_s": bench.median([r["wall_s"] for r in rs]),
            "median_epochs": bench.median([r["epochs_run"] for r in rs]),
            "median_first_s": bench.median([r["first_result_s"] for r in rs]),
        }
    rnd = speedups(runs, seeds, "random", "asha+tpe", key)
    opt = speedups(runs, seeds, "optuna", "asha+tpe", key)
    return {"methods": per_method, "random_over_asha": rnd, "optuna_over_asha": opt}


def tables(runs: Runs, seeds: list[int],
           summary: dict[str, Any], args: argparse.Namespace) -> tuple[list, list, list, list]:
    methods = methods_in(runs)
    h1 = ["seed", *[f"{m}: time to {args.target:g} (s)" for m in methods],
          *[f"{m}: best" for m in methods], *[f"{m}: wall (s)" for m in methods],
          "random/asha+tpe", "optuna/asha+tpe"]
    r1 = []
    for i, seed in enumerate(seeds):
        r1.append([seed, *[fmt_t(runs[(m, seed)]) for m in methods],
                   *[f"{runs[(m, seed)]['best']:.4f}" for m in methods],
                   *[f"{runs[(m, seed)]['wall_s']:.1f}" for m in methods],
                   summary["random_over_asha"][0][i], summary["optuna_over_asha"][0][i]])
    h2 = ["method", "reached target", "median time to target", "median best val_accuracy",
          "median time to first result", "median total wall", "median epochs run"]
    r2 = []
    for m in methods:
        s = summary["methods"][m]
        ttt = s["median_ttt_s"]
        r2.append([m, s["reached"], f"{ttt:.1f} s" if math.isfinite(ttt) else "not reached",
                   f"{s['median_best']:.4f}", f"{s['median_first_s']:.1f} s",
                   f"{s['median_wall_s']:.1f} s",
                   f"{s['median_epochs']:.0f}"])
    return h1, r1, h2, r2


def speedup_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    for key, label in (("random_over_asha", "random search / ASHA+TPE"),
                       ("optuna_over_asha", "Optuna native / ASHA+TPE")):
        _, med, n, bounds = summary[key]
        lines.append(f"{label} time to target: median per-seed ratio {med} over {n} seed(s), "
                     f"{bounds} of them bounds (one method missed the target)"
                     if med is not None else f"{label}: no median (see the seeds)")
    med = {m: st["median_ttt_s"] for m, st in summary["methods"].items()}
    if "asha+tpe" in med:
        parts = [f"{label}/ASHA+TPE {med[m] / med['asha+tpe']:.2f}"
                 for m, label in (("random", "random"), ("optuna", "Optuna")) if m in med]
        if parts:
            lines.append(f"ratio of the median times to target: {', '.join(parts)} "
                         "(>1: ASHA+TPE faster)")
    return lines


def targets_table(runs: Runs, seeds: list[int],
                  args: argparse.Namespace) -> tuple[list[str], list[list[str]]]:
    """One row per target: seeds that reached it and median time to it, per method, and the
    median per-seed ratios against ASHA+TPE (see censored_median)."""
    methods = methods_in(runs)
    header = ["target", *[f"{m}: reached, median time" for m in methods],
              "random/asha+tpe", "optuna/asha+tpe"]
    body = []
    for target in [args.target, *args.more_targets]:
        key = f"{target:g}"
        summary = summarise(runs, seeds, key)
        row = [key]
        for m in methods:
            st = summary["methods"][m]
            ttt = st["median_ttt_s"]
            row.append(f"{st['reached']}, " + (f"{ttt:.1f} s" if math.isfinite(ttt) else "-"))
        for name in ("random_over_asha", "optuna_over_asha"):
            _, med, n, bounds = summary[name]
            row.append(f"{med} (n={n}, {bounds} bounds)" if med is not None else "-")
        body.append(row)
    return header, body


def markdown(runs: Runs, seeds: list[int], summary: dict[str, Any],
             args: argparse.Namespace, problem: Problem, dropped: int) -> str:
    methods = methods_in(runs)
    h1, r1, h2, r2 = tables(runs, seeds, summary, args)
    worst_err = max(r["time_error_s"] for r in runs.values())
    other = max(r["other_cpu_s"] for r in runs.values())
    space = json.dumps(problem.space)
    first = seeds[0]
    cmds = "\n".join(f"- {m}: `{runs[(m, first)]['cmd']}`" for m in methods)
    fixed = json.dumps(problem.constants)
    return f"""Search space `{space}`, constants `{fixed}`; {args.num_samples} trials per run,
2 CPUs, 1 CPU per trial (2 at a time), seeds {', '.join(map(str, seeds))}. ASHA:
max_t {args.epochs}, grace_period 1, reduction_factor {args.reduction_factor}, brackets
{args.brackets}; TPE with
10 start-up trials and constant_liar (hpo's default) in both hpo and Optuna, Optuna's study
named after the seed; Optuna's HyperbandPruner: min_resource 1,
max_resource {args.epochs}, reduction_factor {args.reduction_factor}. Time to target: from
starting the process to the first reported epoch with val_accuracy >= {args.target:g}
(whole process, start-up included); the hpo result times behind these figures are good
to +-{worst_err:.2f} s or better. `hpo run` keeps the trainable's per-epoch checkpoints
(hpo's default checkpoint policy); Optuna native writes none. Runs thrown away and run
again because other processes used more than {args.max_other_cpu:g} CPU s meanwhile:
{dropped}; the most CPU other processes used during a kept run: {other:.1f} s.

Summary over seeds:

{bench.md_table(h2, r2)}

{chr(10).join('- ' + line for line in speedup_lines(summary))}

The same run scored against other targets (median time over all seeds, a seed that missed
counting as infinite; ratios: median per-seed time(method) / time(ASHA+TPE) over the n
seeds where at least one reached it, a seed where one missed counting as a bound, ">X" or
"<X", from its whole run; a median that lands on a bound is one):

{bench.md_table(*targets_table(runs, seeds, args))}

Per seed (">X (not reached)": the target was not reached in the run's X seconds; a ratio
with ">"/"<" is a bound from such a run):

{bench.md_table(h1, r1)}

Exact commands for seed {first} (temp paths vary):
{cmds}
"""


# ---------------------------------------------------------------- Optuna native

def suggest(trial: Any, name: str, dist: dict[str, list[Any]]) -> Any:
    """hpo's `{kind: [args]}` distribution as the matching Optuna suggestion."""
    (kind, args), = dist.items()
    if kind == "loguniform":
        return trial.suggest_float(name, args[0], args[1], log=True)
    if kind == "uniform":
        return trial.suggest_float(name, args[0], args[1])
    if kind == "choice":
        return trial.suggest_categorical(name, list(args))
    if kind == "randint":  # Ray's randint excludes the upper bound
        return trial.suggest_int(name, args[0], args[1] - 1)
    raise SystemExit(f"optuna_native: distribution {kind!r} not mapped")


class OptunaLink:
    """hpo.report -> the Optuna trial (a RankLink of one rank: see hpo.trial.session)."""

    main = True

    def __init__(self, trial: Any, metric: str, events: list[dict[str, Any]],
                 lock: threading.Lock) -> None:
        self.trial, self.metric, self.events, self.lock = trial, metric, events, lock
        self.step, self.last = 0, float("nan")

    def send(self, metrics: dict[str, Any], checkpoint: Path | None) -> None:
        import optuna

        self.step += 1
        value = float(metrics[self.metric])
        with self.lock:
            self.events.append({"time": time.time(), "trial": self.trial.number,
                                "step": self.step, self.metric: value})
        self.trial.report(value, self.step)
        self.last = value
        if self.trial.should_prune():
            raise optuna.TrialPruned()

    def restored(self) -> Path | None:
        return None


OPTUNA_CHILD = ("import sys; from benchmarks.search import optuna_native; "
                "optuna_native(sys.argv[1])")


def optuna_native(study_json: str) -> None:
    """Optuna native on an hpo trainable: TPESampler + HyperbandPruner, study.optimize with
    n_jobs=2 (two trials at a time in threads, like 2 Ray workers with 1 CPU each); the metric
    is maximised. The sampler is set up as hpo's `search: {type: optuna}` (constant_liar on), and
    the study is named after the seed: HyperbandPruner puts trials in brackets by a hash of the
    study name, so a random name would make the same seed prune differently from run to run.

    The trainable runs unchanged: its `hpo.report` calls reach Optuna through a session link
    (trial.report + trial.should_prune) instead of Ray Tune, and no checkpoints are written
    (Optuna has none). The threads share torch's global RNG, so a trial's initial weights may
    differ from the same configuration's in a process of its own. Every report's metric is
    recorded with its wall-clock time, as JSON lines, for the search-efficiency benchmark.
    The child process of the optuna method: its settings are a JSON file (see run_method)."""
    import optuna
    import torch

    from hpo.driver.run.trainable import load_trainable
    from hpo.trial.session import trial_session

    args = argparse.Namespace(**json.loads(Path(study_json).read_text()))
    train = load_trainable(args.trainable)
    torch.set_num_threads(1)  # one thread per trial, as Ray gives each 1-CPU worker
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space, constants = args.search_space, args.constants
    events: list[dict[str, Any]] = []
    lock = threading.Lock()

    def objective(trial: optuna.Trial) -> float:
        config = {**constants, **{name: suggest(trial, name, d) for name, d in space.items()}}
        link = OptunaLink(trial, args.metric, events, lock)
        with trial_session(checkpoint_every=0, link=link):
            train(config)
        return link.last

    study = optuna.create_study(
        study_name=f"hpo-benchmark-seed-{args.seed}", direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=args.seed, constant_liar=True,
                                           n_startup_trials=10),
        pruner=optuna.pruners.HyperbandPruner(min_resource=1, max_resource=args.max_resource,
                                              reduction_factor=args.reduction_factor),
    )
    study.optimize(objective, n_trials=args.n_trials, n_jobs=args.n_jobs)
    with open(args.out, "w") as file:
        for event in events:
            file.write(json.dumps(event) + "\n")
    done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    print(f"{len(study.trials)} trials ({done} complete), best value {study.best_value:.4f}")
