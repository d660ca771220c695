"""The embedded Ray's workers forked from hpo's fork server
(hpo/ray_adapters/fast_start/fork_server.py).

Real embedded Ray throughout: the workers' parents, environments and random streams are read
from the workers themselves and from /proc; the guard against shared Ray IDs is run in a
fresh process where it must refuse.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from hpo.cluster.node import descendants
from hpo.driver.backends.ray_session import embedded_ray
from hpo.ray_adapters.fast_start import worker_stub

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="forks need Linux's pidfds"),
              pytest.mark.usefixtures("speed_patches_on")]  # tests a speed patch itself


@ray.remote(num_cpus=1)
class Probe:
    def __init__(self) -> None:
        import random

        import numpy
        import ray.tune  # noqa: F401  what a trial's actor imports

        self.draws = (int(numpy.random.randint(1 << 30)), random.random())

    def facts(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "parent": os.getppid(), "draws": self.draws,
                "job": os.environ.get("RAY_JOB_ID"), "cwd": os.getcwd(),
                "marker": os.environ.get("HPO_TEST_MARKER")}


def _parent_command(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _alive(pid: int) -> bool:
    try:  # a zombie has ended: only its parent has not collected it yet
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid: int, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_workers_are_forks_that_look_fresh(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPO_TEST_MARKER", "from the driver")
    with embedded_ray(tmp_path / "hpo.log", num_cpus=3):
        probes = [Probe.remote() for _ in range(3)]
        facts = ray.get([probe.facts.remote() for probe in probes])
        job = ray.get_runtime_context().get_job_id()
        parents = {fact["parent"] for fact in facts}
        server = parents.pop() if len(parents) == 1 else None
        server_command = _parent_command(server) if server else ""
        ray.kill(probes[0])
        killed_gone = _gone(facts[0]["pid"])
    assert "hpo.ray_adapters.fast_start.fork_server_process" in server_command, parents
    assert len({fact["draws"][0] for fact in facts}) == 3  # NumPy's global generator
    assert len({fact["draws"][1] for fact in facts}) == 3  # Python's
    assert {fact["job"] for fact in facts} == {job}
    assert {fact["cwd"] for fact in facts} == {os.getcwd()}
    assert {fact["marker"] for fact in facts} == {"from the driver"}
    assert killed_gone  # a killed actor's forked worker ends
    assert server is not None and _gone(server, timeout_s=15)  # the server ends with Ray
    assert all(_gone(fact["pid"], timeout_s=30) for fact in facts)


@ray.remote(num_cpus=1)
class ExitImports:
    def __init__(self) -> None:  # before this worker imports anything
        self.had = "ray.dag.compiled_dag_node" in sys.modules

    def facts(self) -> tuple[bool, int]:
        return self.had, os.getppid()


def _raylet_command() -> str:
    """The command of this process's raylet (not of another Ray on the machine)."""
    for pid in descendants(os.getpid()):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "raylet":
                return _parent_command(pid)
        except OSError:
            continue
    raise AssertionError("no raylet")


def test_the_raylet_starts_each_stub_without_site_and_forks_bring_rays_exit_imports(
        tmp_path: Path) -> None:
    """The stub needs the standard library only: its Python starts with -S, and still gets
    a fork. A fork has what ray.shutdown imports at a worker's exit, so that a run's end
    does not import it in every worker at once."""
    from hpo.ray_adapters.fast_start import fork_server

    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        raylet = _raylet_command()
        had_exit_imports, parent = ray.get(ExitImports.remote().facts.remote())
        server_command = _parent_command(parent)
    assert f"--python_worker_command={sys.executable} -S {worker_stub.__file__} " in raylet
    assert "hpo.ray_adapters.fast_start.fork_server_process" in server_command
    assert had_exit_imports
    cores = len(os.sched_getaffinity(0))
    assert fork_server.system_config()["worker_maximum_startup_concurrency"] == \
        fork_server.STARTS_PER_CORE * cores


def test_a_server_started_ahead_serves_the_next_embedded_ray(tmp_path: Path) -> None:
    """`hpo run` starts the run folder and the fork server before its imports
    (forks_ahead.start_ahead): the embedded Ray it then starts forks its workers there, and
    both end with that Ray."""
    from hpo.driver.backends import forks_ahead

    forks_ahead.start_ahead()
    ahead = forks_ahead._ahead
    assert ahead is not None and ahead[2] is not None
    run_dir, server = ahead[1], ahead[2]._server.pid
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        parent = ray.get(Probe.remote().facts.remote())["parent"]
        assert forks_ahead._ahead is None  # taken
        assert (run_dir / "r").is_dir()  # Ray's temp dir in the folder made ahead
    assert parent == server
    assert _gone(server, timeout_s=15)
    assert not run_dir.exists()


def test_what_was_started_ahead_and_not_taken_ends_with_the_process(tmp_path: Path) -> None:
    """... and starting it imports no Ray: hpo.driver.backends.ray_session imports Ray later,
    local-only (listening on loopback; tests/driver/test_loopback.py)."""
    code = ("import sys\n"
            "from hpo.driver.backends import forks_ahead\n"
            "forks_ahead.start_ahead()\n"
            "print(forks_ahead._ahead[1], forks_ahead._ahead[2]._server.pid, 'ray' in sys.modules,"
            " flush=True)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    run_dir, pid, imported_ray = done.stdout.split()
    assert imported_ray == "False"
    assert not Path(run_dir).exists()
    assert _gone(int(pid), timeout_s=15)


def _nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_a_minimal_dashboard_agent_is_niced_and_its_ports_are_written_ahead(
        tmp_path: Path) -> None:
    """hpo installs Ray without its dashboard packages, so the dashboard agent starts
    minimal: it serves nothing, writes -1 to its three port files, and the raylet waited for
    those files before its node registered. hpo writes them ahead and runs the agent at the
    lowest priority."""
    from ray._private.utils import get_dashboard_dependency_error

    assert get_dashboard_dependency_error() is not None  # what the rest of this test is for
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        raylet = _raylet_command().split()
        session = Path(next(arg for arg in raylet if arg.startswith("--session_dir=")
                            ).split("=", 1)[1])
        ports = {path.name.rsplit("_", 1)[0]: path.read_text() for path in session.iterdir()
                 if path.name.startswith(("metrics_", "dashboard_agent_listen_port"))}
        niceness = [_nice(pid) for pid in _dashboard_agents()]
    assert ports == {"metrics_agent_port": "-1", "metrics_export_port": "-1",
                     "dashboard_agent_listen_port": "-1"}
    assert niceness == [19]


def _dashboard_agents(timeout_s: float = 60.0) -> list[int]:
    """The pid of this process's dashboard agent, once it runs (the node registers before it
    has started): its command, or the title it gives itself."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [pid for pid in descendants(os.getpid())
                 if _command_has(pid, (b"dashboard/agent.py", b"ray::DashboardAgent"))]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _command_has(pid: int, parts: tuple[bytes, ...]) -> bool:
    """Whether pid's command holds one of parts, other than the raylet's (whose arguments
    hold the agent's command)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        raylet = Path(f"/proc/{pid}/comm").read_text().strip() == "raylet"
    except OSError:
        return False
    return not raylet and any(part in command for part in parts)


def test_only_the_stubs_command_loses_site() -> None:
    from hpo.ray_adapters.fast_start.lean_head import without_site

    stub = "/x/worker_stub.py"
    command = f"--python_worker_command={sys.executable} {stub} /ray/default_worker.py --a=1"
    assert without_site(command, stub) == (f"--python_worker_command={sys.executable} -S "
                                           f"{stub} /ray/default_worker.py --a=1")
    for other in (f"--java_worker_command={sys.executable} {stub}", "--head",
                  f"--python_worker_command={sys.executable} /ray/setup_worker.py x"):
        assert without_site(other, stub) == other


def test_a_worker_with_its_own_ray_settings_is_started_by_ray(tmp_path: Path) -> None:
    """Ray's C++ side reads RAY_* once, at `import ray`: a runtime env that sets one gets a
    worker Ray starts itself, and it sees the setting."""
    with embedded_ray(tmp_path / "hpo.log", num_cpus=2):
        forked = ray.get(Probe.remote().facts.remote())
        own = Probe.options(runtime_env={"env_vars": {"RAY_HPO_TEST": "1"}}).remote()
        started = ray.get(own.facts.remote())
        setting = ray.get(own.__ray_call__.remote(lambda _self: os.environ.get("RAY_HPO_TEST")))
        server_command = _parent_command(forked["parent"])
    assert "hpo.ray_adapters.fast_start.fork_server_process" in server_command
    assert started["parent"] != forked["parent"]
    assert setting == "1"


@pytest.mark.parametrize(("context", "forkable"), [
    ({}, True),
    ({"env_vars": {"OMP_NUM_THREADS": "2"}}, False),  # read by OpenBLAS at numpy's import
    ({"env_vars": {"RAY_memory_monitor_refresh_ms": "0"}}, False),
    ({"command_prefix": ["cd", "/x", "&&"]}, False),
    ({"py_executable": "/other/python"}, False),
    ({"override_worker_entrypoint": "/x/default_worker.py"}, False),
])
def test_the_stub_forks_only_plain_python_workers(context: dict[str, Any],
                                                  forkable: bool) -> None:
    args = ["default_worker.py", "--worker-id=ab", "--language=PYTHON",
            f"--serialized-runtime-env-context={json.dumps(context)}"]
    assert worker_stub.forkable(args) is forkable
    assert not worker_stub.forkable([*args[:2], "--language=JAVA", args[3]])


def test_a_stub_imports_only_the_interpreters_c_modules(tmp_path: Path) -> None:
    """A stub runs once per worker: its own imports are the interpreter's C modules, no
    Python source (the standard library's socket, json, re and contextlib cost it 20 of
    33 ms). With no server to ask, it becomes Ray's setup_worker.py, with its arguments."""
    setup = tmp_path / "setup_worker.py"
    setup.write_text("import sys\nprint('setup', *sys.argv[1:])\n")
    env = {**os.environ, worker_stub.SERVER_ENV: str(tmp_path / "no.sock"),
           worker_stub.RAY_SETUP_ENV: str(setup)}
    done = subprocess.run([sys.executable, "-S", "-X", "importtime", worker_stub.__file__,
                           "a", "b=c"], env=env, capture_output=True, text=True, check=True,
                          timeout=60)
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:") and "|" in line} - {"package"}
    assert done.stdout == "setup a b=c\n"
    assert "_socket" in imported
    assert not imported & {"socket", "json", "re", "contextlib", "signal", "os", "enum"}


def test_a_request_reads_back_as_the_stub_sent_it() -> None:
    """Each field as the operating system gave it, undecodable bytes included (os.fsdecode's
    surrogates)."""
    args = ["default_worker.py", "--x=a=b", os.fsdecode(b"caf\xe9"), ""]
    environ = {b"A": b"1=2", b"PATH": b"/bin:/usr/bin", b"EMPTY": b"", b"RAW": b"\xe9"}
    message = worker_stub.encoded("/venv/bin/python", b"/work dir/\xe9", args, environ)
    assert worker_stub.decoded(message) == (
        "/venv/bin/python", os.fsdecode(b"/work dir/\xe9"), args,
        {"A": "1=2", "PATH": "/bin:/usr/bin", "EMPTY": "", "RAW": os.fsdecode(b"\xe9")})
    assert worker_stub.decoded(worker_stub.encoded(sys.executable, b"/", [], {}))[1:] == (
        "/", [], {})


def test_the_server_answers_what_no_stub_sends_with_no_fork_and_keeps_no_descriptor(
        tmp_path: Path) -> None:
    """Garbage, a runtime-env context that is not an object, a request without the stub's
    three descriptors: each gets -1 (the stub then starts the worker as Ray would), and the
    server holds none of the descriptors sent with them after (a file of this test's own:
    the server's other descriptors come and go with Ray's workers)."""
    import socket

    from hpo.driver.backends import ray_session

    args = ["default_worker.py", "--serialized-runtime-env-context=[]"]
    sent = tmp_path / "sent"
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        forks = ray_session._forks
        assert forks is not None
        probe = Probe.remote()  # a fork: the server is serving
        # the node's job and raylet, as a stub of this node has them: the context is read
        node = ray.get(probe.__ray_call__.remote(lambda _self: {
            name.encode(): os.environ[name].encode() for name in ("RAY_JOB_ID",
                                                                  "RAY_RAYLET_PID")}))
        requests = [(b"garbage", 3),
                    (worker_stub.encoded(sys.executable, b"/", args, node), 3),
                    (worker_stub.encoded(sys.executable, b"/", args[:1], node), 0)]
        replies = []
        for message, count in requests:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn, \
                    open(sent, "w") as file:
                conn.settimeout(30)  # a request the server fails on went unanswered before
                conn.connect(str(forks._path))
                socket.send_fds(conn, [message], [file.fileno()] * count)
                replies.append(conn.recv(4))
        held = [link for link in Path(f"/proc/{forks._server.pid}/fd").iterdir()
                if os.path.realpath(link) == str(sent.resolve())]
    assert replies == [(-1).to_bytes(4, "big", signed=True)] * 3
    assert held == []


def test_the_server_judges_a_stub_by_the_stubs_own_environment() -> None:
    """The server decides for the stub (it has json and re imported): the runtime env's
    values are compared with, and expanded in, the stub's environment, and the stub's
    Python must be the server's."""
    args = ["default_worker.py", "--language=PYTHON",
            "--serialized-runtime-env-context=" + json.dumps({"env_vars": {"A": "${B}/x"}})]
    assert worker_stub.forkable(args, {"A": "1/x", "B": "1"})
    assert not worker_stub.forkable(args, {"A": "2/x", "B": "1"})
    assert not worker_stub.forkable(args, {"A": "1/x", "B": "1"}, "/other/python")
    assert worker_stub.forkable(args, {"A": "/x"})  # ${B} unset: dropped, as Ray drops it


def test_the_server_refuses_when_forks_would_share_ray_ids() -> None:
    """Declaring a Ray actor class (as importing Tune does) seeds Ray's C++ generator; forks
    made after it would draw the same IDs, and the server's check says so. The server
    imports Tune with the class IDs drawn from os.urandom: its forks draw their own."""
    code = ("import ray.tune\n"
            "from hpo.ray_adapters.fast_start.fork_server_process import fresh_ray_ids\n"
            "print(fresh_ray_ids())\n")
    fresh = ("from hpo.ray_adapters.fast_start.fork_server_process import (\n"
             "    fresh_ray_ids, RAY_MODULES, import_libraries, import_ray_part)\n"
             "import ray.actor\n"
             "import_libraries()\n"
             "import_ray_part()\n"
             "assert 'ray.tune' in RAY_MODULES and ray.actor.ActorClassID is ray.ActorClassID\n"
             "print(fresh_ray_ids())\n")
    after_tune = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=300, check=True)
    preloaded = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True,
                               timeout=300, check=True)
    assert after_tune.stdout.split()[-1] == "False"
    assert preloaded.stdout.split()[-1] == "True"


def test_what_the_server_imports_before_the_job_is_known_imports_no_ray() -> None:
    """Ray's C++ side reads the job's variables once, when `ray` is first imported: the
    libraries the server imports while Ray starts must not bring it in."""
    from hpo.ray_adapters.fast_start.fork_server_process import COMPANIONS

    code = ("import sys\n"
            "from hpo.ray_adapters.fast_start.fork_server_process import (\n"
            "    COMPANIONS, import_libraries)\n"
            "import_libraries()\n"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
            "print(sum(m in sys.modules for m in COMPANIONS))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)
    ray_modules, imported = done.stdout.splitlines()[-2:]
    assert ray_modules == "[]"
    assert int(imported) >= len(COMPANIONS) // 2  # most come with Ray, Tune or hpo


def test_the_server_imports_no_library_ray_bundles_before_ray() -> None:
    """`import ray` puts its own copies (ray/thirdparty_files: psutil, colorama) first on the
    path: imported before it, a fork would run another copy than a worker Ray starts."""
    from hpo.ray_adapters.fast_start.fork_server_process import COMPANIONS, LIBRARIES

    bundled = Path(ray.__file__).parent / "thirdparty_files"
    assert (bundled / "psutil").is_dir()  # where Ray 2.60 keeps them
    ahead = {name.split(".")[0] for name in (*LIBRARIES, *COMPANIONS)}
    assert not ahead & {entry.name for entry in bundled.iterdir()}


def test_the_server_imports_the_workers_other_libraries_before_the_job_is_known(
        tmp_path: Path) -> None:
    """Before `start` (while Ray starts), the server imports what Ray's worker and Tune import
    beside Ray, e.g. jsonschema, whose Rust part (rpds) shows in its memory map: the first
    trial waits only for Ray's own part, which needs the job."""
    from hpo.ray_adapters.fast_start import fork_server

    with fork_server.serving(tmp_path) as server:
        assert server is not None
        maps = Path(f"/proc/{_server_pid()}/maps")
        deadline = time.monotonic() + 120
        while b"/rpds/" not in maps.read_bytes():
            assert time.monotonic() < deadline, "jsonschema not imported before the job"
            time.sleep(0.1)
        assert b"_raylet" not in maps.read_bytes()


@ray.remote(num_cpus=1)
class Collector:
    def facts(self) -> tuple[bool, int, int]:
        return gc.isenabled(), gc.get_freeze_count(), os.getppid()


def test_a_forked_worker_collects_its_garbage_and_shares_the_servers_frozen_heap(
        tmp_path: Path) -> None:
    """The server imports with the collector off (no holes in the pages its forks share),
    freezes what it has and turns the collector back on before it forks: its workers collect
    their own garbage, skipping the frozen heap they share."""
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        enabled, frozen, parent = ray.get(Collector.remote().facts.remote())
        server = _server_pid()
    assert (enabled, parent) == (True, server)
    assert frozen > 100_000  # Ray's, Tune's and their libraries' objects


@ray.remote(num_cpus=1)
class ModulesAtStart:
    def __init__(self) -> None:
        self.had_torch = "torch" in sys.modules  # before this worker imports anything

    def facts(self) -> tuple[bool, int]:
        return self.had_torch, os.getppid()


def _server_pid() -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if b"hpo.ray_adapters.fast_start.fork_server_process" in command \
                    and parent == os.getpid():
                return int(entry.name)
    raise AssertionError("no fork server of this process")


def test_workers_start_with_the_torch_a_worker_imports_with_the_trainable(
        tmp_path: Path) -> None:
    from hpo.driver.backends.ray_session import preload_for
    from trainables.images import train

    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        before = ray.get(ModulesAtStart.remote().facts.remote())
        server = _server_pid()
        preload_for(train)
        deadline = time.monotonic() + 120
        while b"libtorch" not in Path(f"/proc/{server}/maps").read_bytes():
            assert time.monotonic() < deadline, "the server never imported torch"
            time.sleep(0.1)
        after = ray.get(ModulesAtStart.remote().facts.remote())
    assert before == (False, server)  # Ray, Tune's libraries: no torch unless asked
    assert after == (True, server)


def _function(source: str, module: str, **names: Any) -> Any:
    scope: dict[str, Any] = {"__name__": module, **names}
    exec(source, scope)  # a function as a notebook or another module defines it
    return scope["train"]


def test_a_kept_rays_next_trainable_without_torch_stops_the_forks(tmp_path: Path) -> None:
    """The server cannot unload torch: a later run (a notebook's kept Ray) whose trainable
    does not bring it gets workers Ray starts, which do not have it."""
    from hpo.driver.backends.ray_session import preload_for, starts_per_core
    from hpo.ray_adapters.fast_start.fork_server import STARTS_PER_CORE
    from trainables.images import train

    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        server = _server_pid()
        preload_for(train)
        forking = starts_per_core()
        preload_for(Probe)
        stopped = _gone(server, timeout_s=120)
        starting = starts_per_core()  # Ray's own starts cost a worker 1-2 CPU-s each
        had_torch, parent = ray.get(ModulesAtStart.remote().facts.remote())
        command = _parent_command(parent)
    assert stopped
    assert not had_torch
    assert "raylet" in command
    assert (forking, starting) == (STARTS_PER_CORE, 1)


def test_only_the_torch_that_comes_with_the_trainable_is_preloaded() -> None:
    import torch

    from hpo.driver.run.trainable import WithParameters
    from hpo.ray_adapters.fast_start.fork_server import imported_with
    from trainables.images import train as images

    uses = "def train(config):\n    return torch.zeros(1)\n"
    ignores = "def train(config):\n    return 1\n"
    assert imported_with(images) == ["torch"]  # its module imports torch
    assert imported_with(WithParameters(images, {})) == ["torch"]
    assert imported_with(_function(uses, "__main__", torch=torch)) == ["torch"]
    # a notebook's function that does not use the notebook's torch: copied without it
    assert imported_with(_function(ignores, "__main__", torch=torch)) == []
    assert imported_with(Probe) == []  # this module holds no torch


def test_a_servers_output_goes_to_the_descriptor_it_is_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Slurm node's server writes to the node's own log (hpo.driver.backends.node_start): a failed
    preload is read there, not in the node's private folder, which goes when the node stops."""
    from hpo.ray_adapters.fast_start import fork_server

    monkeypatch.setattr(fork_server, "HEAVY", ("hpo_no_such_module",))
    log = tmp_path / "node.log"
    with open(log, "ab") as out, fork_server.serving(tmp_path, output=out.fileno()) as server:
        assert server is not None
        server.start(os.getpid())  # this process as the raylet: its environment for workers
        server.preload(["hpo_no_such_module"])
        deadline = time.monotonic() + 120
        while "No module named 'hpo_no_such_module'" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    assert not (tmp_path / fork_server.LOG_NAME).exists()


def test_what_a_runs_server_wrote_reaches_the_runs_log_at_its_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """An embedded run's server writes to its own log in the run's private folder, which goes
    at the run's end: what it wrote is logged (into hpo.log) when it closes."""
    from hpo.ray_adapters.fast_start import fork_server

    monkeypatch.setattr(fork_server, "HEAVY", ("hpo_no_such_module",))
    own = tmp_path / fork_server.LOG_NAME
    with caplog.at_level("WARNING", logger="hpo.forks"), \
            fork_server.serving(tmp_path) as server:
        assert server is not None
        server.start(os.getpid())
        server.preload(["hpo_no_such_module"])
        deadline = time.monotonic() + 120
        while "No module named 'hpo_no_such_module'" not in own.read_text():
            assert time.monotonic() < deadline, own.read_text()
            time.sleep(0.1)
        assert not caplog.records  # at its close, not before
    said = [r.getMessage() for r in caplog.records if "fork server wrote" in r.getMessage()]
    assert len(said) == 1 and "No module named 'hpo_no_such_module'" in said[0]


def test_an_embedded_runs_server_output_is_in_hpo_log(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from hpo.driver.backends import ray_session
    from hpo.ray_adapters.fast_start import fork_server

    monkeypatch.setattr(fork_server, "HEAVY", ("hpo_no_such_module",))
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        server = ray_session._forks
        assert server is not None and server._own_log is not None
        server.preload(["hpo_no_such_module"])
        deadline = time.monotonic() + 120
        while "hpo_no_such_module" not in server._own_log.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.1)
    text = (tmp_path / "hpo.log").read_text()
    assert "the workers' fork server wrote:" in text
    assert "No module named 'hpo_no_such_module'" in text


def test_the_fork_workers_patch_off_has_ray_start_every_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPO_RAY_PATCHES", "-fork-workers")
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        parent = ray.get(Probe.remote().facts.remote())["parent"]
        command = _parent_command(parent)
    assert "fork_server_process" not in command
    assert "raylet" in command  # Ray's own worker, the raylet's child


def test_a_server_that_cannot_start_leaves_ray_to_start_the_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The server's exec failing (EFAULT, seen once on CI) costs speed, never the run."""
    import errno

    from hpo.ray_adapters.fast_start import fork_server

    def exec_fails(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EFAULT, "Bad address", sys.executable)

    monkeypatch.setattr(fork_server.subprocess, "Popen", exec_fails)
    fds = sorted(os.listdir("/proc/self/fd"))
    with fork_server.serving(tmp_path) as server:
        assert server is None
    assert sorted(os.listdir("/proc/self/fd")) == fds  # the pipe and the socket closed
    assert "the fork server did not start ([Errno 14] Bad address" in caplog.text
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):  # and the run goes on without it
        parent = ray.get(Probe.remote().facts.remote())["parent"]
        assert "raylet" in _parent_command(parent)


@pytest.mark.parametrize(("variables", "forkable"), [
    ({"PL_DISABLE_FORK": "1"}, True),  # what Tune gives every trial actor: read late
    ({"HOME": os.environ.get("HOME", "")}, True),  # a value the server has already
    ({"HOME": "${HOME}"}, True),  # the same, once expanded as Ray expands it
    ({"HOME": "$HOME/x"}, False),
    ({"PL_DISABLE_FORK": "1", "MKL_NUM_THREADS": "3"}, False),  # read as the process starts
])
def test_runtime_env_variables_read_late_or_repeated_still_fork(variables: dict[str, str],
                                                                forkable: bool,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    args = ["default_worker.py", "--language=PYTHON",
            f"--serialized-runtime-env-context={json.dumps({'env_vars': variables})}"]
    assert worker_stub.forkable(args) is forkable
    monkeypatch.setattr(worker_stub, "READ_LATE", frozenset())
    assert worker_stub.forkable(args) is (forkable and "PL_DISABLE_FORK" not in variables)


def test_a_runs_trials_run_in_forked_workers_with_tunes_variable_set(tmp_path: Path) -> None:
    """Through `hpo.run`: the trials are forks, and Tune's PL_DISABLE_FORK is set (the
    embedded Ray's workers inherit it: hpo.ray_adapters.fast_start.runtime_env; where Tune's trial
    actors still carry it in a runtime env, the stub lets it through: worker_stub.READ_LATE,
    test_runtime_env_variables_read_late_or_repeated_still_fork above)."""
    import hpo

    spec = {"name": "forks", "trainable": "tests/support/study_trainables.py:parent_process",
            "metric": "score", "mode": "max", "num_samples": 3,
            "search_space": {"x": {"uniform": [0.0, 1.0]}}, "storage": str(tmp_path)}
    frame = hpo.run(spec, num_cpus=2, keep_ray=False).dataframe
    assert list(frame["forked"]) == [True, True, True]
    assert list(frame["own_group"]) == [True, True, True]  # as the raylet's stubs
    assert list(frame["pl_disable_fork"]) == ["1", "1", "1"]


def test_a_runtime_env_that_repeats_the_servers_values_is_forked_and_set(
        tmp_path: Path) -> None:
    """A variable whose value, expanded as Ray expands it, is the one the server has: the
    worker is a fork, and the fork sets it as setup_worker.py would."""
    home = os.environ.get("HOME", "/")
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        probe = Probe.options(runtime_env={"env_vars": {"HOME": "${HOME}"}}).remote()
        parent = ray.get(probe.facts.remote())["parent"]
        seen = ray.get(probe.__ray_call__.remote(lambda _self: os.environ.get("HOME")))
        command = _parent_command(parent)
    assert "hpo.ray_adapters.fast_start.fork_server_process" in command
    assert seen == home


def test_a_warm_raylet_is_served_only_where_it_runs_confined_alike() -> None:
    """A run's fork server gives its forks the run's CPUs, limits and cgroups: it serves a
    warm raylet's workers only where that raylet has the same (not one in another Slurm
    step, or on other CPUs), and not a raylet that is gone."""
    from hpo.driver.backends.warm_forks import confined_alike

    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                          stdin=subprocess.PIPE) as other:
        alike = confined_alike(other.pid)
        cpus = os.sched_getaffinity(0)
        if len(cpus) > 1:
            os.sched_setaffinity(other.pid, {min(cpus)})
        apart = confined_alike(other.pid)
        other.stdin.close()  # type: ignore[union-attr]
    assert alike
    assert not apart or len(cpus) == 1
    assert not confined_alike(other.pid)  # gone


@pytest.mark.parametrize(("cgroup", "steps"), [
    ("4:memory:/slurm/uid_1000/job_77/step_0\n3:cpuset:/slurm/uid_1000/job_77/step_0\n",
     {"job_77/step_0"}),  # cgroup v1
    ("0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n",
     {"job_77/step_batch"}),  # cgroup v2
    ("0::/user.slice/user-1000.slice/session-4.scope\n", set()),  # a login's: confines nothing
])
def test_the_slurm_step_is_read_from_a_processs_cgroups(cgroup: str, steps: set[str]) -> None:
    from hpo.driver.backends.warm_forks import slurm_steps

    assert slurm_steps(cgroup) == steps


def test_a_bad_spec_starts_no_fork_server(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`hpo run` starts its workers' fork server ahead, but only once the spec is valid."""
    from calls import cli_invoke

    from hpo.driver.backends import forks_ahead

    started: list[object] = []
    monkeypatch.setattr(forks_ahead, "start_ahead", lambda *args: started.append(args))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\ntrainable: x:y\nmetric: m\nmode: sideways\n")
    code, said, _ = cli_invoke(["run", str(bad), "--storage", str(tmp_path)])
    assert code == 2 and "mode" in said + _
    assert started == []
