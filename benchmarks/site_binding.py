"""What a core-bound site does to a Ray node started by `srun` without `-c`, side by side.

On the strict test cluster (tests/slurm_testcluster.py: task/affinity, cores bound by
default), one job holds every CPU of a node. Inside it, a step runs what Ray does on a
node: one process per trial, each CPU-bound, as many as the job has CPUs. The same step is
started twice: as hpo started a node's Ray before (`srun -n1`, no `-c`) and as it does now
(`srun -n1 -c <the job's CPUs>`). Printed: each variant's affinity mask and seconds per step,
and the ratio. hpo's own part (that every srun it starts asks for `-c`) is tested end to end
in tests/test_slurm_site_jobs.py; this shows what the difference costs.

    .venv/bin/python benchmarks/site_binding.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from slurm_testcluster import SlurmTestCluster  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    with SlurmTestCluster(nodes=1, gpus=0) as cluster:
        variants = {"srun -n1 (before)": "srun -n1",
                    f"srun -n1 -c {cluster.cpus} (now)": f"srun -n1 -c {cluster.cpus}"}
        times: dict[str, list[float]] = {name: [] for name in variants}
        masks: dict[str, object] = {}
        for _ in range(rounds):  # interleaved: the machine's load hits both alike
            for name, srun in variants.items():
                result = _step(cluster, srun)
                masks[name] = result["mask"]
                times[name].append(statistics.mean(result["seconds"]))  # type: ignore[arg-type]
    print(f"{cluster.cpus} trial processes in one node's step, {rounds} rounds interleaved")
    for name, seconds in times.items():
        print(f"  {name:<24} affinity {masks[name]}  s/step median "
              f"{statistics.median(seconds):.2f} (all: {', '.join(f'{s:.2f}' for s in seconds)})")
    before, now = (statistics.median(s) for s in times.values())
    print(f"  ratio before/now: {before / now:.2f}x")


if __name__ == "__main__":
    main()
