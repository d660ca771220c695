"""A real, small multi-node Slurm on this one machine, for the tests and the benchmark.

One private munged, one slurmctld and one slurmd per "node"; each slurmd runs in its own
network namespace (a veth pair into a private bridge), UTS namespace (own hostname) and mount
namespace (own /etc/hosts and a node-local /tmp), as HPC nodes share only the parallel file
system. Verified facts behind this shape: ../shared/notes/real-slurm-on-one-machine.md.

It is as strict as the sites hpo's profiles name (JUWELS Booster, JURECA-DC, LUMI-G): steps
are bound to their cores (task/affinity, cores by default: an srun without -c gets one CPU),
GPUs sit near cores (gres.conf Cores=), the sites' partitions refuse a job over their MaxTime,
`module` is a real Lmod whose Python module hides the user's venv, and with
`hostname_suffix="i"` only the JSC-style suffixed node names reach a node.

Everything it starts is ended by saved pid, checked against the pid's start time, plus what
is left inside the namespaces it created; it never ends a process by name. Its files live
under /var/tmp (not /tmp: each node gets its own /tmp).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NEEDED = ("slurmctld", "slurmd", "sbatch", "munged", "nsenter", "unshare", "ip")
PACKAGES = "slurmctld slurmd slurm-client munge lmod"
LMOD_CMD = Path("/usr/share/lmod/lmod/libexec/lmod")  # Debian's lmod
SITE_PYTHON = Path("/usr/bin/python3")  # the system's: no hpo, no venv
UNREACHABLE = "192.0.2"  # TEST-NET-1 (RFC 5737): nodes have no route there, connect fails at once
# The sites' partitions (hpo/spec/sites/*.yaml) with their MaxTime: a longer job is refused.
PARTITIONS = {"booster": "24:00:00", "develbooster": "02:00:00", "dc-gpu": "24:00:00",
              "standard-g": "2-00:00:00", "dev-g": "03:00:00"}
# The modules the site profiles load, by the names they load them with. Loading one only
# records it (Lmod's LOADEDMODULES), except those that put the site's own Python first on
# PATH: JSC's Python and LUMI's cray-python: a venv activated before them is hidden.
MODULES = {"Stages/2026": False, "GCCcore/14.3.0": False, "Python/3.13.5": True,
           "CUDA/13": False, "LUMI/25.03": False, "partition/G": False, "cray-python": True}
# A login shell's Lmod state that must not leak into the cluster's jobs from the caller's
_LMOD_STATE = re.compile(r"_ModuleTable|__LMOD|LMOD_|BASH_FUNC_(module|ml)%%|LOADEDMODULES$|"
                         r"_LMFILES_$|MODULEPATH$|MODULESHOME$")


def _shared_under_tmp() -> list[Path]:
    """The repository and the Python environment the jobs use, where they lie under /tmp."""
    paths = {Path(__file__).resolve().parent.parent, Path(sys.prefix).resolve()}
    tmp = Path("/tmp").resolve()
    under = [p for p in paths if p.is_relative_to(tmp) and p != tmp]
    return sorted(p for p in under if not any(p != q and p.is_relative_to(q) for q in under))


class Unavailable(RuntimeError):
    """This machine cannot run the test cluster (missing programs, no namespaces)."""


def _start_time(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()[19]  # field 22: start time in clock ticks


@dataclass
class _Proc:
    pid: int
    started: str | None

    def end(self, sig: int = signal.SIGKILL) -> None:
        if self.started is not None and _start_time(self.pid) == self.started:
            os.kill(self.pid, sig)


def _subnet(tag: str) -> str:
    return f"10.213.{int(tag, 16) % 200 + 20}"


def _ctl_port(tag: str) -> int:
    return 6900 + int(tag, 16) % 90 * 2


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _free_tag() -> str:
    """A tag whose bridge, subnet and controller port no other cluster here uses, so that a
    second cluster can run beside the tests' session cluster."""
    used = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True,
                          check=False).stdout
    for _ in range(200):
        tag = secrets.token_hex(2)
        if f"hpob{tag}" not in used and f" {_subnet(tag)}.1/" not in used and _port_free(
                _ctl_port(tag)):
            return tag
    raise Unavailable("no free subnet and port for another test cluster")


def _sh(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise Unavailable(f"`{' '.join(cmd)}` failed: {done.stderr.strip()}")
    return done.stdout


@dataclass
class SlurmTestCluster:
    """`with SlurmTestCluster(3) as c:` gives nodes node1..nodeN, `c.env` for sbatch (with
    `module`). Another can run beside it (its own tag, subnet, port and job ids), e.g.
    `SlurmTestCluster(2, gpus=8, hostname_suffix="i")` for JSC's node names."""

    nodes: int = 3
    # CPUs per node: at most the machine's, since steps are bound to real cores
    cpus: int = field(default_factory=lambda: min(2, os.cpu_count() or 1))
    gpus: int = 4  # fake GPUs per node (8 as LUMI-G's GCDs, say): GRES backed by files
    hostname_suffix: str = ""  # "i": only nodeKi reaches node K (JSC's InfiniBand names)
    interface: str = "eth0"  # each node's network interface (LUMI's Slingshot NIC: hsn0)
    tag: str = field(default_factory=_free_tag)
    root: Path = field(init=False)
    procs: dict[str, _Proc] = field(default_factory=dict)
    _made: list[list[str]] = field(default_factory=list)  # `ip` commands that undo our links

    def __post_init__(self) -> None:
        self.subnet = _subnet(self.tag)
        self.ctl_port = _ctl_port(self.tag)

    @property
    def names(self) -> list[str]:
        return [f"node{k}" for k in range(1, self.nodes + 1)]

    @property
    def env(self) -> dict[str, str]:
        """What a user's login shell on a site passes to sbatch: the Slurm config and Lmod's
        `module`, a bash function exported as Lmod's bash init exports it (`export -f`), so
        a `#!/bin/bash` batch script has it."""
        own = {k: v for k, v in os.environ.items() if not _LMOD_STATE.match(k)}
        return {**own, "SLURM_CONF": str(self.root / "etc/slurm.conf"),
                "MODULEPATH": str(self.root / "modules"), "LMOD_CMD": str(LMOD_CMD),
                "BASH_FUNC_module%%": '() {  eval "$($LMOD_CMD bash "$@")"; }'}

    def netns(self, node: str) -> str:
        return f"hpo{self.tag}-{node}"

    def _check_machine(self) -> None:
        missing = [p for p in NEEDED if shutil.which(p) is None]
        missing += [str(p) for p in (LMOD_CMD, SITE_PYTHON) if not p.exists()]
        if missing:
            raise Unavailable(f"missing {', '.join(missing)}; apt-get install {PACKAGES}")
        have = os.cpu_count() or 1
        if not 1 <= self.cpus <= have:
            raise Unavailable(
                f"cpus={self.cpus} per node, but this machine has {have} CPUs: steps are bound "
                f"to real cores (task/affinity), and a node declaring more CPUs than the "
                f"machine has cannot lay out `srun -c` (\"Unable to layout tasks on given "
                f"cpus\"). Hint: cpus between 1 and {have}")

    def __enter__(self) -> SlurmTestCluster:
        self._check_machine()
        self.root = Path(tempfile.mkdtemp(prefix="hpo-slurm-", dir="/var/tmp"))
        try:
            self._network()
            self._files()
            self._daemons()
            self.wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _network(self) -> None:
        bridge = f"hpob{self.tag}"
        _sh("ip", "link", "add", bridge, "type", "bridge")
        self._made.append(["link", "del", bridge])
        _sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", bridge)
        _sh("ip", "link", "set", bridge, "up")
        for k, node in enumerate(self.names, start=1):
            ns, host_end = self.netns(node), f"hpov{self.tag}{k}"
            _sh("ip", "netns", "add", ns)
            self._made.append(["netns", "del", ns])
            _sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", self.interface,
                "netns", ns)
            self._made.append(["link", "del", host_end])
            _sh("ip", "link", "set", host_end, "master", bridge, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{self.address(node)}/24", "dev",
                self.interface)
            _sh("ip", "-n", ns, "link", "set", self.interface, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")

    def address(self, node: str) -> str:
        return f"{self.subnet}.{10 + int(node.removeprefix('node'))}"

    def _files(self) -> None:
        r = self.root
        for sub in ("etc", "munge", "state", "log", "spool", "work", "dev", "modules"):
            (r / sub).mkdir(mode=0o755)
        (r / "munge").chmod(0o755)  # munged insists on these modes
        key = r / "munge/key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        host = os.uname().nodename.split(".")[0]
        (r / "etc/hosts").write_text(self._hosts(host))
        for node in self.names:
            (r / "spool" / node).mkdir()
            (r / "nodetmp" / node).mkdir(parents=True, mode=0o1777)
            (r / "nodetmp" / node).chmod(0o1777)
        (r / "etc/slurm.conf").write_text(self._conf(host))
        (r / "etc/gres.conf").write_text(self._gres_conf())
        self._modules()

    def _hosts(self, host: str) -> str:
        """Each node's /etc/hosts. With a suffix, as at JSC: nodeKi is the node's address
        (there: its InfiniBand one) and plain nodeK an address no node reaches, so Ray works
        only where it uses the suffix. Slurm itself uses NodeAddr, not these names."""
        lines = ["127.0.0.1 localhost", f"{self.subnet}.1 {host}"]
        for k, node in enumerate(self.names, start=1):
            if self.hostname_suffix:
                lines += [f"{self.address(node)} {node}{self.hostname_suffix}",
                          f"{UNREACHABLE}.{k} {node}"]
            else:
                lines.append(f"{self.address(node)} {node}")
        return "\n".join(lines) + "\n"

    def _modules(self) -> None:
        """Lua modulefiles for Lmod (MODULEPATH=root/modules) and the site's Python folder."""
        bin_dir = self.root / "site-python" / "bin"
        bin_dir.mkdir(parents=True)
        for name in ("python", "python3"):
            (bin_dir / name).symlink_to(SITE_PYTHON)
        for name, python in MODULES.items():
            file = self.root / "modules" / f"{name}.lua"
            file.parent.mkdir(parents=True, exist_ok=True)
            text = f"-- A stand-in for the site's {name} module (testing/slurm_cluster.py)\n"
            file.write_text(text + (f'prepend_path("PATH", "{bin_dir}")\n' if python else ""))

    def _conf(self, host: str) -> str:
        r = self.root
        lines = [
            "ClusterName=hpotest", f"SlurmctldHost={host}({self.subnet}.1)",
            f"SlurmctldPort={self.ctl_port}", f"SlurmdPort={self.ctl_port + 1}",
            "AuthType=auth/munge", f"AuthInfo=socket={r}/munge/socket,cred_expire=10",
            "CredType=cred/munge", "SlurmUser=root", "SlurmdUser=root",
            # Bind every step to its cores, as sites do: an srun without -c gets one CPU
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity",
            "TaskPluginParam=Cores",
            # A job over a partition's limits (MaxTime) is refused at sbatch, not left pending
            "EnforcePartLimits=ALL",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides", "JobRequeue=1", "ReturnToService=2",
            "SchedulerParameters=sched_interval=1,bf_interval=5", "MinJobAge=600",
            # Job ids as long as a site's, and distinct between clusters that run side by
            # side: their jobs' output files in the one checkout (hpo-NAME-ID.out) never clash
            f"FirstJobId={(int(self.tag, 16) + 1) * 1000}",
            "KillWait=5", "SlurmdTimeout=300", "MpiDefault=none", "GresTypes=gpu",
            f"StateSaveLocation={r}/state", f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/state/slurmctld.pid", f"SlurmdPidFile={r}/spool/%n/pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log", f"SlurmdLogFile={r}/log/%n.log",
        ]
        gres = f"Gres=gpu:{self.gpus} " if self.gpus else ""
        lines += [f"NodeName={n} NodeAddr={self.address(n)} CPUs={self.cpus} "
                  f"RealMemory=4000 {gres}State=UNKNOWN" for n in self.names]
        lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        lines += [f"PartitionName={name} Nodes=ALL MaxTime={limit} State=UP"
                  for name, limit in PARTITIONS.items()]
        return "\n".join(lines) + "\n"

    def _gres_conf(self) -> str:
        """Fake GPUs: slurmd wants character devices (it refuses regular files) and only
        reads their numbers, so each is a node with /dev/null's numbers (nothing opens it).
        Slurm exports SLURM_STEP_GPUS but no CUDA_VISIBLE_DEVICES (no_gpu_env, as on sites
        that leave it to the job): Ray on the nodes sees only what hpo gives it. Each GPU is
        near one core (GPU k near core k % cpus), as sites' gres.conf say."""
        null = os.stat("/dev/null").st_rdev
        lines = ["AutoDetect=off"]
        for k in range(self.gpus):
            os.mknod(self.root / "dev" / f"gpu{k}", 0o600 | stat.S_IFCHR, null)
            lines.append(f"NodeName=node[1-{self.nodes}] Name=gpu Flags=no_gpu_env "
                         f"File={self.root}/dev/gpu{k} Cores={k % self.cpus}")
        return "\n".join(lines) + "\n"

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 - outlives us
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=self.env)
        log.close()
        self.procs[name] = _Proc(proc.pid, _start_time(proc.pid))

    def _daemons(self) -> None:
        r = self.root
        self._spawn("munged", ["munged", "-F", "-f", f"--socket={r}/munge/socket",
                               f"--key-file={r}/munge/key", f"--pid-file={r}/munge/pid",
                               f"--log-file={r}/log/munged.log",
                               f"--seed-file={r}/munge/seed"])
        self._wait(lambda: (r / "munge/socket").exists(), "munged socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", f"{r}/etc/slurm.conf"])
        for node in self.names:
            self.start_node(node)

    def start_node(self, node: str) -> None:
        """Start (or restart) one node's slurmd inside its namespaces."""
        r = self.root
        local_tmp = r / "nodetmp" / node
        # The shared file system (the checkout, its venv) must show through the node-local
        # /tmp when it lives under /tmp (a CI clone there): bind it in before /tmp is covered.
        keep = "".join(f"mkdir -p {local_tmp / p.relative_to('/tmp')} && mount --bind {p} "
                       f"{local_tmp / p.relative_to('/tmp')} && " for p in _shared_under_tmp())
        inner = (f"hostname {node} && mount --bind {r}/etc/hosts /etc/hosts && {keep}"
                 f"mount --rbind {local_tmp} /tmp && "
                 f"exec slurmd -D -N {node} -f {r}/etc/slurm.conf")
        self._spawn(node, ["nsenter", f"--net=/run/netns/{self.netns(node)}", "unshare",
                           "--uts", "--mount", "sh", "-c", inner])

    def kill_node(self, node: str) -> None:
        """A node lost: its slurmd and every process in its network namespace, SIGKILLed."""
        self.procs.pop(node).end()
        self._kill_inside(self.netns(node))

    def _kill_inside(self, ns: str) -> None:
        done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                              check=False)
        for pid in map(int, done.stdout.split()):
            _Proc(pid, _start_time(pid)).end()

    def _wait(self, ready: object, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.1)
        raise Unavailable(f"{what} not ready after {timeout:.0f} s; logs in {self.root}/log")

    def wait_idle(self, timeout: float = 60) -> None:
        def idle() -> bool:
            # one line per node and partition: every node is in all of them
            done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env,
                                  capture_output=True, text=True, check=False)
            states = dict(line.split() for line in done.stdout.splitlines())
            return len(states) == self.nodes and set(states.values()) == {"idle"}

        self._wait(idle, "all Slurm nodes idle", timeout)

    def stop(self) -> None:
        """Cancel jobs, end our daemons by pid, then what is left in our namespaces."""
        if self.procs.get("slurmctld"):
            subprocess.run(["scancel", "--full", f"--user={os.getuid()}"], env=self.env,
                           capture_output=True, check=False)
        for name in [n for n in self.procs if n.startswith("node")] + ["slurmctld", "munged"]:
            proc = self.procs.pop(name, None)
            if proc:
                proc.end()
        for node in self.names:
            self._kill_inside(self.netns(node))
        for undo in reversed(self._made):
            subprocess.run(["ip", *undo], capture_output=True, check=False)
        self._made.clear()
        if getattr(self, "root", None) and not os.environ.get("HPO_KEEP_SLURM_TEST_CLUSTER"):
            shutil.rmtree(self.root, ignore_errors=True)


if __name__ == "__main__":  # a quick manual check: start, show sinfo and a 3-node srun, stop
    with SlurmTestCluster() as cluster:
        print(subprocess.run(["sinfo"], env=cluster.env, capture_output=True, text=True).stdout)
        print(subprocess.run(["srun", "-N3", "-l", "hostname"], env=cluster.env,
                             capture_output=True, text=True, timeout=60).stdout)
