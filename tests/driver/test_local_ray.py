"""The embedded Ray of `hpo run` (hpo/driver/backends/ray_session.py): private to the run, and lean.

One real embedded Ray: the processes it runs are read from Ray's own node record and from
/proc, its files and token are checked while it runs and after it has stopped.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import ray
from calls import command_lines
from ray._private import ray_constants
from ray._private.parameter import RayParams

from hpo.driver.backends.ray_session import embedded_ray

pytestmark = pytest.mark.usefixtures("speed_patches_on")  # tests a speed patch itself

HELPERS_NOT_STARTED = (ray_constants.PROCESS_TYPE_MONITOR,
                       ray_constants.PROCESS_TYPE_LOG_MONITOR,
                       ray_constants.PROCESS_TYPE_DASHBOARD)


def test_embedded_ray_runs_work_without_the_helpers_and_leaves_nothing(tmp_path: Path) -> None:
    home_token = Path.home() / ".ray" / "auth_token"
    had_home_token = home_token.exists()
    auth_mode = os.environ.get("RAY_AUTH_MODE")
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1) as resources:
        node = ray._private.worker._global_node
        run_dir = Path(node.get_session_dir_path()).parent.parent  # /tmp/hpo-xxxx/r/session_*
        token = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
        started = set(node.all_processes)
        ray_processes = [c for c in command_lines() if str(run_dir) in c]
        answer = ray.get(ray.remote(lambda: 41 + 1).remote())

        assert resources["CPU"] == 1.0
        assert answer == 42  # a worker ran a task: the node works without the helpers
        assert {ray_constants.PROCESS_TYPE_GCS_SERVER, ray_constants.PROCESS_TYPE_RAYLET} <= started
        assert not started & set(HELPERS_NOT_STARTED), started
        assert not [c for c in ray_processes
                    if "monitor.py" in c or "dashboard/dashboard.py" in c], ray_processes
        assert node.webui_url is None
        assert os.environ["RAY_AUTH_MODE"] == "token"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700  # Ray's own dirs inside: 0777
    assert not run_dir.exists()  # the run's temp dir and token are gone
    assert home_token.exists() == had_home_token
    assert os.environ.get("RAY_AUTH_MODE") == auth_mode


def test_the_lean_settings_apply_to_the_embedded_start_only(tmp_path: Path) -> None:
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        during = RayParams()
    after = RayParams()

    # Inside the run, other code (e.g. a user's `ray start` from Python) gets Ray's defaults.
    assert during.no_monitor is False and during.include_log_monitor is None
    assert after.no_monitor is False and after.include_log_monitor is None
