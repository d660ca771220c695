"""What the fork server does once for all its forks
(hpo/ray_adapters/fast_start/fork_server_warm.py): the
worker's main script compiled ahead and run as runpy runs it; the regular expressions
Ray's worker compiles, already in the cache a fork inherits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from hpo.driver.backends.ray_session import embedded_ray

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="forks need Linux's pidfds"),
              pytest.mark.usefixtures("speed_patches_on")]  # tests a speed patch itself

# In a fresh interpreter: prepare with SCRIPT, then rewrite SCRIPT, then run it as __main__;
# the script writes what it saw to OUT.
_DRIVER = """
import sys
from pathlib import Path
from hpo.ray_adapters.fast_start import fork_server_warm
script, out, ahead = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
if ahead:
    fork_server_warm.prepare_script(str(script))
script.write_text(script.read_text().replace("'first'", "'rewritten'"))
sys.argv = [str(script), "--flag"]
fork_server_warm.run_as_main(str(script))
"""
_SCRIPT = """
import json, sys
def annotated(x: int) -> None:
    pass
json.dump({"version": 'first', "name": __name__, "file": __file__, "argv": sys.argv,
           "main": sys.modules["__main__"].__dict__ is globals(),
           "cached": __cached__, "package": __package__,
           "annotation": repr(annotated.__annotations__["x"])}, open(%r, "w"))
"""


@pytest.mark.parametrize("ahead", [True, False])
def test_the_worker_script_runs_as_main_from_the_code_compiled_ahead(tmp_path: Path,
                                                                     ahead: bool) -> None:
    script, out = tmp_path / "worker_main.py", tmp_path / "seen.json"
    script.write_text(_SCRIPT % str(out))
    subprocess.run([sys.executable, "-c", _DRIVER, str(script), str(out), str(int(ahead))],
                   check=True, timeout=120)
    seen = json.loads(out.read_text())
    # compiled ahead: the code as it was at prepare; else runpy reads the file as it is now
    assert seen.pop("version") == ("first" if ahead else "rewritten")
    assert seen == {"name": "__main__", "file": str(script), "argv": [str(script), "--flag"],
                    "main": True, "cached": None, "package": "",
                    "annotation": "<class 'int'>"}  # not the compiling module's __future__


def test_prepare_puts_rays_accelerator_patterns_in_the_regex_cache() -> None:
    """After prepare, matching a resource name as Ray's worker does compiles nothing."""
    program = """
import re, re._compiler
from ray._private.accelerators import get_all_accelerator_resource_names
from hpo.ray_adapters.fast_start import fork_server_warm
fork_server_warm.prepare()
def refuse(*args, **kwargs):
    raise AssertionError("compiled again")
re._compiler.compile = refuse
names = get_all_accelerator_resource_names()
assert len(names) >= 2, names
for name in names:
    re.match(f"^{name}_group_[0-9A-Za-z]+$", f"{name}_group_abc123")
print("ok", len(names))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")


def test_a_pattern_ray_no_longer_matches_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpo.ray_adapters.fast_start import fork_server_warm

    assert fork_server_warm.missing() == []
    monkeypatch.setattr(fork_server_warm, "_ACCELERATOR_PATTERN", "^{}_bundle_[0-9]+$")
    assert fork_server_warm.missing() == [
        'RuntimeContext.get_accelerator_ids matches f"^{accelerator_resource_name}_bundle_[0-9]+$"']


@ray.remote(num_cpus=1)
class MainScript:
    def path(self) -> tuple[str, str, str, bool]:
        from hpo.ray_adapters.fast_start import fork_server_warm

        parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ")
        return (sys.argv[0], sys.modules["__main__"].__file__, parent.decode(),
                sys.argv[0] in fork_server_warm._compiled)


def test_a_forked_workers_main_is_the_script_the_server_compiled(tmp_path: Path) -> None:
    """The server compiles Ray's default_worker.py by its module's path: the path the raylet
    gives each worker, so that every fork runs the code compiled ahead."""
    from ray._private.workers import default_worker

    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        argv0, main_file, parent, compiled_ahead = ray.get(MainScript.remote().path.remote())
    assert "hpo.ray_adapters.fast_start.fork_server_process" in parent  # a fork
    assert argv0 == main_file == default_worker.__file__
    assert compiled_ahead  # the server's prepare ran (a failure there is only printed)
