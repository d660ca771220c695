"""SIMULATION, not a measurement: ASHA with fixed ranks per trial against RASDA (promoted
trials grow their data-parallel ranks) on N devices, in a small discrete-event model.

    python benchmarks/rasda_sim.py --devices 64 256 1024
    python benchmarks/rasda_sim.py --scaling 1:1,2:1.9,4:3.6,8:6.8 --max-workers 8
    python benchmarks/rasda_sim.py --scaling-file scaling.json --curves curves.csv

Both runs see the same trials (the same learning curves, a metric to maximise, one value per
iteration) in the same order. Promotion follows Ray Tune's ASHAScheduler (one bracket): when
a trial reports at a rung's milestone it is stopped if its value is below the
(1 - 1/reduction_factor) percentile of the values recorded at that rung so far, otherwise it
goes on (it is promoted), and every trial stops at max_t. RASDA grows a trial as hpo's rasda
scheduler does: after k rungs passed it is due workers x growth_factor**k ranks (up to
max_workers) and gets the largest such count that its ranks and the free devices hold; a new
or grown trial pays `restart_s` first (new rank processes, restore). An iteration takes
`iter_s / speedup(ranks)` with speedup from a scaling curve given as input: the global batch
stays (`batch: fixed`), so the curves do not change with the ranks. `batch: grows` is not
modelled. Pending trials start whenever enough devices are free; a grown trial takes free
devices before pending trials do (it is handled first).
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import md_table, text_table, write_section  # noqa: E402

# The default scaling curve: DDP strong scaling on 2 CPU cores, the same global batch on 1
# and on 2 ranks (docs/benchmarks.md, "Data-parallel trials": efficiency 0.90 in the first
# run of that session, 1.14 in the second; the lower one is taken).
CPU_DDP = {1: 1.0, 2: 1.8}
PRESETS = {"cpu-ddp": (CPU_DDP, "measured: DDP on 2 CPU cores, efficiency 0.90 at 2 ranks "
                                "(docs/benchmarks.md, Data-parallel trials)"),
           "linear": ({1: 1.0, 2: 2.0}, "assumed: perfect linear scaling"),
           "flat": ({1: 1.0, 2: 1.0}, "assumed: no speed-up from more ranks")}


@dataclass(frozen=True)
class Scaling:
    """Speed-up of one iteration over 1 rank, by ranks. Between two given rank counts the
    speed-up is interpolated linearly; beyond the largest, each further doubling repeats the
    last given doubling's gain (an extrapolation, said so in `describe`)."""

    speedup: dict[int, float]
    source: str

    def at(self, ranks: int) -> float:
        points = sorted(self.speedup.items())
        if ranks <= points[-1][0]:
            xs, ys = zip(*points, strict=True)
            return float(np.interp(ranks, xs, ys))
        (r0, s0), (r1, s1) = points[-2], points[-1]
        per_doubling = (s1 / s0) ** (1 / math.log2(r1 / r0))
        return s1 * per_doubling ** math.log2(ranks / r1)

    def describe(self, max_workers: int) -> str:
        given = ", ".join(f"{r}: {s:g}" for r, s in sorted(self.speedup.items()))
        text = f"{{{given}}} ({self.source})"
        top = max(self.speedup)
        beyond = [top * 2 ** k for k in range(1, 20) if top * 2 ** k <= max_workers]
        if beyond:
            shown = ", ".join(f"{r}: {self.at(r):.2f}" for r in beyond)
            text += f"; extrapolated beyond {top} ranks: {shown}"
        return text


def parse_scaling(text: str, path: Path | None = None) -> Scaling:
    """`linear`, `flat`, `cpu-ddp`, `1:1,2:1.9,4:3.6` (ranks:speed-up), or with `path` a JSON
    file {"speedup": {"1": 1.0, "2": 1.9}, "source": ...} (benchmarks/rasda.py --scaling-out)."""
    if path is not None:
        data = json.loads(path.read_text())
        pairs, source = data["speedup"].items(), f"{data.get('source')}, read from {path}"
    elif text in PRESETS:
        return Scaling(dict(PRESETS[text][0]), PRESETS[text][1])
    else:
        pairs, source = [i.split(":") for i in text.split(",") if i.strip()], f"given: {text}"
    curve = {int(r): float(s) for r, s in pairs}
    if curve.get(1) != 1.0 or len(curve) < 2 or min(curve.values()) <= 0:
        raise ValueError(f"a scaling curve needs 1:1 and at least one more rank count with a "
                         f"positive speed-up (got {curve})")
    return Scaling(curve, source)


def synthetic_curves(trials: int, max_t: int, seed: int) -> list[list[float]]:
    """Seeded accuracy-like curves a(1 - exp(-t/tau)) + noise: asymptote a in [0.5, 0.95],
    time constant tau log-uniform in [0.5, 8] iterations (slow learners can end best)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, max_t + 1)
    curves = []
    for _ in range(trials):
        top, tau = rng.uniform(0.5, 0.95), math.exp(rng.uniform(math.log(0.5), math.log(8)))
        noise = rng.normal(0.0, 0.005, max_t)
        curves.append([float(v) for v in top * (1 - np.exp(-steps / tau)) + noise])
    return curves


def read_curves(path: Path, metric: str, mode: str, max_t: int) -> tuple[list[list[float]], int]:
    """Curves from `hpo results DIR --curves --format csv`: one per trial_id, in file order,
    negated for mode min; a curve shorter than max_t (a trial stopped early in the recorded
    run) is padded with its last value. Returns the curves and how many were padded."""
    by_trial: dict[str, list[tuple[int, float]]] = {}
    with path.open() as handle:
        for row in csv.DictReader(handle):
            if row.get(metric, "") != "":
                sign = -1.0 if mode == "min" else 1.0
                by_trial.setdefault(row["trial_id"], []).append(
                    (int(float(row["training_iteration"])), sign * float(row[metric])))
    curves, padded = [], 0
    for points in by_trial.values():
        values = [v for _, v in sorted(points)][:max_t]
        padded += len(values) < max_t
        curves.append(values + [values[-1]] * (max_t - len(values)))
    return curves, padded


class Rungs:
    """Ray Tune's ASHA bracket (`_Bracket`, s=0) for one metric to maximise: milestones
    grace_period * rf**k below max_t, highest first; a trial is judged once per milestone."""

    def __init__(self, grace_period: int, max_t: int, reduction_factor: float) -> None:
        count = int(np.log(max_t / grace_period) / np.log(reduction_factor) + 1)
        self.rf = reduction_factor
        self.rungs: list[tuple[float, dict[int, float]]] = [
            (grace_period * reduction_factor ** k, {}) for k in reversed(range(count))]

    def judge(self, trial: int, iteration: int, value: float) -> str:
        """"stop", "promote" (judged at a milestone and kept) or "continue" (no milestone)."""
        for milestone, recorded in self.rungs:
            if iteration < milestone or trial in recorded:
                continue
            cutoff = (np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100)
                      if recorded else None)
            recorded[trial] = value
            return "stop" if cutoff is not None and value < cutoff else "promote"
        return "continue"


@dataclass(frozen=True)
class Setup:
    """One simulated run: `max_workers == workers` is ASHA with fixed ranks."""

    devices: int
    max_t: int = 16
    grace_period: int = 1
    reduction_factor: float = 2
    growth_factor: int = 2
    workers: int = 1
    max_workers: int = 1
    iter_s: float = 60.0
    restart_s: float = 20.0


SETUP_KEYS = ("max_t", "grace_period", "reduction_factor", "growth_factor", "workers",
              "max_workers", "iter_s", "restart_s")


@dataclass
class Outcome:
    best: float = -math.inf
    time_to_target: float = math.inf
    makespan: float = 0.0
    device_s: float = 0.0
    promotions: list[tuple[int, int]] = field(default_factory=list)  # (trial, iteration)
    growths: list[tuple[int, int, int]] = field(default_factory=list)  # (trial, iter, ranks)


@dataclass
class _Trial:
    curve: list[float]
    ranks: int
    done: int = 0
    began: float = 0.0  # start of the iteration under way (its restart included)


def simulate(setup: Setup, curves: Sequence[Sequence[float]], scaling: Scaling,
             target: float = math.inf) -> Outcome:
    """Run every trial (in order) through ASHA's rules on setup.devices devices."""
    if setup.workers > setup.devices or setup.max_workers < setup.workers:
        raise ValueError(f"need workers <= max_workers and workers <= devices (got {setup})")
    rungs = Rungs(setup.grace_period, setup.max_t, setup.reduction_factor)
    out, events = Outcome(), []
    trials: dict[int, _Trial] = {}
    pending, free = list(range(len(curves))), setup.devices

    def schedule(tid: int, now: float, restart: bool) -> None:
        trial = trials[tid]
        trial.began = now
        took = (setup.restart_s if restart else 0.0) + setup.iter_s / scaling.at(trial.ranks)
        heapq.heappush(events, (now + took, tid))

    now = 0.0
    while True:
        while pending and free >= setup.workers:
            tid = pending.pop(0)
            trials[tid], free = _Trial(list(curves[tid]), setup.workers), free - setup.workers
            schedule(tid, now, restart=True)
        if not events:
            break
        now, tid = heapq.heappop(events)
        trial = trials[tid]
        out.device_s += (now - trial.began) * trial.ranks
        free = _report(setup, rungs, out, trial, tid, now, target, free, schedule)
    out.makespan = now
    return out


def _report(setup: Setup, rungs: Rungs, out: Outcome, trial: _Trial, tid: int, now: float,
            target: float, free: int, schedule: Callable[[int, float, bool], None]
            ) -> int:
    """One iteration ended: record it, apply ASHA's rule, grow a promoted trial (RASDA) and
    schedule its next iteration. Returns the devices free afterwards."""
    value = trial.curve[trial.done]
    trial.done += 1
    out.best = max(out.best, value)
    if out.best >= target and out.time_to_target == math.inf:
        out.time_to_target = now
    decision = "stop" if trial.done >= setup.max_t else rungs.judge(tid, trial.done, value)
    if decision == "stop":
        return free + trial.ranks
    restart = False
    if decision == "promote":
        out.promotions.append((tid, trial.done))
        grown = _grow_to(setup, rungs, trial.done, trial.ranks, free)
        if grown > trial.ranks:
            free -= grown - trial.ranks
            trial.ranks, restart = grown, True
            out.growths.append((tid, trial.done, grown))
    schedule(tid, now, restart)
    return free


def _grow_to(setup: Setup, rungs: Rungs, done: int, ranks: int, free: int) -> int:
    """hpo's rasda rule: after k rungs passed a trial is due workers x growth_factor**k
    ranks (capped at max_workers); it gets the largest such count up to that which its own
    ranks and the free devices hold, else keeps its ranks."""
    counts = [setup.workers]
    while counts[-1] < setup.max_workers:
        counts.append(min(setup.max_workers, counts[-1] * setup.growth_factor))
    passed = sum(1 for milestone, _ in rungs.rungs if milestone <= done)
    due = counts[min(passed, len(counts) - 1)]
    return max((n for n in counts if n <= due and n <= ranks + free), default=ranks)


def compare(setup: Setup, curves: Sequence[Sequence[float]], scaling: Scaling,
            target: float | None = None) -> tuple[float, Outcome, Outcome]:
    """ASHA (ranks fixed at setup.workers) and RASDA (setup as given) on the same curves;
    the target defaults to the best value the ASHA run reached."""
    asha_setup = replace(setup, max_workers=setup.workers)
    if target is None:
        target = simulate(asha_setup, curves, scaling).best
    return (target, simulate(asha_setup, curves, scaling, target),
            simulate(setup, curves, scaling, target))


def _fmt_s(seconds: float) -> str:
    return "not reached" if seconds == math.inf else f"{seconds / 3600:.2f} h"


def _row(devices: int, trials: int, target: float, asha: Outcome, rasda: Outcome) -> list[str]:
    speedup = asha.time_to_target / rasda.time_to_target if rasda.time_to_target < math.inf \
        else 0.0
    return [str(devices), str(trials), f"{target:.4f}", _fmt_s(asha.time_to_target),
            _fmt_s(rasda.time_to_target), f"{speedup:.2f}x" if speedup else "n/a",
            f"{asha.device_s / 3600:.0f}", f"{rasda.device_s / 3600:.0f}",
            f"{rasda.device_s / asha.device_s:.2f}", _fmt_s(asha.makespan),
            _fmt_s(rasda.makespan), str(len(rasda.growths))]


HEADER = ["devices", "trials", "target", "ASHA: time to target", "RASDA: time to target",
          "ASHA/RASDA time", "ASHA device-h", "RASDA device-h", "RASDA/ASHA device-h",
          "ASHA: all done", "RASDA: all done", "growths"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--devices", type=int, nargs="+", default=[64, 256, 1024])
    add("--trials-per-device", type=float, default=1.0,
        help="trials = devices x this / workers (default 1: every device busy at the start)")
    for name, kind, default in (("max-t", int, 16), ("grace-period", int, 1),
                                ("reduction-factor", float, 2), ("growth-factor", int, 2),
                                ("workers", int, 1), ("max-workers", int, 8)):
        add(f"--{name}", type=kind, default=default)
    add("--iter-s", type=float, default=60.0, help="seconds of one iteration on 1 rank")
    add("--restart-s", type=float, default=20.0,
        help="paid when a trial starts and when it grows (new ranks, restore)")
    add("--scaling", default="cpu-ddp", help="cpu-ddp, linear, flat or 1:1,2:1.9,4:3.6")
    add("--scaling-file", type=Path, help="JSON written by benchmarks/rasda.py --scaling-out")
    add("--curves", type=Path, help="CSV of `hpo results DIR --curves --format csv`")
    add("--metric", default="val_accuracy")
    add("--mode", choices=["max", "min"], default="max")
    add("--seed", type=int, default=0, help="of the synthetic curves")
    add("--target", type=float, help="default: the best value of the ASHA run")
    add("--markdown", type=Path, help="write the rasda-sim section of this file")
    return parser


def _curves_for(args: argparse.Namespace, devices: int) -> tuple[list[list[float]], str]:
    if args.curves:
        curves, padded = read_curves(args.curves, args.metric, args.mode, args.max_t)
        return curves, (f"{len(curves)} curves of {args.metric} ({args.mode}) read from "
                        f"{args.curves}, {padded} padded with their last value to max_t")
    trials = max(1, int(devices * args.trials_per_device / args.workers))
    return synthetic_curves(trials, args.max_t, args.seed), (
        f"synthetic curves (seed {args.seed}, `synthetic_curves`), "
        f"{args.trials_per_device:g} trial(s) per device")


def run(args: argparse.Namespace) -> str:
    """Every device count: prints the table; returns the markdown text."""
    scaling = parse_scaling(args.scaling, args.scaling_file)
    rows, about = [], ""
    for devices in args.devices:
        setup = Setup(devices, **{key: getattr(args, key) for key in SETUP_KEYS})
        curves, about = _curves_for(args, devices)
        target, asha, rasda = compare(setup, curves, scaling, args.target)
        rows.append(_row(devices, len(curves), target, asha, rasda))
    lines = [
        "**SIMULATION** (`benchmarks/rasda_sim.py`, a discrete-event model; no device ran "
        "these figures).", "",
        f"Command: `python benchmarks/rasda_sim.py {' '.join(sys.argv[1:])}`.", "",
        f"ASHA: {args.workers} rank(s) per trial; RASDA: from {args.workers} rank(s), x"
        f"{args.growth_factor} at each promotion up to {args.max_workers} (and the free "
        f"devices); `batch: fixed`. max_t {args.max_t}, grace_period {args.grace_period}, "
        f"reduction_factor {args.reduction_factor:g}; {about}. One iteration on 1 rank: "
        f"{args.iter_s:g} s; a trial's start and each growth: {args.restart_s:g} s. "
        f"Scaling curve (speed-up by ranks): {scaling.describe(args.max_workers)}. "
        "Target: " + (f"{args.target}" if args.target is not None else
                      "the best value the ASHA run reached") + ".", ""]
    print("SIMULATION (not measured):\n" + "\n".join(lines[2:-1]) + "\n")
    print(text_table(HEADER, rows))
    return "\n".join(lines) + "\n" + md_table(HEADER, rows)


def main() -> None:
    args = _parser().parse_args()
    text = run(args)
    if args.markdown:
        write_section(args.markdown, "rasda-sim", "## RASDA vs ASHA: simulated on 64-1024 "
                      "GPUs (SIMULATION)\n\n" + text)


if __name__ == "__main__":
    main()
