"""One tool, one workload, in this process: the child that benchmarks/overhead_peers.py times.

Every tool runs the same trial: `steps` steps that each sleep `sleep_s` and report a score;
at its end the trial appends one JSON line to the spans file (its first and last step's wall
clock and its step count). Only the standard library is imported at the top: the peers run
from venvs of their own, where neither hpo nor Ray is installed.

    python benchmarks/peer_runs.py TOOL --trials 160 --steps 10 --sleep-s 0.5 --workers 8 \
        --spans /tmp/spans.jsonl --work /tmp/work
TOOL: hpo (the `hpo run` CLI; hpo-warm the same, on the warm Ray it finds), tune (Ray Tune,
lean: actor reuse, no loggers, verbose 0), optuna (threads, in-memory storage), syne (Syne
Tune, LocalBackend, 0.5 s poll), deephyper (DeepHyper, process evaluator, random search).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def steps(config: dict[str, Any], report: Callable[[int, float], None]) -> float:
    """The trial: sleep and report `steps` times; appends its span; returns the last score."""
    first, score = time.time(), 0.0
    for step in range(1, int(config["steps"]) + 1):
        if config["sleep_s"]:
            time.sleep(float(config["sleep_s"]))
        score = float(config["x"]) * step
        report(step, score)
    line = json.dumps({"first": first, "last": time.time(), "steps": int(config["steps"])})
    with open(config["spans"], "a") as spans:  # one short append: whole lines, any process
        spans.write(line + "\n")
    return score


def hpo_trial(config: dict[str, Any]) -> None:
    import hpo

    steps(config, lambda step, score: hpo.report({"score": score}))


def tune_trial(config: dict[str, Any]) -> None:
    from ray import tune

    steps(config, lambda step, score: tune.report({"score": score}))


def run_hpo(args: argparse.Namespace, constants: dict[str, Any]) -> None:
    spec = {"name": "peers", "trainable": f"{HERE}:hpo_trial", "metric": "score",
            "mode": "max", "num_samples": args.trials, "max_concurrent": args.workers,
            "search_space": {"x": {"uniform": [0.0, 1.0]}}, "constants": constants,
            "resources": {"cpus_per_trial": 1}}
    path = Path(args.work) / "peers.json"  # YAML is a superset of JSON
    path.write_text(json.dumps(spec))
    subprocess.run([sys.executable, "-m", "hpo", "run", str(path), "--storage", args.work,
                    "--cpus", str(args.workers)], check=True, stdout=subprocess.DEVNULL)


def run_tune(args: argparse.Namespace, constants: dict[str, Any]) -> None:
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # leaves no ~/.ray/auth_token
    import ray
    from ray import tune

    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    tune.Tuner(
        tune.with_resources(tune_trial, {"cpu": 1}),
        param_space={**constants, "x": tune.uniform(0.0, 1.0)},
        tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=args.trials,
                                    reuse_actors=True),
        run_config=tune.RunConfig(storage_path=args.work, verbose=0),
    ).fit()
    ray.shutdown()


def run_optuna(args: argparse.Namespace, constants: dict[str, Any]) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial: Any) -> float:
        config = {**constants, "x": trial.suggest_float("x", 0.0, 1.0)}
        return steps(config, lambda step, score: trial.report(score, step))

    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler())
    study.optimize(objective, n_trials=args.trials, n_jobs=args.workers)


def syne_trial() -> None:
    """Syne Tune's entry point: the config comes as --name value pairs."""
    from syne_tune import Reporter

    pairs = sys.argv[2:]
    config = {pairs[i].lstrip("-"): pairs[i + 1] for i in range(0, len(pairs), 2)}
    reporter = Reporter()
    steps(config, lambda step, score: reporter(step=step, score=score))


def run_syne(args: argparse.Namespace, constants: dict[str, Any]) -> None:
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend import LocalBackend
    from syne_tune.config_space import uniform
    from syne_tune.optimizer.baselines import RandomSearch

    os.environ["SYNETUNE_FOLDER"] = str(Path(args.work) / "syne")  # not ~/syne-tune
    os.chdir(args.work)  # its GPU probe writes std.out into the working folder
    space = {**constants, "x": uniform(0.0, 1.0)}
    Tuner(trial_backend=LocalBackend(entry_point=str(HERE)),
          scheduler=RandomSearch(space, metrics=["score"], do_minimize=False),
          stop_criterion=StoppingCriterion(max_num_trials_started=args.trials - 1),
          n_workers=args.workers, sleep_time=0.5, wait_trial_completion_when_stopping=True,
          save_tuner=False).run()


def _deephyper_run(job: Any) -> float:
    config = {**json.loads(os.environ["PEER_CONSTANTS"]), **job.parameters}
    return steps(config, lambda step, score: job.record(step, score))


def run_deephyper(args: argparse.Namespace, constants: dict[str, Any]) -> None:
    from deephyper.evaluator import Evaluator
    from deephyper.hpo import HpProblem, RandomSearch

    os.environ["PEER_CONSTANTS"] = json.dumps(constants)
    problem = HpProblem()
    problem.add_hyperparameter((0.0, 1.0), "x")
    evaluator = Evaluator.create(_deephyper_run, method="process",
                                 method_kwargs={"num_workers": args.workers})
    RandomSearch(problem, log_dir=str(Path(args.work) / "deephyper")).search(
        evaluator, max_evals=args.trials, max_evals_strict=True)


RUNS = {"hpo": run_hpo, "hpo-warm": run_hpo, "tune": run_tune, "optuna": run_optuna,
        "syne": run_syne, "deephyper": run_deephyper}


def main() -> None:
    if sys.argv[1:2] == ["syne-trial"] or "--st_checkpoint_dir" in sys.argv:
        sys.argv.insert(1, "syne-trial")  # Syne Tune starts this file with the config only
        syne_trial()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", choices=sorted(RUNS))
    for name, kind in (("--trials", int), ("--steps", int), ("--sleep-s", float),
                       ("--workers", int), ("--spans", str), ("--work", str)):
        parser.add_argument(name, type=kind, required=True)
    args = parser.parse_args()
    RUNS[args.tool](args, {"steps": args.steps, "sleep_s": args.sleep_s, "spans": args.spans})


if __name__ == "__main__":
    main()
