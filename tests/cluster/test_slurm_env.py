"""The cluster side's pure parts: SLURM_* parsing, port blocks, `ray start` lines."""

from __future__ import annotations

import multiprocessing
import socket
from collections.abc import Iterator
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

import pytest

from hpo.cluster import node_report
from hpo.cluster import ports as ports_module
from hpo.cluster.ports import (
    BLOCK,
    BLOCKS,
    FIRST_PORT,
    RayPorts,
    first_block,
    pick_ports,
    port_is_free,
)
from hpo.cluster.render import ray_start_args, ray_temp_dir, srun_args
from hpo.cluster.slurm_env import (
    Allocation,
    NodeShare,
    expand_counts,
    expand_hostlist,
    parse_cpus,
    parse_gpus,
    ray_node_env,
    rocm_visible,
)
from hpo.errors import SlurmEnvironmentError


@pytest.mark.parametrize(("hostlist", "hosts"), [
    ("node1", ["node1"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("jwb[0098-0101]", ["jwb0098", "jwb0099", "jwb0100", "jwb0101"]),
    ("a[1-2],b5,c[9]", ["a1", "a2", "b5", "c9"]),
    ("gpu[1,3]-ib", ["gpu1-ib", "gpu3-ib"]),
    ("lrdn[0001-0002],lrdn0010", ["lrdn0001", "lrdn0002", "lrdn0010"]),
    ("nid00[1-2]", ["nid001", "nid002"]),
])
def test_expand_hostlist(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("bad", ["node[1-3", "node1-3]", "node[3-1]", "node[a-b]",
                                 "n[[1]]"])
def test_expand_hostlist_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        expand_hostlist(bad)


@pytest.mark.parametrize(("value", "gpus"), [
    (None, []), ("", []), ("NoDevFiles", []), ("N/A", []), ("0", ["0"]),
    ("0,1,2,3", ["0", "1", "2", "3"]), (" 2, 3 ", ["2", "3"]),
])
def test_parse_gpus(value: str | None, gpus: list[str]) -> None:
    assert parse_gpus(value) == gpus


@pytest.mark.parametrize(("env", "gpus"), [
    # cgroups: Slurm renumbers CUDA_VISIBLE_DEVICES 0..n-1, SLURM_STEP_GPUS keeps the node's
    ({"SLURM_STEP_GPUS": "2,3", "SLURM_JOB_GPUS": "0,1,2,3", "CUDA_VISIBLE_DEVICES": "0,1"},
     ("0", "1")),
    ({"SLURM_STEP_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "2,3"}, ("2", "3")),
    ({"SLURM_STEP_GPUS": "2,3"}, ("2", "3")),  # gres.conf Flags=no_gpu_env
    # a CUDA_VISIBLE_DEVICES that is not Slurm's list or its renumbering is stale: ignored
    ({"SLURM_JOB_GPUS": "0,1,2,3", "CUDA_VISIBLE_DEVICES": "0"}, ("0", "1", "2", "3")),
    ({"SLURM_STEP_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "4,5"}, ("2", "3")),
    ({"SLURM_STEP_GPUS": "1", "SLURM_JOB_GPUS": "0,1"}, ("1",)),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, ("0", "1")),
    ({"SLURM_STEP_GPUS": "", "CUDA_VISIBLE_DEVICES": "1"}, ("1",)),
    ({"SLURM_GPUS_ON_NODE": "2"}, ("0", "1")),  # count-only GRES
    ({"SLURM_GPUS_ON_NODE": "0"}, ()),
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, ()),
    ({}, ()),
])
def test_gpus_come_from_slurm_first(env: dict[str, str], gpus: tuple[str, ...]) -> None:
    assert NodeShare.from_env(env, "host.example").gpus == gpus


@pytest.mark.parametrize(("env", "added"), [
    ({}, {}),
    ({"ROCR_VISIBLE_DEVICES": "4,5"}, {"HIP_VISIBLE_DEVICES": "0,1"}),  # LUMI
    ({"ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
     {"HIP_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}),
    ({"ROCR_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "1"}, {}),  # the user's choice
    ({"ROCR_VISIBLE_DEVICES": ""}, {"HIP_VISIBLE_DEVICES": ""}),
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, {}),
])
def test_rocm_visible(env: dict[str, str], added: dict[str, str]) -> None:
    before = dict(env)
    assert rocm_visible(env) == {**env, **added}
    assert env == before  # pure


@pytest.mark.parametrize(("env", "gpus", "visible"), [
    ({}, (), {}),
    ({}, ("2", "3"), {"CUDA_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "2,3"}),
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, ("1",),
     {"CUDA_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "1"}),
    # LUMI: ROCR stays, HIP indexes into it
    ({"ROCR_VISIBLE_DEVICES": "4,5"}, ("4", "5"),
     {"ROCR_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "0,1",
      "CUDA_VISIBLE_DEVICES": "4,5"}),
    ({"HIP_VISIBLE_DEVICES": "0"}, ("3",),
     {"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "3"}),
])
def test_ray_node_env_gpus(env: dict[str, str], gpus: tuple[str, ...],
                           visible: dict[str, str]) -> None:
    out = ray_node_env({"PATH": "/bin", **env}, gpus, "/tmp/hpo-7/miopen")
    assert {k: v for k, v in out.items() if k.endswith("VISIBLE_DEVICES")} == visible
    assert out["PATH"] == "/bin"


@pytest.mark.parametrize(("env", "cache"), [
    ({}, "/tmp/hpo-7/miopen"),
    ({"MIOPEN_USER_DB_PATH": "/scratch/db", "MIOPEN_CUSTOM_CACHE_DIR": "/scratch/db"},
     "/scratch/db"),
])
def test_ray_node_env_keeps_miopen_per_job(env: dict[str, str], cache: str) -> None:
    out = ray_node_env(env, (), "/tmp/hpo-7/miopen")
    assert out["MIOPEN_USER_DB_PATH"] == out["MIOPEN_CUSTOM_CACHE_DIR"] == cache


@pytest.mark.parametrize(("value", "cpus"), [(None, None), ("8", 8), ("48(x2)", 48)])
def test_parse_cpus(value: str | None, cpus: int | None) -> None:
    assert parse_cpus(value) == cpus


@pytest.mark.parametrize("bad", ["", "zero", "0", "-4"])
def test_parse_cpus_rejects(bad: str) -> None:
    with pytest.raises(SlurmEnvironmentError, match="SLURM_CPUS_ON_NODE"):
        parse_cpus(bad)


def test_node_share_names_the_node() -> None:
    share = NodeShare.from_env({"SLURMD_NODENAME": "jwb0001", "SLURM_CPUS_ON_NODE": "96"},
                               "jwb0001.juwels")
    assert share == NodeShare("jwb0001", 96, (), job_cpus=96)
    assert share.short_of_cpus is None
    assert NodeShare.from_env({}, "node7.cluster").name == "node7"


def test_ray_gets_no_more_cpus_than_the_step_may_use() -> None:
    env = {"SLURMD_NODENAME": "n1", "SLURM_CPUS_ON_NODE": "4"}
    bound = NodeShare.from_env(env, "n1", usable=1)  # a step bound to one core
    assert (bound.cpus, bound.job_cpus) == (1, 4)
    assert bound.short_of_cpus is not None and "srun -c 4" in bound.short_of_cpus
    assert NodeShare.from_env(env, "n1", usable=8).cpus == 4  # the job's share caps it
    assert NodeShare.from_env({}, "n1", usable=2).cpus is None  # not in Slurm: Ray counts


def test_inside_a_step_the_jobs_share_comes_from_the_job() -> None:
    # SLURM_CPUS_ON_NODE counts the step's CPUs (srun -c1); the job holds 4 on n2
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURMD_NODENAME": "n2",
           "SLURM_JOB_CPUS_PER_NODE": "8,4", "SLURM_CPUS_ON_NODE": "1"}
    share = NodeShare.from_env(env, "n2", usable=1)
    assert (share.cpus, share.job_cpus) == (1, 4) and share.short_of_cpus is not None


@pytest.mark.parametrize(("value", "counts"), [
    ("4", [4]), ("4(x2)", [4, 4]), ("72,36(x2)", [72, 36, 36]), ("2(x1),1", [2, 1])])
def test_expand_counts(value: str, counts: list[int]) -> None:
    assert expand_counts(value) == counts


@pytest.mark.parametrize("bad", ["", "4(x)", "x4", "4,,2"])
def test_expand_counts_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        expand_counts(bad)


@pytest.mark.parametrize(("value", "cpus"), [
    ("48(x2),24", (48, 48, 24)), (None, ()), ("48(x2)", ()), ("banana", ())])
def test_allocation_reads_the_cpus_of_each_node(value: str | None, cpus: tuple[int, ...]) -> None:
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[1-3]"}
    alloc = Allocation.from_env({**env, "SLURM_JOB_CPUS_PER_NODE": value} if value else env)
    assert alloc.cpus == cpus  # unreadable or not one count per node: none asked for
    assert alloc.cpus_on("n3") == (cpus[2] if cpus else None)


def test_allocation_from_env() -> None:
    alloc = Allocation.from_env({"SLURM_JOB_ID": "4711", "SLURM_JOB_NODELIST": "n[07-08]",
                                 "SLURM_JOB_NUM_NODES": "2", "SLURM_RESTART_COUNT": "1"})
    assert alloc == Allocation("4711", ("n07", "n08"), 1)
    assert alloc.head == "n07"


@pytest.mark.parametrize(("env", "says"), [
    ({}, "not inside a Slurm job"),
    ({"SLURM_JOB_ID": "1"}, "not inside a Slurm job"),
    ({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-"}, "SLURM_JOB_NODELIST='n[1-'"),
    ({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "3"},
     "names 2 node(s)"),
])
def test_allocation_errors(env: dict[str, str], says: str) -> None:
    with pytest.raises(SlurmEnvironmentError, match="Hint: ") as info:
        Allocation.from_env(env)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_port_block_is_per_job_and_covers_every_ray_port() -> None:
    assert first_block("4711") != first_block("4712")
    assert first_block("4711_3") == first_block("4711")  # array task
    ports = RayPorts(FIRST_PORT)
    values = list(ports.named.values())
    assert len(set(values)) == len(values)
    assert all(p in ports.all_ports() for p in values)
    assert ports.named["--max-worker-port"] - ports.named["--min-worker-port"] >= 300


def test_pick_ports_skips_a_block_with_a_busy_port() -> None:
    own = FIRST_PORT + first_block("77") * BLOCK
    busy = {own + 5}
    ports = pick_ports("77", is_free=lambda p: p not in busy)
    assert ports.base == FIRST_PORT + (first_block("77") + 1) % BLOCKS * BLOCK


def test_pick_ports_checks_real_sockets() -> None:
    job = "123"
    wanted = pick_ports(job)
    with socket.socket() as sock:  # another job's Ray listening inside our block
        sock.bind(("", wanted.named["--node-manager-port"]))
        sock.listen()
        assert pick_ports(job).base != wanted.base


def test_pick_ports_fails_when_nothing_is_free() -> None:
    with pytest.raises(OSError, match="no free block"):
        pick_ports("1", is_free=lambda p: False)


def test_ray_start_lines() -> None:
    share = NodeShare("n1", 8, ("0", "1"))
    ports = RayPorts(FIRST_PORT)
    head = ray_start_args("ray", ip="10.0.0.1", ports=ports, share=share,
                          temp_dir=ray_temp_dir("42"))
    worker = ray_start_args("ray", ip="10.0.0.2", ports=ports, share=share,
                            temp_dir=ray_temp_dir("42"), head_address="10.0.0.1:20000")
    assert {"--head", "--include-dashboard=false", "--port=20000", "--num-cpus=8",
            "--num-gpus=2", "--node-ip-address=10.0.0.1", "--temp-dir=/tmp/hpo-42/r",
            "--block"} <= set(head)
    assert "--address=10.0.0.1:20000" in worker and "--head" not in worker
    assert not any(a.startswith(("--port=", "--dashboard-port")) for a in worker)
    assert not any("token" in a or "password" in a for a in head + worker)
    dashboard = ray_start_args("ray", ip="10.0.0.1", ports=ports, share=share,
                               temp_dir="/tmp/x", dashboard=True)
    assert "--dashboard-host=127.0.0.1" in dashboard
    socket = "/session_2026-11-21_11-19-13_717887_18614/sockets/plasma_store"
    assert len(ray_temp_dir("2147483647_1000") + socket) < 107


def test_srun_line_runs_one_task_on_the_node() -> None:
    from pathlib import Path

    args = srun_args("n2", "worker", "/venv/bin/python", Path("/jobs/1"), Path("/l/n2.log"))
    assert args[:1] == ["srun"] and "--nodelist=n2" in args and "--ntasks=1" in args
    assert args[-5:] == ["/venv/bin/python", "-m", "hpo.cluster.node", "worker", "/jobs/1"]
    assert "--mem=0" in args and not any(a.startswith("--cpus-per-task") for a in args)
    # srun does not inherit sbatch's --cpus-per-task: the step asks for the node's share
    bound = srun_args("n2", "head", "python", Path("/j"), Path("/l"), cpus=48)
    assert "--cpus-per-task=48" in bound and bound.index("--cpus-per-task=48") < bound.index(
        "python")


def test_doctor_flags_a_step_with_fewer_cpus_than_the_job() -> None:
    from hpo.cluster.node_report import node_checks

    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n1", "SLURM_CPUS_ON_NODE": "4"}
    cpus = {label: (value, fine) for label, value, fine in node_checks(env, "lo", usable=1)}
    assert cpus["cpus"][1] is False and "1 usable" in cpus["cpus"][0], cpus["cpus"]
    fine = {label: fine for label, _, fine in node_checks(env, "lo", usable=4)}
    assert fine["cpus"] is True


def test_an_address_of_another_machine_is_refused() -> None:
    from hpo.cluster.network import is_local, node_address

    assert is_local("127.0.0.1") and not is_local("192.0.2.1")  # TEST-NET-1: no one's
    with pytest.raises(SlurmEnvironmentError, match="no address of this node.*hostname_suffix"):
        node_address(None, hostname="192.0.2.1")


def test_node_report_for_doctor() -> None:
    info = node_report({"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]",
                     "SLURM_CPUS_ON_NODE": "4", "SLURM_JOB_GPUS": "0"}, interface="lo")
    assert info["slurm job"].startswith("9")
    assert info["nodes"] == "2: n1, n2 (head n1)"
    assert info["ray address"] == "127.0.0.1" and info["ray interface"] == "lo"
    assert info["gpus"] == "0" and "usable by this step" in info["cpus"]
    assert info["ray temp dir"] == "/tmp/hpo-9/r"
    assert node_report({})["slurm job"].startswith("none")


@pytest.mark.parametrize(("limit", "seconds"), [
    ("30", 1800), ("30:15", 1815), ("02:00:00", 7200), ("1-00", 86400),
    ("1-02:30", 95400), ("2-00:00:10", 172810),
])
def test_slurm_time_limits(limit: str, seconds: int) -> None:
    from hpo.spec.slurm import time_seconds

    assert time_seconds(limit) == seconds


def test_cluster_side_never_imports_ray_tune() -> None:
    import subprocess
    import sys

    code = ("import sys, hpo.cluster.bootstrap, hpo.cluster.node, hpo.cluster.sbatch, "
            "hpo.cluster.node_report; bad = [m for m in sys.modules if m.startswith('ray.tune')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def claims() -> Iterator[list[socket.socket]]:
    """This process's port claims, released after the test."""
    yield ports_module._claims
    while ports_module._claims:
        ports_module._claims.pop().close()


def test_a_claimed_block_is_busy_to_every_other_pick(claims: list[socket.socket]) -> None:
    claimed = pick_ports("77", claim=True)
    assert pick_ports("77").base != claimed.base
    assert pick_ports("77", claim=True).base != claimed.base
    claims.pop(0).close()
    assert pick_ports("77").base == claimed.base


def _claim_and_hold(job_id: str, bases: Queue[int], release: Event) -> None:
    bases.put(pick_ports(job_id, claim=True).base)
    release.wait(60)


def test_jobs_starting_on_one_node_at_once_claim_distinct_blocks() -> None:
    """Each process checks the same free block before any claims it: only the claim tells
    them apart (without it all six took one block)."""
    context = multiprocessing.get_context("spawn")
    bases: Queue[int] = context.Queue()
    release = context.Event()
    jobs = [context.Process(target=_claim_and_hold, args=("77", bases, release))
            for _ in range(6)]
    for job in jobs:
        job.start()
    try:
        taken = [bases.get(timeout=60) for _ in jobs]
    finally:
        release.set()
        for job in jobs:
            job.join(30)
    assert len(set(taken)) == len(jobs), taken


def test_a_port_only_an_ended_connection_of_rays_holds_is_free() -> None:
    port = pick_ports("91").base + 10
    with socket.socket() as listener:  # as Ray's gRPC servers listen
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server's side closes first: its port goes to TIME_WAIT
        client.recv(1)
        client.close()
    with socket.socket() as plain, pytest.raises(OSError):  # a check without SO_REUSEADDR
        plain.bind(("", port))
    assert port_is_free(port)
