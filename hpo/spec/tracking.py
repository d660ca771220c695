"""The `tracking:` section: each trial as an MLflow and/or Weights & Biases run."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, model_validator

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


class Tracking(Strict):
    mlflow: Mlflow | None = None
    wandb: Wandb | None = None
