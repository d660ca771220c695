"""The module names an experiment saved by an earlier hpo pickled its scheduler under.

Tune's tuner.pkl holds the run's scheduler, its class named by module; `hpo resume` unpickles
it. hpo's schedulers lived in hpo.spec before the spec became description only (and PB2 in
hpo.spec.seedable before it had a module of its own). Each old name is a stand-in module in
sys.modules that hands out the class from where it lives now, imported only when asked for
(PB2's imports scikit-learn). The spec cannot hold the names itself: it never imports the
driver.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_FIFO = "hpo.driver.schedulers.fifo_choice"
_SEEDABLE = "hpo.driver.schedulers.seedable"
_BANDITS = "hpo.driver.schedulers.seedable_bandits"
# old module -> {class name: the module that holds the class now}
OLD_NAMES: dict[str, dict[str, str]] = {
    "hpo.spec.fifo_choice": {"FifoScheduler": _FIFO, "MedianStopping": _FIFO},
    "hpo.spec.seedable": {"SeedableASHA": _SEEDABLE, "SeedablePBT": _SEEDABLE,
                          "SeedablePB2": _BANDITS},
    "hpo.spec.seedable_bandits": {"SeedablePB2": _BANDITS},
}


def _stand_in(name: str, classes: dict[str, str]) -> types.ModuleType:
    module = types.ModuleType(name, f"hpo's schedulers saved under {name}, where they live now")

    def find(attr: str) -> Any:
        if attr not in classes:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        return getattr(importlib.import_module(classes[attr]), attr)

    vars(module)["__getattr__"] = find  # a module's own __getattr__ (PEP 562)
    return module


def keep_old_names() -> None:
    """Let pickle find hpo's schedulers under the module names older experiments saved."""
    for name, classes in OLD_NAMES.items():
        sys.modules.setdefault(name, _stand_in(name, classes))
