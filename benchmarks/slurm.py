"""hpo on a real multi-node Slurm: the test cluster of testing/slurm_cluster.py (real
slurmctld and one slurmd per node, each node in its own network, UTS and mount namespace, all
sharing this machine's cores). Run from the repository root as root (it creates network
namespaces). By --mode:

startup (default): time from a Slurm job's start to "Ray cluster ready on all nodes", for 1,
2 and 3 nodes, against the fixed sleeps of the official Ray-on-Slurm template (10 s after the
head, 5 s after each worker). Each run submits a batch script whose first line records the
time (`date +%s.%N`) and which then runs `hpo slurm check`: it starts the head and the
workers through srun, waits until the GCS reports every node alive with its CPUs, prints the
time, and stops Ray. The figure is that time minus the first line's: Python start-up and
imports included.

forks: a job's trial workers forked by each node's fork server (hpo.driver.backends.node_start)
against Ray's own fresh workers (HPO_RAY_PATCHES=-fork-workers), side by side. Each run submits a
batch script that records its start, then runs a study with `hpo slurm run`: one trial per CPU of
the allocation at once (nodes x 2), each `steps` steps of `sleep_s` (benchmarks/trials.py's
hpo_trial, which appends its first and last step's clock to a spans file on the shared file system;
with `torch`, the same in benchmarks/torch_trial.py, whose module imports torch). Figures, from the
job's start: the cluster ready (the batch output's line), the first trial's first step, the last
trial's first step (every worker up), and the job's end. The two sides take turns.

join: elastic capacity (`hpo slurm join`): the same study run on one node alone, and joined
by a second node's job once half of its trials have finished, both in one invocation; the
trials are stand-ins that sleep (benchmarks/trials.py:steady), so a node's capacity is its
CPUs, not the machine's cores. Printed: each study's wall time (its job running -> its job
done), their ratio, and the join latency (the join job running -> a trial reporting on its
node). With the capacity doubled halfway, the ratio cannot go below 0.75.

binding: what a core-bound site does to a Ray node started by `srun` without `-c`. On the
strict test cluster (task/affinity, cores bound by default), one job holds every CPU of a
node; inside it, a step runs what Ray does on a node: one CPU-bound process per trial, as
many as the job has CPUs. The same step is started as `srun -n1` (no `-c`) and as
`srun -n1 -c <the job's CPUs>`, which is what hpo starts. Printed: each variant's affinity
mask and seconds per step, and the ratio. hpo's own part (that every srun it starts asks for
`-c`) is tested end to end in tests/cluster/test_slurm_site_jobs.py; this shows what it is worth.

    python -m benchmarks slurm --markdown docs/benchmarks.md
    python -m benchmarks slurm --mode forks --nodes 2 --markdown docs/benchmarks.md
    python -m benchmarks slurm --mode join --trials 16 --markdown docs/benchmarks.md
    python -m benchmarks slurm --mode binding
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import (
    ROOT,
    log,
    md_table,
    median,
    publish,
    text_table,
    wait_until_quiet,
)
from testing.slurm_cluster import SlurmTestCluster


def slurm_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=["startup", "forks", "join", "binding"],
                        default="startup")
    parser.add_argument("--nodes", default=None,
                        help="startup: comma-separated sizes (default 1,2,3); forks: nodes "
                        "(default 2)")
    parser.add_argument("--quiet-timeout", type=float, default=60.0,
                        help="seconds to wait for a quiet machine before each run")
    parser.add_argument("--trainables", nargs="+", choices=["plain", "torch"],
                        default=["plain", "torch"], help="forks")
    parser.add_argument("--steps", type=int, default=None,
                        help="forks: steps a trial (default 3); join: 0.5 s each (default 20)")
    parser.add_argument("--sleep-s", type=float, default=0.5, help="forks")
    parser.add_argument("--trials", type=int, default=16, help="join")


def slurm(args: argparse.Namespace) -> Any:
    return {"startup": startup, "forks": forks, "join": join,
            "binding": binding}[args.mode](args)


# ---------------------------------------------------------------- startup

SCRIPT = """#!/bin/bash
#SBATCH --nodes={nodes} --ntasks-per-node=1 --cpus-per-task=2 --output={out}
echo "job-start $(date +%s.%N)"
cd {root}
{python} -m hpo slurm check --timeout 120
"""


def fixed_sleeps(nodes: int) -> float:
    return 10.0 + 5.0 * (nodes - 1)


def one_run(cluster: SlurmTestCluster, nodes: int, tag: str) -> tuple[float, float]:
    """(job start -> all nodes ready, the part inside `hpo slurm check`) in seconds."""
    work = cluster.root / "work"
    out = work / f"startup-{tag}.out"
    script = work / f"startup-{tag}.sh"
    script.write_text(SCRIPT.format(nodes=nodes, out=out, root=ROOT, python=sys.executable))
    subprocess.run(["sbatch", "--wait", str(script)], env=cluster.env, check=True,
                   capture_output=True, timeout=300)
    text = out.read_text()
    start = re.search(r"job-start (\S+)", text)
    ready = re.search(r"ready: \d+ node\(s\) after (\S+) s; head \S+; epoch (\S+)", text)
    if not (start and ready):
        raise RuntimeError(f"run {tag} did not report readiness:\n{text}")
    return float(ready.group(2)) - float(start.group(1)), float(ready.group(1))


def startup(args: argparse.Namespace) -> list[list[Any]]:
    sizes = [int(n) for n in (args.nodes or "1,2,3").split(",")]
    rows = []
    with SlurmTestCluster(nodes=max(sizes), cpus=2) as cluster:
        for nodes in sizes:
            totals, inner = [], []
            for k in range(args.rounds):
                wait_until_quiet(timeout_s=args.quiet_timeout, log=log)
                total, part = one_run(cluster, nodes, f"{nodes}-{k}")
                log(f"  {nodes} node(s), run {k + 1}: ready {total:.2f} s after job start "
                    f"({part:.2f} s inside hpo slurm check)")
                totals.append(total)
                inner.append(part)
            rows.append([nodes, f"{fixed_sleeps(nodes):.0f} s", f"**{median(totals):.2f} s**",
                         ", ".join(f"{t:.2f}" for t in totals),
                         ", ".join(f"{t:.2f}" for t in inner)])
    header = ["nodes", "official template (fixed sleeps)", "hpo median",
              "hpo runs (job start -> ready)", "of which in `hpo slurm check`"]
    print(text_table(header, [[str(c).strip("*") for c in r] for r in rows]))
    publish(args, "slurm-startup", "Slurm: job start to Ray cluster ready on all nodes",
            "Test cluster of `testing/slurm_cluster.py`: real slurmctld and one slurmd per "
            "node, each node in its own network, UTS and mount namespace, all nodes sharing "
            "the machine's 2 cores (nodes declare 2 CPUs each). A run waits for a quiet "
            "machine first; the nodes share the machine's cores, so the figures are "
            "noisy.\n\n" + md_table(header, rows))
    return rows


# ---------------------------------------------------------------- forks

CPUS = 2  # each test node's
SIDES = {"forked": "on", "Ray's own": "-fork-workers"}  # HPO_RAY_PATCHES
TRAINABLES = {"plain": ROOT / "benchmarks/trials.py:hpo_trial",
              "torch": ROOT / "benchmarks/torch_trial.py:hpo_torch_trial"}

FORKS_SCRIPT = """#!/bin/bash
#SBATCH --nodes={nodes} --ntasks-per-node=1 --cpus-per-task={cpus} --output={out}
echo "job-start $(date +%s.%N)"
export HPO_RAY_PATCHES={fork}
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


def forks_run(cluster: SlurmTestCluster, args: argparse.Namespace, trainable: str,
              side: str, tag: str) -> dict[str, float]:
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
    script.write_text(FORKS_SCRIPT.format(nodes=args.nodes, cpus=CPUS, out=out, fork=SIDES[side],
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


def forks(args: argparse.Namespace) -> list[list[Any]]:
    args.nodes = int(args.nodes or 2)
    args.steps = args.steps or 3
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    with SlurmTestCluster(nodes=args.nodes, cpus=CPUS) as cluster:
        for k in range(args.rounds):
            for trainable in args.trainables:
                for side in SIDES:
                    wait_until_quiet(timeout_s=args.quiet_timeout, log=log)
                    tag = f"{trainable}-{k}-{SIDES[side]}"
                    run = forks_run(cluster, args, trainable, side, tag)
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
    publish(args, "slurm-forks", "Slurm: trial workers forked on each node, against Ray's own",
            "Seconds from the job's start, medians (each run).\n\n" + md_table(header, rows))
    return rows


# ---------------------------------------------------------------- join

JOIN_SPACE = """\
name: {name}
trainable: {trainable}
metric: score
mode: max
num_samples: {trials}
search_space:
  x: {{uniform: [0.0, 1.0]}}
constants: {{steps: {steps}, sleep: 0.5}}
search: {{type: random, seed: 1}}
checkpoint: {{frequency: 1, keep: 1}}
reuse_actors: false
storage: {work}/results
slurm: {{nodes: 1, cpus_per_node: {cpus}, time: "00:30:00", venv: {venv},
        job_dir: {work}/jobs, startup_timeout_s: 120}}
"""


def _hpo(cluster: SlurmTestCluster, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "hpo", "slurm", *args, "--workdir", str(ROOT)],
                          cwd=ROOT, env=cluster.env, capture_output=True, text=True,
                          timeout=120, check=True)
    return done.stdout.strip()


def _job(cluster: SlurmTestCluster, job_id: str) -> dict[str, str]:
    text = subprocess.run(["scontrol", "show", "job", job_id], env=cluster.env,
                          capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", text))


def _until(ready: object, timeout: float = 900) -> float:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("not seen in time")
        time.sleep(0.2)
    return time.monotonic()


def _frame(exp_dir: Path):  # noqa: ANN202 - a pandas frame, or None before the first row
    from hpo.results import load_results

    try:
        return load_results(exp_dir)
    except Exception:  # the study is starting: no state yet
        return None


def one_study(cluster: SlurmTestCluster, name: str, trials: int, steps: int,
              join: bool) -> tuple[float, float | None]:
    """(wall s, join latency s or None) of one study."""
    work = cluster.root / "work"
    space = work / f"{name}.yaml"
    space.write_text(JOIN_SPACE.format(
        trainable=ROOT / "benchmarks/trials.py:steady", name=name, trials=trials, steps=steps,
        work=work, cpus=cluster.cpus, venv=Path(sys.executable).parent.parent))
    exp_dir = work / "results" / name
    head = _hpo(cluster, "submit", str(space))
    started = _until(lambda: _job(cluster, head)["JobState"] == "RUNNING")
    latency = None
    if join:
        def half_done() -> bool:
            frame = _frame(exp_dir)
            return frame is not None and (frame["status"] == "TERMINATED").sum() >= trials // 2

        _until(half_done)
        joined = _hpo(cluster, "join", str(exp_dir), "--cpus-per-node", str(cluster.cpus))
        running = _until(lambda: _job(cluster, joined)["JobState"] == "RUNNING")
        node = _job(cluster, joined)["NodeList"]

        def on_node() -> bool:
            frame = _frame(exp_dir)
            return frame is not None and bool(((frame["hostname"] == node)
                                               & (frame["iterations"] >= 1)).any())

        latency = _until(on_node) - running
    ended = _until(lambda: _job(cluster, head)["JobState"] not in ("PENDING", "RUNNING"))
    for job_output in ROOT.glob(f"hpo-{name}-*.out"):  # the jobs' output files (workdir)
        job_output.unlink()
    frame = _frame(exp_dir)
    if frame is None or len(frame) != trials or set(frame["status"]) != {"TERMINATED"}:
        raise RuntimeError(f"{name}: not every trial finished:\n{frame}")
    return ended - started, latency


def join(args: argparse.Namespace) -> list[list[str]]:
    steps = args.steps or 20
    # nodes of as many CPUs as the machine lets a node bind (2 on a 2-core machine)
    with SlurmTestCluster(nodes=2) as cluster:
        alone, _ = one_study(cluster, "alone", args.trials, steps, join=False)
        log(f"  one node: {alone:.1f} s")
        joined, latency = one_study(cluster, "joined", args.trials, steps, join=True)
        log(f"  joined halfway: {joined:.1f} s, join latency {latency:.1f} s")
        slots = cluster.cpus
    header = ["study", "wall", "vs one node", "join latency"]
    rows = [[f"one node ({slots} trial slots)", f"{alone:.1f} s", "1.00x", "-"],
            ["a second node joins at half the trials", f"{joined:.1f} s",
             f"**{joined / alone:.2f}x**", f"{latency:.1f} s"]]
    print(text_table(header, [[c.strip("*") for c in r] for r in rows]))
    publish(args, "join", "Slurm: a second job joins a running study",
            f"{args.trials} stand-in trials of {steps} steps of 0.5 s (sleep), a "
            f"checkpoint each step, on the test cluster (nodes of {slots} CPUs in their "
            "own namespaces on this machine). The join job is submitted once half the trials "
            "have finished; doubling the capacity then bounds the ratio at 0.75x. Join "
            "latency: the join job running -> a trial reporting on its node, polled every "
            "0.2 s (one run each).\n\n" + md_table(header, rows))
    return rows


# ---------------------------------------------------------------- binding

# N trial processes, each timing a fixed amount of pure-Python work (one core's worth)
WORKLOAD = """\
import json, os, sys, time
from multiprocessing import Pool

def step(_):
    started = time.perf_counter()
    total = 0
    for i in range(3_000_000):
        total += i * i
    return time.perf_counter() - started

n = int(sys.argv[1])
with Pool(n) as pool:
    seconds = pool.map(step, range(n))
print(json.dumps({"mask": sorted(os.sched_getaffinity(0)), "seconds": seconds}))
"""


def _step(cluster: SlurmTestCluster, srun: str) -> dict[str, object]:
    script = cluster.root / "work" / "workload.py"
    script.write_text(WORKLOAD)
    out = cluster.root / "work" / f"bench-{abs(hash(srun))}-%j.out"
    batch = f"#!/bin/bash\n{srun} {sys.executable} {script} {cluster.cpus}\n"
    subprocess.run(["sbatch", "--wait", "-N1", "-c", str(cluster.cpus), "-o", str(out)],
                   input=batch, env=cluster.env, capture_output=True, text=True, timeout=300,
                   check=True)
    found = sorted(out.parent.glob(out.name.replace("%j", "*")))
    result = json.loads(found[-1].read_text().splitlines()[-1])
    for path in found:
        path.unlink()
    return result


def binding(args: argparse.Namespace) -> dict[str, list[float]]:
    with SlurmTestCluster(nodes=1, gpus=0) as cluster:
        variants = {"srun -n1": "srun -n1",
                    f"srun -n1 -c {cluster.cpus} (hpo)": f"srun -n1 -c {cluster.cpus}"}
        times: dict[str, list[float]] = {name: [] for name in variants}
        masks: dict[str, object] = {}
        for _ in range(args.rounds):  # interleaved: the machine's load hits both alike
            for name, srun in variants.items():
                result = _step(cluster, srun)
                masks[name] = result["mask"]
                times[name].append(statistics.mean(result["seconds"]))  # type: ignore[arg-type]
    print(f"{cluster.cpus} trial processes in one node's step, {args.rounds} rounds interleaved")
    for name, seconds in times.items():
        print(f"  {name:<24} affinity {masks[name]}  s/step median "
              f"{statistics.median(seconds):.2f} (all: {', '.join(f'{s:.2f}' for s in seconds)})")
    without, with_c = (statistics.median(s) for s in times.values())
    print(f"  ratio without -c / with -c: {without / with_c:.2f}x")
    return times
