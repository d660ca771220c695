"""`hpo local up`: a warm local Ray (real `ray start --head`) that `hpo run` and `hpo resume`
use instead of starting their own; `hpo local down` leaves none of its processes behind."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from calls import ROOT, cli_invoke, command_lines, hpo_cli, trial_rows

from hpo.ray_adapters.fast_start import worker_stub

SPEC = """name: w
trainable: {root}/tests/support/study_trainables.py:steady
metric: score
mode: max
num_samples: 2
search_space:
  x: {{uniform: [0.0, 1.0]}}
constants: {{steps: 3, sleep: 0.0}}
"""


@pytest.fixture
def warm_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    where = tmp_path / "warm"
    monkeypatch.setenv("HPO_LOCAL_RAY", str(where))
    yield where
    cli_invoke(["local", "down"])  # also after a failed assertion


def _ray_processes(where: Path) -> set[int]:
    """The warm Ray's processes: those naming its folder, and their children (Ray's agents
    and workers, whose command lines name no folder)."""
    private = json.loads((where / "head.json").read_text())["temp_dir"]
    parents, roots = {}, set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path("/proc", pid, "stat").read_text()
            command = Path("/proc", pid, "cmdline").read_bytes()
        except OSError:
            continue
        parents[int(pid)] = int(stat[stat.rindex(")") + 2:].split()[1])
        if private.encode() in command:
            roots.add(int(pid))
    found = set(roots)
    while True:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        if not more:
            return found
        found |= more


def _alive(pids: set[int]) -> set[int]:
    """Those still running (a zombie has ended: init reaps it when it gets to it)."""
    alive = set()
    for pid in pids:
        try:
            stat = Path("/proc", str(pid), "stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z":
            alive.add(pid)
    return alive


@pytest.mark.slow
def test_runs_use_the_warm_ray_until_it_is_down(tmp_path: Path, warm_dir: Path) -> None:
    spec = tmp_path / "w.yaml"
    spec.write_text(SPEC.format(root=ROOT))
    started = hpo_cli("local", "up", "--cpus", "2")
    assert started.returncode == 0 and "warm Ray up at 127.0.0.1:" in started.stdout
    assert stat.S_IMODE(os.stat(warm_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(warm_dir / "auth_token").st_mode) == 0o600
    assert _ray_processes(warm_dir)
    code, said, _ = cli_invoke(["local", "up"])
    assert code == 2 and "already up" in said + _
    for name in ("a", "b"):  # two runs, one after the other, on the same Ray
        ran = hpo_cli("run", str(spec), "--storage", str(tmp_path), "--name", name)
        assert ran.returncode == 0, ran.stderr
        rows = trial_rows(tmp_path / name)
        assert [[r["training_iteration"] for r in t] for t in rows.values()] == [[1, 2, 3]] * 2
        head = json.loads((warm_dir / "head.json").read_text())["address"]
        assert f"connected to Ray at {head}" in (tmp_path / name / "hpo.log").read_text()
    processes = _ray_processes(warm_dir)  # the runs left it up, with its agents and workers
    assert len(processes) >= 4 and any("ray::" in line for line in command_lines())
    private = json.loads((warm_dir / "head.json").read_text())["temp_dir"]
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700  # Ray's own temp dir is 0777
    code, said, _ = cli_invoke(["local", "down"])
    assert code == 0 and "warm Ray down" in said
    assert not _alive(processes)
    assert not (warm_dir / "head.json").exists() and not Path(private).exists()
    code, said, _ = cli_invoke(["local", "status"])
    assert "no warm Ray is up" in said


@pytest.mark.slow
def test_python_runs_on_a_warm_ray_each_log_to_their_own_folder(tmp_path: Path,
                                                                 warm_dir: Path) -> None:
    """A script's two hpo.run calls on the warm Ray: the first run's hpo.log took the
    second's records (its handler was never removed). The script imports ray before hpo, as
    many do: Ray then turned the warm Ray's 127.0.0.1 into the machine's address, where
    nothing listens, and the run waited for its GCS (5 s here, 60 by default) and failed."""
    spec = tmp_path / "w.yaml"
    spec.write_text(SPEC.format(root=ROOT))
    assert hpo_cli("local", "up", "--cpus", "2").returncode == 0
    script = ("import ray, hpo, sys\nfrom hpo.cluster import warm\n"
              "for name in ('a', 'b'):\n"
              "    hpo.run(sys.argv[1], storage=sys.argv[2], name=name, "
              "cluster=warm.for_run(None))\n")
    ran = subprocess.run([sys.executable, "-c", script, str(spec), str(tmp_path)],
                         capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "RAY_gcs_server_port_wait_time_s": "5"})
    assert ran.returncode == 0, ran.stderr[-3000:]
    logs = [(tmp_path / name / "hpo.log").read_text() for name in ("a", "b")]
    assert [text.count("connected to Ray at") for text in logs] == [1, 1]


def test_a_head_file_without_a_ray_behind_it_is_no_warm_ray(warm_dir: Path) -> None:
    from hpo.cluster import warm

    warm_dir.mkdir()
    (warm_dir / "head.json").write_text(json.dumps(
        {"address": "127.0.0.1:1", "token_file": str(warm_dir / "t"), "cpus": 2}))
    assert warm.for_run(None) is None
    assert not (warm_dir / "head.json").exists()


@pytest.mark.slow
def test_each_run_on_the_warm_ray_has_its_workers_forked_by_a_server_of_its_own(
        tmp_path: Path, warm_dir: Path) -> None:
    """The warm raylet's worker command is hpo's stub, which asks the fork server of its
    worker's job: each run starts one, linked where the stubs look, unlinked at its end. A
    fork leads a process group of its own: the warm raylet kills a worker's group at its
    end, and the driver's group (the fork server's) would otherwise go with it."""
    import pandas as pd

    spec = tmp_path / "f.yaml"
    spec.write_text(SPEC.format(root=ROOT).replace("steady", "parent_process")
                    .replace("num_samples: 2", "num_samples: 3"))
    assert hpo_cli("local", "up", "--cpus", "2").returncode == 0
    head = json.loads((warm_dir / "head.json").read_text())
    raylet = Path(f"/proc/{head['raylet_pid']}/cmdline").read_bytes()
    assert f" -S {worker_stub.__file__} ".encode() in raylet
    cpus = os.sched_getaffinity(0)
    # two jobs, then one on fewer CPUs than the raylet's: its forks would not be on the
    # raylet's CPUs, so Ray starts its workers
    for name, on in (("a", cpus), ("b", cpus), ("c", {min(cpus)})):
        ran = subprocess.run([sys.executable, "-m", "hpo", "run", str(spec), "--storage",
                              str(tmp_path), "--name", name], capture_output=True, text=True,
                             timeout=300, start_new_session=True,  # this test's group apart
                             preexec_fn=lambda on=on: os.sched_setaffinity(0, on))
        assert ran.returncode == 0, ran.stderr
        frame = pd.DataFrame([rows[-1] for rows in trial_rows(tmp_path / name).values()])
        forked = on == cpus or len(cpus) == 1
        assert list(frame["forked"]) == [forked] * 3, name
        assert list(frame["own_group"]) == [True] * 3
        assert list(frame["pl_disable_fork"]) == ["1"] * 3
        assert not list(Path(head["temp_dir"]).glob("fork-*.sock"))
