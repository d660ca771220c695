"""Time from a Slurm job's start to "Ray cluster ready on all nodes", for 1, 2 and 3 nodes,
on the test cluster of tests/slurm_testcluster.py (real slurmctld/slurmd, one network
namespace per node, all on this one machine), against the fixed sleeps of the official
Ray-on-Slurm template (10 s after the head, 5 s after each worker).

Each run submits a batch script whose first line records the time (`date +%s.%N`) and
which then runs `hpo slurm check`: it starts the head and the workers through srun, waits
until the GCS reports every node alive with its CPUs, prints the time, and stops Ray. The
figure is that time minus the first line's: Python start-up and imports included.

Run from the repository root as root (it creates network namespaces):
    python benchmarks/slurm_startup.py [--repeats 3] [--markdown docs/benchmarks.md]
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
    median,
    text_table,
    versions,
    wait_until_quiet,
    write_section,
)

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", default="1,2,3")
    parser.add_argument("--quiet-timeout", type=float, default=60.0,
                        help="seconds to wait for a quiet machine before each run")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    began = time.time()
    rows = []
    with SlurmTestCluster(nodes=max(sizes), cpus=2) as cluster:
        for nodes in sizes:
            totals, inner = [], []
            for k in range(args.repeats):
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
    if args.markdown:
        command = "python benchmarks/slurm_startup.py " + " ".join(sys.argv[1:])
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(began))
        took = (time.time() - began) / 60
        text = (f"## Slurm: job start to Ray cluster ready on all nodes\n\n"
                f"Command: `{command.strip()}` (run {when}, took {took:.1f} min). "
                f"Machine: {machine()}; {versions()}.\n\n"
                "Test cluster of `tests/slurm_testcluster.py`: real slurmctld and one slurmd per "
                "node, each node in its own network, UTS and mount namespace, all nodes sharing "
                "the machine's 2 cores (nodes declare 2 CPUs each). A run waits for a quiet "
                "machine first; the nodes share the machine's cores, so the figures are "
                "noisy.\n\n"
                + md_table(header, rows))
        write_section(args.markdown, "slurm-startup", text)


if __name__ == "__main__":
    main()
