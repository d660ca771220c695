"""Built-in site profiles (`--site juwels-booster|jureca-dc|lumi-g`): a golden sbatch script
each, site files built on them (`base:`), the order in which settings win, bad input ending in
one line and exit 2, and the site's hostname suffix reaching the address Ray uses."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from calls import cli_invoke
from golden_files import check_golden, with_golden_venv

from hpo.cluster.network import node_address, suffixed
from hpo.errors import SlurmEnvironmentError
from hpo.spec.site import builtin_sites, site_layers
from hpo.spec.slurm import SlurmSettings

ROOT = Path(__file__).resolve().parents[2]
SITES = ["juwels-booster", "jureca-dc", "lumi-g"]
SPACE = "tests/cluster/golden/site-space.yaml"
REGENERATE = ("HPO_REGENERATE_GOLDEN=1 python -m pytest "
              "tests/cluster/test_slurm_sites.py::test_site_renders_its_golden_file")

GOOD = """\
name: exp
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
"""


def golden_args(site: str, workdir: str = "/p/project/hpo") -> list[str]:
    return ["slurm", "render", SPACE, "--site", site, "--workdir", workdir,
            "--storage", "/p/scratch/hpo/results"]


_invoke = cli_invoke


def test_the_built_ins_are_the_three_sites() -> None:
    assert builtin_sites() == sorted(SITES)


@pytest.mark.parametrize("site", SITES)
def test_site_renders_its_golden_file(site: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    golden = Path(f"tests/cluster/golden/site-{site}.sbatch")
    code, text, stderr = _invoke(golden_args(site))
    assert code == 0, stderr
    check_golden(golden, with_golden_venv(text, ROOT), REGENERATE)


@pytest.mark.parametrize(("site", "lines"), [
    ("juwels-booster", ["#SBATCH --gres=gpu:4", "#SBATCH --cpus-per-task=96",
                        "#SBATCH --partition=booster",
                        "module load Stages/2026 GCCcore/14.3.0 Python/3.13.5 CUDA/13"]),
    ("jureca-dc", ["#SBATCH --gres=gpu:4", "#SBATCH --cpus-per-task=256",
                   "#SBATCH --partition=dc-gpu"]),
    ("lumi-g", ["#SBATCH --gpus-per-node=8", "#SBATCH --cpus-per-task=56",
                "#SBATCH --mem=480G", "#SBATCH --partition=standard-g",
                "module load LUMI/25.03 partition/G cray-python",
                'export NCCL_SOCKET_IFNAME="hsn0,hsn1,hsn2,hsn3"', 'export CXI_FORK_SAFE="1"',
                'export CXI_FORK_SAFE_HP="1"', 'export FI_CXI_DISABLE_CQ_HUGETLB="1"']),
])
def test_golden_site_scripts_hold_the_profile(site: str, lines: list[str]) -> None:
    text = (ROOT / f"tests/cluster/golden/site-{site}.sbatch").read_text()
    for line in lines:
        assert line in text, line
    assert f"--site {site}" in text  # `hpo slurm run` in the job reads the same profile
    assert "NCCL_NET_GDR_LEVEL" not in text  # PHB is reported to hang on LUMI: left unset


def test_lumi_leaves_miopen_to_the_node_process() -> None:
    # Each node's process sets MIOpen's caches per job unless the environment already does:
    # a profile value would override that with one path for every job.
    env = SlurmSettings.model_validate(site_layers("lumi-g")[0][1]).env
    assert env == {"NCCL_SOCKET_IFNAME": "hsn0,hsn1,hsn2,hsn3", "CXI_FORK_SAFE": "1",
                   "CXI_FORK_SAFE_HP": "1", "FI_CXI_DISABLE_CQ_HUGETLB": "1"}
    assert "FI_MR_CACHE_MONITOR" not in env  # a container's setting, not a native venv's


@pytest.mark.parametrize(("site", "cpus"), [("juwels-booster", 96), ("jureca-dc", 256),
                                            ("lumi-g", 56)])
def test_profiles_count_cpus_as_the_sites_slurm_does(site: str, cpus: int) -> None:
    """JSC's Slurm counts hardware threads (SMT 2): 96 and 256 CPUs a node, OS CPU ids 0 to
    node_cpus - 1; LUMI-G's 56 cores (8 of its 64 reserved: ids up to 63). At JSC a GPU's CPU
    list holds its cores and their SMT siblings."""
    settings = SlurmSettings.model_validate(site_layers(site)[0][1])
    assert settings.node_cpus == cpus and settings.cpus_per_task == cpus
    from hpo.cluster.gpu_cores import cpu_list

    lists = [cpu_list(cpus_near) for cpus_near in settings.gpu_cores]
    assert len(lists) == settings.node_gpus
    assert all(max(near) < (64 if site == "lumi-g" else cpus) for near in lists)
    assert len({cpu for near in lists for cpu in near}) == sum(len(near) for near in lists)
    if site != "lumi-g":  # JSC: each GPU's NUMA domain, both threads of each core
        cores = cpus // 2
        for near in lists:
            assert {cpu + cores for cpu in near if cpu < cores} == {
                cpu for cpu in near if cpu >= cores}


def test_jureca_dc_gpus_sit_on_numa_domains_3_1_7_5() -> None:
    settings = SlurmSettings.model_validate(site_layers("jureca-dc")[0][1])
    from hpo.cluster.gpu_cores import cpu_list

    domains = [min(cpu_list(near)) // 16 for near in settings.gpu_cores]
    assert domains == [3, 1, 7, 5]
    assert [len(cpu_list(near)) for near in settings.gpu_cores] == [32] * 4


def test_jscs_own_96_cpus_render_on_juwels_booster(tmp_path: Path) -> None:
    space = tmp_path / "exp.yaml"
    space.write_text(GOOD)
    code, text, stderr = _invoke(["slurm", "render", str(space), "--site", "juwels-booster",
                                  "--cpus-per-node", "96", "-N", "2", "-t", "01:00:00",
                                  "--workdir", str(tmp_path)])
    assert code == 0, stderr
    assert "#SBATCH --cpus-per-task=96" in text and "#SBATCH --nodes=2" in text


@pytest.mark.parametrize(("args", "line"), [
    ([], "#SBATCH --mem=480G"),  # standard-g: whole nodes
    (["-p", "small-g", "--gpus-per-node", "2"], "#SBATCH --mem-per-gpu=60G"),
    (["-p", "dev-g", "--gpus-per-node", "1", "-t", "00:30:00"], "#SBATCH --mem-per-gpu=60G"),
])
def test_lumi_asks_the_memory_the_ai_guide_asks(args: list[str], line: str) -> None:
    code, text, stderr = _invoke([*golden_args("lumi-g", str(ROOT)), *args])
    assert code == 0, stderr
    memory = [row for row in text.splitlines() if row.startswith("#SBATCH --mem")]
    assert memory == [line]


def test_the_jobs_own_memory_wins_over_the_partitions(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("base: lumi-g\nmem: '0'\n")
    code, text, stderr = _invoke([*golden_args(str(site), str(ROOT))])
    assert code == 0, stderr
    assert [row for row in text.splitlines() if row.startswith("#SBATCH --mem")] == [
        "#SBATCH --mem=0"]
    site.write_text("base: lumi-g\nmem_per_gpu: 30G\n")
    code, text, stderr = _invoke([*golden_args(str(site), str(ROOT))])
    assert code == 0 and "#SBATCH --mem-per-gpu=30G" in text and "--mem=480G" not in text
    # a CPU-only job on a shared partition asks for no per-GPU memory
    code, text, _ = _invoke([*golden_args("lumi-g", str(ROOT)), "-p", "small-g",
                             "--gpus-per-node", "0", "--set", "resources.gpus_per_trial=0"])
    assert code == 0 and "#SBATCH --mem" not in text
    # JSC's profiles ask for none: their nodes are whole and exclusive
    code, text, _ = _invoke(golden_args("juwels-booster", str(ROOT)))
    assert code == 0 and "#SBATCH --mem" not in text


@pytest.mark.parametrize("site", SITES)
def test_jsc_sites_use_infiniband_names_and_lumi_its_slingshot_nic(site: str) -> None:
    settings = SlurmSettings.model_validate(site_layers(site)[0][1])
    if site == "lumi-g":
        assert (settings.interface, settings.hostname_suffix) == ("hsn0", "")
    else:
        assert (settings.interface, settings.hostname_suffix) == (None, "i")


def test_site_file_builds_on_a_built_in(tmp_path: Path) -> None:
    site, space = tmp_path / "site.yaml", tmp_path / "exp.yaml"
    site.write_text("base: jureca-dc\naccount: my-proj\nenv: {NCCL_DEBUG: WARN}\n")
    space.write_text(GOOD + "slurm: {env: {OMP_NUM_THREADS: '8'}}\n")
    code, text, stderr = _invoke(["slurm", "render", str(space), "--site", str(site)])
    assert code == 0, stderr
    for line in ("#SBATCH --partition=dc-gpu", "#SBATCH --gres=gpu:4",  # from the base
                 "#SBATCH --account=my-proj",  # from the file
                 'export NCCL_DEBUG="WARN"', 'export OMP_NUM_THREADS="8"'):  # env: merged
        assert line in text, line
    assert f"--site {site.resolve()}" in text


def test_precedence_built_in_then_site_file_then_yaml_then_command_line(
        tmp_path: Path) -> None:
    site, space = tmp_path / "site.yaml", tmp_path / "exp.yaml"
    site.write_text("base: lumi-g\npartition: small-g\naccount: site-acct\ntime: '03:00:00'\n"
                    "env: {NCCL_SOCKET_IFNAME: hsn0}\n")
    space.write_text(GOOD + "slurm: {account: yaml-acct, time: '04:00:00', "
                            "env: {NCCL_SOCKET_IFNAME: hsn1}}\n")
    code, text, stderr = _invoke(["slurm", "render", str(space), "--site", str(site),
                                  "--time", "05:00:00", "--gpus-per-node", "2"])
    assert code == 0, stderr
    assert "#SBATCH --partition=small-g" in text  # site file beats built-in
    assert "#SBATCH --account=yaml-acct" in text  # YAML beats site file
    assert "#SBATCH --time=05:00:00" in text  # command line beats all
    assert 'export NCCL_SOCKET_IFNAME="hsn1"' in text  # YAML's env beats the site's
    assert "#SBATCH --gpus-per-node=2" in text and "#SBATCH --cpus-per-task=14" in text


BAD = [  # (id, --site value or None for a file, site file text, command-line, path, value)
    ("unknown-built-in", "lumi", None, [], "--site", "'lumi'"),
    ("unknown-base", None, "base: juwels\n", [], "base", "'juwels'"),
    ("unknown-key-with-base", None, "base: lumi-g\npartiton: small-g\n", [], "partiton",
     "did you mean 'partition'"),
    ("more-gpus-than-a-node", "lumi-g", None, ["--gpus-per-node", "9"], "--gpus-per-node",
     "node_gpus (8)"),
    ("more-cpus-than-a-node", "juwels-booster", None, ["--cpus-per-node", "97"],
     "--cpus-per-node", "node_cpus is 96"),
    ("node-cores-is-node-cpus", None, "base: jureca-dc\nnode_cores: 128\n", [], "node_cores",
     "128"),
    ("bad-memory", None, "base: lumi-g\nmem: 480GB\n", [], "mem", "'480GB'"),
    ("two-memories", None, "mem: 4G\nmem_per_gpu: 1G\ngpus_per_node: 1\n", [], "mem_per_gpu",
     "4G"),
    ("memory-per-gpu-without-gpus", None, "mem_per_gpu: 60G\n", [], "slurm.mem_per_gpu",
     "60G"),
    ("bad-partition-memory", None, "partitions: {p: {mem_per_gpu: lots}}\n", [],
     "partitions.p.mem_per_gpu", "'lots'"),
    ("bad-gres-form", None, "gpu_option: gpu\n", [], "gpu_option", "'gpu'"),
    ("bad-suffix", None, "hostname_suffix: i.ib\n", [], "hostname_suffix", "'i.ib'"),
    ("bad-env-name", None, "env: {1NCCL: x}\n", [], "env.1NCCL", "'1NCCL'"),
    ("bad-env-value", None, "env: {NCCL_X: 'a\"b'}\n", [], "env.NCCL_X", "'a\"b'"),
]


@pytest.mark.parametrize(("site", "text", "options", "path", "value"),
                         [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_site_input_is_one_line(tmp_path: Path, site: str | None, text: str | None,
                                    options: list[str], path: str, value: str) -> None:
    space = tmp_path / "exp.yaml"
    space.write_text(GOOD)
    if site is None:
        (tmp_path / "site.yaml").write_text(text or "")
        site = str(tmp_path / "site.yaml")
    code, stdout, stderr = _invoke(["slurm", "render", str(space), "--site", site, *options])
    line = stderr.strip()
    assert code == 2 and "\n" not in line and "Traceback" not in stdout + stderr, stderr
    assert f"{path}: " in line and value in line and "Hint:" in line, line
    assert stdout == ""


def test_unknown_site_name_lists_the_built_ins(tmp_path: Path) -> None:
    space = tmp_path / "exp.yaml"
    space.write_text(GOOD)
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site", "juwels"])
    assert code == 2 and ", ".join(sorted(SITES)) in stderr, stderr


def test_missing_site_file_says_so(tmp_path: Path) -> None:
    space = tmp_path / "exp.yaml"
    space.write_text(GOOD)
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site",
                               str(tmp_path / "nope.yaml")])
    assert code == 2 and "cannot read the site file" in stderr and "lumi-g" in stderr


@pytest.mark.parametrize(("host", "suffix", "expected"), [
    ("jwb0001", "i", "jwb0001i"),
    ("jwb0001.juwels", "i", "jwb0001i.juwels"),
    ("jrc0712", "", "jrc0712"),
    ("nid005000", "-ib", "nid005000-ib"),
])
def test_suffixed_names_the_infiniband_host(host: str, suffix: str, expected: str) -> None:
    assert suffixed(host, suffix) == expected


def test_node_address_resolves_the_suffixed_name(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"jwb0001": "10.0.0.1", "jwb0001i": "10.13.0.1"}

    def resolve(host: str) -> str:
        if host not in table:
            raise OSError(host)
        return table[host]

    monkeypatch.setattr(socket, "gethostbyname", resolve)
    monkeypatch.setattr("hpo.cluster.network.is_local", lambda address: True)  # not here
    assert node_address(None, "jwb0001") == "10.0.0.1"
    assert node_address(None, "jwb0001", suffix="i") == "10.13.0.1"
    with pytest.raises(SlurmEnvironmentError, match="hostname_suffix"):
        node_address(None, "jwb0001", suffix="x")


def test_node_process_passes_the_job_configs_suffix_on(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The job dir's config.json carries the settings to each node's process.
    from hpo.cluster import node

    (tmp_path / node.CONFIG_FILE).write_text(
        '{"interface": null, "hostname_suffix": "i", "dashboard": false, "timeout": 1}')
    seen: list[tuple[object, str]] = []

    def address(interface: str | None, hostname: str | None = None, suffix: str = "") -> str:
        seen.append((interface, suffix))
        raise SlurmEnvironmentError("stop here")

    monkeypatch.setattr(node, "node_address", address)
    with pytest.raises(SlurmEnvironmentError, match="stop here"):
        node.start_args("head", tmp_path, {"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": "4"})
    assert seen == [(None, "i")]


def test_the_job_dir_hands_the_hostname_suffix_to_every_node(tmp_path: Path) -> None:
    """bootstrap writes the settings each node's `hpo` reads (node.py picks its address)."""
    import json

    from hpo.cluster import node
    from hpo.cluster.bootstrap import make_job_dir
    from hpo.spec.slurm import SlurmSettings

    job_dir = make_job_dir(str(tmp_path), "7", SlurmSettings(hostname_suffix="i"))
    assert json.loads((job_dir / node.CONFIG_FILE).read_text())["hostname_suffix"] == "i"


def test_a_rank_bigger_than_the_merged_node_share_is_refused(tmp_path: Path) -> None:
    """The YAML alone is fine; with the profile and --gpus-per-node 2 a 4-GPU rank cannot run."""
    space = tmp_path / "big-rank.yaml"
    space.write_text("name: x\ntrainable: trainables.digits:train\nmetric: a\nmode: max\n"
                     "distributed: {backend: ddp, workers: 2, gpus_per_worker: 4}\n")
    assert _invoke(["slurm", "render", str(space), "--site", "lumi-g"])[0] == 0
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site", "lumi-g",
                               "--gpus-per-node", "2"])
    assert code == 2 and len(stderr.strip().splitlines()) == 1
    assert "distributed.gpus_per_worker: one rank asks for 4 GPUs but a node has 2" in stderr


def test_a_trial_bigger_than_the_job_is_refused_at_render_only(tmp_path: Path) -> None:
    """Rendered before, and the job would have waited in the queue, then started nothing.
    Render only: the YAML alone is valid (its `slurm:` block may be overridden), and the job's
    own `hpo slurm run` does not get render's -N."""
    from hpo.cli.slurm import _settings
    from hpo.spec.load import load_spec

    space = tmp_path / "big.yaml"
    space.write_text("name: x\ntrainable: trainables.digits:train\nmetric: a\nmode: max\n"
                     "slurm: {gpus_per_node: 8}\n"
                     "distributed: {backend: ddp, workers: 16, gpus_per_worker: 1}\n")
    load_spec(space)  # valid as it is: -N 2 at render makes it fit
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site", "lumi-g", "-N", "1"])
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert ("distributed.workers: a trial has 16 ranks x 1 GPUs = 16, but the job has 8 (1 "
            "node(s) x 8): it would never start. Hint: lower workers, or ask for more nodes"
            ) in stderr
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site", "lumi-g", "-N", "2",
                               "--workdir", str(tmp_path)])
    assert code == 0 and "warning" not in stderr, stderr
    _settings(space, None, "lumi-g", {})  # what the job's `hpo slurm run` does: no -N there


def test_a_trial_with_more_cpus_than_the_job_asks_per_node_is_a_warning(tmp_path: Path) -> None:
    """A warning, not a refusal: Slurm may count hardware threads as CPUs."""
    space = tmp_path / "wide.yaml"
    space.write_text(GOOD + "resources: {cpus_per_trial: 64, gpus_per_trial: 1}\n")
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site", "lumi-g",
                               "--gpus-per-node", "2", "-p", "small-g",
                               "--workdir", str(tmp_path)])
    assert code == 0, stderr
    assert stderr.strip() == (
        "warning: resources.cpus_per_trial: one trial asks for 64 CPUs, but the job asks for "
        "14 per node (slurm.cpus_per_gpu 7 x gpus_per_node 2): it may never start. Hint: "
        "lower resources.cpus_per_trial, or ask for more CPUs per node (--cpus-per-node)")


def test_horovod_on_amd_gpus_is_refused_at_render_with_the_ddp_hint() -> None:
    """Horovod does not build on ROCm 6 (docs/install.md): the job would fail on LUMI-G."""
    space = "search_spaces/images-horovod-asha.yaml"
    gpu = ["--set", "distributed.gpus_per_worker=1"]  # on the CPU (Gloo) it may run
    assert _invoke(["slurm", "render", space, "--site", "lumi-g"])[0] == 0
    code, _, stderr = _invoke(["slurm", "render", space, "--site", "lumi-g", *gpu])
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert "distributed.backend: horovod cannot run on these AMD GPUs" in stderr
    assert "Hint: use distributed: {backend: ddp}" in stderr
    assert _invoke(["slurm", "render", space, "--site", "lumi-g", *gpu,
                    "--set", "distributed.backend=ddp"])[0] == 0
    assert _invoke(["slurm", "render", space, "--site", "juwels-booster", *gpu])[0] == 0


@pytest.mark.parametrize(("site", "args", "limit"), [
    ("lumi-g", ["--time", "2-00:00:01"], "2-00:00:00"),
    ("lumi-g", ["-p", "dev-g", "--time", "04:00:00"], "03:00:00"),
    ("juwels-booster", ["--time", "1-00:00:01"], "24:00:00"),
    ("jureca-dc", ["-p", "dc-gpu-devel", "--time", "03:00:00"], "02:00:00")])
def test_a_time_over_the_partitions_limit_is_refused(site: str, args: list[str],
                                                     limit: str) -> None:
    code, stdout, stderr = _invoke([*golden_args(site), *args])
    line = stderr.strip()
    assert code == 2 and "\n" not in line and stdout == "", stderr
    assert "--time: " in line and f"limit of {limit}" in line and "Hint:" in line, line


def test_a_partition_without_a_known_limit_takes_any_time() -> None:
    code, text, stderr = _invoke([*golden_args("lumi-g", str(ROOT)), "-p", "small-g",
                                  "--gpus-per-node", "2", "--time", "3-00:00:00"])
    assert code == 0 and "#SBATCH --time=3-00:00:00" in text, stderr
    assert "warning" not in stderr  # small-g shares nodes: billed per GCD
    code, _, stderr = _invoke([*golden_args("lumi-g"), "-p", "my-own", "--time", "9-00:00:00"])
    assert code == 0, stderr


def test_asking_for_part_of_a_whole_node_warns_in_one_line() -> None:
    code, text, stderr = _invoke([*golden_args("lumi-g", str(ROOT)), "--gpus-per-node", "4"])
    assert code == 0 and "#SBATCH --gpus-per-node=4" in text
    warning = stderr.strip()
    assert warning.startswith("warning: partition standard-g bills whole nodes") and (
        "4 of 8 GPUs" in warning and "\n" not in warning), warning
    code, _, stderr = _invoke(golden_args("lumi-g", str(ROOT)))
    assert code == 0 and "warning" not in stderr


def test_gpu_nodes_that_no_trial_uses_are_warned_about_in_one_line(tmp_path: Path) -> None:
    """A CPU-only YAML (every example's default) on a profile's GPU nodes: paid, and idle."""
    space = tmp_path / "cpu.yaml"
    space.write_text(GOOD + "search_space: {x: {grid: [1]}}\n")
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site", "juwels-booster",
                               "--workdir", str(tmp_path)])
    assert code == 0 and stderr.strip() == (
        "warning: the job asks for 4 GPUs per node, but no trial uses one "
        "(resources.gpus_per_trial is 0): they would sit idle. Hint: set "
        "resources.gpus_per_trial to train on them"), stderr
    space.write_text(GOOD + "search_space: {x: {grid: [1]}}\nresources: {gpus_per_trial: 1}\n")
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site", "juwels-booster",
                               "--workdir", str(tmp_path)])
    assert code == 0 and "warning" not in stderr


def test_a_site_file_adds_a_partition_and_keeps_the_bases(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("base: lumi-g\npartitions: {debug: {max_time: '00:30:00'}}\n")
    space = tmp_path / "exp.yaml"
    space.write_text(GOOD)
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site", str(site), "-p",
                               "debug", "--time", "01:00:00"])
    assert code == 2 and "limit of 00:30:00" in stderr, stderr
    code, _, stderr = _invoke(["slurm", "render", str(space), "--site", str(site), "--time",
                               "3-00:00:00"])
    assert code == 2 and "standard-g's limit" in stderr, stderr
