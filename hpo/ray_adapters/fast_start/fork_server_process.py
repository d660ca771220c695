"""The fork server's own process (started by hpo.ray_adapters.fast_start.fork_server): it imports
what every worker imports, once, then forks a worker for each stub that asks
(hpo.ray_adapters.fast_start.worker_stub).

A fork is what a fresh worker would be: the environment, working directory and stdio of the
process the raylet started, Ray's runtime-env variables applied as setup_worker.py applies
them, SIGINT blocked as in Ray's processes, and the random generators that would have been
seeded afresh (Python's own reseeds at fork; NumPy's global one is reseeded here). Nothing in
the server uses a CUDA device or a connection before it forks. What forks share that fresh
workers would not: the interpreter's string hash seed (the order of a set of strings), the
modules the server imported (those a worker imports anyway before its first trial), and
what hpo.ray_adapters.fast_start.fork_server_warm did once for all (the worker script's code,
compiled; the
regular expressions Ray's worker compiles, in `re`'s cache). Its loop is
hpo.ray_adapters.fast_start.fork_server_loop; what a fork does to become a worker,
hpo.ray_adapters.fast_start.fork_server_child.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import signal
import socket
import sys
import traceback
from collections.abc import Iterator
from typing import Any

from hpo.ray_adapters.fast_start import fork_server_warm
from hpo.ray_adapters.fast_start.fork_server_loop import PER_PROCESS, Orders, Server

# What every trial's worker imports, in two parts. First, while Ray starts, the libraries:
# those Tune imports (0.8 CPU-s on 2 cores), then those Ray's worker and Tune import beside
# them where installed (IPython's shell, which Tune's trainable clears; jsonschema, requests,
# protobuf, pydantic v1, starlette: 0.4 CPU-s). None reads Ray's per-process variables; those
# they read at import (TQDM_*, PROTOCOL_BUFFERS_*, TERM) are the server's first environment's,
# the raylet's too (hpo.ray_adapters.fast_start.fork_server). Not those Ray bundles
# (ray/thirdparty_files:
# psutil, colorama), which `import ray` puts first on the path. Then, once the node and job
# are known (`import ray` reads the job's variables), Ray's worker main, Tune and hpo's trial
# wrapper (0.45 CPU-s): the part the first trial waits for. Not the user's trainable: it may
# touch a GPU.
LIBRARIES = ("numpy", "pandas", "pyarrow", "pyarrow.fs", "pydantic", "fsspec", "rich")
COMPANIONS = ("IPython.core.interactiveshell", "jsonschema", "requests", "rich.layout",
              "rich.live", "pydantic.v1", "pydantic.dataclasses", "google.protobuf.json_format",
              "google.protobuf.struct_pb2", "google.protobuf.timestamp_pb2", "yaml", "wcwidth",
              "annotated_types", "filelock", "tqdm.auto", "pyarrow.parquet", "pyarrow.json",
              "starlette.datastructures", "starlette.concurrency", "msgpack",
              "packaging.version", "fsspec.implementations.local")
RAY_MODULES = ("ray._private.workers.default_worker", "ray.tune", "hpo.trial.one_process")
# What a trial's worker imports after that before its first step (about 0.1 CPU-s): Ray's
# serializers for Arrow, hpo's result batches, the fork's own argument parser; and at its
# exit: ray.shutdown imports Ray's compiled DAGs to close them (24 ms a worker, all of them
# at once at a run's end).
WORKER_EXTRAS = ("ray._private.arrow_serialization", "hpo.trial.batched",
                 "ray._private.workers.setup_worker", "ray.dag.compiled_dag_node")


def main(listener_fd: int, orders_fd: int, notices_fd: int | None = None) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # as Ray's own processes
    gc.disable()  # while it imports: no collection leaves holes in the pages forks share
    parent = os.getppid()
    listener = socket.socket(fileno=listener_fd)
    import_libraries()
    gc.freeze()
    orders = Orders(orders_fd)
    env = json.loads(orders.first() or "{}")
    if not env:
        return  # the node did not start
    os.environ.clear()
    os.environ.update(env)  # Ray's C++ side reads it once, at `import ray`
    import_ray_part()
    try:  # what each worker would redo, once (a failure costs only that time)
        fork_server_warm.prepare()
    except Exception:  # noqa: BLE001  the workers compile for themselves, as without it
        traceback.print_exc()
    if not fresh_ray_ids():
        print("hpo fork server: forks would share Ray's random IDs; not forking",
              file=sys.stderr, flush=True)
        return  # the stubs find the socket closed and start their workers as Ray does
    gc.freeze()  # the forks share these pages instead of copying them at their first GC
    gc.enable()  # for what the loop and the forks make (a collection skips the frozen)
    Server(listener, orders, fresh_ray_ids, notices_fd).run(parent)


def import_libraries() -> None:
    """The first part, before the job is known: LIBRARIES, then the COMPANIONS installed."""
    for name in LIBRARIES:
        importlib.import_module(name)
    _import_where_installed(COMPANIONS)


def import_ray_part() -> None:
    """The second part, in the job's environment: Ray's worker, Tune (its actor classes with
    IDs of their own) and hpo's trial wrapper, then the WORKER_EXTRAS installed."""
    with _unseeded_actor_ids():
        for name in RAY_MODULES:
            importlib.import_module(name)
        _import_where_installed(WORKER_EXTRAS)


def _import_where_installed(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:  # the worker would not have it either
            pass
        except Exception:  # the worker imports it itself, and meets the error there
            traceback.print_exc()


@contextlib.contextmanager
def _unseeded_actor_ids() -> Iterator[None]:
    """While the block runs, a Ray actor class declared (as importing Tune does) takes its
    ID from os.urandom instead of Ray's C++ generator, whose first draw seeds it once per
    process: a fork would share the seed, and draw the same object IDs as its siblings. The
    class ID is only kept in the class's metadata (read by nothing in Ray 2.60)."""
    import ray.actor
    from ray._raylet import ActorClassID

    class _FromUrandom:
        @staticmethod
        def from_random() -> Any:
            return ActorClassID(os.urandom(ActorClassID.size()))

    ray.actor.ActorClassID = _FromUrandom
    try:
        yield
    finally:
        ray.actor.ActorClassID = ActorClassID


def fresh_ray_ids() -> bool:
    """Whether two forks draw different random Ray IDs (each seeds its own generator)."""
    from ray._raylet import ObjectID

    drawn = []
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, ObjectID.from_random().binary())
            os._exit(0)
        os.close(write)
        with open(read, "rb") as drawn_id:
            drawn.append(drawn_id.read())
        os.waitpid(pid, 0)
    return drawn[0] != drawn[1]


def missing() -> list[str]:
    """What the server reads of Ray's private parts that the installed Ray lacks (those of
    its forks: hpo.ray_adapters.fast_start.fork_server_child): where an actor class draws its ID,
    the per-process flags."""
    import ray.actor
    from ray._private import ray_constants

    from hpo.ray_adapters.reading import source

    gaps = []
    if "ActorClassID.from_random()" not in source(ray.actor._make_actor):
        gaps.append("ray.actor._make_actor(ActorClassID.from_random())")
    if not set(PER_PROCESS) <= set(ray_constants.RAY_INTERNAL_FLAGS):
        gaps.append("ray_constants.RAY_INTERNAL_FLAGS")
    return gaps


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
