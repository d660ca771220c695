"""Optuna native on the digits trainable: TPESampler + HyperbandPruner, study.optimize with
n_jobs=2 (two trials at a time in threads, like 2 Ray workers with 1 CPU each).

The training loop is the one of trainables/digits.py (its load_data, build_model,
build_optimizer, train_epoch and evaluate helpers); only hpo.report is replaced by
trial.report + trial.should_prune, and no checkpoints are written (Optuna has none).
Every epoch's val_accuracy is recorded with its wall-clock time, as JSON lines, for
benchmarks/search_efficiency.py.

    python benchmarks/optuna_digits.py --space SPACE.json --seed 0 --n-trials 40 --out EV.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


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
    raise SystemExit(f"optuna_digits.py: distribution {kind!r} not mapped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", type=Path, required=True,
                        help="JSON: {search_space: {...}, constants: {...}} in hpo's format")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-trials", type=int, default=40)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--n-startup-trials", type=int, default=10)
    parser.add_argument("--reduction-factor", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True, help="events, JSON lines")
    args = parser.parse_args()

    import optuna
    import torch

    from trainables import digits

    # One thread per trial, as Ray gives each 1-CPU worker OMP_NUM_THREADS=1.
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = json.loads(args.space.read_text())
    space, constants = spec["search_space"], spec.get("constants", {})
    epochs = int(constants.get("epochs", digits.DEFAULTS["epochs"]))
    events: list[dict[str, Any]] = []
    lock = threading.Lock()

    def objective(trial: optuna.Trial) -> float:
        cfg = {**digits.DEFAULTS, **constants,
               **{name: suggest(trial, name, dist) for name, dist in space.items()}}
        seed = int(cfg["seed"])
        x_tr, y_tr, x_va, y_va = digits.load_data()
        with lock:  # the global RNG is shared by the threads: seed + init as one step
            torch.manual_seed(seed)
            model = digits.build_model(int(cfg["hidden"]), int(cfg["depth"]))
        opt = digits.build_optimizer(model, cfg)
        gen = torch.Generator()
        val_acc = 0.0
        for epoch in range(epochs):
            gen.manual_seed(seed * 100_003 + epoch)
            digits.train_epoch(model, opt, (x_tr, y_tr), int(cfg["batch_size"]), gen)
            val_acc, _ = digits.evaluate(model, x_va, y_va)
            with lock:
                events.append({"time": time.time(), "trial": trial.number, "epoch": epoch + 1,
                               "val_accuracy": val_acc})
            trial.report(val_acc, epoch + 1)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return val_acc

    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=args.seed,
                                           n_startup_trials=args.n_startup_trials),
        pruner=optuna.pruners.HyperbandPruner(min_resource=1, max_resource=epochs,
                                              reduction_factor=args.reduction_factor),
    )
    study.optimize(objective, n_trials=args.n_trials, n_jobs=args.n_jobs)
    with open(args.out, "w") as file:
        for event in events:
            file.write(json.dumps(event) + "\n")
    done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    print(f"{len(study.trials)} trials ({done} complete), best value {study.best_value:.4f}")


if __name__ == "__main__":
    main()
