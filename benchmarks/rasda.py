"""RASDA against ASHA with fixed ranks, by --mode.

hpo (default): measured through the real `hpo run` on this machine: the same search (the same
8 configurations of `trainables.images:train`, DDP ranks) once with ASHA on 1 rank per trial
and once with RASDA growing promoted trials from 1 to 2 ranks, --rounds pairs, the order
alternating. Time to target: from starting the `hpo run` process to the first result (of any
trial) at or above the target, by default the best val_accuracy of the ASHA run of the pair
(whole process, start-up included; result times from Ray's `timestamp` and `time_total_s`).
Rank-seconds: the sum over all results of time_this_iter_s x the ranks the trial ran on (the
`ranks` column the relay adds; without it 1, and n/a for RASDA). `--max-concurrent 1` (a core
left free for growth) writes its own section, rasda-max-concurrent-1.

tune: through Tune's own controller, on a Ray started with N logical GPUs: hpo's
RasdaScheduler (with its gated search) vs Ray's AsyncHyperBandScheduler, the same search
(random or Optuna TPE, same seed) in both. A stand-in trial holds one {CPU: 1, GPU: 1} bundle
per rank (hpo's rank placement), reads its rank count from Tune, sleeps `iter_s / ranks**0.9`
per iteration and saves a real checkpoint every iteration. Its score after epoch e is the
recorded val_accuracy after epoch e of the images trainable's config nearest to its own
(benchmarks/data/images-long-curves.json, written by --mode curves), so trials rank as real
ones do. Figures, each a ratio ASHA/RASDA (above 1: RASDA faster) from runs side by side:
  first at max_t   seconds from fit() to the first result at max_t;
  to 0.5%          seconds until the run's best is within 0.5% of the pair's final best
                   (the better of the two runs), inf where a run never got there;
  wall             the whole study; device-s: sum of iteration seconds x ranks (RASDA/ASHA).
With --json, the pairs already in that file are kept, so calls one after another build up
the matrix.

curves: record the learning curves --mode tune replays: real `hpo run`s of the built-in
images trainable (search-efficiency's images-long workload: a CNN on noisy textures, 27
epochs, its five-parameter space), random search, every trial run to the end (FIFO).

    python -m benchmarks rasda --rounds 2 --markdown docs/benchmarks.md
    python -m benchmarks rasda --mode tune --devices 16 32 --per-device 1 3 --iter-s 1 3 \
        --search random tpe --seeds 0 1 2 --json pairs.json --markdown docs/benchmarks.md
    python -m benchmarks rasda --mode curves --trials 64
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

import benchmarks as bench


def rasda_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=["hpo", "tune", "curves"], default="hpo")
    parser.add_argument("--target", type=float, help="hpo: default the ASHA run's best")
    parser.add_argument("--quiet-timeout", type=float, default=300, help="hpo")
    parser.add_argument("--max-concurrent", type=int,
                        help="hpo: trials at a time (1: a core left free for growth)")
    parser.add_argument("--devices", type=int, nargs="+", default=[32], help="tune")
    parser.add_argument("--per-device", type=int, nargs="+", default=[3], help="tune")
    parser.add_argument("--iter-s", type=float, nargs="+", default=[3.0], help="tune")
    parser.add_argument("--search", nargs="+", choices=["random", "tpe"], default=["random"],
                        help="tune")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="tune")
    parser.add_argument("--trials", type=int, default=64, help="curves")
    parser.add_argument("--concurrent", type=int, default=2, help="curves")
    parser.add_argument("--seed", type=int, default=0, help="curves")
    parser.add_argument("--out", type=Path, default=None,
                        help="curves: default benchmarks/data/images-long-curves.json")


def rasda(args: argparse.Namespace) -> Any:
    return {"hpo": rasda_hpo, "tune": rasda_tune, "curves": record_curves}[args.mode](args)


# ---------------------------------------------------------------- hpo: through `hpo run`

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
    began = bench.trial_start(rows)
    if began is None:
        return [r["timestamp"] + 0.5 for r in rows]
    return [began[0] + r["time_total_s"] for r in rows]


def measure(tmp: Path, variant: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One `hpo run`; its results read back from the experiment folder."""
    from hpo.results import trial_results

    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec(variant, name, args.max_concurrent)))
    cmd = bench.hpo_run_command(path, tmp / "runs", name, cpus=2)
    env = bench.env_with_root()
    timed = bench.run_when_quiet(cmd, env=env, quiet_timeout=args.quiet_timeout, run_timeout=1800)
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
    bench.log(f"  {name}: {timed.wall_s:.1f} s wall, {len(events)} results, other CPU "
              f"{timed.other_cpu_s:.1f} s ({timed.other_top})")
    return {"variant": variant, "name": name, "wall_s": timed.wall_s, "command": " ".join(cmd),
            "other_cpu_s": timed.other_cpu_s, "events": sorted(events), "rank_s": rank_s,
            "iter_s": iters, "ranks_column": relayed}


def time_to(run: dict[str, Any], target: float) -> float:
    return next((t for t, value, _ in run["events"] if value >= target), math.inf)


def measure_pairs(args: argparse.Namespace, tmp: Path) -> list[dict[str, dict[str, Any]]]:
    """--rounds pairs, the order alternating (ASHA first in even pairs)."""
    pairs = []
    for repeat in range(args.rounds):
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
    return {ranks: bench.median(times) for ranks, times in sorted(by_ranks.items())}


def report(args: argparse.Namespace, pairs: list[dict[str, dict[str, Any]]]) -> str:
    rows = [pair_row(i, pair, args.target) for i, pair in enumerate(pairs)]
    print(bench.text_table(HEADER, rows))
    iters = scaling(pairs)
    per_rank = ", ".join(f"{r} rank(s): {s:.3f} s" for r, s in iters.items())
    relayed = all(pair["rasda"]["ranks_column"] for pair in pairs)
    print(f"median time_this_iter_s in the RASDA runs: {per_rank}")
    first = pairs[0]
    return "\n".join([
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
        bench.md_table(HEADER, rows), "",
        f"Median time_this_iter_s in the RASDA runs: {per_rank}.", "",
        "Exact commands of the first pair (temp paths vary):",
        *[f"- {v}: `{first[v]['command']}`" for v in VARIANTS]])


def rasda_hpo(args: argparse.Namespace) -> list[dict[str, dict[str, Any]]]:
    with tempfile.TemporaryDirectory(prefix="hpo-bench-rasda-") as tmp:
        pairs = measure_pairs(args, Path(tmp))
    text = report(args, pairs)
    one = args.max_concurrent == 1
    bench.publish(args, "rasda-max-concurrent-1" if one else "rasda",
                  "RASDA vs ASHA: measured on this machine"
                  + (", one trial at a time" if one else "") + " (CPU, 1 -> 2 DDP ranks)", text)
    return pairs


# ---------------------------------------------------------------- tune: Tune's controller

TUNE_RUNGS = {"max_t": 27, "grace_period": 1, "reduction_factor": 3}
GROWTH, MAX_RANKS = 2, 8
CURVES = bench.ROOT / "benchmarks/data/images-long-curves.json"
CLOSE = 0.005  # "within 0.5% of the final best"


def stand_in(config: dict[str, Any]) -> None:
    import json
    import os

    from ray import tune

    resources = tune.get_context().get_trial_resources()
    ranks = sum(1 for bundle in resources.bundles if bundle.get("GPU"))
    curve = nearest_curve(config)
    done, checkpoint = 0, tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            done = json.loads(Path(folder, "state.json").read_text())["done"]
    while done < TUNE_RUNGS["max_t"]:
        time.sleep(config["iter_s"] / ranks ** 0.9)
        done += 1
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "state.json").write_text(json.dumps({"done": done}))
            tune.report({"score": curve[done - 1], "ranks": ranks, "pid": os.getpid()},
                        checkpoint=tune.Checkpoint.from_directory(folder))


def _scaled(space: dict[str, Any], config: dict[str, Any]) -> list[float]:
    """A config as coordinates in [0, 1]: log scale where the space samples in log."""
    import math

    out = []
    for name, dist in space.items():
        kind, args = next(iter(dist.items()))
        value = float(config[name])
        if kind == "choice":
            low, high = math.log(min(args)), math.log(max(args))
            value = math.log(value)
        elif kind == "loguniform":
            low, high, value = math.log(args[0]), math.log(args[1]), math.log(value)
        else:
            low, high = args
        out.append((value - low) / (high - low))
    return out


def nearest_curve(config: dict[str, Any], path: Path = CURVES) -> list[float]:
    """The recorded val_accuracy curve of the config nearest to `config` (the recorded
    trials that ran every epoch), padded with its last value if shorter than max_t."""
    data = json.loads(Path(config.get("curves", path)).read_text())
    here = _scaled(data["space"], config)
    full = [t for t in data["trials"] if len(t["val_accuracy"]) >= TUNE_RUNGS["max_t"]]
    best = min(full, key=lambda t: sum((a - b) ** 2 for a, b in
                                       zip(here, _scaled(data["space"], t["config"]),
                                           strict=True)))
    return best["val_accuracy"][:TUNE_RUNGS["max_t"]]


def tune_space() -> dict[str, Any]:
    """The recorded trials' space (hpo's YAML form) as Tune's distributions."""
    from ray import tune

    makers = {"loguniform": lambda a: tune.loguniform(*a), "uniform": lambda a: tune.uniform(*a),
              "choice": tune.choice}
    space = json.loads(CURVES.read_text())["space"]
    return {name: makers[kind](args) for name, dist in space.items()
            for kind, args in dist.items()}


def tune_scheduler(variant: str) -> Any:
    from ray.tune.schedulers import AsyncHyperBandScheduler

    from hpo.driver.plugins.rasda import RasdaScheduler
    from hpo.spec.schedulers import Rasda

    if variant == "asha":
        return AsyncHyperBandScheduler(time_attr="training_iteration", brackets=1, **TUNE_RUNGS)
    ranks = SimpleNamespace(workers=1, max_workers=MAX_RANKS, cpus_per_worker=1,
                            gpus_per_worker=1)
    return RasdaScheduler(Rasda(type="rasda", growth_factor=GROWTH, **TUNE_RUNGS), ranks)


def tune_searcher(kind: str, seed: int) -> Any:
    from ray.tune.search.basic_variant import BasicVariantGenerator

    if kind == "random":
        return BasicVariantGenerator(random_state=seed)
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    return OptunaSearch(sampler=optuna.samplers.TPESampler(seed=seed))


def tune_measure(variant: str, trials: int, iter_s: float, kind: str, seed: int, storage: Path,
            callbacks: tuple[Any, ...] = ()) -> dict[str, Any]:
    from ray import tune

    from hpo.trial.ranks.trial import rank_placement

    results: list[tuple[float, dict[str, Any]]] = []

    class Clock(tune.Callback):
        def on_trial_result(self, iteration: int, trials: Any, trial: Any,
                            result: dict[str, Any], **info: Any) -> None:
            results.append((time.monotonic(), result))

    chosen = tune_scheduler(variant)
    search = tune_searcher(kind, seed)
    if variant == "rasda":
        search = chosen.gated(search)
    tuner = tune.Tuner(
        tune.with_resources(stand_in, rank_placement(1, {"CPU": 1, "GPU": 1})),
        param_space={**tune_space(), "iter_s": iter_s, "curves": str(CURVES)},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=chosen,
                                    search_alg=search, num_samples=trials, reuse_actors=True),
        run_config=tune.RunConfig(name=f"{variant}-{trials}-{kind}-{seed}",
                                  storage_path=str(storage), verbose=0,
                                  callbacks=[Clock(), *callbacks]))
    start = time.monotonic()
    tuner.fit()
    return tune_summary(results, start, time.monotonic() - start)


def tune_summary(results: list[tuple[float, dict[str, Any]]], start: float, wall: float
            ) -> dict[str, Any]:
    first = min((t for t, r in results if r["training_iteration"] >= TUNE_RUNGS["max_t"]),
                default=float("nan")) - start
    best, progress = float("-inf"), []
    for t, r in sorted(results, key=lambda item: item[0]):
        if r["score"] > best:
            best = r["score"]
            progress.append((t - start, best))
    return {"first": first, "wall": wall, "progress": progress, "best": best,
            "device_s": sum(r["time_this_iter_s"] * r["ranks"] for _, r in results),
            "grown": len({r["trial_id"] for _, r in results if r["ranks"] > 1}),
            "trials": len({r["trial_id"] for _, r in results})}


def tune_time_to(progress: list[tuple[float, float]], target: float) -> float:
    return next((t for t, best in progress if best >= target), float("inf"))


def pair_figures(asha: dict[str, Any], rasda: dict[str, Any]) -> dict[str, float]:
    target = max(asha["best"], rasda["best"]) * (1 - CLOSE)
    close_a = tune_time_to(asha["progress"], target)
    close_r = tune_time_to(rasda["progress"], target)
    return {"first": asha["first"] / rasda["first"], "close": close_a / close_r,
            "close_a": close_a, "close_r": close_r, "wall": asha["wall"] / rasda["wall"],
            "device": rasda["device_s"] / asha["device_s"]}


TUNE_HEADER = ["devices x per device", "iter s", "search", "seed", "first at max_t s A / R",
          "ratio", "to 0.5% s A / R", "ratio", "wall s A / R", "wall ratio",
          "device-s R/A", "best A / R", "grown"]
SUMMARY = ["devices x per device", "iter s", "search", "seeds", "first at max_t ratio",
           "to 0.5% ratio", "wall ratio", "device-s R/A", "best A / R", "RASDA grown"]


def tune_row(case: tuple, asha: dict[str, Any], rasda: dict[str, Any]) -> list[str]:
    devices, per, iter_s, kind, seed = case
    f = pair_figures(asha, rasda)
    return [f"{devices} x {per}", f"{iter_s:g}", kind, str(seed),
            f"{asha['first']:.1f} / {rasda['first']:.1f}", f"{f['first']:.2f}",
            f"{f['close_a']:.1f} / {f['close_r']:.1f}", f"{f['close']:.2f}",
            f"{asha['wall']:.1f} / {rasda['wall']:.1f}", f"{f['wall']:.2f}",
            f"{f['device']:.2f}", f"{asha['best']:.4f} / {rasda['best']:.4f}",
            f"{rasda['grown']} of {rasda['trials']}"]


def summary_rows(pairs: list[dict[str, Any]]) -> list[list[str]]:
    """Medians over seeds, one row per setting."""
    out = []
    ordered = sorted(pairs, key=lambda p: p["case"])
    for key, group in itertools.groupby(ordered, key=lambda p: tuple(p["case"][:4])):
        group = list(group)
        figs = [pair_figures(p["asha"], p["rasda"]) for p in group]

        def med(name: str, figs: list[dict[str, float]] = figs) -> str:
            return f"{statistics.median(f[name] for f in figs):.2f}"

        best = "; ".join(f"{p['asha']['best']:.4f} / {p['rasda']['best']:.4f}" for p in group)
        grown = statistics.median(p["rasda"]["grown"] for p in group)
        out.append([f"{key[0]} x {key[1]}", f"{key[2]:g}", key[3], str(len(group)),
                    med("first"), med("close"), med("wall"), med("device"), best, f"{grown:g}"])
    return out


def tune_markdown(pairs: list[dict[str, Any]]) -> str:
    commands = list(dict.fromkeys(p["command"] for p in pairs))
    return "\n".join([
        "All the commands (one after another, each adding its pairs to the same --json): "
        + "; ".join(f"`{c}`" for c in commands) + ".", "",
        "Tune's controller on `ray.init(num_gpus=N)`: hpo's `RasdaScheduler` (gated search, "
        "at most 2 pending trials) against Ray's `AsyncHyperBandScheduler` (max_t 27, grace 1, "
        f"reduction 3; RASDA grows by {GROWTH} up to {MAX_RANKS} ranks, batch fixed), the same "
        "search and seed in both (random: BasicVariantGenerator; tpe: OptunaSearch with "
        "TPESampler), reuse_actors on. A trial sleeps `iter_s / ranks**0.9` per iteration, "
        "saves a checkpoint every iteration and reports the recorded val_accuracy curve of "
        "the nearest of 64 real images-long trials (benchmarks/data/images-long-curves.json). "
        "Ratios ASHA/RASDA (device-s: RASDA/ASHA); A = ASHA, R = RASDA. To 0.5%: until the "
        "run's best is within 0.5% of the pair's better final best (inf: never).", "",
        "Medians over seeds:", "", bench.md_table(SUMMARY, summary_rows(pairs)), "",
        "Every pair:", "", bench.md_table(TUNE_HEADER, [p["row"] for p in pairs])])


def rasda_tune(args: argparse.Namespace) -> list[dict[str, Any]]:
    import ray

    pairs: list[dict[str, Any]] = []
    if args.json and args.json.exists():
        pairs = json.loads(args.json.read_text())
    for devices in args.devices:
        ray.init(num_cpus=4 * devices, num_gpus=devices, include_dashboard=False,
                 log_to_driver=False)
        for case in itertools.product([devices], args.per_device, args.iter_s, args.search,
                                      args.seeds):
            with tempfile.TemporaryDirectory(prefix="hpo-rasda-tune-") as tmp:
                runs = {v: tune_measure(v, case[1] * devices, case[2], case[3], case[4], Path(tmp))
                        for v in ("asha", "rasda")}
            pairs.append({"case": list(case), **runs, "row": tune_row(case, **runs),
                          "command": args.command})
            print(bench.text_table(TUNE_HEADER, [pairs[-1]["row"]]), flush=True)
            if args.json:  # after each pair: a run stopped early keeps what it measured
                args.json.write_text(json.dumps(pairs, indent=1))
            bench.publish(args, "rasda-tune", "RASDA vs ASHA through Tune's controller (logical "
                          "GPUs, replayed curves)", tune_markdown(pairs))
        ray.shutdown()
    print(bench.text_table(SUMMARY, summary_rows(pairs)))
    return pairs


# ---------------------------------------------------------------- curves: recorded for tune

def images_long() -> Any:
    from benchmarks.search import WORKLOADS

    return WORKLOADS["images-long"]


def curves_constants() -> dict[str, Any]:
    return {**images_long().constants, "epochs": images_long().epochs}


def curves_spec(trials: int, concurrent: int, seed: int) -> dict:
    return {
        "name": "rasda-curves", "trainable": images_long().trainable,
        "metric": "val_accuracy", "mode": "max", "num_samples": trials,
        "max_concurrent": concurrent, "search_space": images_long().space,
        "constants": curves_constants(),
        "scheduler": {"type": "fifo"}, "search": {"type": "random", "seed": seed},
        "resources": {"cpus_per_trial": 1, "gpus_per_trial": 0},
        "stop": {"training_iteration": images_long().epochs}, "checkpoint": {"frequency": 0},
    }


def record(trials: int, concurrent: int, seed: int, command: str) -> dict:
    import hpo

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="hpo-curves-") as tmp:
        result = hpo.run(curves_spec(trials, concurrent, seed), storage=tmp, keep_ray=False)
        loaded = hpo.load(result.path)
        curves, table = loaded.curves, loaded.trials
    names = list(images_long().space)
    recorded = []
    for _, trial in table.iterrows():
        rows = curves[curves.trial_id == trial.trial_id].sort_values("training_iteration")
        recorded.append({"config": {n: trial[f"config/{n}"] for n in names},
                         "val_accuracy": [round(float(v), 5) for v in rows.val_accuracy],
                         "epoch_s": round(float(rows.time_total_s.diff().median()), 3)})
    return {"workload": "images-long", "trainable": images_long().trainable,
            "space": images_long().space, "constants": curves_constants(),
            "command": command,
            "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "took_s": round(time.time() - started), "machine": bench.machine(),
            "versions": bench.versions(), "trials": recorded}


def record_curves(args: argparse.Namespace) -> dict[str, Any]:
    """The file holds each trial's config and its val_accuracy after every epoch; a stand-in
    trial of --mode tune replays the curve of the recorded config nearest to its own, so ASHA
    and RASDA rank trials as they would rank the real ones, and TPE searches a real response
    surface."""
    out = args.out or CURVES
    data = record(args.trials, args.concurrent, args.seed, args.command)
    epochs = images_long().epochs
    full = [t for t in data["trials"] if len(t["val_accuracy"]) == epochs]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(full)} of {len(data['trials'])} trials with {epochs} epochs -> "
          f"{out} ({data['took_s']} s)")
    return data
