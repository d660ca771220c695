"""`hpo doctor --site NAME`: the profile's modules, loaded one by one in a clean login shell
(a stub Lmod `module` in a temporary HOME's .bash_profile stands in for the site's), each
failure named with `module spider`'s suggestion; and on AMD GPUs whether RCCL finds its
aws-ofi-rccl plugin (NCCL_NET_PLUGIN or LD_LIBRARY_PATH), the TCP fallback named if not."""

from __future__ import annotations

from pathlib import Path

import pytest
from calls import cli_invoke

from hpo.cli.doctor_site import load_modules, module_rows, rccl_rows, site_rows

# A login profile with a stand-in for Lmod's `module`: some modules load, the rest fail as
# Lmod's do (status 1), and spider knows the Python versions.
STUB_PROFILE = r"""
module() {
  case "$1" in
    load) shift
      for m in "$@"; do
        case "$m" in
          Stages/2026|GCCcore/14.3.0|CUDA/13|Python/3.13.5) echo "$m" >> "$HOME/loaded" ;;
          *) echo "Lmod has detected the following error: unknown module \"$m\"" >&2
             return 1 ;;
        esac
      done ;;
    spider)
      case "$2" in
        Python) printf -- '-----\n  Python:\n-----\n     Versions:\n' >&2
                printf -- '        Python/3.12.3\n        Python/3.13.5\n' >&2 ;;
        *) echo "Lmod has detected the following error:  Unable to find: \"$2\"." >&2
           return 1 ;;
      esac ;;
  esac
}
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A HOME whose login profile defines the stub. Lmod's init sets BASH_ENV, which bash
    reads after the login files (a machine with Lmod would redefine `module` then): the
    profile points BASH_ENV at the stub too."""
    (tmp_path / "module-stub.sh").write_text(STUB_PROFILE)
    (tmp_path / ".bash_profile").write_text(
        '. "$HOME/module-stub.sh"\nexport BASH_ENV="$HOME/module-stub.sh"\n')
    return tmp_path


def test_the_profiles_modules_all_load(home: Path) -> None:
    modules = ["Stages/2026", "GCCcore/14.3.0", "Python/3.13.5", "CUDA/13"]
    rows = load_modules(modules, env={"HOME": str(home)})
    assert rows == [("modules", "all 4 load in a clean login shell: "
                     "Stages/2026 GCCcore/14.3.0 Python/3.13.5 CUDA/13", True)]
    assert (home / "loaded").read_text().split() == modules  # in order, one at a time


def test_each_module_that_does_not_load_is_named_with_spiders_suggestion(home: Path) -> None:
    rows = load_modules(["Stages/2026", "Python/3.14.0", "Pythn", "CUDA/13"],
                        env={"HOME": str(home)})
    assert [(what, fine) for what, _, fine in rows] == [
        ("module Python/3.14.0", False), ("module Pythn", False)]
    assert "module spider lists Python/3.12.3, Python/3.13.5" in rows[0][1]
    assert 'module spider Pythn: Lmod has detected the following error:  Unable to find: ' \
        '"Pythn".' in rows[1][1]
    assert all("Hint:" in finding and "\n" not in finding for _, finding, _ in rows)
    # the modules after a failure were still tried
    assert (home / "loaded").read_text().split() == ["Stages/2026", "CUDA/13"]


def test_the_login_shell_is_clean(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the caller's environment (its modules, venv, a `module` it exported) leaks
    into the check: only HOME and the like pass. Without the stub, the login shell has this
    machine's own `module` (Lmod without site modules) or none: either way nothing loads."""
    monkeypatch.setenv("BASH_FUNC_module%%", "() {  return 0\n}")  # would load anything
    monkeypatch.setenv("HOME", str(home.parent / "no-such-home"))
    rows = load_modules(["Stages/2026"])  # this process's environment, minus all but HOME
    assert len(rows) == 1 and rows[0][2] is False, rows
    assert ("no `module` command in a login shell" in rows[0][1]
            or rows[0][0] == "module Stages/2026"), rows


@pytest.mark.parametrize(("output", "expected"), [
    ("", "the login shell ended before loading (exit 1)"),
    ("hpo-nomodule\n", "no `module` command"),
])
def test_a_shell_without_module_or_output_is_one_no_row(output: str, expected: str) -> None:
    rows = module_rows(["A"], output, returncode=1)
    assert len(rows) == 1 and rows[0][2] is False and expected in rows[0][1]


def test_rccl_finds_aws_ofi_rccl_on_the_library_path(tmp_path: Path) -> None:
    (tmp_path / "librccl-net.so").write_text("")
    rows = rccl_rows({"LD_LIBRARY_PATH": f"/nowhere:{tmp_path}"})
    assert rows == [("rccl net plugin", f"{tmp_path / 'librccl-net.so'}: RCCL uses libfabric "
                     "(aws-ofi-rccl) over Slingshot", True)]


def test_nccl_net_plugin_names_the_library(tmp_path: Path) -> None:
    plugin = tmp_path / "librccl-net-ofi.so"
    plugin.write_text("")
    assert rccl_rows({"NCCL_NET_PLUGIN": str(plugin)})[0][2] is True
    assert rccl_rows({"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": str(tmp_path)})[0][2]


@pytest.mark.parametrize(("env", "where"), [
    ({"LD_LIBRARY_PATH": "/opt/rocm/lib", "NCCL_SOCKET_IFNAME": "hsn0,hsn1"},
     "no librccl-net.so on LD_LIBRARY_PATH"),
    ({"NCCL_NET_PLUGIN": "/gone/librccl-net.so"}, "NCCL_NET_PLUGIN=/gone/librccl-net.so"),
    ({"NCCL_NET_PLUGIN": "none"}, "NCCL_NET_PLUGIN=none"),
])
def test_without_the_plugin_the_tcp_fallback_is_named(env: dict[str, str], where: str) -> None:
    (what, finding, fine), = rccl_rows(env)
    assert not fine and what == "rccl net plugin" and finding.startswith(where)
    assert "falls back to TCP sockets" in finding and "\n" not in finding


def test_lumi_checks_its_modules_and_rccl_and_jsc_only_its_modules() -> None:
    seen: list[list[str]] = []

    def load(modules: list[str]) -> list[tuple[str, str, bool]]:
        seen.append(list(modules))
        return [("modules", "stub", True)]

    lumi = site_rows("lumi-g", env={"LD_LIBRARY_PATH": ""}, load=load)
    assert seen == [["LUMI/25.03", "partition/G", "cray-python"]]
    assert [what for what, _, _ in lumi] == ["modules", "rccl net plugin"]
    assert "NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3" in lumi[1][1]  # the profile's, named
    jsc = site_rows("juwels-booster", env={}, load=load)
    assert [what for what, _, _ in jsc] == ["modules"]


def test_an_unknown_site_is_one_line_before_any_check() -> None:
    code, stdout, stderr = cli_invoke(["doctor", "--site", "lumi"])
    line = stderr.strip()
    assert code == 2 and "\n" not in line and "'lumi'" in line and "Hint:" in line, stderr
    assert stdout == ""


@pytest.mark.parametrize(("site", "expected"), [("juwels-booster", (None, "i")),
                                                ("lumi-g", ("hsn0", ""))])
def test_the_address_check_uses_the_sites_network(site: str, expected: tuple,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With --site, the Ray address is found as the job would: JSC's `<node>i` name, LUMI's
    hsn0; an --interface given on the command line still wins."""
    import importlib

    from hpo.cli import doctor

    node_report = importlib.import_module("hpo.cluster.node_report")  # the module, not the
    # function hpo.cluster re-exports under the same name

    seen: list[tuple[object, str]] = []

    def address(interface: str | None, hostname: str | None = None, suffix: str = "") -> str:
        seen.append((interface, suffix))
        return "10.0.0.1"

    monkeypatch.setattr(node_report, "node_address", address)
    doctor._cluster(None, site)
    doctor._cluster("ib0", site)
    assert seen == [expected, ("ib0", expected[1])]
