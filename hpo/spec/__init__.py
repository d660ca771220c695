"""The experiment spec: one YAML file -> a validated, immutable Spec. Nothing here imports Ray;
the translation into Ray Tune's objects is hpo.driver.run.translate."""

from __future__ import annotations

from hpo.spec.load import load_spec, spec_from_dict
from hpo.spec.model import Distributed, Spec
from hpo.spec.slurm import SlurmSettings

__all__ = ["Distributed", "SlurmSettings", "Spec", "load_spec", "spec_from_dict"]
