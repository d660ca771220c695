"""The speed patches' own tests run them on, whatever HPO_RAY_PATCHES says around the run
(`HPO_RAY_PATCHES=off pytest` reruns everything else on plain Ray)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hpo.ray_adapters import gate


@pytest.fixture(scope="module")
def speed_patches_on() -> Iterator[None]:
    """For a module that tests a speed patch: the switch unset while it runs, the gate's
    decisions taken afresh before and after."""
    import hpo

    hpo.shutdown()  # a Ray kept from a run under the outer setting
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(gate.SWITCH, raising=False)
        gate.clear()
        yield
    hpo.shutdown()
    gate.clear()
