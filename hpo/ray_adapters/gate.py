"""The gate: each patch of the registry checked once a process against the Ray installed, and
turned on only where it still matches (or off where `HPO_RAY_PATCHES` says so).

`HPO_RAY_PATCHES`:
  unset, `on`      every patch whose check passes
  `off`            every speed patch off (plain Ray's speed); fixes and features stay
  `-a,-b`          the named patches off (any kind), the others as `on`
  `off,-a`         both
A Ray newer than the newest tested runs with every speed patch off. A speed patch that no
longer matches is off with one warning; a fix is off with a warning naming its upstream issue;
a feature that a spec needs and that does not match is one ConfigError before Ray starts.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from hpo.errors import ConfigError
from hpo.ray_adapters.registry import NEWEST_RAY, OLDEST_RAY, PATCHES, Patch, by_name

SWITCH = "HPO_RAY_PATCHES"
DECIDED = "HPO_RAY_PATCHES_DECIDED"  # "<the setting>|<the patches on>", set by decisions()
_log = logging.getLogger("hpo.ray")


@dataclass(frozen=True)
class Decision:
    """What the gate decided for one patch."""

    patch: Patch
    gaps: tuple[str, ...]  # what its check found missing in the Ray installed
    off_why: str  # "" (on), or why it is off

    @property
    def on(self) -> bool:
        return not self.off_why


@functools.cache
def ray_version() -> tuple[int, int]:
    """The installed Ray's (major, minor), read from its metadata (no import of Ray)."""
    major, minor, *_ = _installed_ray().split(".")
    return int(major), int(minor)


def _installed_ray() -> str:
    import importlib.metadata  # 10-20 ms: not at `hpo --help`

    return importlib.metadata.version("ray")


def supported_ray() -> str:
    """The requirement of the Ray releases hpo is tested with (pyproject.toml's)."""
    (major, low), (_, high) = OLDEST_RAY, NEWEST_RAY
    return f"ray[tune]>={major}.{low},<{major}.{high + 1}"


def switched_off() -> tuple[bool, frozenset[str]]:
    """(every speed patch off, the patches named off) as HPO_RAY_PATCHES says."""
    words = [w.strip() for w in os.environ.get(SWITCH, "").split(",") if w.strip()]
    named = frozenset(w[1:] for w in words if w.startswith("-"))
    unknown = sorted(named - {p.name for p in PATCHES}) + [
        w for w in words if not w.startswith("-") and w not in ("on", "off")]
    if unknown:
        raise ConfigError(SWITCH, unknown[0], "names no patch",
                          f"valid: off, on, or -NAME with NAME one of "
                          f"{', '.join(p.name for p in PATCHES)}")
    return "off" in words, named


def _switched_off_why(patch: Patch) -> str:
    """Why HPO_RAY_PATCHES or the Ray's version turns the patch off ("": neither does)."""
    all_speed_off, named = switched_off()
    if patch.name in named:
        return f"{SWITCH} names it"
    if patch.kind == "speed" and all_speed_off:
        return f"{SWITCH}=off"
    if patch.kind == "speed" and ray_version() > NEWEST_RAY:
        return "Ray {}.{} is newer than tested".format(*ray_version())
    return ""


def _decide(patch: Patch) -> Decision:
    if why := _switched_off_why(patch):
        return Decision(patch, (), why)
    from hpo.ray_adapters import checked

    gaps = checked.gaps(patch.check)
    return Decision(patch, gaps, f"Ray lacks {gaps[0]}" if gaps else "")


@functools.cache
def _decision(setting: str, name: str) -> Decision:
    """One patch's decision under `setting` (HPO_RAY_PATCHES: the cache's key)."""
    return _decide(by_name(name))


def decisions() -> dict[str, Decision]:
    """Each patch's decision, decided once a process (for the current HPO_RAY_PATCHES); on
    the first look at this Ray, every check runs and its answer is kept (checked.py)."""
    from hpo.ray_adapters import checked

    checked.keep_all(patch.check for patch in PATCHES)
    setting = os.environ.get(SWITCH, "")
    found = {patch.name: _decision(setting, patch.name) for patch in PATCHES}
    # what this process's Ray and its workers inherit: a trial worker then decides for free
    os.environ[DECIDED] = setting + "|" + ",".join(n for n, d in found.items() if d.on)
    return found


def clear() -> None:
    """Decide afresh at the next look (tests: a check or the setting changed)."""
    from hpo.ray_adapters import checked

    _decision.cache_clear()
    _warn_once.cache_clear()
    os.environ.pop(DECIDED, None)
    checked.forget()


def switched_on(name: str) -> bool:
    """Whether neither HPO_RAY_PATCHES nor the Ray's version turns the patch off: the look
    before Ray is imported (is_on then runs its check)."""
    return not _switched_off_why(by_name(name))


def is_on(name: str) -> bool:
    """Whether the patch of this name applies in this process."""
    by_name(name)  # a typo is a KeyError, not a patch quietly off
    setting = os.environ.get(SWITCH, "")
    decided, _, on = os.environ.get(DECIDED, "\0|").partition("|")
    if decided == setting:  # the driver's (or the node's) decisions, inherited
        return name in on.split(",")
    return _decision(setting, name).on


def applied(name: str, patch: Callable[[], AbstractContextManager[object]]
            ) -> AbstractContextManager[object]:
    """patch() where the named patch is on; else a block that changes nothing."""
    return patch() if is_on(name) else nullcontext()


def check_at_start(source: str = "<spec>", needed: dict[str, str] | None = None) -> list[str]:
    """Run every check once, before Ray starts. `needed` maps a feature patch to the spec key
    that asks for it: a feature needed and off is one ConfigError. Returns the warning lines
    (also logged once): the speed patches off by a mismatch, each fix that does not apply."""
    found = decisions()
    for name, key in (needed or {}).items():
        decision = found[name]
        if not decision.on:
            raise ConfigError(source, key, f"needs hpo's '{name}' change to Ray, which is off "
                              f"({decision.off_why})", _hint(decision))
    return _warn_once(tuple(_warnings(found)))


def _hint(decision: Decision) -> str:
    if decision.gaps:
        return f"install a tested Ray: pip install '{supported_ray()}'"
    return f"remove -{decision.patch.name} from {SWITCH}"


def _warnings(found: dict[str, Decision]) -> Iterator[str]:
    mismatched = [d.patch.name for d in found.values()
                  if d.patch.kind == "speed" and not d.on and not d.off_why.startswith(SWITCH)]
    if mismatched:
        yield (f"Ray {_installed_ray()} does not match what hpo read: running "
               f"with the speed patches {', '.join(mismatched)} off (results are the same; "
               f"`hpo doctor` lists why)")
    for decision in found.values():
        if decision.patch.kind == "fix" and decision.gaps:
            yield (f"hpo's fix '{decision.patch.name}' does not apply to this Ray "
                   f"({decision.patch.why}): {decision.off_why}")


@functools.cache
def _warn_once(lines: tuple[str, ...]) -> list[str]:
    for line in lines:
        _log.warning("%s", line)
    return list(lines)


def table() -> list[tuple[str, str, str, str]]:
    """(name, kind, on or off, why) for each patch: `hpo doctor`'s table."""
    return [(d.patch.name, d.patch.kind, "on" if d.on else "off",
             d.off_why or d.patch.what) for d in decisions().values()]
