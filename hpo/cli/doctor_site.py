"""`hpo doctor --site NAME`: does this machine have what the site profile names?

- the profile's modules, loaded one by one in a clean login shell (`bash -l` with an empty
  environment but HOME and USER, as a new login has): each one that does not load is named,
  with what `module spider` suggests for its name;
- on AMD GPUs (LUMI-G), RCCL's network plugin (aws-ofi-rccl, `librccl-net.so`): found
  through NCCL_NET_PLUGIN or the library path, RCCL talks libfabric over Slingshot; not found,
  it falls back to TCP sockets.

The shell's output is judged by pure functions (module_rows, rccl_rows), tested without a site.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

Row = tuple[str, str, bool]  # (what, finding, fine)
RCCL_PLUGIN = "librccl-net.so"  # the name RCCL looks for when NCCL_NET_PLUGIN is unset
# What a fresh login keeps: nothing of this shell's modules, venv or PATH.
_LOGIN_KEEP = ("HOME", "USER", "LOGNAME", "LANG", "TERM")
_TIMEOUT_S = 120


def module_script(modules: Sequence[str]) -> str:
    """Bash that loads each module in turn and prints `hpo-ok I`, or `hpo-no I` and what
    `module spider` says of its name (each line as `hpo-spider I ...`)."""
    lines = ['type module >/dev/null 2>&1 || { echo hpo-nomodule; exit 0; }']
    for i, name in enumerate(modules):
        base = shlex.quote(name.split("/")[0])
        lines.append(f"if module load {shlex.quote(name)} >/dev/null 2>&1; then echo hpo-ok {i}; "
                     f"else echo hpo-no {i}; module spider {base} 2>&1 | "
                     f"sed 's/^/hpo-spider {i} /'; fi")
    return "\n".join(lines) + "\n"


def _suggestion(name: str, spider: list[str]) -> str:
    """The versions `module spider` lists for the module's name, else its first message."""
    base = name.split("/")[0]
    versions = [line.strip() for line in spider if line.strip().startswith(base + "/")]
    if versions:
        return "module spider lists " + ", ".join(dict.fromkeys(versions))
    text = [line.strip() for line in spider if line.strip().strip("-")]
    first = text[0] if text else "nothing"
    return f"module spider {base}: {first[:160]}"


def module_rows(modules: Sequence[str], output: str, returncode: int = 0) -> list[Row]:
    """Rows for the output of module_script: one for all that loaded, one per failure."""
    if not modules:
        return [("modules", "the profile loads none", True)]
    lines = output.splitlines()
    if "hpo-nomodule" in lines:
        return [("modules", "no `module` command in a login shell here. Hint: run "
                 "`hpo doctor --site` on the site's login node", False)]
    loaded = {int(line.split()[1]) for line in lines if line.startswith("hpo-ok ")}
    failed = {int(line.split()[1]) for line in lines if line.startswith("hpo-no ")}
    if not loaded | failed:
        return [("modules", f"the login shell ended before loading (exit {returncode})",
                 False)]
    rows: list[Row] = []
    for i in sorted(failed):
        spider = [line.split(" ", 2)[2] if line.count(" ") >= 2 else ""
                  for line in lines if line.startswith(f"hpo-spider {i} ")]
        rows.append((f"module {modules[i]}", f"does not load in a clean login shell; "
                     f"{_suggestion(modules[i], spider)}. Hint: set slurm.modules in a site "
                     f"file with `base:` to what loads", False))
    if not failed:
        rows.append(("modules", f"all {len(modules)} load in a clean login shell: "
                     f"{' '.join(modules)}", True))
    return rows


def load_modules(modules: Sequence[str], env: Mapping[str, str] | None = None,
                 run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
                 ) -> list[Row]:
    """Run module_script in `env -i ... bash -l` and judge its output."""
    source = os.environ if env is None else env
    keep = [f"{key}={source[key]}" for key in _LOGIN_KEEP if key in source]
    try:
        done = run(["env", "-i", *keep, "bash", "-lc", module_script(modules)],
                   capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [("modules", f"could not run a login shell: {exc}", False)]
    return module_rows(modules, done.stdout, done.returncode)


def _plugin_names(setting: str | None) -> list[str]:
    """The library names RCCL tries: NCCL_NET_PLUGIN's (a name X is librccl-net-X.so, a
    .so name or path as given), else librccl-net.so."""
    if not setting:
        return [RCCL_PLUGIN]
    if setting.endswith(".so") or "/" in setting:
        return [setting]
    return [f"librccl-net-{setting}.so", f"libnccl-net-{setting}.so"]


def rccl_rows(env: Mapping[str, str],
              exists: Callable[[Path], bool] = Path.is_file) -> list[Row]:
    """Whether RCCL will find aws-ofi-rccl: NCCL_NET_PLUGIN, else LD_LIBRARY_PATH."""
    setting = env.get("NCCL_NET_PLUGIN")
    fallback = (f"RCCL falls back to TCP sockets (NCCL_SOCKET_IFNAME="
                f"{env.get('NCCL_SOCKET_IFNAME', 'unset')}), far slower between nodes")
    if setting == "none":
        return [("rccl net plugin", f"NCCL_NET_PLUGIN=none: {fallback}", False)]
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    for name in _plugin_names(setting):
        candidates = [Path(name)] if "/" in name else [Path(d) / name for d in dirs]
        found = next((path for path in candidates if exists(path)), None)
        if found is not None:
            return [("rccl net plugin", f"{found}: RCCL uses libfabric (aws-ofi-rccl) over "
                     "Slingshot", True)]
    where = f"NCCL_NET_PLUGIN={setting}" if setting else f"no {RCCL_PLUGIN} on LD_LIBRARY_PATH"
    return [("rccl net plugin", f"{where}: {fallback}. Hint: load the module that provides "
             "aws-ofi-rccl (module spider aws-ofi-rccl) or run in LUMI's AI container, which "
             "ships it", False)]


def site_rows(site: str, env: Mapping[str, str] | None = None,
              load: Callable[[Sequence[str]], list[Row]] = load_modules) -> list[Row]:
    """The profile's modules, and RCCL's plugin where its GPUs are AMD's."""
    from hpo.spec.slurm import SlurmSettings, merged_settings

    settings = merged_settings(SlurmSettings(), site, {}, f"--site {site}")
    rows = load(settings.modules)
    if settings.gpu_vendor == "amd":
        rows += rccl_rows({**(os.environ if env is None else env), **settings.env})
    return rows
