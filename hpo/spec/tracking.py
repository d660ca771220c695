"""The `tracking:` section: each trial as an MLflow and/or Weights & Biases run."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, model_validator

from hpo.errors import ConfigError
from hpo.spec._validation import FieldProblem, Strict


def _installed(package: str) -> None:
    # find_spec only: importing mlflow or wandb takes seconds, too slow for `hpo validate`.
    if importlib.util.find_spec(package) is None:
        raise FieldProblem("", f"needs the {package} package, which is not installed",
                           f"pip install 'hpo[{package}]'")


class Mlflow(Strict):
    tracking_uri: str | None = None  # null: MLflow's own default (MLFLOW_TRACKING_URI)
    experiment_name: str | None = None  # null: the spec's name
    tags: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _package(self) -> Mlflow:
        _installed("mlflow")
        return self


class Wandb(Strict):
    project: str | None = None  # null: the spec's name
    group: str | None = None  # null: the experiment folder's name
    mode: Literal["offline", "online"] | None = None  # null: offline inside Slurm, else online

    @model_validator(mode="after")
    def _package(self) -> Wandb:
        _installed("wandb")
        return self

    def resolved_mode(self, environ: Mapping[str, str]) -> str:
        """Compute nodes have no internet: inside a Slurm job W&B writes offline runs
        (`wandb sync` them from a login node) unless the YAML asks for online."""
        return self.mode or ("offline" if environ.get("SLURM_JOB_ID") else "online")

    def check_login(self, source: str, environ: Mapping[str, str]) -> None:
        """An online run needs a W&B API key: refuse before anything starts, instead of Ray's
        traceback from its logger callback once the run is under way."""
        if self.resolved_mode(environ) != "online" or _has_wandb_key(environ):
            return
        raise ConfigError(source, "tracking.wandb.mode", "online, but no W&B API key was "
                          "found (WANDB_API_KEY, ~/.netrc)", "set tracking.wandb.mode: offline "
                          "(`wandb sync` the runs later), or run `wandb login` first")


def _has_wandb_key(environ: Mapping[str, str]) -> bool:
    """Where Ray's WandbLoggerCallback looks (ray/air/integrations/wandb.py, _set_api_key):
    WANDB_MODE offline/disabled needs none, else the variable, wandb's own lookup (its
    session, ~/.netrc or $NETRC for its base URL, its settings), or Ray's key hook."""
    if environ.get("WANDB_MODE") in ("offline", "disabled"):
        return True
    if environ.get("WANDB_API_KEY") or environ.get("WANDB_SETUP_API_KEY_HOOK"):
        return True
    # What `wandb.api.api_key` (Ray's check) reads, without its deprecation warning line.
    from wandb.sdk import wandb_setup  # seconds to import: only for an online run
    from wandb.sdk.lib import wbauth

    settings = wandb_setup.singleton().settings
    return bool(wbauth.session_credentials(host=settings.base_url)
                or wbauth.read_netrc_auth(host=settings.base_url) or settings.api_key)


class Tracking(Strict):
    mlflow: Mlflow | None = None
    wandb: Wandb | None = None

    def check_login(self, source: str, environ: Mapping[str, str]) -> None:
        """What the trackers need from this machine before a run starts (W&B's key)."""
        if self.wandb:
            self.wandb.check_login(source, environ)
