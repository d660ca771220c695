"""Reading an experiment: a YAML file (or a mapping) -> overrides -> a validated Spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hpo.errors import ConfigError
from hpo.spec._validation import config_error
from hpo.spec._yaml import apply_overrides, parse_yaml
from hpo.spec.model import Spec


def load_spec(path: str | Path, overrides: list[str] | None = None) -> Spec:
    """Read, override and validate one experiment YAML file."""
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read the file ({exc.strerror})",
                          "check the path") from None
    data = parse_yaml(text, source)
    if data is None:
        raise ConfigError(source, "", "the file is empty",
                          "see search_spaces/ for complete examples")
    if not isinstance(data, dict):
        raise ConfigError(source, "", f"expected a mapping at the top, got {type(data).__name__}",
                          "start with `name:`, `trainable:`, `metric:` ...")
    data.setdefault("name", Path(path).stem)
    return spec_from_dict(apply_overrides(data, overrides or [], source), source)


def spec_from_dict(data: dict[str, Any], source: str = "<spec>") -> Spec:
    """Validate an already-parsed mapping into a Spec."""
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        raise config_error(source, exc) from None
