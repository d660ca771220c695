"""A node whose Ray fails to start shows the ends of Ray's own logs in its log
(hpo.cluster.ray_logs): Ray's message names a file in the node's private folder, which is
removed when the node ends; the start's one-line reason stays Ray's own message."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpo.cluster.bootstrap import _tail
from hpo.cluster.ray_logs import RAY_LOG_MARK, print_ray_logs
from hpo.cluster.render import node_dir, ray_temp_dir


@pytest.fixture
def job_id() -> Iterator[str]:
    job = f"test{os.getpid()}"
    yield job
    shutil.rmtree(node_dir(job), ignore_errors=True)


def test_the_ends_of_rays_logs_reach_the_node_log_and_the_reason_stays_rays(
        job_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = Path(ray_temp_dir(job_id), "session_2026-11-29_21-28-59_1", "logs")
    logs.mkdir(parents=True)
    Path(ray_temp_dir(job_id), "session_latest").symlink_to(logs.parent)
    (logs / "gcs_server.out").write_text("".join(f"gcs line {i}\n" for i in range(100)))
    (logs / "raylet.err").write_text("")  # empty: not shown
    print_ray_logs(job_id)
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == RAY_LOG_MARK + "the end of Ray's gcs_server.out on this node:"
    assert shown[1:] == [RAY_LOG_MARK + f"gcs line {i}" for i in range(60, 100)]
    node_log = tmp_path / "ray-node1.log"
    node_log.write_text("ray start ...\nPlease check gcs_server.out for details.\n"
                        + "\n".join(shown) + "\n")
    assert _tail(node_log) == "Please check gcs_server.out for details."


def test_a_node_without_rays_logs_shows_nothing(job_id: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    print_ray_logs(job_id)
    assert capsys.readouterr().out == ""
