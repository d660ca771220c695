"""A stand-in container runtime for the test cluster: Apptainer is not in this machine's
package sources.

`install(bin_dir)` puts `apptainer` and `singularity` (the script apptainer-standin.sh next to
this module) in a folder for the jobs' PATH; `make_image(folder, held)` makes an "image": a
folder that names the host paths the image holds. Inside, a path the image does not hold and
no bind brings in is missing, as under Apptainer, and so are Slurm's commands.

What an image holds here is the host's own OS and the test run's Python environment (the
same files a site's image would have its own copies of): building a separate root file
system with its own Python, Ray and torch would cost CI minutes without changing what hpo
must get right (which paths it needs bound, where srun runs).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

SCRIPT = Path(__file__).with_name("apptainer-standin.sh")
# The OS of the image (/bin, /lib, ... are links into /usr on Debian and are kept as links)
OS_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc")


def install(bin_dir: Path) -> Path:
    """`apptainer` and `singularity` in bin_dir (made if missing); returns bin_dir."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("apptainer", "singularity"):
        target = bin_dir / name
        shutil.copyfile(SCRIPT, target)
        target.chmod(0o755)
    return bin_dir


def python_paths() -> list[str]:
    """This test run's Python: its venv, the interpreter it is built on, and hpo's source
    (an editable install points there), as an image's venv would hold them."""
    import hpo

    paths = {sys.prefix, os.path.realpath(sys.base_prefix),
             str(Path(hpo.__file__).resolve().parent.parent)}
    return sorted(paths)


def make_image(folder: Path, held: Iterable[str] = ()) -> Path:
    """An image folder holding the OS, this Python environment and `held`; returns it."""
    (folder / ".root").mkdir(parents=True, exist_ok=True)
    paths = [p for p in (*OS_PATHS, *python_paths(), *held) if os.path.lexists(p)]
    (folder / ".standin-image").write_text("".join(f"{p}\n" for p in dict.fromkeys(paths)))
    return folder
