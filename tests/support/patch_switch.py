"""hpo's gate under a setting of the tests' choosing: the speed patches' own tests run them on,
whatever HPO_RAY_PATCHES says around the run (`HPO_RAY_PATCHES=off pytest` reruns everything
else on plain Ray), and tests/driver/test_plain_ray.py runs its studies with them off."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from hpo.ray_adapters import gate


def forget_ray_and_decisions() -> None:
    """No Ray kept and no decision cached from before: the next run starts and decides anew."""
    import hpo

    hpo.shutdown()
    gate.clear()


@contextlib.contextmanager
def gate_under(env: dict[str, str | None]) -> Iterator[None]:
    """These variables set (None: unset) while the block runs, with a Ray and decisions of
    their own; the setting around it decides again afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        forget_ray_and_decisions()
        for name, value in env.items():
            if value is None:
                patch.delenv(name, raising=False)
            else:
                patch.setenv(name, value)
        yield
        forget_ray_and_decisions()
    gate.clear()


@pytest.fixture(scope="module")
def speed_patches_on() -> Iterator[None]:
    """For a module that tests a speed patch: the switch unset while it runs."""
    with gate_under({gate.SWITCH: None}):
        yield
