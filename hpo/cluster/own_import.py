"""The trials import the hpo that runs the study, whatever the working folder holds.

Ray puts the driver's working folder first on each worker's sys.path (so that the trainable's
own modules resolve there). A folder named `hpo` there (a clone of the project, an empty
`mkdir hpo`) is then a namespace package `hpo`, which Python's path finder returns before an
editable install's finder is asked: every trial failed with "module 'hpo' has no attribute
'report'". A regular install is found on the path and wins over a namespace folder; an
editable one is not, so its root goes on the workers' PYTHONPATH (after the working folder,
which still serves the trainable's imports: a regular package anywhere on the path wins over
a namespace folder). The processes hpo starts by module name (`python -P -m hpo...`: the fork
server, a node's `ray start`) leave the working folder off their path and get the same root. A
`./hpo` that is a package (or an `hpo.py`) and not this hpo would
replace it outright in every worker started fresh: that is refused in one line.
"""

from __future__ import annotations

import importlib.machinery
import os
import site
from pathlib import Path

from hpo.errors import ConfigError

PYTHONPATH = "PYTHONPATH"


def own_package() -> Path:
    """The folder of the hpo package this process runs."""
    return Path(__file__).resolve().parents[1]


def _workers_path(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """Where a fresh worker looks, besides the working folder and Ray's own: its PYTHONPATH
    and the interpreter's site-packages."""
    extra = [p for p in environ.get(PYTHONPATH, "").split(os.pathsep) if p]
    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    return [*extra, *site.getsitepackages(), *user]


def found_on_path(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Whether a fresh worker's path finder finds this hpo as a regular package (so that a
    namespace folder `./hpo` cannot shadow it)."""
    spec = importlib.machinery.PathFinder.find_spec(
        "hpo", _workers_path(os.environ if environ is None else environ))
    origin = getattr(spec, "origin", None)
    return origin is not None and Path(origin).resolve().parent == own_package()


def workers_env(environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, str]:
    """What to add to the environment Ray's workers inherit so that they import this hpo:
    {} where they find it already, else PYTHONPATH with this hpo's root last."""
    environ = os.environ if environ is None else environ
    if found_on_path(environ):
        return {}
    old = environ.get(PYTHONPATH, "")
    root = str(own_package().parent)
    return {PYTHONPATH: os.pathsep.join([p for p in (old, root) if p])}


def check_working_folder(source: str, folder: Path | None = None) -> None:
    """Refuse a working folder whose `hpo` would replace this hpo in the trials."""
    folder = Path.cwd() if folder is None else folder
    package, module = folder / "hpo" / "__init__.py", folder / "hpo.py"
    shadows = [f"./{path.relative_to(folder).parts[0]}" for path in (package, module)
               if path.is_file() and path.resolve().parent != own_package()]
    if shadows:
        raise ConfigError(source, "trainable", f"{shadows[0]} in the working folder is a Python "
                          f"module named hpo: the trials would import it instead of the hpo "
                          f"that runs them ({own_package()})",
                          f"rename {shadows[0]}, or run from another folder")
