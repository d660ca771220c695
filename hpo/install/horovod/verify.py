"""After installing: does `import horovod.torch` work, with the planned parts, and one NCCL?

Runs in a fresh interpreter of this Python (the installer's own has torch loaded already).
"""

from __future__ import annotations

import json
import subprocess
import sys

from hpo.install.horovod.build import StepFailed
from hpo.install.horovod.nccl import library_version_of, version_from_code
from hpo.install.horovod.toolchain import BuildPlan

# What the new interpreter reports: versions, parts built, and every libnccl file it mapped.
_CODE = """
import json, re, horovod, horovod.torch as hvd
maps = open("/proc/self/maps").read()
print(json.dumps({"version": horovod.__version__, "gloo": bool(hvd.gloo_built()),
                  "nccl": int(hvd.nccl_built()), "rocm": bool(hvd.rocm_built()),
                  "nccl_files": sorted(set(re.findall(r"(/\\S*/libnccl\\.so[.\\d]*)$", maps,
                                                      re.MULTILINE)))}))
"""


def verify(plan: BuildPlan) -> str:
    """One phrase naming what was installed; StepFailed when a planned part is missing."""
    run = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise StepFailed(f"import horovod.torch failed after installing: {last}")
    found = json.loads(run.stdout.strip().splitlines()[-1])
    parts = ["gloo"] * found["gloo"] + ["rocm"] * found["rocm"]
    if found["nccl"]:
        parts.append(f"nccl {version_from_code(found['nccl'])}")
    if not found["gloo"] or ("HOROVOD_GPU_OPERATIONS" in plan.env and not found["nccl"]):
        raise StepFailed(f"Horovod {found['version']} installed without a planned part "
                         f"(has: {parts})")
    mixed = one_nccl(found["nccl"], found["nccl_files"])
    if mixed:
        raise StepFailed(mixed)
    return f"horovod {found['version']} ({', '.join(parts)})"


def one_nccl(built: int, files: list[str]) -> str | None:
    """Why the NCCL in use is not one NCCL (two libraries mapped, or a header of another
    version than the library), or None."""
    if not built:
        return None
    if len(files) > 1:
        return f"two NCCL libraries in one process: {', '.join(files)}"
    library = library_version_of(files[0]) if files else None
    if library and library != version_from_code(built):
        return (f"Horovod was built with nccl.h {version_from_code(built)} but loads NCCL "
                f"{library} ({files[0]}): rebuild with --rebuild")
    return None
