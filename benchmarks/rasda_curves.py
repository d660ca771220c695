"""Record the learning curves benchmarks/rasda_tune.py replays: real `hpo run`s of the
built-in images trainable (search_efficiency's images-long workload: a CNN on noisy textures,
27 epochs, its five-parameter space), random search, every trial run to the end (FIFO).

    python benchmarks/rasda_curves.py --trials 64 --out benchmarks/data/images-long-curves.json

The file holds each trial's config and its val_accuracy after every epoch. A stand-in trial
of rasda_tune.py replays the curve of the recorded config nearest to its own, so ASHA and
RASDA rank trials as they would rank the real ones, and TPE searches a real response surface.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine, versions  # noqa: E402
from benchmarks.search_efficiency import WORKLOADS  # noqa: E402

WORKLOAD = WORKLOADS["images-long"]
CONSTANTS = {**WORKLOAD.constants, "epochs": WORKLOAD.epochs}


def spec(trials: int, concurrent: int, seed: int) -> dict:
    return {
        "name": "rasda-curves", "trainable": WORKLOAD.trainable,
        "metric": "val_accuracy", "mode": "max", "num_samples": trials,
        "max_concurrent": concurrent, "search_space": WORKLOAD.space,
        "constants": CONSTANTS,
        "scheduler": {"type": "fifo"}, "search": {"type": "random", "seed": seed},
        "resources": {"cpus_per_trial": 1, "gpus_per_trial": 0},
        "stop": {"training_iteration": WORKLOAD.epochs}, "checkpoint": {"frequency": 0},
    }


def record(trials: int, concurrent: int, seed: int) -> dict:
    import hpo

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="hpo-curves-") as tmp:
        result = hpo.run(spec(trials, concurrent, seed), storage=tmp, keep_ray=False)
        loaded = hpo.load(result.path)
        curves, table = loaded.curves, loaded.trials
    names = list(WORKLOAD.space)
    recorded = []
    for _, trial in table.iterrows():
        rows = curves[curves.trial_id == trial.trial_id].sort_values("training_iteration")
        recorded.append({"config": {n: trial[f"config/{n}"] for n in names},
                         "val_accuracy": [round(float(v), 5) for v in rows.val_accuracy],
                         "epoch_s": round(float(rows.time_total_s.diff().median()), 3)})
    return {"workload": "images-long", "trainable": WORKLOAD.trainable,
            "space": WORKLOAD.space, "constants": CONSTANTS,
            "command": "python benchmarks/rasda_curves.py " + " ".join(sys.argv[1:]),
            "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "took_s": round(time.time() - started), "machine": machine(),
            "versions": versions(), "trials": recorded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks/data/images-long-curves.json")
    args = parser.parse_args()
    data = record(args.trials, args.concurrent, args.seed)
    full = [t for t in data["trials"] if len(t["val_accuracy"]) == WORKLOAD.epochs]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(full)} of {len(data['trials'])} trials with {WORKLOAD.epochs} epochs -> "
          f"{args.out} ({data['took_s']} s)")


if __name__ == "__main__":
    main()
