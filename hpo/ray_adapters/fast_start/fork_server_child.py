"""What a fork of the fork server does to become the worker a stub asked for
(hpo.ray_adapters.fast_start.fork_server_loop): the stub's stdio, working directory and
environment, Ray's
runtime-env variables set as setup_worker.py sets them, fresh random generators, then Ray's
worker script as its main; it exits as the interpreter would, never back into the server.
A fork that ends before it registers with its raylet (before Ray's worker has its core
worker) with any code but 0 exits with FAILED_START instead (a registered worker's own
FAILED_START exits as 1): its server then forks no more, and its stub starts Ray's own worker
(hpo.ray_adapters.fast_start.fork_server_loop). For tests only, FAIL_START_ENV=1 in a
worker's environment has its fork fail so, as a fork refused by the GCS did."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from hpo.ray_adapters.fast_start import fork_server_warm

FAILED_START = 117  # a fork's exit code: it ended before it registered with its raylet
FAIL_START_ENV = "HPO_TEST_FORK_FAILS"  # tests: "1" makes each fork fail its start

class Request(NamedTuple):
    """What a stub asks for: the worker's working directory, arguments and environment."""

    cwd: str
    args: list[str]
    env: dict[str, str]


def become_worker(request: Request, fds: list[int]) -> NoReturn:
    """In the fork: turn into the worker the stub's arguments describe; never returns."""
    code: Any = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(request.env)
        sys.argv = _as_setup_worker(request.args)
        _fresh_state()
        if request.env.get(FAIL_START_ENV) == "1":
            raise RuntimeError(f"{FAIL_START_ENV}=1: this fork fails its start")
        code = 0
        fork_server_warm.run_as_main(sys.argv[0])
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1  # as the interpreter exits after an uncaught exception
    code = code if isinstance(code, int) else int(code is not None)
    if _registered():  # a worker's own exit: its code, unless it reads as a failed start
        _exit(1 if code == FAILED_START else code)
    _exit(FAILED_START if code != 0 else 0)


def _as_setup_worker(args: list[str]) -> list[str]:
    """Do what setup_worker.py does before its exec: parse its own arguments off with its own
    parser and set the runtime env's variables (only those the stub lets through:
    hpo.ray_adapters.fast_start.worker_stub.READ_LATE, or repeated values); return what it would
    exec, the interpreter flags dropped (this one has them)."""
    from ray._private.runtime_env.context import RuntimeEnvContext
    from ray._private.utils import update_envs
    from ray._private.workers.setup_worker import parser

    known, rest = parser.parse_known_args(args)
    update_envs(RuntimeEnvContext.deserialize(known.serialized_runtime_env_context or "{}")
                .env_vars)
    while rest and rest[0] in ("-S", "-s"):
        rest.pop(0)
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    return rest


def _fresh_state() -> None:
    """What a new process would have fresh and a fork shares with its siblings."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()  # the global generator, seeded from the OS as at import


def _registered() -> bool:
    """Whether this fork's Ray worker registered with its raylet: `connect` made its core
    worker (ray._private.worker.connect sets global_worker.core_worker)."""
    worker = sys.modules.get("ray._private.worker")
    return worker is not None and hasattr(worker.global_worker, "core_worker")


def _exit(code: int) -> NoReturn:
    """Exit as the interpreter would (atexit hooks, flushed stdio), without unwinding into
    the server's frames."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def missing() -> list[str]:
    """What a fork reads of Ray's private parts that the installed Ray lacks: the worker's
    main, setup_worker.py's parser and its runtime-env context, where a worker keeps its
    core worker."""
    from ray._private.runtime_env.context import RuntimeEnvContext
    from ray._private.workers import default_worker, setup_worker

    from hpo.ray_adapters.reading import source

    gaps = []
    if "ray._private.worker.connect(" not in Path(default_worker.__file__).read_text():
        gaps.append(default_worker.__file__)
    if "--serialized-runtime-env-context" not in setup_worker.parser.format_usage():
        gaps.append("setup_worker.parser(--serialized-runtime-env-context)")
    fields = set(vars(RuntimeEnvContext()))
    if not {"command_prefix", "env_vars", "py_executable", "override_worker_entrypoint"} <= fields:
        gaps.append("RuntimeEnvContext fields")
    if "update_envs(self.env_vars)" not in source(RuntimeEnvContext.exec_worker):
        gaps.append("RuntimeEnvContext.exec_worker(update_envs)")
    from ray._private import worker

    if "worker.core_worker = ray._raylet.CoreWorker(" not in source(worker.connect):
        gaps.append("ray._private.worker.connect sets global_worker.core_worker")
    return gaps
