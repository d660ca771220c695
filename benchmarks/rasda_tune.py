"""RASDA against ASHA through Tune's own controller, on a Ray started with N logical GPUs:
hpo's RasdaScheduler (with its gated search) vs Ray's AsyncHyperBandScheduler, the same grid
of stand-in trials in both. A trial holds one {CPU: 1, GPU: 1} bundle per rank (hpo's rank
placement), reads its rank count from Tune, sleeps `iter_s / ranks**0.9` per iteration (the
scaling the issue's probe used) and saves a real checkpoint every iteration; its score
rises towards its quality, so ASHA ranks trials by quality.

    python benchmarks/rasda_tune.py --devices 16 --per-device 1 3 --iter-s 3
    python benchmarks/rasda_tune.py ... --markdown docs/benchmarks.md

First at max_t: seconds from fit() to the first result at max_t; the ratio is ASHA/RASDA.
"""

from __future__ import annotations

import argparse
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


def stand_in(config: dict[str, Any]) -> None:
    import json
    import os

    from ray import tune

    resources = tune.get_context().get_trial_resources()
    ranks = sum(1 for bundle in resources.bundles if bundle.get("GPU"))
    done, checkpoint = 0, tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            done = json.loads(Path(folder, "state.json").read_text())["done"]
    while done < RUNGS["max_t"]:
        time.sleep(config["iter_s"] / ranks ** 0.9)
        done += 1
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "state.json").write_text(json.dumps({"done": done}))
            score = config["quality"] * done / (done + 3)
            tune.report({"score": score, "ranks": ranks, "pid": os.getpid()},
                        checkpoint=tune.Checkpoint.from_directory(folder))


def scheduler(variant: str) -> Any:
    from ray.tune.schedulers import AsyncHyperBandScheduler

    from hpo.driver.rasda import RasdaScheduler
    from hpo.spec.schedulers import Rasda

    if variant == "asha":
        return AsyncHyperBandScheduler(time_attr="training_iteration", brackets=1, **RUNGS)
    ranks = SimpleNamespace(workers=1, max_workers=MAX_RANKS, cpus_per_worker=1,
                            gpus_per_worker=1)
    return RasdaScheduler(Rasda(type="rasda", growth_factor=GROWTH, **RUNGS), ranks)


def measure(variant: str, trials: int, iter_s: float, seed: int, storage: Path
            ) -> dict[str, Any]:
    import numpy as np
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from hpo.ranks.trial import rank_placement

    results: list[tuple[float, dict[str, Any]]] = []

    class Clock(tune.Callback):
        def on_trial_result(self, iteration: int, trials: Any, trial: Any,
                            result: dict[str, Any], **info: Any) -> None:
            results.append((time.monotonic(), result))

    qualities = np.random.default_rng(seed).permutation(np.linspace(0.5, 1.0, trials))
    chosen = scheduler(variant)
    search = BasicVariantGenerator()
    if variant == "rasda":
        search = chosen.gated(search)
    tuner = tune.Tuner(
        tune.with_resources(stand_in, rank_placement(1, {"CPU": 1, "GPU": 1})),
        param_space={"quality": tune.grid_search([float(q) for q in qualities]),
                     "iter_s": iter_s},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=chosen,
                                    search_alg=search, reuse_actors=True),
        run_config=tune.RunConfig(name=f"{variant}-{trials}", storage_path=str(storage),
                                  verbose=0, callbacks=[Clock()]))
    start = time.monotonic()
    tuner.fit()
    wall = time.monotonic() - start
    first = min((t for t, r in results if r["training_iteration"] >= RUNGS["max_t"]),
                default=float("nan")) - start
    device_s = sum(r["time_this_iter_s"] * r["ranks"] for _, r in results)
    grown = len({r["trial_id"] for _, r in results if r["ranks"] > 1})
    return {"first": first, "wall": wall, "device_s": device_s, "grown": grown,
            "best": max(r["score"] for _, r in results)}


def row(devices: int, per: int, iter_s: float, asha: dict[str, Any],
        rasda: dict[str, Any]) -> list[str]:
    return [f"{devices} x {per}", f"{iter_s:g}", f"{asha['first']:.1f}", f"{rasda['first']:.1f}",
            f"{asha['first'] / rasda['first']:.2f}", f"{asha['wall']:.1f}", f"{rasda['wall']:.1f}",
            f"{asha['wall'] / rasda['wall']:.2f}", f"{rasda['device_s'] / asha['device_s']:.2f}",
            f"{asha['best']:.4f} / {rasda['best']:.4f}", str(rasda["grown"])]


HEADER = ["devices x trials per device", "iteration s", "ASHA: first at max_t s",
          "RASDA: first at max_t s", "ratio", "ASHA wall s", "RASDA wall s", "wall ratio",
          "RASDA/ASHA device-s", "best ASHA / RASDA", "RASDA trials grown"]


def main() -> None:
    import ray

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--per-device", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--iter-s", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    ray.init(num_cpus=4 * args.devices, num_gpus=args.devices, include_dashboard=False,
             log_to_driver=False)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hpo-rasda-tune-") as tmp:
        for per in args.per_device:
            runs = {v: measure(v, per * args.devices, args.iter_s, args.seed, Path(tmp))
                    for v in ("asha", "rasda")}
            rows.append(row(args.devices, per, args.iter_s, runs["asha"], runs["rasda"]))
            print(text_table(HEADER, rows[-1:]), flush=True)
    if args.markdown:
        command = "python benchmarks/rasda_tune.py " + " ".join(sys.argv[1:])
        write_section(args.markdown, "rasda-tune", "\n".join([
            "## RASDA vs ASHA through Tune's controller (logical GPUs, stand-in trials)", "",
            f"Command: `{command}` (run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})."
            f" Machine: {machine()}; {versions()}. One seed, one run each: ratios vary from "
            "run to run.", "", md_table(HEADER, rows)]))


if __name__ == "__main__":
    main()
