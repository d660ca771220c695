"""The test cluster (testing/slurm_cluster.py) is as strict as the sites hpo's profiles name
(JUWELS Booster, JURECA-DC, LUMI-G), so that what would fail there fails here: steps bound to
the CPUs they ask for, GPUs near cores, the sites' partitions with their time limits, a real
Lmod `module` whose Python hides the user's venv, and JSC's node names (only the suffixed
name reaches a node). The session's cluster answers most; a second one, started beside it,
has the JSC names and LUMI-G's 8 GPUs per node.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.slurm_cluster import SITE_PYTHON, SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

VENV = Path(sys.executable).parent.parent
AFFINITY = "import json, os; print(json.dumps(sorted(os.sched_getaffinity(0))))"


@pytest.fixture(scope="module")
def jsc() -> Iterator[SlurmTestCluster]:
    """A second cluster beside the session's: JSC's names (nodeKi) and 8 GPUs per node."""
    with SlurmTestCluster(nodes=2, gpus=8, hostname_suffix="i") as cluster:
        yield cluster


def _run(cluster: SlurmTestCluster, *cmd: str, stdin: str | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=cluster.env, cwd=cluster.root / "work", input=stdin,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _batch(cluster: SlurmTestCluster, script: str, *options: str) -> str:
    """Run a batch script to its end (sbatch --wait polls Slurm) and return its output."""
    out = cluster.root / "work" / f"strict-{time.monotonic_ns()}.out"
    done = _run(cluster, "sbatch", "--wait", f"--output={out}", *options, stdin=script)
    text = out.read_text() if out.exists() else "(no output)"
    assert done.returncode == 0, done.stdout + done.stderr + text
    return text


def test_a_step_is_bound_to_the_cpus_it_asks_for(slurm: SlurmTestCluster) -> None:
    # As in hpo's jobs: a batch job of 2 CPUs per node, whose srun steps do not inherit
    # them (Slurm 22.05, man srun): without -c a step runs on one core.
    text = _batch(slurm, f"""#!/bin/bash
echo "batch $({sys.executable} -c '{AFFINITY}')"
echo "plain $(srun --nodes=1 --ntasks=1 {sys.executable} -c '{AFFINITY}')"
echo "with-c $(srun --nodes=1 --ntasks=1 -c 2 {sys.executable} -c '{AFFINITY}')"
""", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=2")
    masks = {k: json.loads(v) for k, v in re.findall(r"^(\S+) (\[.*\])$", text, re.MULTILINE)}
    assert [len(masks.get(k, [])) for k in ("batch", "plain", "with-c")] == [2, 1, 2], text


def test_a_node_cannot_declare_more_cpus_than_the_machine_has() -> None:
    from testing.slurm_cluster import Unavailable

    with pytest.raises(Unavailable, match="cpus=999 per node"):
        SlurmTestCluster(nodes=1, cpus=999).__enter__()


@pytest.mark.parametrize("partition, limit, over", [
    ("booster", "24:00:00", "24:00:01"),
    ("dc-gpu", "24:00:00", "24:00:01"),
    ("standard-g", "2-00:00:00", "2-00:00:01"),
])
def test_a_site_partition_refuses_a_job_over_its_time_limit(
        slurm: SlurmTestCluster, partition: str, limit: str, over: str) -> None:
    fits = _run(slurm, "sbatch", "--test-only", f"--partition={partition}", f"--time={limit}",
                "--wrap=true")
    refused = _run(slurm, "sbatch", "--test-only", f"--partition={partition}",
                   f"--time={over}", "--wrap=true")
    assert fits.returncode == 0, fits.stderr
    assert refused.returncode != 0 and "time limit" in refused.stderr, refused.stderr


def test_every_gpu_is_near_a_core(slurm: SlurmTestCluster, jsc: SlurmTestCluster) -> None:
    for cluster in (slurm, jsc):
        conf = (cluster.root / "etc/gres.conf").read_text()
        near = re.findall(r"File=\S+/gpu(\d+) Cores=(\d+)", conf)
        assert near == [(str(k), str(k % cluster.cpus)) for k in range(cluster.gpus)], conf
        # Slurm read the cores: it names the sockets (of its own layout) the GPUs sit on
        node = _run(cluster, "scontrol", "show", "node", "node1").stdout
        assert re.search(rf"Gres=gpu:{cluster.gpus}\(S:[\d-]+\)", node), node
    assert jsc.gpus == 8  # LUMI-G's 8 GCDs per node


def test_module_is_lmod_and_the_site_python_hides_the_venv(slurm: SlurmTestCluster) -> None:
    # Run outside the checkout, so that `import hpo` cannot come from the working directory.
    text = _batch(slurm, f"""#!/bin/bash
echo "module: $(type -t module)"
module load Stages/2026 GCCcore/14.3.0 Python/3.13.5 CUDA/13
echo "loaded: $LOADEDMODULES"
echo "python: $(which python)"
python -c "import hpo" 2>&1 | tail -n 1
source {VENV}/bin/activate
python -c "import hpo; print('hpo imported')"
module purge
module load LUMI/25.03 partition/G cray-python
echo "lumi python3: $(which python3)"
python3 -c "import hpo" 2>&1 | tail -n 1
""")
    site_bin = slurm.root / "site-python" / "bin"
    assert "module: function" in text, text
    assert "loaded: Stages/2026:GCCcore/14.3.0:Python/3.13.5:CUDA/13" in text, text
    assert f"python: {site_bin / 'python'}" in text and (site_bin / "python").resolve() == (
        SITE_PYTHON.resolve()), text
    # the venv activated after the modules wins; activated before LUMI's, it is hidden
    assert text.count("No module named 'hpo'") == 2 and "hpo imported" in text, text
    assert f"lumi python3: {site_bin / 'python3'}" in text, text


NAMES_JOB = """#!/bin/bash
srun --nodes=2 --ntasks-per-node=1 --label hostname | sort
srun --nodes=1 --ntasks=1 --nodelist=node2 {python} -c '
import socket
server = socket.create_server(("0.0.0.0", 7777))
while True:
    server.accept()[0].close()
' &
{python} - <<'EOF'
import socket, time
deadline = time.monotonic() + 60
while True:  # until node2's listener is up (or the deadline)
    try:
        socket.create_connection(("node2i", 7777), 2).close()
        print("node2i: connected")
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            print("node2i:", exc)
            break
        time.sleep(0.1)
try:
    socket.create_connection(("node2", 7777), 5).close()
    print("node2: connected")
except OSError as exc:
    print("node2:", exc)
EOF
kill %1
"""


def test_with_a_suffix_only_the_suffixed_name_reaches_a_node(
        slurm: SlurmTestCluster, jsc: SlurmTestCluster) -> None:
    text = _batch(jsc, NAMES_JOB.format(python=SITE_PYTHON), "--nodes=2")
    assert "0: node1\n1: node2\n" in text, text  # Slurm itself works (it uses NodeAddr)
    assert "node2i: connected" in text, text
    assert "node2: [Errno 101] Network is unreachable" in text, text
    # the session's cluster runs beside this one, each on its own subnet and port
    assert (slurm.subnet, slurm.ctl_port) != (jsc.subnet, jsc.ctl_port)
    assert _run(slurm, "sinfo", "-h", "-N", "-o", "%N").returncode == 0
