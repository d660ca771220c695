"""Elastic capacity (`hpo slurm join`) on the test Slurm cluster of tests/slurm_testcluster.py:
the same study run on one node alone, and joined by a second node's job once half of its
trials have finished. Both runs side by side in one invocation, on real slurmctld/slurmd and
real Ray; the trials are stand-ins that sleep (tests/study_trainables.py:steady), so a node's
capacity is its CPUs, not the machine's 2 cores.

Printed: each study's wall time (its job running -> its job done), their ratio, and the join
latency (the join job running -> a trial reporting on its node). With the capacity doubled
halfway, the ratio cannot go below 0.75 (half the work at 1x, half at 2x).

Run from the repository root as root (it creates network namespaces):
    python benchmarks/join.py [--trials 16] [--markdown docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
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
    text_table,
    versions,
    write_section,
)
from hpo.results import load_results  # noqa: E402

SPACE = """\
name: {name}
trainable: tests/study_trainables.py:steady
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
    try:
        return load_results(exp_dir)
    except Exception:  # the study is starting: no state yet
        return None


def one_study(cluster: SlurmTestCluster, name: str, trials: int, steps: int,
              join: bool) -> tuple[float, float | None]:
    """(wall s, join latency s or None) of one study."""
    work = cluster.root / "work"
    space = work / f"{name}.yaml"
    space.write_text(SPACE.format(name=name, trials=trials, steps=steps, work=work,
                                  cpus=cluster.cpus, venv=Path(sys.executable).parent.parent))
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
    frame = load_results(exp_dir)
    if len(frame) != trials or set(frame["status"]) != {"TERMINATED"}:
        raise RuntimeError(f"{name}: not every trial finished:\n{frame}")
    return ended - started, latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20, help="0.5 s each")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    began = time.time()
    # nodes of as many CPUs as the machine lets a node bind (2 on a 2-core machine)
    with SlurmTestCluster(nodes=2) as cluster:
        alone, _ = one_study(cluster, "alone", args.trials, args.steps, join=False)
        log(f"  one node: {alone:.1f} s")
        joined, latency = one_study(cluster, "joined", args.trials, args.steps, join=True)
        log(f"  joined halfway: {joined:.1f} s, join latency {latency:.1f} s")
        slots = cluster.cpus
    header = ["study", "wall", "vs one node", "join latency"]
    rows = [[f"one node ({slots} trial slots)", f"{alone:.1f} s", "1.00x", "-"],
            ["a second node joins at half the trials", f"{joined:.1f} s",
             f"**{joined / alone:.2f}x**", f"{latency:.1f} s"]]
    print(text_table(header, [[c.strip("*") for c in r] for r in rows]))
    if args.markdown:
        command = "python benchmarks/join.py " + " ".join(sys.argv[1:])
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(began))
        text = (f"## Slurm: a second job joins a running study\n\n"
                f"Command: `{command.strip()}` (run {when}, took "
                f"{(time.time() - began) / 60:.1f} min). Machine: {machine()}; {versions()}.\n\n"
                f"{args.trials} stand-in trials of {args.steps} steps of 0.5 s (sleep), a "
                f"checkpoint each step, on the test cluster (nodes of {slots} CPUs in their "
                "own namespaces on this machine). The join job is submitted once half the trials "
                "have finished; doubling the capacity then bounds the ratio at 0.75x. Join "
                "latency: the join job running -> a trial reporting on its node, polled every "
                "0.2 s (one run each).\n\n" + md_table(header, rows))
        write_section(args.markdown, "join", text)


if __name__ == "__main__":
    main()
