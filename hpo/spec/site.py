"""Site profiles: the `slurm:` keys of one machine, built in (hpo/spec/sites/NAME.yaml) or in a
file passed with `--site FILE`. A file may start from a built-in with `base: NAME`.

The values of each built-in, with their sources, are in slurm/README.md.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from hpo.errors import ConfigError
from hpo.spec._yaml import parse_yaml

_SITES = resources.files("hpo.spec") / "sites"


def builtin_sites() -> list[str]:
    """The names `--site` accepts besides a file, e.g. ['jureca-dc', 'juwels-booster', ...]."""
    return sorted(entry.name.removesuffix(".yaml") for entry in _SITES.iterdir()
                  if entry.name.endswith(".yaml"))


def site_argument(site: str) -> str:
    """What `hpo slurm run` inside the job gets: a built-in's name, or the file's full path."""
    path = Path(site)
    return str(path.resolve()) if path.is_file() else site


def site_layers(site: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """(source, raw slurm keys) of a site, its base first; `base:` itself is removed."""
    path = Path(site)
    if path.is_file():
        source, text = str(path), _read(path)
    elif _looks_like_a_name(str(site)):
        source, text = _builtin(str(site), "--site", "")
    else:
        raise ConfigError(str(site), "", "cannot read the site file (no such file)",
                          f"check the --site path, or name a built-in: {_listing()}")
    raw = parse_yaml(text, source)
    if not isinstance(raw, dict):
        raise ConfigError(source, "", "expected slurm keys (key: value)",
                          "e.g. partition: booster")
    base = raw.pop("base", None)
    if base is None:
        return [(source, raw)]
    if not isinstance(base, str) or base not in builtin_sites():
        raise ConfigError(source, "base", f"unknown built-in site profile {base!r}",
                          f"name one of {_listing()}")
    base_source, base_text = _builtin(base, source, "base")
    return [(base_source, parse_yaml(base_text, base_source)), (source, raw)]


def _looks_like_a_name(site: str) -> bool:
    # A bare word (no folder, no .yaml) is read as a built-in's name, not a missing file.
    return "/" not in site and not site.endswith((".yaml", ".yml"))


def _builtin(name: str, source: str, path: str) -> tuple[str, str]:
    if name not in builtin_sites():
        raise ConfigError(source, path, f"unknown site profile {name!r}",
                          f"built-ins: {_listing()}; or pass a site file (YAML with slurm keys)")
    return f"site {name}", (_SITES / f"{name}.yaml").read_text()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read the site file ({exc.strerror})",
                          "check the --site path") from None


def _listing() -> str:
    return ", ".join(builtin_sites())
