"""Every change hpo makes below Ray's public API, one entry each: its kind, what it changes,
the check that the Ray installed is still the Ray it was read from, and its off switch.

Kinds:
  fix      a bug of Ray Tune's that hpo works around (with the upstream issue); off, Tune
           behaves as it ships, bug included
  feature  what a spec key or a guarantee of hpo needs (exact histories and resumes, node
           loss forgiven, RASDA); off, a spec that needs it is refused before Ray starts
  speed    a faster path to the same result; off, Ray does it its own way, a little slower

Every patch is named by `HPO_RAY_PATCHES` (hpo.ray_adapters.gate): `off` turns every speed
patch off (plain Ray's speed), `-NAME,-NAME` turns the named ones off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["fix", "feature", "speed"]
# The Ray releases hpo is tested with: the newest three minors (pyproject.toml's range).
# Every private read was checked against each; a newer Ray runs with the speed patches off.
OLDEST_RAY = (2, 58)
NEWEST_RAY = (2, 60)


@dataclass(frozen=True)
class Patch:
    """One change below Ray's public API."""

    name: str  # its switch: HPO_RAY_PATCHES=-name
    kind: Kind
    what: str  # one line: what it changes in Ray
    check: str  # "module:function" returning the gaps found in the installed Ray ([]: none)
    why: str = ""  # fix: the upstream issue; feature: the spec key or guarantee that needs it


_A = "hpo.ray_adapters."
PATCHES: tuple[Patch, ...] = (
    Patch("history", "feature",
          "Tune's loggers write each row once, and a restart's repeated steps are dropped",
          _A + "tune_guards:history_gaps", "exact histories (every run)"),
    Patch("snapshot-deletes", "feature",
          "a checkpoint Tune drops is deleted only after the snapshot that forgets it",
          _A + "tune_guards:snapshot_gaps", "checkpoint.keep (exact resume)"),
    Patch("node-loss", "feature",
          "a trial whose node went away is retried, not counted against max_failures",
          _A + "node_loss:missing", "failure.max_failures on a Slurm cluster"),
    Patch("rasda", "feature", "RASDA reads the rungs and grows a promoted trial's ranks",
          _A + "tune_rasda:missing", "scheduler.type: rasda"),
    Patch("scheduler-state", "feature",
          "the scheduler's records ride in Tune's snapshot of its callbacks' states and are put "
          "back on the resumed trials", _A + "schedulers.state:scheduler_gaps",
          "exact resume (ray-project/ray#30838: Tune saves no scheduler)"),
    Patch("cluster", "feature",
          "a Slurm node's GCS client: its nodes, a preemption drain, the job's token",
          _A + "gcs:missing", "slurm join, a node's drain"),
    Patch("trial-session", "feature",
          "a trial reads its Ray Train session: its folder, its last report's time",
          _A + "train_session:session_gaps", "cost, checkpoint files (every run)"),
    Patch("pbt-pause", "fix",
          "a trial paused by PBT without a save keeps no STOP queued for that save",
          _A + "tune_fit:fix_gaps", "ray-project/ray#57906 (open PR #61448)"),
    Patch("save-race", "fix",
          "a batch of results that starts a save leaves its decision for after the save",
          _A + "tune_fit:fix_gaps", "not filed upstream: two train calls in flight"),
    Patch("interrupt-cleanup", "fix",
          "a KeyboardInterrupt in Tune's controller ends the trials' actors first",
          _A + "tune_fit:fix_gaps", "not filed upstream: tune.run cleans up after Exception"),
    Patch("staged-apart", "fix",
          "two runs of one name in one second on one Ray get staging folders of their own",
          _A + "tune_fit:fix_gaps", "not filed upstream: the staging folder is per second"),
    Patch("fit-speed", "speed",
          "Tune's fit: actors reused by waiting trials, starts staggered, no callback census, "
          "no result frames, the registry read once", _A + "tune_fit:speed_gaps"),
    Patch("trial-reports", "speed",
          "a trial's storage sync looks at its period first; results taken in batches",
          _A + "train_session:speed_gaps"),
    Patch("lean-head", "speed",
          "the embedded Ray starts without monitors, dashboard process or agent wait",
          _A + "fast_start.lean_head:head_gaps"),
    Patch("runtime-env-gate", "speed",
          "trial actors without a runtime env where workers inherit it; the agent on demand",
          _A + "fast_start.runtime_env:missing"),
    Patch("fork-workers", "speed",
          "Ray's workers forked from a server that has imported Ray, torch and the trainable",
          _A + "fast_start.fork_server:forks_missing"),
)


def by_name(name: str) -> Patch:
    """The patch of this name (KeyError: none)."""
    return {patch.name: patch for patch in PATCHES}[name]
