"""Who may attach to a Ray cluster: a per-run random token in a 0600 file, token auth on in
this process only, and the address + token of a running cluster to connect to."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from hpo.ray_adapters import gcs


@dataclass(frozen=True)
class RayCluster:
    """A running Ray cluster to connect to: GCS address, this node's Ray IP, token file."""

    address: str
    node_ip: str
    token_file: Path
    notes: tuple[str, ...] = ()  # what the nodes found at start (e.g. fewer CPUs than held)
    # Where this node's worker stubs look for a job's fork server ({job}: the job's ID), and
    # the raylet whose workers it forks: a warm local Ray's (hpo.cluster.warm); "" and 0: none.
    fork_socket: str = ""
    raylet_pid: int = 0
    # Where a Slurm job's nodes look for the libraries their fork servers import for the
    # study's trainable (its torch: hpo.driver.backends.node_start); "": none.
    preload_file: str = ""


def new_token(folder: Path) -> Path:
    """A fresh random token in a 0600 file inside folder (which should be 0700)."""
    token = folder / "auth_token"
    token.touch(mode=0o600)
    token.write_text(secrets.token_hex(32))
    return token


@contextlib.contextmanager
def environ_overlay(values: Mapping[str, str]) -> Iterator[None]:
    """os.environ holds these values while the block runs (the processes it starts, such as
    Ray's, inherit them); each name's earlier value, or none, after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# Tune's legacy reporter, silent at verbose=0: the new one prints its own tables and passes
# by the live view (a TrialProgressCallback).
TUNE_OUTPUT_ENV = {"RAY_AIR_NEW_OUTPUT": "0"}


@contextlib.contextmanager
def token_env(token: Path) -> Iterator[None]:
    """Token auth on for this process (Ray reads the token from the file), restored after."""
    try:
        with environ_overlay({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
                              **TUNE_OUTPUT_ENV}):
            gcs.reload_auth_settings()
            yield
    finally:
        gcs.reload_auth_settings()
