"""The built-in site profiles, end to end, on a test cluster as strict as the sites.

Its own 2-node cluster (testing/slurm_cluster.py): steps bound to cores, a real Lmod whose
site modules put a Python without hpo first on PATH, 8 fake GPUs per node with `Cores=`,
partitions named and limited as the sites', and JSC-style node names (only `node1i` reaches
node1). Each profile runs through a site file that starts from it (`base: ...`) and changes
only what this machine cannot give: the CPUs per node (2 cores) and, for LUMI-G, the name of
the network interface (hsn0 there, eth0 here). The jobs are submitted from this test run's
venv and name no `slurm.venv`: the job must find its hpo after the site's modules.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from calls import ROOT
from slurm_jobs import _wait_job

from hpo.results import load_results
from testing.slurm_cluster import SlurmTestCluster, Unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PROFILES = ("juwels-booster", "jureca-dc", "lumi-g")


@pytest.fixture(scope="module")
def site_cluster() -> Iterator[SlurmTestCluster]:
    try:
        cluster = SlurmTestCluster(nodes=2, gpus=8, hostname_suffix="i").__enter__()
    except Unavailable as exc:  # never a silent skip: these tests are the feature
        pytest.fail(f"cannot start the strict test Slurm cluster: {exc}", False)
    try:
        yield cluster
    finally:
        cluster.stop()


def _study(cluster: SlurmTestCluster, profile: str, gpus_per_trial: int) -> tuple[Path, Path]:
    """(space, site file) of a 2-node study of 4 trials that report where they ran."""
    work = cluster.root / "work"
    site = work / f"site-{profile}.yaml"
    extra = {"lumi-g": "interface: eth0  # LUMI's hsn0\nmem: '0'  # all of this machine's\n",
             # gres.conf's Cores= (the profile's map names CPUs this machine lacks)
             "jureca-dc": "gpu_cores: []\n"}.get(profile, "")
    site.write_text(f"base: {profile}\ncpus_per_node: {cluster.cpus}  # a 2-core machine\n"
                    f"{extra}")
    space = work / f"{profile}.yaml"
    space.write_text(f"""\
name: {profile}
trainable: tests/support/study_trainables.py:placed
metric: score
mode: max
num_samples: 4
search_space:
  x: {{uniform: [0.0, 1.0]}}
constants: {{steps: 2, sleep: 0.5}}
search: {{type: random, seed: 1}}
resources: {{cpus_per_trial: 1, gpus_per_trial: {gpus_per_trial}}}
storage: {work / "results"}
slurm:
  nodes: 2
  time: "00:20:00"
  signal_seconds: 60
  job_dir: {work / "jobs"}
  startup_timeout_s: 120
""")
    return space, site


def _submit(cluster: SlurmTestCluster, space: Path, *options: str) -> str:
    done = subprocess.run([sys.executable, "-m", "hpo", "slurm", "submit", str(space),
                           "--workdir", str(ROOT), *options], cwd=ROOT, env=cluster.env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def _finished(cluster: SlurmTestCluster, name: str, job_id: str) -> str:
    """The job's output once it ended well (the file is removed: job ids repeat across the
    tests' clusters)."""
    job = _wait_job(cluster, job_id)
    output = ROOT / f"hpo-{name}-{job_id}.out"
    out = output.read_text() if output.exists() else "(no output file)"
    output.unlink(missing_ok=True)
    assert job["JobState"] in ("COMPLETED", "COMPLETING") and job["ExitCode"] == "0:0", (
        f"{job['JobState']} {job['ExitCode']}\n{out}")
    return out


def _rows(exp_dir: Path) -> pd.DataFrame:
    frame = load_results(exp_dir)
    assert len(frame) == 4 and set(frame["status"]) == {"TERMINATED"}, frame
    return frame


@pytest.mark.parametrize("profile", PROFILES)
def test_each_profile_runs_a_two_node_study(site_cluster: SlurmTestCluster,
                                            profile: str) -> None:
    # jureca-dc's site file drops its profile's map: its trials take one GPU each and run on
    # the cores gres.conf puts near it; the other two use whole-step CPUs (their profiles'
    # maps name cores a 2-core machine does not have, so nothing is pinned).
    gpus = 1 if profile == "jureca-dc" else 0
    space, site = _study(site_cluster, profile, gpus)
    job_id = _submit(site_cluster, space, "--site", str(site))
    out = _finished(site_cluster, profile, job_id)
    assert "Ray cluster ready on 2 node(s) (node1, node2)" in out, out
    assert "warning" not in out, out  # no node short of CPUs
    frame = _rows(site_cluster.root / "work/results" / profile)
    # the venv's Python, not the site module's
    assert {str(Path(python).parent) for python in frame["python"]} == {f"{sys.prefix}/bin"}
    assert set(frame["hostname"]) <= {"node1", "node2"}
    # the profile's variables reach the trials (batch shell -> srun -> Ray -> its workers)
    assert set(frame["cxi_fork_safe"].astype(str)) == {"1" if profile == "lumi-g" else "unset"}
    if gpus:
        near = {gpu: str(int(gpu) % site_cluster.cpus) for gpu in frame["gpus"]}
        assert [row.cpu_list == near[row.gpus] for row in frame.itertuples()] == [True] * 4, (
            frame[["gpus", "cpu_list"]])
    else:  # every trial may run on all the CPUs the job holds on its node
        assert list(frame["cpus"]) == [site_cluster.cpus] * 4, frame[["hostname", "cpus"]]


def test_a_site_module_hides_hpo_from_a_job_without_the_venv(
        site_cluster: SlurmTestCluster) -> None:
    """What the profile test guards against: the site's Python module comes first on PATH,
    so a job that does not bring its venv after the modules has no hpo."""
    script = ("#!/bin/bash\nmodule load Stages/2026 GCCcore/14.3.0 Python/3.13.5 CUDA/13\n"
              "python -c 'import hpo'\n")
    work = site_cluster.root / "work"  # not the checkout, where `import hpo` finds ./hpo
    done = subprocess.run(["sbatch", "--wait", "-N1", "-p", "booster", "-D", str(work), "-o",
                           str(work / "hidden-%j.out")],
                          input=script, env=site_cluster.env, capture_output=True, text=True,
                          timeout=120, cwd=work)
    assert done.returncode != 0, done.stdout
    out = next((site_cluster.root / "work").glob("hidden-*.out")).read_text()
    assert "No module named 'hpo'" in out, out


def _doctor_in_a_step(cluster: SlurmTestCluster, srun: str) -> str:
    """`hpo doctor` in a step of a 1-node job that holds all the node's CPUs."""
    # one log per step line (its options, not its length: "-c1" and "-c2" are as long)
    log = cluster.root / "work" / f"doctor-{srun.replace(' ', '_')}-%j.out"
    script = f"#!/bin/bash\n{srun} {sys.executable} -m hpo doctor\n"
    subprocess.run(["sbatch", "--wait", "-N1", "-c", str(cluster.cpus), "-o", str(log)],
                   input=script, env=cluster.env, capture_output=True, text=True,
                   timeout=180, cwd=ROOT)
    found = list(log.parent.glob(log.name.replace("%j", "*")))
    assert len(found) <= 1, found
    return found[0].read_text() if found else "(no output)"


def test_doctor_in_a_core_bound_step_says_what_is_wrong(site_cluster: SlurmTestCluster) -> None:
    cpus = site_cluster.cpus
    short = _doctor_in_a_step(site_cluster, "srun -n1 -c1")
    rows = {line[4:22].strip(): line for line in short.splitlines() if line[:3] in ("ok ", "NO ")}
    assert rows["cpus"].startswith("NO ") and (
        f"1 usable by this step (affinity mask) of the {cpus} the job holds" in rows["cpus"]), short
    assert f"srun -c {cpus}" in rows["cpus"]
    # node1 resolves to an address no node has (JSC-like names: only node1i reaches it)
    assert rows["ray address"].startswith("NO ") and "192.0.2." in rows["ray address"], short
    whole = _doctor_in_a_step(site_cluster, f"srun -n1 -c{cpus}")
    rows = {line[4:22].strip(): line for line in whole.splitlines() if line[:3] in ("ok ", "NO ")}
    assert rows["cpus"].startswith("ok ") and f"{cpus} usable" in rows["cpus"], whole


def test_the_first_job_checks_run_as_written_on_juwels_booster(
        site_cluster: SlurmTestCluster) -> None:
    """docs/first-job.md's JUWELS Booster check, line by line in one salloc: only the CPUs per
    task (96 there, this machine's here) change. The site's login shell knows the site's
    modules (a login profile that sets MODULEPATH, as the site's /etc/profile does); HOME is
    on the cluster's shared file system (each node has its own /tmp)."""
    page = (ROOT / "docs/first-job.md").read_text()
    block = next(b for b in re.findall(r"^```bash\n(.*?)^```", page, re.S | re.M)
                 if "develbooster" in b)
    salloc, *rest = [line for line in block.splitlines() if line.strip()]
    words = shlex.split(salloc, comments=True)
    words[words.index("-c") + 1] = str(site_cluster.cpus)
    home = site_cluster.root / "work" / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / ".bash_profile").write_text(f"export MODULEPATH={site_cluster.root / 'modules'}\n")
    bin_dir = Path(sys.executable).parent  # `hpo` as the venv installs it
    env = {**site_cluster.env, "HOME": str(home), "PATH": f"{bin_dir}:{site_cluster.env['PATH']}"}
    done = subprocess.run([*words, "bash", "-c", "\n".join(rest)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert "Invalid numeric value" not in out and "salloc: Granted job allocation" in out, out
    rows = {line[4:22].strip(): line for line in out.splitlines() if line[:3] in ("ok ", "NO ")}
    cpus, address, modules = (rows.get(key, "") for key in ("cpus", "ray address", "modules"))
    assert cpus.startswith("ok ") and f"{site_cluster.cpus} usable" in cpus, out
    assert address.startswith("ok "), out  # the profile's `i` names: node1i
    assert modules.startswith("ok ") and "all 4 load" in modules, out
    assert "ready: 2 node(s)" in out, out  # hpo slurm check: Ray on both nodes
