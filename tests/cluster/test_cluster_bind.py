"""A Slurm job's Ray cluster: every listener refuses a client without the job's token.

Ray 2.60 has no setting to bind its C++ gRPC servers to one address: gcs_server, the raylet
(node manager, object manager) and every core worker (driver included) listen on 127.0.0.1
when the node's IP is 127.0.0.1, else on all interfaces (src/ray/rpc/grpc_server.cc:
`listen_to_localhost_only ? "127.0.0.1" : "0.0.0.0"`). So this test proves the property that
matters on a real cluster, read from `ss -ltnp` inside each node's network namespace while
trials run: each listener answers a tokenless request with UNAUTHENTICATED (gRPC 16) or 401.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from calls import is_loopback
from slurm_jobs import _finished, _space, _submit

from testing.slurm_cluster import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SLURM_OWN = ("slurmd", "slurmstepd", "srun")
# One harmless request per Ray service; a listener that is none of them answers UNIMPLEMENTED.
GRPC_PROBES = ("NodeInfoGcsService/GetAllNodeInfo", "NodeManagerService/GetNodeStats",
               "ObjectManagerService/Pull", "CoreWorkerService/GetCoreWorkerStats")
# Ray's C++ gRPC servers: documented as listening on all interfaces (README, security).
WILDCARD_OK = re.compile(r"gcs_server|raylet|ray::|python|default_worker")


def _in_node(cluster: SlurmTestCluster, node: str, *cmd: str, stdin: bytes = b"") -> str:
    return subprocess.run(["nsenter", f"--net=/run/netns/{cluster.netns(node)}", *cmd],
                          input=stdin, capture_output=True, timeout=30).stdout.decode(
                              errors="replace")


def _listeners(cluster: SlurmTestCluster, node: str) -> list[tuple[str, str]]:
    """(address, owner) of every TCP listener in the node that is not Slurm's own."""
    found = []
    for line in _in_node(cluster, node, "ss", "-Hltnp").splitlines():
        owner = line.split("users:", 1)[-1]
        if not any(f'"{name}"' in owner for name in SLURM_OWN):
            found.append((line.split()[3], owner))
    return found


def _grpc_status(cluster: SlurmTestCluster, node: str, url: str, token: str | None) -> str:
    """The grpc-status of an empty request (curl speaks HTTP/2; hpo's venv has no grpcio)."""
    auth = ["-H", f"authorization: Bearer {token}"] if token else []
    head = _in_node(cluster, node, "curl", "-s", "--http2-prior-knowledge", "-m", "5", "-o",
                    "/dev/null", "-D", "-", "-H", "content-type: application/grpc", "-H",
                    "te: trailers", *auth, "--data-binary", "@-", url, stdin=b"\0" * 5)
    match = re.search(r"grpc-status: (\d+)", head)
    return match.group(1) if match else ""


def _http_status(cluster: SlurmTestCluster, node: str, url: str) -> str:
    return _in_node(cluster, node, "curl", "-s", "-m", "5", "-o", "/dev/null", "-w",
                    "%{http_code}", "-X", "POST", url).strip()


def _refuses(cluster: SlurmTestCluster, node: str, address: str) -> str:
    """How the listener refused a tokenless client ('' when it did not)."""
    ip = cluster.address(node)
    host_port = address.replace("*", ip).replace("0.0.0.0", ip)
    for method in GRPC_PROBES:
        if _grpc_status(cluster, node, f"http://{host_port}/ray.rpc.{method}", None) == "16":
            return method
    code = _http_status(cluster, node, f"http://{host_port}/get_runtime_envs_info")
    return "HTTP 401" if code == "401" else ""


def _wait_trials_running(exp_dir: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.stat().st_size for p in exp_dir.glob("*/result.json")):
            return
        time.sleep(0.5)
    pytest.fail(f"no trial reported within {timeout:.0f} s")


def test_every_listener_of_a_slurm_job_refuses_a_client_without_the_token(
        slurm: SlurmTestCluster, outputs: list[str]) -> None:
    space = _space(slurm, "bind", nodes=2, samples=2, steps=60, sleep=0.5,
                   slurm_extra='  sbatch: ["--nodelist=node[1-2]"]\n')
    job_id = _submit(slurm, space)
    outputs.append(job_id)
    _wait_trials_running(slurm.root / "work/results/bind")
    token = (slurm.root / "work/jobs" / job_id / "auth_token").read_text().strip()
    seen: list[tuple[str, str, str, str]] = []
    for node in ("node1", "node2"):
        seen += [(node, a, o, _refuses(slurm, node, a)) for a, o in _listeners(slurm, node)]
    owners = " ".join(o for _, _, o, _ in seen)
    assert "gcs_server" in owners and "raylet" in owners and "ray::" in owners, seen
    assert [s for s in seen if not s[3]] == [], f"accept a tokenless client: {seen}"
    wildcard = [s for s in seen if not is_loopback(s[1]) and not s[1].startswith("10.")]
    assert [s for s in wildcard if not WILDCARD_OK.search(s[2])] == [], wildcard
    gcs = next(a for n, a, o, _ in seen if n == "node1" and "gcs_server" in o)
    url = f"http://{gcs.replace('*', slurm.address('node1'))}/ray.rpc.{GRPC_PROBES[0]}"
    assert _grpc_status(slurm, "node1", url, token) == "0"  # the token opens the same door
    _finished(slurm, job_id)
