"""The summary of benchmarks/search_efficiency.py: per-seed and per-target tables, speed-up
ratios against ASHA+TPE, and its section of docs/benchmarks.md.

`runs` maps (method, seed) to one run's measurements (see search_efficiency.run_method).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
from dataclasses import dataclass
from typing import Any

from benchmarks._common import machine, md_table, median, versions

METHODS = ("asha+tpe", "random", "optuna")
Runs = dict[tuple[str, int], dict[str, Any]]


@dataclass(frozen=True)
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
            "median_ttt_s": median(all_t),
            "median_best": median([r["best"] for r in rs]),
            "median_wall_s": median([r["wall_s"] for r in rs]),
            "median_epochs": median([r["epochs_run"] for r in rs]),
            "median_first_s": median([r["first_result_s"] for r in rs]),
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


def markdown(runs: Runs, seeds: list[int],
             summary: dict[str, Any], args: argparse.Namespace, problem: Problem, argv: list[str],
             started: str, took_s: float, dropped: int) -> str:
    methods = methods_in(runs)
    h1, r1, h2, r2 = tables(runs, seeds, summary, args)
    worst_err = max(r["time_error_s"] for r in runs.values())
    other = max(r["other_cpu_s"] for r in runs.values())
    space = json.dumps(problem.space)
    first = seeds[0]
    cmds = "\n".join(f"- {m}: `{runs[(m, first)]['cmd']}`" for m in methods)
    return f"""## Search efficiency: `{args.workload}` (`{problem.trainable}`)

Command: `{shlex.join(['python', 'benchmarks/search_efficiency.py', *argv])}` (run {started},
took {took_s / 60:.1f} min). Machine: {machine()}; {versions()}.

Search space `{space}`, constants `{json.dumps(problem.constants)}`; {args.num_samples} trials
per run, 2 CPUs, 1 CPU per trial (2 at a time), seeds {', '.join(map(str, seeds))}. ASHA:
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

{md_table(h2, r2)}

{chr(10).join('- ' + line for line in speedup_lines(summary))}

The same run scored against other targets (median time over all seeds, a seed that missed
counting as infinite; ratios: median per-seed time(method) / time(ASHA+TPE) over the n
seeds where at least one reached it, a seed where one missed counting as a bound, ">X" or
"<X", from its whole run; a median that lands on a bound is one):

{md_table(*targets_table(runs, seeds, args))}

Per seed (">X (not reached)": the target was not reached in the run's X seconds; a ratio
with ">"/"<" is a bound from such a run):

{md_table(h1, r1)}

Exact commands for seed {first} (temp paths vary):
{cmds}
"""
