"""hpo's orchestration overhead beside the tools a user would pick instead, in one run.

Each tool runs the same trial (benchmarks/trials.py: `steps` steps that sleep and report) as
a whole process, launched and timed from here; the tools take turns within each round.
Workloads:
  throughput  2 trials x 5,000 reports, no sleep: results/s from the trials' own clocks
              (all reports / (the last report - the first)), i.e. what the driver takes
              where a report waits for it (hpo, Tune), and for the whole process (all
              reports / its wall time, the start included), the only fair figure for the
              tools whose report returns before anyone has taken it (Optuna, Syne Tune,
              DeepHyper keep or print it);
  util8       8 workers, 160 trials x 10 steps x 0.5 s (ideal wall 100 s);
  util32      32 workers, 160 trials x 10 steps x 0.2 s (ideal wall 10 s);
  scale64     64 workers, 640 trials x 20 steps x 0.2 s (ideal wall 40 s).
Utilisation = trial time / (workers x the process's whole wall); "steady" uses the span from
the first trial's start to the last one's end instead; "start" is the launch to the first
trial's first step, "ramp" from there to the start of the trial that made all workers busy
(the workers-th to start), "end" the last step to the process's exit. "CPU/trial": CPU
seconds of the tool's processes (the trials only sleep), sampled from /proc every 0.5 s, so
a lower bound. hpo-warm: `hpo run` on a warm local Ray
(`hpo local up` before the timed run, `hpo local down` after, neither timed). Peers run from
their own venvs (--syne-python, --deephyper-python: a venv with `syne-tune` / `deephyper`
installed), left out when not given.

    python -m benchmarks overhead-peers --markdown docs/benchmarks.md \
        --syne-python /work/peers/syne-tune/bin/python \
        --deephyper-python /work/peers/deephyper/bin/python
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import (
    ROOT,
    env_with_root,
    log,
    md_table,
    median,
    publish,
    run_when_quiet,
    text_table,
)

WORKLOADS = {  # trials, steps, sleep_s, workers
    "throughput": (2, 5000, 0.0, 2),
    "util8": (160, 10, 0.5, 8),
    "util32": (160, 10, 0.2, 32),
    "scale64": (640, 20, 0.2, 64),
}
TOOLS = ("hpo", "hpo-warm", "hpo-plain", "tune", "optuna", "syne", "deephyper")
# hpo-plain: `hpo run` with every speed patch off (HPO_RAY_PATCHES=off, hpo.ray_adapters.gate);
# hpo-no-NAME: with that one speed patch off
PLAIN = {"hpo-plain": {"HPO_RAY_PATCHES": "off"}}


def patch_env(tool: str) -> dict[str, str]:
    """The HPO_RAY_PATCHES a side runs under (none for the others)."""
    if tool.startswith("hpo-no-"):
        return {"HPO_RAY_PATCHES": "-" + tool.removeprefix("hpo-no-")}
    return PLAIN.get(tool, {})


@contextlib.contextmanager
def warm_ray(tool: str, python: str, workers: int, env: dict[str, str]) -> Iterator[None]:
    """For hpo-warm: `hpo local up` before the timed run (not timed), `hpo local down` after."""
    if tool != "hpo-warm":
        yield
        return
    subprocess.run([python, "-m", "hpo", "local", "up", "--cpus", str(workers)], env=env,
                   check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run([python, "-m", "hpo", "local", "down"], env=env, check=False,
                       capture_output=True)


def peer_run(python: str, tool: str, workload: str, work: Path
             ) -> tuple[list[str], dict[str, str], Path]:
    """The command and environment of one tool's run of a workload (the peer child of
    benchmarks/trials.py), and the spans file its trials append to."""
    trials, steps, sleep_s, workers = WORKLOADS[workload]
    spans = work / "spans.jsonl"
    child = "hpo" if tool.startswith("hpo-no-") else tool  # the same trial, another setting
    cmd = [python, str(ROOT / "benchmarks" / "trials.py"), child, "--trials", str(trials),
           "--steps", str(steps), "--sleep-s", str(sleep_s), "--workers", str(workers),
           "--spans", str(spans), "--work", str(work)]
    env = env_with_root(HPO_LOCAL_RAY=str(work / "warm"), **patch_env(tool))
    return cmd, env, spans  # HPO_LOCAL_RAY: hpo-warm's, no other


def one_run(python: str, tool: str, workload: str, work: Path) -> dict[str, float]:
    trials, steps, sleep_s, workers = WORKLOADS[workload]
    cmd, env, spans = peer_run(python, tool, workload, work)
    with warm_ray(tool, python, workers, env):
        timed = run_when_quiet(cmd, env=env, quiet_timeout=120, run_timeout=1800)
    done = [json.loads(line) for line in spans.read_text().splitlines()] if spans.exists() else []
    if timed.returncode or len(done) < trials:
        raise RuntimeError(f"{tool} {workload}: rc {timed.returncode}, {len(done)}/{trials} "
                           f"trials\n{timed.stderr[-1500:]}")
    firsts = sorted(d["first"] for d in done)
    first, last = firsts[0], max(d["last"] for d in done)
    busy = trials * steps * sleep_s
    return {"wall_s": timed.wall_s, "start_s": first - timed.start_epoch,
            "ramp_s": firsts[min(workers, trials) - 1] - first,
            "end_s": timed.start_epoch + timed.wall_s - last,
            "results_per_s": trials * steps / (last - first),
            "whole_results_per_s": trials * steps / timed.wall_s,
            "utilisation": busy / (workers * timed.wall_s),
            "steady": busy / (workers * (last - first)),
            "cpu_per_trial": timed.tree_cpu_s / trials, "other_cpu_s": timed.other_cpu_s}


def measure(args: argparse.Namespace, tools: dict[str, str]) -> dict[tuple[str, str], list]:
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    for workload in args.workloads:
        for round_ in range(args.rounds):
            order = list(tools) if round_ % 2 == 0 else list(reversed(tools))
            for tool in order:
                with tempfile.TemporaryDirectory(prefix=f"peers-{tool}-") as work:
                    try:
                        run = one_run(tools[tool], tool, workload, Path(work))
                    except RuntimeError as exc:  # said, and the others go on
                        log(f"  FAILED {exc}")
                        continue
                runs.setdefault((workload, tool), []).append(run)
                log(f"  {workload} {tool} round {round_ + 1}: " + ", ".join(
                    f"{k} {v:.3g}" for k, v in run.items()))
    return runs


def rows(runs: dict[tuple[str, str], list[dict[str, float]]]) -> list[list[Any]]:
    out = []
    for (workload, tool), done in runs.items():
        def med(key: str, done: list[dict[str, float]] = done) -> float:
            return median([run[key] for run in done])
        measure_ = (f"{med('results_per_s'):.0f} results/s (whole process "
                    f"{med('whole_results_per_s'):.0f})" if workload == "throughput"
                    else f"{med('utilisation'):.2f} (steady {med('steady'):.2f})")
        out.append([workload, tool, len(done), measure_, f"{med('start_s'):.1f}",
                    f"{med('ramp_s'):.1f}", f"{med('end_s'):.1f}", f"{med('wall_s'):.1f}",
                    f"{med('cpu_per_trial'):.3f}"])
    return out


HEADER = ["workload", "tool", "runs", "throughput / utilisation (median)", "start s",
          "ramp s", "end s", "wall s", "CPU s/trial"]


def peers_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS),
                        default=list(WORKLOADS))
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--syne-python", default=None)
    parser.add_argument("--deephyper-python", default=None)


def peers(args: argparse.Namespace) -> list[Any]:
    ours = dict.fromkeys(("hpo", "hpo-warm", "hpo-plain", "tune", "optuna"), sys.executable)
    pythons = {**ours, "syne": args.syne_python, "deephyper": args.deephyper_python}
    tools = {tool: pythons[tool] for tool in args.tools if pythons[tool]}
    log(f"tools: {', '.join(tools)} (a peer without its --*-python is left out)")
    runs = measure(args, tools)
    table = rows(runs)
    print(text_table(HEADER, table))
    publish(args, "overhead-peers", "Orchestration overhead beside the peers",
            md_table(HEADER, table))
    return [[*key, done] for key, done in runs.items()]


def patches_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS),
                        default=["throughput", "util8", "util32"])
    parser.add_argument("--each", action="store_true",
                        help="also each speed patch off alone (hpo-no-NAME)")


def patches(args: argparse.Namespace) -> list[Any]:
    """hpo with its speed patches on and off (plain Ray's speed), side by side in one run;
    with --each, also every speed patch off alone."""
    from hpo.ray_adapters.registry import PATCHES

    sides = ["hpo", "hpo-plain"] + [f"hpo-no-{patch.name}" for patch in PATCHES
                                    if args.each and patch.kind == "speed"]
    runs = measure(args, dict.fromkeys(sides, sys.executable))
    table = rows(runs)
    print(text_table(HEADER, table))
    publish(args, "patches", "What the speed patches buy", md_table(HEADER, table))
    return [[*key, done] for key, done in runs.items()]
