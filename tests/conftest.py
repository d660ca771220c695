"""The fixtures every test shares; the shared calls live in tests/support/ (calls.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from patch_switch import speed_patches_on
from slurm_jobs import outputs, slurm
from tier_markers import _ray_marker_kept, pytest_collection_modifyitems

# the tiers' markers, the test Slurm cluster's fixtures (one cluster for the whole run), and
# the speed patches' switch for their own tests
__all__ = ["_ray_marker_kept", "outputs", "pytest_collection_modifyitems", "slurm",
           "speed_patches_on"]
# A warm Ray a developer keeps up (`hpo local up`) is not the tests' to use: they get none
# unless they start their own (tests/cluster/test_warm_ray.py).
os.environ["HPO_LOCAL_RAY"] = str(Path(os.environ.get("TMPDIR", "/tmp")) /
                                  f"hpo-tests-no-warm-ray-{os.getpid()}")


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    return tmp_path / "results"


@pytest.fixture(autouse=True, scope="session")
def _no_warm_ray_left() -> Iterator[None]:
    """A test that started a warm Ray in the tests' own folder and failed to stop it: stopped
    at the end, not left running (later runs would connect to it)."""
    yield
    from hpo.cluster import warm

    warm.down()


@pytest.fixture(autouse=True, scope="module")
def _no_ray_left_between_modules() -> Iterator[None]:
    """`hpo.run` from Python keeps its embedded Ray for the next run (as in a notebook): end it
    after each test module, so a later module starts from a machine without a Ray."""
    yield
    import hpo

    hpo.shutdown()
