"""Optuna native on an hpo trainable: TPESampler + HyperbandPruner, study.optimize with
n_jobs=2 (two trials at a time in threads, like 2 Ray workers with 1 CPU each); the metric
is maximised. The sampler is set up as hpo's `search: {type: optuna}` (constant_liar on), and
the study is named after the seed: HyperbandPruner puts trials in brackets by a hash of the
study name, so a random name would make the same seed prune differently from run to run.

The trainable runs unchanged: its `hpo.report` calls reach Optuna through a session link
(trial.report + trial.should_prune) instead of Ray Tune, and no checkpoints are written
(Optuna has none). The threads share torch's global RNG, so a trial's initial weights may
differ from the same configuration's in a process of its own. Every report's metric is
recorded with its wall-clock time, as JSON lines, for benchmarks/search_efficiency.py.

    python benchmarks/optuna_native.py --trainable trainables.digits:train --space SPACE.json \
        --metric val_accuracy --seed 0 --n-trials 40 --out EVENTS.jsonl
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
    raise SystemExit(f"optuna_native.py: distribution {kind!r} not mapped")


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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainable", required=True, help="pkg.module:function")
    parser.add_argument("--space", type=Path, required=True,
                        help="JSON: {search_space: {...}, constants: {...}} in hpo's format")
    parser.add_argument("--metric", required=True)
    parser.add_argument("--max-resource", type=int, required=True, help="reports per trial")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-trials", type=int, default=40)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--n-startup-trials", type=int, default=10)
    parser.add_argument("--reduction-factor", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True, help="events, JSON lines")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    import optuna
    import torch

    from hpo.driver.trainable import load_trainable
    from hpo.trial.session import trial_session

    train = load_trainable(args.trainable)
    torch.set_num_threads(1)  # one thread per trial, as Ray gives each 1-CPU worker
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = json.loads(args.space.read_text())
    space, constants = spec["search_space"], spec.get("constants", {})
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
                                           n_startup_trials=args.n_startup_trials),
        pruner=optuna.pruners.HyperbandPruner(min_resource=1, max_resource=args.max_resource,
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
