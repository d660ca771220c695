"""A Slurm job's trial workers forked by each node's fork server (hpo.driver.node_start)
against Ray's own fresh workers (HPO_FORK_WORKERS=0), side by side, on the test cluster of
tests/slurm_testcluster.py (real slurmctld and one slurmd per node, each node in its own
network, UTS and mount namespace, all sharing this machine's cores).

Each run submits a batch script that records its start (`date +%s.%N`), then runs a study
with `hpo slurm run`: one trial per CPU of the allocation at once (`nodes` x 2), each
`steps` steps of `sleep_s` (benchmarks/peer_runs.py's trial, which appends its first and
last step's clock to a spans file on the shared file system; with `torch`, the same in
benchmarks/torch_trial.py, whose module imports torch). Figures, from the job's start:
the cluster ready (the batch output's line), the first trial's first step, the last trial's
first step (every worker up), and the job's end. The two sides take turns.

Run from the repository root as root (it creates network namespaces):
    python benchmarks/slurm_forks.py [--nodes 2] [--rounds 3] [--markdown docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT, ROOT / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from slurm_testcluster import SlurmTestCluster  # noqa: E402

from benchmarks._common import (  # noqa: E402
    log,
    machine,
    md_table,
    median,
    text_table,
    versions,
    wait_until_quiet,
    write_section,
)

CPUS = 2  # each test node's
SIDES = {"forked": "1", "Ray's own": "0"}  # HPO_FORK_WORKERS
TRAINABLES = {"plain": ROOT / "benchmarks/peer_runs.py:hpo_trial",
              "torch": ROOT / "benchmarks/torch_trial.py:hpo_torch_trial"}

SCRIPT = """#!/bin/bash
#SBATCH --nodes={nodes} --ntasks-per-node=1 --cpus-per-task={cpus} --output={out}
echo "job-start $(date +%s.%N)"
export HPO_FORK_WORKERS={fork}
cd {root}
{python} -m hpo slurm run {space} --storage {storage}
echo "job-end $(date +%s.%N)"
"""

SPACE = """name: forks
trainable: {trainable}
metric: score
mode: max
num_samples: {trials}
max_concurrent: {trials}
search_space: {{x: {{uniform: [0.0, 1.0]}}}}
constants: {{steps: {steps}, sleep_s: {sleep_s}, spans: {spans}}}
resources: {{cpus_per_trial: 1}}
slurm:
  nodes: {nodes}
  cpus_per_node: {cpus}
  time: "00:20:00"
  venv: {venv}
  job_dir: {jobs}
  startup_timeout_s: 180
"""


def one_run(cluster: SlurmTestCluster, args: argparse.Namespace, trainable: str, side: str,
            tag: str) -> dict[str, float]:
    """Seconds from the job's start to: cluster ready, first step, last first step, end."""
    work = cluster.root / "work" / f"forks-{tag}"
    work.mkdir(parents=True)
    trials = args.nodes * CPUS
    spans = work / "spans.jsonl"
    space = work / "space.yaml"
    space.write_text(SPACE.format(trainable=TRAINABLES[trainable], trials=trials, steps=args.steps,
                                  sleep_s=args.sleep_s, spans=spans, nodes=args.nodes,
                                  cpus=CPUS, venv=Path(sys.executable).parent.parent,
                                  jobs=work / "jobs"))
    out = work / "job.out"
    script = work / "job.sh"
    script.write_text(SCRIPT.format(nodes=args.nodes, cpus=CPUS, out=out, fork=SIDES[side],
                                    root=ROOT, python=sys.executable, space=space,
                                    storage=work / "results"))
    subprocess.run(["sbatch", "--wait", str(script)], env=cluster.env, check=True,
                   capture_output=True, timeout=600)
    text = out.read_text()
    marks = {name: re.search(rf"{name} (\S+)", text) for name in ("job-start", "job-end")}
    ready = re.search(r"Ray cluster ready .*? after (\S+) s", text)
    done = [json.loads(line) for line in spans.read_text().splitlines()] if spans.exists() else []
    if not all(marks.values()) or len(done) != trials:
        raise RuntimeError(f"{trainable}, {side} run {tag}: {len(done)}/{trials} trials\n"
                           f"{text[-2000:]}")
    start = float(marks["job-start"].group(1))  # type: ignore[union-attr]
    firsts = sorted(d["first"] for d in done)
    return {"ready_s": float(ready.group(1)) if ready else float("nan"),
            "first_s": firsts[0] - start, "all_s": firsts[-1] - start,
            "end_s": float(marks["job-end"].group(1)) - start}  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--trainables", nargs="+", choices=sorted(TRAINABLES),
                        default=list(TRAINABLES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sleep-s", type=float, default=0.5)
    parser.add_argument("--quiet-timeout", type=float, default=60.0)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    began = time.time()
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    with SlurmTestCluster(nodes=args.nodes, cpus=CPUS) as cluster:
        for k in range(args.rounds):
            for trainable in args.trainables:
                for side in SIDES:
                    wait_until_quiet(timeout_s=args.quiet_timeout, log=log)
                    tag = f"{trainable}-{k}-{SIDES[side]}"
                    run = one_run(cluster, args, trainable, side, tag)
                    log(f"  {trainable}, {side}, round {k + 1}: " + ", ".join(
                        f"{key} {value:.2f}" for key, value in run.items()))
                    runs.setdefault((trainable, side), []).append(run)
    header = ["trainable", "workers", "Ray ready s (inside `hpo slurm run`)",
              "first trial's first step s", "every trial's first step s", "job's end s"]
    rows = [[trainable, side, *(f"{median([r[key] for r in done]):.2f} ("
                                + ", ".join(f"{r[key]:.2f}" for r in done) + ")"
                                for key in ("ready_s", "first_s", "all_s", "end_s"))]
            for (trainable, side), done in runs.items()]
    print(text_table(header, rows))
    if args.markdown:
        command = "python benchmarks/slurm_forks.py " + " ".join(sys.argv[1:])
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(began))
        text = (f"## Slurm: trial workers forked on each node, against Ray's own\n\n"
                f"Command: `{command.strip()}` (run {when}). Machine: {machine()}; "
                f"{versions()}. Seconds from the job's start, medians (each run).\n\n"
                + md_table(header, rows))
        write_section(args.markdown, "slurm-forks", text)


if __name__ == "__main__":
    main()
