"""The benchmarks' stand-in trials, and the child that runs one peer tool (overhead-peers).

Only the standard library is imported at the top, on purpose: hpo loads these functions by
name (`benchmarks.trials:sleep_once`) or by file path in its trial workers, where a module
that holds torch would have hpo's fork server preload torch for every fork; plain Ray Tune's
workers must not import hpo; and the peers (Syne Tune, DeepHyper) run this file from venvs
of their own, where neither hpo nor Ray is installed. Each function imports what it uses.

Config keys of the overhead workloads:
    sleep_s (1.0)   sleep_once: seconds to sleep before the single report
    rate (50)       stream: reports per second
    duration_s (20) stream: seconds of reporting (rate * duration_s reports in all)
    reports (5000)  burst: reports sent as fast as the driver takes them

The peer child (run by benchmarks/peers.py as `python benchmarks/trials.py TOOL ...`):
TOOL is hpo (the `hpo run` CLI; hpo-warm the same, on the warm Ray it finds; hpo-plain the
same, with every speed patch off), tune (Ray Tune, lean: actor reuse, no loggers, verbose 0),
optuna (threads, in-memory storage), syne (Syne Tune, LocalBackend, 0.5 s poll) or deephyper
(DeepHyper, process evaluator, random search).
Every tool runs the same trial: `steps` steps that each sleep `sleep_s` and report a score;
at its end the trial appends one JSON line to the spans file (its first and last step's
wall clock and its step count).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
STEPS = 3  # reports of a checkpointing scale trial, each with a checkpoint


# ---------------------------------------------------------------- overhead (hpo and raw)

def _stream_plan(config: dict[str, Any]) -> tuple[int, float]:
    rate = float(config.get("rate", 50))
    duration = float(config.get("duration_s", 20))
    return int(round(rate * duration)), 1.0 / rate


def sleep_once(config: dict[str, Any]) -> None:
    """hpo: sleep, then report one result."""
    import hpo

    time.sleep(float(config.get("sleep_s", 1.0)))
    hpo.report({"score": 1.0})


def stream(config: dict[str, Any]) -> None:
    """hpo: report `rate` results per second for `duration_s` seconds (a fixed count of
    reports, each after sleeping 1/rate s, so any per-report cost adds to the wall time)."""
    import hpo

    count, pause = _stream_plan(config)
    for i in range(count):
        time.sleep(pause)
        hpo.report({"score": float(i)})


def burst(config: dict[str, Any]) -> None:
    """hpo: `reports` results without a pause, each with its wall time: the rate at which
    the driver takes results (a report blocks until the driver has taken it)."""
    import hpo

    for i in range(int(config.get("reports", 5000))):
        hpo.report({"score": float(i), "wall": time.time()})


def raw_sleep_once(config: dict[str, Any]) -> None:
    """Plain Ray Tune: the same as sleep_once."""
    from ray import tune

    time.sleep(float(config.get("sleep_s", 1.0)))
    tune.report({"score": 1.0})


def raw_stream(config: dict[str, Any]) -> None:
    """Plain Ray Tune: the same as stream."""
    from ray import tune

    count, pause = _stream_plan(config)
    for i in range(count):
        time.sleep(pause)
        tune.report({"score": float(i)})


# ---------------------------------------------------------------- scale

def trivial(config: dict[str, Any]) -> None:
    """hpo: one report, no sleep."""
    import hpo

    hpo.report({"score": float(config["x"])})


def raw_trivial(config: dict[str, Any]) -> None:
    """Plain Ray Tune: the same."""
    from ray import tune

    tune.report({"score": float(config["x"])})


def checkpointed(config: dict[str, Any]) -> None:
    """hpo: STEPS reports, each with a small checkpoint (`checkpoint: {frequency: 1, keep: 2}`)."""
    import hpo

    for step in range(STEPS):
        hpo.report({"score": float(config["x"]) + step, "ended": time.time()},
                   checkpoint={"step": step})


def raw_checkpointed(config: dict[str, Any]) -> None:
    """Plain Ray Tune: the same, a checkpoint folder per report (`num_to_keep=2`)."""
    from ray import tune

    for step in range(STEPS):
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "step").write_text(str(step))
            tune.report({"score": float(config["x"]) + step, "ended": time.time()},
                        checkpoint=tune.Checkpoint.from_directory(folder))


# ---------------------------------------------------------------- trainables.images, stamped

def _stamped_images(config: dict[str, Any], stamp: Callable[[], dict[str, Any]]) -> None:
    """`trainables.images:train` with `stamp()` added to every report (it calls hpo.report)."""
    import hpo
    from trainables import images

    report = hpo.report

    def stamped(metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return report({**metrics, **stamp()}, *args, **kwargs)

    hpo.report = stamped  # type: ignore[assignment]
    try:
        images.train(config)
    finally:
        hpo.report = report  # type: ignore[assignment]


def timed_images(config: dict[str, Any]) -> None:
    """Each report with its wall-clock time (`wall`), so a benchmark can read when a run's
    first result came to the millisecond (Ray's own `timestamp` has 1 s resolution)."""
    _stamped_images(config, lambda: {"wall": time.time()})


def timed_epochs(config: dict[str, Any]) -> None:
    """Each report with its wall time, the torch threads and the device (the trial of
    trial-vs-standalone, and the body of its standalone side)."""
    import torch

    from hpo import dist

    _stamped_images(config, lambda: {"wall": time.time(), "threads": torch.get_num_threads(),
                                     "device": str(dist.device())})


# ---------------------------------------------------------------- data-parallel, Slurm

def rank_trivial(config: dict[str, Any]) -> None:
    """rank-reuse's trainable: on a GPU one matmul (its cuBLAS workspace stays allocated),
    then one allreduce and one report."""
    import torch

    import hpo
    from hpo import dist

    start = time.time()
    if config["device"] == "cuda":
        x = torch.ones(256, 256, device=dist.device())
        (x @ x).sum().item()
    if config["model"]:  # one step of a model wrapped by hpo (DDP), as real trainables do
        layer = torch.nn.Linear(256, 256).to(dist.device())
        model, optimizer = dist.prepare(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
        model(torch.ones(8, 256, device=dist.device())).sum().backward()
        optimizer.step()
    value = dist.allreduce_mean(float(dist.rank()))
    hpo.report({"loss": value, "start": start, "end": time.time(),
                "rank_pid": os.getpid()})  # "pid" is Tune's: the trial process's


def steady(config: dict[str, Any]) -> None:
    """Deterministic score x * step, `sleep` s per step, resumable from its checkpoint."""
    import hpo

    state = hpo.get_checkpoint()
    start = state["step"] + 1 if state else 1
    for step in range(start, config["steps"] + 1):
        time.sleep(config["sleep"])
        print(f"step {step}", flush=True)
        hpo.report({"score": config["x"] * step, "resumed_at": start},
                   checkpoint={"step": step})


# ---------------------------------------------------------------- the peers' trial and child

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


PEER_RUNS = {"hpo": run_hpo, "hpo-warm": run_hpo, "hpo-plain": run_hpo, "tune": run_tune,
             "optuna": run_optuna, "syne": run_syne, "deephyper": run_deephyper}


def peer_child(argv: list[str]) -> None:
    """One tool, one workload, in this process: what benchmarks/peers.py times."""
    if argv[:1] == ["syne-trial"] or "--st_checkpoint_dir" in argv:
        sys.argv.insert(1, "syne-trial")  # Syne Tune starts this file with the config only
        syne_trial()
        return
    parser = argparse.ArgumentParser(description=peer_child.__doc__)
    parser.add_argument("tool", choices=sorted(PEER_RUNS))
    for name, kind in (("--trials", int), ("--steps", int), ("--sleep-s", float),
                       ("--workers", int), ("--spans", str), ("--work", str)):
        parser.add_argument(name, type=kind, required=True)
    args = parser.parse_args(argv)
    PEER_RUNS[args.tool](args, {"steps": args.steps, "sleep_s": args.sleep_s,
                                "spans": args.spans})


if __name__ == "__main__":  # a file the peers' venvs run without the benchmarks package
    peer_child(sys.argv[1:])
