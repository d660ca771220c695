"""The CPUs near each GPU: read from the site profile or gres.conf's Cores= (cluster side),
and a trial's process or rank pinned to them (trial side)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from calls import cli_invoke

from hpo.cluster.gpu_cores import (
    cpu_list,
    gres_cores,
    logical_cores,
    node_gpu_cores,
    table_text,
)
from hpo.trial.placement import gpu_cores

GRES = """\
AutoDetect=off
# one line per GPU, as JSC-like sites write it
NodeName=gpu[01-02] Name=gpu Type=a100 File=/dev/nvidia0 Cores=3
NodeName=gpu[01-02] Name=gpu Type=a100 File=/dev/nvidia1 Cores=1
NodeName=gpu03 Name=gpu File=/dev/nvidia[0-1] Cores=0-1
Name=gpu File=/dev/nvidia[2-3]
"""


def _sysfs(root: Path, layout: list[tuple[int, int]]) -> Path:
    """A fake /sys/devices/system/cpu: cpuN -> (package, core)."""
    for cpu, (package, core) in enumerate(layout):
        topology = root / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{package}\n")
        (topology / "core_id").write_text(f"{core}\n")
    return root


def test_cpu_lists() -> None:
    assert cpu_list("0-2,8") == [0, 1, 2, 8] and cpu_list("5") == [5]
    with pytest.raises(ValueError):
        cpu_list("a-b")


def test_gres_conf_cores_per_gpu_of_this_node() -> None:
    assert gres_cores(GRES, "gpu02") == {"0": [3], "1": [1]}  # nvidia2-3 have no Cores=
    assert gres_cores(GRES, "gpu03") == {"0": [0, 1], "1": [0, 1]}
    assert gres_cores("Name=mps Count=100\n", "gpu01") == {}


def test_slurm_core_indices_become_os_cpus(tmp_path: Path) -> None:
    # 2 packages x 2 cores x 2 threads, numbered as Linux does: threads last
    layout = [(0, 0), (0, 1), (1, 0), (1, 1)] * 2
    sysfs = _sysfs(tmp_path, layout)
    assert logical_cores(sysfs) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    conf = tmp_path / "gres.conf"
    conf.write_text(GRES)
    env = {"SLURM_CONF": str(tmp_path / "slurm.conf")}
    assert node_gpu_cores([], env, "gpu01", sysfs) == {"0": [3, 7], "1": [1, 5]}


def test_the_profile_map_wins_over_gres_conf(tmp_path: Path) -> None:
    (tmp_path / "gres.conf").write_text(GRES)
    env = {"SLURM_CONF": str(tmp_path / "slurm.conf")}
    table = node_gpu_cores(["49-51", "57"], env, "gpu01")
    assert table == {"0": [49, 50, 51], "1": [57]}
    assert table_text(table) == "0=49,50,51;1=57"
    assert gpu_cores(table_text(table)) == {"0": {49, 50, 51}, "1": {57}}
    assert node_gpu_cores([], {"SLURM_CONF": str(tmp_path / "none/slurm.conf")}, "x") == {}


_PIN = """\
import json, os, sys
from hpo.trial import placement
wanted, gpus = int(sys.argv[1]), sys.argv[2].split(",") if sys.argv[2] else []
pinned = placement.pin_near(gpus, wanted)
tasks = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
print(json.dumps({"pinned": sorted(pinned) if pinned else None,
                  "masks": sorted({tuple(m) for m in tasks.values()})}))
"""


def _pin(env: dict[str, str], wanted: int) -> dict[str, object]:
    gpus = env.pop("GPUS", "")  # the trial's own (Ray's ids)
    done = subprocess.run([sys.executable, "-c", _PIN, str(wanted), gpus], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=60, check=True)
    return json.loads(done.stdout)


def test_a_trial_runs_on_the_cpus_near_its_gpu() -> None:
    assert len(os.sched_getaffinity(0)) >= 2, "needs 2 CPUs to tell them apart"
    first, second = sorted(os.sched_getaffinity(0))[:2]
    table = f"0={first};1={second}"
    got = _pin({"HPO_GPU_CORES": table, "GPUS": "1"}, 1)
    assert got == {"pinned": [second], "masks": [[second]]}  # every thread of the process
    both = _pin({"HPO_GPU_CORES": table, "GPUS": "0,1"}, 2)
    assert both["pinned"] == [first, second]
    # fewer near CPUs than the trial asked for: left as it was
    assert _pin({"HPO_GPU_CORES": table, "GPUS": "1"}, 2)["pinned"] is None
    assert _pin({"GPUS": "1"}, 1)["pinned"] is None  # no layout known


def test_bad_gpu_cores_in_a_site_file_is_one_line(tmp_path: Path) -> None:
    site, space = tmp_path / "site.yaml", tmp_path / "exp.yaml"
    site.write_text("base: lumi-g\ngpu_cores: [1-7, seven]\n")
    space.write_text("name: e\ntrainable: tests/support/study_trainables.py:steady\nmetric: score\n"
                     "mode: max\n")
    code, _, stderr = cli_invoke(["slurm", "render", str(space), "--site", str(site)])
    assert code == 2 and "gpu_cores.1" in stderr and "'seven'" in stderr, stderr
