"""RASDA against ASHA through Tune's own controller, on a Ray started with N logical GPUs:
hpo's RasdaScheduler (with its gated search) vs Ray's AsyncHyperBandScheduler, the same search
(random or Optuna TPE, same seed) in both.

A stand-in trial holds one {CPU: 1, GPU: 1} bundle per rank (hpo's rank placement), reads its
rank count from Tune, sleeps `iter_s / ranks**0.9` per iteration and saves a real checkpoint
every iteration. Its score after epoch e is the recorded val_accuracy after epoch e of the
images trainable's config nearest to its own (benchmarks/data/images-long-curves.json,
written by benchmarks/rasda_curves.py from real `hpo run`s), so trials rank as real ones do.

    python benchmarks/rasda_tune.py --devices 32 --per-device 3 --iter-s 3 --search random
    python benchmarks/rasda_tune.py --devices 16 32 --per-device 1 3 --iter-s 1 3 \
        --search random tpe --seeds 0 1 2 --markdown docs/benchmarks.md   # the whole matrix

Figures, each a ratio ASHA/RASDA (above 1: RASDA faster) from runs side by side:
  first at max_t   seconds from fit() to the first result at max_t;
  to 0.5%          seconds until the run's best is within 0.5% of the pair's final best
                   (the better of the two runs), inf where a run never got there;
  wall             the whole study; device-s: sum of iteration seconds x ranks (RASDA/ASHA).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine, md_table, text_table, versions, write_section  # noqa: E402

RUNGS = {"max_t": 27, "grace_period": 1, "reduction_factor": 3}
GROWTH, MAX_RANKS = 2, 8
CURVES = ROOT / "benchmarks/data/images-long-curves.json"
CLOSE = 0.005  # "within 0.5% of the final best"
COMMAND = "python benchmarks/rasda_tune.py " + " ".join(sys.argv[1:])


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
    while done < RUNGS["max_t"]:
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
    full = [t for t in data["trials"] if len(t["val_accuracy"]) >= RUNGS["max_t"]]
    best = min(full, key=lambda t: sum((a - b) ** 2 for a, b in
                                       zip(here, _scaled(data["space"], t["config"]),
                                           strict=True)))
    return best["val_accuracy"][:RUNGS["max_t"]]


def search_space() -> dict[str, Any]:
    """The recorded trials' space (hpo's YAML form) as Tune's distributions."""
    from ray import tune

    makers = {"loguniform": lambda a: tune.loguniform(*a), "uniform": lambda a: tune.uniform(*a),
              "choice": tune.choice}
    space = json.loads(CURVES.read_text())["space"]
    return {name: makers[kind](args) for name, dist in space.items()
            for kind, args in dist.items()}


def scheduler(variant: str) -> Any:
    from ray.tune.schedulers import AsyncHyperBandScheduler

    from hpo.driver.plugins.rasda import RasdaScheduler
    from hpo.spec.schedulers import Rasda

    if variant == "asha":
        return AsyncHyperBandScheduler(time_attr="training_iteration", brackets=1, **RUNGS)
    ranks = SimpleNamespace(workers=1, max_workers=MAX_RANKS, cpus_per_worker=1,
                            gpus_per_worker=1)
    return RasdaScheduler(Rasda(type="rasda", growth_factor=GROWTH, **RUNGS), ranks)


def searcher(kind: str, seed: int) -> Any:
    from ray.tune.search.basic_variant import BasicVariantGenerator

    if kind == "random":
        return BasicVariantGenerator(random_state=seed)
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    return OptunaSearch(sampler=optuna.samplers.TPESampler(seed=seed))


def measure(variant: str, trials: int, iter_s: float, kind: str, seed: int, storage: Path,
            callbacks: tuple[Any, ...] = ()) -> dict[str, Any]:
    from ray import tune

    from hpo.trial.ranks.trial import rank_placement

    results: list[tuple[float, dict[str, Any]]] = []

    class Clock(tune.Callback):
        def on_trial_result(self, iteration: int, trials: Any, trial: Any,
                            result: dict[str, Any], **info: Any) -> None:
            results.append((time.monotonic(), result))

    chosen = scheduler(variant)
    search = searcher(kind, seed)
    if variant == "rasda":
        search = chosen.gated(search)
    tuner = tune.Tuner(
        tune.with_resources(stand_in, rank_placement(1, {"CPU": 1, "GPU": 1})),
        param_space={**search_space(), "iter_s": iter_s, "curves": str(CURVES)},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=chosen,
                                    search_alg=search, num_samples=trials, reuse_actors=True),
        run_config=tune.RunConfig(name=f"{variant}-{trials}-{kind}-{seed}",
                                  storage_path=str(storage), verbose=0,
                                  callbacks=[Clock(), *callbacks]))
    start = time.monotonic()
    tuner.fit()
    return summary(results, start, time.monotonic() - start)


def summary(results: list[tuple[float, dict[str, Any]]], start: float, wall: float
            ) -> dict[str, Any]:
    first = min((t for t, r in results if r["training_iteration"] >= RUNGS["max_t"]),
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


def time_to(progress: list[tuple[float, float]], target: float) -> float:
    return next((t for t, best in progress if best >= target), float("inf"))


def pair_figures(asha: dict[str, Any], rasda: dict[str, Any]) -> dict[str, float]:
    target = max(asha["best"], rasda["best"]) * (1 - CLOSE)
    close_a, close_r = time_to(asha["progress"], target), time_to(rasda["progress"], target)
    return {"first": asha["first"] / rasda["first"], "close": close_a / close_r,
            "close_a": close_a, "close_r": close_r, "wall": asha["wall"] / rasda["wall"],
            "device": rasda["device_s"] / asha["device_s"]}


HEADER = ["devices x per device", "iter s", "search", "seed", "first at max_t s A / R",
          "ratio", "to 0.5% s A / R", "ratio", "wall s A / R", "wall ratio",
          "device-s R/A", "best A / R", "grown"]
SUMMARY = ["devices x per device", "iter s", "search", "seeds", "first at max_t ratio",
           "to 0.5% ratio", "wall ratio", "device-s R/A", "best A / R", "RASDA grown"]


def row(case: tuple, asha: dict[str, Any], rasda: dict[str, Any]) -> list[str]:
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


def markdown(pairs: list[dict[str, Any]], started: str) -> str:
    commands = list(dict.fromkeys(p["command"] for p in pairs))
    return "\n".join([
        "## RASDA vs ASHA through Tune's controller (logical GPUs, replayed curves)", "",
        "Commands (one after another, each adding its pairs to the same --json): "
        + "; ".join(f"`{c}`" for c in commands) + f" (last run {started}). "
        f"Machine: {machine()}; {versions()}.", "",
        "Tune's controller on `ray.init(num_gpus=N)`: hpo's `RasdaScheduler` (gated search, "
        "at most 2 pending trials) against Ray's `AsyncHyperBandScheduler` (max_t 27, grace 1, "
        f"reduction 3; RASDA grows by {GROWTH} up to {MAX_RANKS} ranks, batch fixed), the same "
        "search and seed in both (random: BasicVariantGenerator; tpe: OptunaSearch with "
        "TPESampler), reuse_actors on. A trial sleeps `iter_s / ranks**0.9` per iteration, "
        "saves a checkpoint every iteration and reports the recorded val_accuracy curve of "
        "the nearest of 64 real images-long trials (benchmarks/data/images-long-curves.json). "
        "Ratios ASHA/RASDA (device-s: RASDA/ASHA); A = ASHA, R = RASDA. To 0.5%: until the "
        "run's best is within 0.5% of the pair's better final best (inf: never).", "",
        "Medians over seeds:", "", md_table(SUMMARY, summary_rows(pairs)), "",
        "Every pair:", "", md_table(HEADER, [p["row"] for p in pairs])])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[32])
    parser.add_argument("--per-device", type=int, nargs="+", default=[3])
    parser.add_argument("--iter-s", type=float, nargs="+", default=[3.0])
    parser.add_argument("--search", nargs="+", choices=["random", "tpe"], default=["random"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--markdown", type=Path, help="write the section here after each pair")
    parser.add_argument("--json", type=Path, help="save every pair here; the pairs already "
                        "in it are kept, so calls one after another build up the matrix")
    return parser.parse_args()


def main() -> None:
    import ray

    args = parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    pairs: list[dict[str, Any]] = []
    if args.json and args.json.exists():
        pairs = json.loads(args.json.read_text())
    for devices in args.devices:
        ray.init(num_cpus=4 * devices, num_gpus=devices, include_dashboard=False,
                 log_to_driver=False)
        for case in itertools.product([devices], args.per_device, args.iter_s, args.search,
                                      args.seeds):
            with tempfile.TemporaryDirectory(prefix="hpo-rasda-tune-") as tmp:
                runs = {v: measure(v, case[1] * devices, case[2], case[3], case[4], Path(tmp))
                        for v in ("asha", "rasda")}
            pairs.append({"case": list(case), **runs, "row": row(case, **runs),
                          "command": COMMAND})
            print(text_table(HEADER, [pairs[-1]["row"]]), flush=True)
            if args.json:
                args.json.write_text(json.dumps(pairs, indent=1))
            if args.markdown:
                write_section(args.markdown, "rasda-tune", markdown(pairs, started))
        ray.shutdown()
    print(text_table(SUMMARY, summary_rows(pairs)))


if __name__ == "__main__":
    main()
