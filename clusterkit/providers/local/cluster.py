"""A real Slurm cluster on this machine: create, describe, delete, crash and restart nodes.

Each slurmd runs in a private mount and UTS namespace whose /etc/hosts maps the node names to this
machine and whose host name is the node's name, so node names resolve inside jobs (torch
rendezvous) and `hostname` tells nodes apart. The namespace also tells which processes belong to a
node: crashing a node kills exactly them.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from clusterkit import registry
from clusterkit.errors import AlreadyExists, ClusterkitError, MissingDependency
from clusterkit.pids import pid_alive, start_time
from clusterkit.providers.base import (ClusterInfo, DeletionPlan, NodeAction, NodeActionPlan, Progress, Replacement,
                                       ResizeResult, cannot_act_on_nodes, quiet, slurm_nodes)
from clusterkit.providers.local import processes, slurms
from clusterkit.providers.local.config import (
    ACCOUNTING_DATABASE,
    SSHD_PRIVSEP_DIR,
    TIMINGS,
    LocalClusterConfig,
    LocalClusterState,
    LocalLayout,
    LocalPlanDetails,
    ReplacementStyle,
    Timings,
    render_gres_conf,
    render_hosts,
    render_hyperpod_resource_config,
    render_launcher,
    render_mysql_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
    render_sshd_config,
    timings_named,
)
from clusterkit.providers.local.replacer import LOG_NAME, read_log
from clusterkit.providers.plan import ClusterPlan, ClusterRequest, Option, refuse_foreign_options
from clusterkit.registry import ClusterRecord, JsonObject
from clusterkit.runtime import FAULTS_DIR_ENV
from clusterkit.slurm import Flavor, NodeInfo, Slurm
from clusterkit.stack import health
from clusterkit.transport import SshTarget

PROVIDER = "local"
# The cluster's own (slurmd per node besides); the replacer where the timings replace nodes; the cluster agent
# (clusterkit.resilience.agent), as a ParallelCluster head node runs it.
DAEMONS = ("munged", "mariadb", "slurmdbd", "slurmctld", "sshd", "replacer", "agent")
AGENT_LOG_NAME = "agent.jsonl"
SSHD = "/usr/sbin/sshd"  # sshd insists on being started by its absolute path
SSH_PROGRAMS = (SSHD, "ssh-keygen", "ssh")
REQUIRED_PROGRAMS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd",
                     "sinfo", "sbatch", "sacct", "scontrol", "unshare", "mount")
INSTALL_COMMAND = ("apt-get install -y --no-install-recommends slurm-wlm munge slurmdbd mariadb-server "
                   "openssh-server openssh-client")
START_TIMEOUT = 30.0
LOCAL_GPU_PCI = "PCI:0000:10:1c"  # the fake GPU a device fault names, as the driver names a GPU in an Xid
LOCAL_GPU_BUS_ID = "00000000:10:1C.0"  # the same GPU as nvidia-smi names it


def check_prerequisites(ssh: bool = False, slurm: str = slurms.HOST) -> None:
    """Fail early, before anything is written, when this machine cannot run a local cluster (of Slurm `slurm`)."""
    if os.geteuid() != 0:
        raise ClusterkitError(
            "the local provider runs munged, slurmdbd, slurmctld and slurmd as root and needs root "
            "to give each node its own mount namespace",
            fix="run clusterkit as root (e.g. `sudo -E clusterkit create-cluster --provider local ...`)",
        )
    needed = REQUIRED_PROGRAMS + (SSH_PROGRAMS if ssh else ())
    missing = [program for program in needed if shutil.which(program) is None]
    if missing:
        raise MissingDependency(
            f"missing programs for a local Slurm cluster: {', '.join(missing)}",
            fix=f"install them with `{INSTALL_COMMAND}` (or run scripts/install-slurm.sh)",
        )
    slurms.check_installed(slurm)


def _mariadb_template(progress: Progress) -> Path:
    """An initialised MariaDB data directory, made once and copied per cluster (saves ~2 s a create)."""
    template = registry.clusterkit_home() / "cache" / "mariadb-datadir"
    if (template / "mysql").is_dir():
        return template
    progress("initialising the MariaDB template (once)")
    building = template.with_name(f"mariadb-datadir.{os.getpid()}.tmp")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    layout = LocalLayout(building.parent / f"mariadb-build.{os.getpid()}")
    conf = building.parent / f"my.{os.getpid()}.cnf"
    conf.write_text(render_mysql_conf(layout).replace(str(layout.mysql_data), str(building)))
    (layout.log).mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(
            ["mariadb-install-db", f"--defaults-file={conf}", "--auth-root-authentication-method=socket",
             "--skip-test-db"], capture_output=True, text=True)
        if result.returncode != 0:
            raise ClusterkitError(f"mariadb-install-db failed: {result.stderr.strip()[-300:]}")
        try:
            building.rename(template)
        except OSError:  # another create built it first
            shutil.rmtree(building, ignore_errors=True)
    finally:
        conf.unlink(missing_ok=True)
        shutil.rmtree(layout.root, ignore_errors=True)
    return template


class LocalProvider:
    """Real Slurm clusters on this machine: plan (files, ports, daemons), prepare, apply, open."""

    name = PROVIDER
    options = (Option("nodes", "--nodes"), Option("cpus_per_node", "--cpus-per-node"),
               Option("gpus_per_node", "--gpus-per-node"), Option("memory_mb_per_node", "memory_mb_per_node"),
               Option("ssh", "--ssh"), Option("timings", "--timings"), Option("replace_nodes", "--replace-nodes"),
               Option("boot_delay", "--boot-delay"), Option("replacement", "--replacement"),
               Option("slurm", "--slurm"))

    def plan(self, request: ClusterRequest) -> ClusterPlan[LocalPlanDetails]:
        refuse_foreign_options(self, request.given())
        timings = timings_named(request.timings, request.replace_nodes, request.boot_delay, request.replacement)
        cluster = LocalCluster._new(request.name, request.nodes, request.cpus_per_node, request.gpus_per_node,
                                    request.memory_mb_per_node, request.ssh, timings, slurms.chosen(request.slurm))
        if cluster._as_hyperpod and set(str(cluster.layout.hyperpod_opt)) & set(",:\\"):
            # The overlay's mount options cannot hold them.
            raise ClusterkitError(f"--replacement hyperpod cannot give the nodes of a cluster in "
                                  f"{str(cluster.layout.root)!r} HyperPod's resource config (a comma, colon or "
                                  "backslash in the path)", fix="set CLUSTERKIT_HOME to a directory without them")
        share = [] if processes.root_mount_is_shared() else [shlex.join(processes.SHARE_ROOT_COMMAND)]
        return ClusterPlan(
            provider=PROVIDER, name=request.name,
            details=LocalPlanDetails(config=cluster.config, directory=str(cluster.layout.root)),
            files={str(path): text for path, text in cluster._rendered_files().items()},
            actions=tuple(share + [shlex.join(argv) for argv in cluster._daemon_commands().values()]),
        )

    def prepare(self, plan: ClusterPlan[LocalPlanDetails],
                progress: Progress = quiet) -> ClusterPlan[LocalPlanDetails]:
        check_prerequisites(ssh=plan.details.config.ssh, slurm=plan.details.config.slurm)
        if registry.exists(plan.name):
            raise AlreadyExists(f"a cluster named {plan.name!r} already exists",
                                fix=f"use it, or delete it first with `clusterkit delete-cluster {plan.name}`")
        return plan

    def apply(self, plan: ClusterPlan[LocalPlanDetails], progress: Progress = quiet) -> LocalCluster:
        """Write exactly the plan's files and start the daemons; on failure leave nothing behind.

        The name is claimed first (registry.claim), and the ports: a second create of the same name
        fails at once and never touches this one's files, and a failed create removes only its own.
        """
        config = plan.details.config
        with registry.claim(plan.name) as directory:
            processes.reserve_ports(config.base_port, len(config.ports), directory)
            cluster = LocalCluster.from_config(config)
            try:
                if not processes.root_mount_is_shared():
                    progress("making / a shared mount, so that mounts made later reach the nodes")
                    processes.share_root_mount()
                cluster._write_files(plan.files, progress)
                registry.save(cluster.record)  # before any daemon starts: delete-cluster can always clean up
                cluster._start(progress)
            except BaseException:
                # Leave nothing half-made behind: no daemons, no ports held (the claim takes the directory).
                cluster._teardown()
                processes.release_ports(directory)
                raise
        return cluster

    def read_state(self, record: ClusterRecord[JsonObject]) -> ClusterRecord[LocalClusterState]:
        return ClusterRecord(record.name, record.provider, record.created,
                             LocalClusterState.from_json(record.name, record.details))

    def open(self, record: ClusterRecord[LocalClusterState]) -> LocalCluster:
        return LocalCluster(record)


class LocalCluster:
    """A local Slurm cluster known to the registry."""

    def __init__(self, record: ClusterRecord[LocalClusterState]) -> None:
        self.record = record
        self.state = record.details
        self.config = self.state.config
        self.layout = LocalLayout(record.directory)
        # Jobs on a local cluster run with the Python that drives it (its venv's python, torchrun).
        # Health checks in its jobs look for injected faults here.
        self._slurm = Slurm(self.layout.slurm_conf, extra_env={
            "PATH": self._session_path(), FAULTS_DIR_ENV: str(self.layout.faults)})

    # ----- lookup -------------------------------------------------------------------------------
    @classmethod
    def get(cls, name: str) -> LocalCluster:
        from clusterkit.providers import open_cluster

        cluster = open_cluster(name)
        if not isinstance(cluster, LocalCluster):
            raise ClusterkitError(f"cluster {name!r} is not a local cluster",
                                  fix="`clusterkit local` verbs act on clusters made with --provider local")
        return cluster

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def pids(self) -> dict[str, int]:
        return self.state.pids

    @property
    def env(self) -> dict[str, str]:
        """What a shell needs to use this cluster with plain Slurm commands (on a Slurm root, its clients first)."""
        env = {"SLURM_CONF": str(self.layout.slurm_conf)}
        if self.config.slurm_root is not None:
            env["PATH"] = f"{self.layout.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return env

    # ----- create -------------------------------------------------------------------------------
    @classmethod
    def _new(cls, name: str, nodes: int, cpus_per_node: int, gpus_per_node: int,
             memory_mb_per_node: int, ssh: bool = False, timings: Timings = TIMINGS["test"],
             slurm: str = slurms.HOST) -> LocalCluster:
        """A cluster object with its ports chosen, not yet saved or started."""
        registry.check_cluster_name(name)
        if nodes < 1 or cpus_per_node < 1 or gpus_per_node < 0:
            raise ClusterkitError(f"invalid node shape: nodes={nodes} cpus-per-node={cpus_per_node} "
                                  f"gpus-per-node={gpus_per_node}",
                                  fix="nodes and cpus-per-node must be at least 1, gpus-per-node at least 0")
        if registry.exists(name):
            raise AlreadyExists(f"a cluster named {name!r} already exists",
                                fix=f"use it, or delete it first with `clusterkit delete-cluster {name}`")
        taken = [port for other in registry.all_records() if other.provider == PROVIDER
                 for port in LocalClusterState.from_json(other.name, other.details).config.ports]
        base_port = processes.find_free_port_range(nodes + 2 + (1 if ssh else 0), taken)
        return cls.from_config(LocalClusterConfig(
            name=name, nodes=nodes, cpus_per_node=cpus_per_node, gpus_per_node=gpus_per_node,
            memory_mb_per_node=memory_mb_per_node, base_port=base_port,
            controller_host=socket.gethostname().split(".")[0], ssh=ssh, timings=timings, slurm=slurm))

    @classmethod
    def from_config(cls, config: LocalClusterConfig) -> LocalCluster:
        return cls(ClusterRecord(name=config.name, provider=PROVIDER,
                                 created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                                 details=LocalClusterState(config)))

    def slurm(self) -> Slurm:
        return self._slurm

    def flavor(self) -> Flavor:
        return Flavor.STOCK

    def runs_dir(self) -> str | None:
        return None

    def python(self) -> str:
        return sys.executable  # jobs of a local cluster run with the Python that drives it

    def queues(self) -> dict[str, list[str]]:
        return {}  # CPU nodes (and fake GPUs): no EC2 instance type

    def _rendered_files(self) -> dict[Path, str]:
        layout, config = self.layout, self.config
        files = {
            layout.slurm_conf: render_slurm_conf(config, layout),
            layout.gres_conf: render_gres_conf(config, layout),
            layout.slurmdbd_conf: render_slurmdbd_conf(config, layout),
            layout.mysql_conf: render_mysql_conf(layout),
            layout.hosts_file: render_hosts(config),
        }
        if config.ssh:
            files[layout.sshd_config] = render_sshd_config(config, layout, self._session_path())
        if self._as_hyperpod:
            files[layout.hyperpod_resource_config] = render_hyperpod_resource_config(config)
        if config.slurm_root is not None:
            files[layout.launcher] = render_launcher(config.slurm_root)
        return files

    @property
    def _as_hyperpod(self) -> bool:
        """Whether its nodes stand in for HyperPod's: the replacer acts as HyperPod's node recovery."""
        timings = self.config.timings
        return timings.replace_nodes and timings.replacement is ReplacementStyle.HYPERPOD

    def _session_path(self) -> str:
        """PATH of clusterkit's Slurm commands, of jobs and of SSH sessions: a Slurm root's client commands (the
        cluster's bin directory) first, then the Python that drives the cluster (its venv)."""
        path = f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return path if self.config.slurm_root is None else f"{self.layout.bin}:{path}"

    def _daemon_commands(self) -> dict[str, list[str]]:
        layout = self.layout
        # A cluster on a Slurm root runs munged, slurmdbd and slurmctld through its launcher (MariaDB is the host's).
        launch = [str(layout.launcher)] if self.config.slurm_root is not None else []
        commands = {
            "munged": [*launch, "munged", "--foreground", "--force", f"--socket={layout.munge_socket}",
                       f"--key-file={layout.munge_key}", f"--pid-file={layout.run}/munged.pid",
                       f"--log-file={layout.log}/munged.log", f"--seed-file={layout.run}/munged.seed"],
            "mariadb": ["mariadbd", f"--defaults-file={layout.mysql_conf}"],
            # slurmdbd reads the slurmdbd.conf beside $SLURM_CONF.
            "slurmdbd": [*launch, "slurmdbd", "-D"],
            # In a mount namespace whose /etc/hosts names the nodes: Slurm 24.11's srun tells slurmctld its node's
            # name (n1), not an address, and slurmctld blocks resolving it (10 s, clients time out) when it cannot.
            "slurmctld": ["unshare", "--mount", "--propagation", "slave", "sh", "-c",
                          'mount --bind "$0" /etc/hosts && exec "$@"', str(layout.hosts_file),
                          *launch, "slurmctld", "-D", "-i", "-f", str(layout.slurm_conf)],
        }
        # A mount + UTS namespace per node: its own /etc/hosts and host name. Slave propagation: mounts
        # made on this machine later (a file system for checkpoints) reach the nodes; the nodes' own
        # /etc/hosts never reaches this machine.
        script = 'mount --bind "$1" /etc/hosts && hostname "$2" && exec slurmd -D -N "$2" -f "$3"'
        extra: list[str] = []
        if self._as_hyperpod:
            # HyperPod's resource config at its place in the node's /opt (a read-only overlay on this machine's
            # /opt, seen by the node only): clusterkit on the node (the supervisor) knows HyperPod by it.
            script = 'mount -t overlay overlay -o "lowerdir=$4:/opt" /opt && ' + script
            extra = [str(layout.hyperpod_opt)]
        root = self.config.slurm_root
        if root is not None:
            # The node's slurmd, its slurmstepd and the job steps all run the root's /usr (slurms.py).
            extra.append(f"{root}/usr")
            script = script.replace("exec slurmd", f'mount --rbind "${3 + len(extra)}" /usr && exec slurmd')
        for node in self.config.node_names:
            commands[f"slurmd-{node}"] = ["unshare", "--mount", "--uts", "--propagation", "slave",
                                          "sh", "-c", script, "slurmd", str(layout.hosts_file), node,
                                          str(layout.slurm_conf), *extra]
        if self.config.ssh:
            commands["sshd"] = [SSHD, "-D", "-e", "-f", str(layout.sshd_config)]
        if self.config.timings.replace_nodes:
            commands["replacer"] = [sys.executable, "-m", "clusterkit.providers.local.replacer", self.name]
        commands["agent"] = [sys.executable, "-m", "clusterkit.resilience.agent", "--log",
                             str(layout.log / AGENT_LOG_NAME), "--pid-file", str(layout.pid_file("agent"))]
        return commands

    def _write_files(self, files: dict[str, str], progress: Progress) -> None:
        layout, config = self.layout, self.config
        for directory in (layout.etc, layout.run, layout.log, layout.state, layout.spool):
            directory.mkdir(exist_ok=True)
        layout.munge_socket_dir.mkdir(mode=0o711, exist_ok=True)
        os.chmod(layout.munge_socket_dir, 0o711)
        for node in config.node_names:
            layout.node_spool(node).mkdir(exist_ok=True)
        if config.gpus_per_node:
            layout.gpu_devices.mkdir(exist_ok=True)
            for index in range(config.gpus_per_node):
                (layout.gpu_devices / f"gpu{index}").symlink_to("/dev/null")
        key = os.open(layout.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(key, "wb") as handle:
            handle.write(os.urandom(1024))
        if self._as_hyperpod:
            layout.hyperpod_resource_config.parent.mkdir(parents=True)
        if config.slurm_root is not None:
            layout.bin.mkdir()
            for command in slurms.CLIENT_COMMANDS:
                (layout.bin / command).symlink_to(layout.launcher.name)
        for path, text in files.items():
            # slurmdbd refuses a config that others can read; the launcher runs.
            mode = {layout.slurmdbd_conf: 0o600, layout.launcher: 0o755}.get(Path(path), 0o644)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(text)
        shutil.copytree(_mariadb_template(progress), layout.mysql_data)
        # The accounting database exists before slurmdbd first connects (a database is a directory to MariaDB):
        # Debian 13's client library reports a connection to a missing database as a TLS error, which keeps Slurm
        # 24.11's slurmdbd from creating it and costs a 5 s retry.
        (layout.mysql_data / ACCOUNTING_DATABASE).mkdir()
        if config.ssh:
            self._make_ssh_keys()

    def _make_ssh_keys(self) -> None:
        """A host key for the head node's sshd and a key that logs in to it, made for this cluster."""
        layout = self.layout
        for key in (layout.ssh_host_key, layout.ssh_client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"clusterkit-{self.name}",
                            "-f", str(key)], check=True, capture_output=True)
        layout.authorized_keys.write_text(Path(f"{layout.ssh_client_key}.pub").read_text())
        host_key = Path(f"{layout.ssh_host_key}.pub").read_text().split()[:2]
        layout.known_hosts.write_text(f"[127.0.0.1]:{self.config.sshd_port} {' '.join(host_key)}\n")
        SSHD_PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)

    def _spawn(self, key: str, **extra_env: str) -> int:
        # The cluster's agent and replacer run Slurm's commands: those of the cluster's Slurm.
        env = dict(os.environ, SLURM_CONF=str(self.layout.slurm_conf), PATH=self._session_path(), **extra_env)
        pid = processes.spawn(self._daemon_commands()[key], self.layout.log / f"{key}.stdout", env=env)
        self.pids[key] = pid
        self.state.start_times[key] = start_time(pid)
        registry.save(self.record)
        return pid

    def _ours(self, key: str) -> int | None:
        """The pid of daemon `key` of this cluster, if that very process still runs (pids are reused
        after it exits, or after a reboot: never signal a stranger). A daemon someone restarted by hand
        is found by its pid file and adopted, so that describe and delete still see it."""
        pid = self.pids.get(key)
        recorded = self.state.start_times.get(key)
        if pid is not None and pid_alive(pid) and (recorded is None or
                                                             start_time(pid) == recorded):
            return pid
        return self._adopt(key)

    def _adopt(self, key: str) -> int | None:
        pid = processes.pid_from_file(self.layout.pid_file(key))
        if pid is None or pid == self.pids.get(key) or not processes.belongs_to(pid, str(self.layout.root)):
            return None
        self.pids[key] = pid
        self.state.start_times[key] = start_time(pid)
        if key.startswith("slurmd-"):
            self.state.namespaces[key.removeprefix("slurmd-")] = processes.mount_namespace(pid)
        registry.save(self.record)
        return pid

    def _readiness(self, key: str, pid: int) -> tuple[Callable[[], bool], str]:
        """How to tell that daemon `key` (just started as `pid`) serves, and the log to read if not."""
        layout = self.layout
        return {
            "munged": (lambda: processes.pid_from_file(layout.pid_file("munged")) == pid
                       and layout.munge_socket.exists(), "munged.log"),
            "mariadb": (lambda: layout.mysql_socket.exists(), "mariadb.log"),
            "slurmdbd": (lambda: processes.port_listening(self.config.slurmdbd_port), "slurmdbd.log"),
            "slurmctld": (lambda: processes.port_listening(self.config.slurmctld_port), "slurmctld.log"),
            "sshd": (lambda: processes.port_listening(self.config.sshd_port), "sshd.stdout"),
            "replacer": (lambda: processes.pid_from_file(layout.pid_file("replacer")) == pid, "replacer.stdout"),
            "agent": (lambda: processes.pid_from_file(layout.pid_file("agent")) == pid, "agent.stdout"),
        }[key]

    def restart_daemon(self, key: str = "slurmctld", progress: Progress = quiet) -> int:
        """Stop daemon `key` if it runs, start it again, wait until it serves; returns its new pid.
        Jobs survive a controller restart (their state is saved); nodes reconnect by themselves."""
        if key not in DAEMONS or (key == "sshd" and not self.config.ssh) or (
                key == "replacer" and not self.config.timings.replace_nodes):
            raise ClusterkitError(f"no daemon {key!r} in local cluster {self.name!r}",
                                  fix=f"restart one of: {', '.join(DAEMONS)} (a node: `clusterkit local "
                                      "start-node`)")
        running = self._ours(key)
        if running is not None:
            progress(f"stopping {key} (pid {running})")
            processes.stop_pids([running])
        progress(f"starting {key}")
        pid = self._spawn(key, **self._daemon_env(key))
        ready, log_name = self._readiness(key, pid)
        self._wait_for_daemon(key, ready, log_name)
        if key == "slurmctld":
            self._wait_for_nodes_up([n for n in self.config.node_names if self._ours(f"slurmd-{n}")])
        return pid

    def _daemon_env(self, key: str) -> dict[str, str]:
        if key == "replacer":  # it finds this cluster's record where this process does
            return {"CLUSTERKIT_HOME": str(registry.clusterkit_home())}
        # The MySQL client library finds our socket through MYSQL_UNIX_PORT.
        return {"MYSQL_UNIX_PORT": str(self.layout.mysql_socket)} if key == "slurmdbd" else {}

    def _node_namespace(self, node: str) -> str | None:
        """The node's mount namespace while its slurmd runs (a freed namespace id can be reused)."""
        if self._ours(f"slurmd-{node}") is None:
            return None
        return self.state.namespaces.get(node)

    def _start(self, progress: Progress) -> None:
        progress("starting munged and MariaDB")
        started = {key: self._spawn(key) for key in ("munged", "mariadb")}
        for key, pid in started.items():
            self._wait_for_daemon(key, *self._readiness(key, pid))

        progress("starting slurmdbd")
        pid = self._spawn("slurmdbd", **self._daemon_env("slurmdbd"))
        self._wait_for_daemon("slurmdbd", *self._readiness("slurmdbd", pid))

        progress(f"starting slurmctld and {self.config.nodes} slurmd")
        pid = self._spawn("slurmctld")
        for node in self.config.node_names:
            self._start_slurmd(node)
        self._wait_for_daemon("slurmctld", *self._readiness("slurmctld", pid))
        self._wait_for_nodes_up(self.config.node_names)
        if self.config.ssh:
            progress(f"starting sshd on 127.0.0.1:{self.config.sshd_port}")
            pid = self._spawn("sshd")
            self._wait_for_daemon("sshd", *self._readiness("sshd", pid))
        if self.config.timings.replace_nodes:
            progress("starting the node replacer")
            pid = self._spawn("replacer", **self._daemon_env("replacer"))
            self._wait_for_daemon("replacer", *self._readiness("replacer", pid))
        progress("starting the cluster agent")
        pid = self._spawn("agent")
        self._wait_for_daemon("agent", *self._readiness("agent", pid))
        progress(f"cluster {self.name!r} is up: {self.config.nodes} nodes")

    def _wait_for_daemon(self, key: str, ready: Callable[[], bool], log_name: str) -> None:
        pid = self.pids[key]

        def ready_or_dead() -> bool:
            if ready():
                return True
            if not pid_alive(pid):
                raise ClusterkitError(f"{key} exited during start-up",
                                      fix=f"see {self.layout.log / log_name} and {self.layout.log / key}.stdout")
            return False

        processes.wait_until(ready_or_dead, START_TIMEOUT, f"{key} to start",
                             hint=f"see {self.layout.log / log_name}")

    def _start_slurmd(self, node: str) -> None:
        pid = self._spawn(f"slurmd-{node}")
        own = processes.mount_namespace(os.getpid())
        processes.wait_until(lambda: processes.mount_namespace(pid) not in (own, None) or
                             not pid_alive(pid), 10, f"slurmd of {node} to enter its namespace")
        self.state.namespaces[node] = processes.mount_namespace(pid)
        registry.save(self.record)

    def _wait_for_nodes_up(self, nodes: list[str], timeout: float = START_TIMEOUT) -> None:
        def all_up() -> bool:
            for node in nodes:
                pid = self.pids.get(f"slurmd-{node}")
                if pid is None or not pid_alive(pid):
                    raise ClusterkitError(f"slurmd of node {node} exited during start-up",
                                          fix=f"see {self.layout.log}/slurmd-{node}.log")
            states = {n.name: n for n in self._slurm.nodes()}
            return all(n in states and states[n].responding and
                       states[n].base_state in ("idle", "alloc", "mix", "comp", "drain", "drng")
                       for n in nodes)

        processes.wait_until(all_up, timeout, f"nodes {', '.join(nodes)} to register",
                             interval=0.1, hint=f"see {self.layout.log}/slurmctld.log")

    # ----- describe -----------------------------------------------------------------------------
    def describe(self) -> ClusterInfo:
        daemons = {key: self._ours(key) is not None for key in self.pids}
        controller_up = daemons.get("slurmctld", False) and self._slurm.ping()
        if controller_up:
            nodes = slurm_nodes(self._slurm)
        else:
            nodes = tuple(NodeInfo(name=n, state="unknown", cpus=self.config.cpus_per_node, gres="",
                                   reason="slurmctld is not running") for n in self.config.node_names)
        if not controller_up:
            status = "stopped"
        elif all(daemons.values()) and all(n.state.rstrip("*") not in ("down", "fail") for n in nodes):
            status = "running"
        else:
            status = "degraded"
        return ClusterInfo(
            name=self.name, provider=PROVIDER, status=status, created=self.record.created, nodes=nodes,
            details={"slurm_conf": str(self.layout.slurm_conf), "directory": str(self.layout.root),
                     "ports": {"slurmctld": self.config.slurmctld_port, "slurmdbd": self.config.slurmdbd_port},
                     "daemons": daemons, "python": sys.executable, "timings": self.config.timings.describe(),
                     # The choice made at create, and what the running controller says it is.
                     "slurm": self.config.slurm, "slurm_version": self._slurm.version() if controller_up else None,
                     **({"ssh": self.ssh_target().to_dict()} if self.config.ssh else {})},
            where=f"with {self.config.nodes} nodes; use Slurm directly: "
                  + (f"export SLURM_CONF={self.layout.slurm_conf}" if self.config.slurm_root is None
                     else f'eval "$(clusterkit local env {self.name})"'))

    def ssh_target(self) -> SshTarget:
        """How to reach the head node from elsewhere (`create-cluster --ssh`): what `clusterkit connect` takes."""
        if not self.config.ssh:
            raise ClusterkitError(f"local cluster {self.name!r} has no sshd", fix="create it with --ssh")
        return SshTarget(host="127.0.0.1", user="root", port=self.config.sshd_port,
                         identity_file=str(self.layout.ssh_client_key), known_hosts_file=str(self.layout.known_hosts))

    def resize(self, queue: str, max_count: int, min_count: int | None = None, compute_resource: str | None = None,
               progress: Progress = quiet) -> ResizeResult:
        raise ClusterkitError(f"cluster {self.name!r} is a local cluster, whose size is fixed",
                              fix="delete it and create it again with the size you need (--nodes N)")

    # ----- faults -------------------------------------------------------------------------------
    def _check_node(self, node: str) -> None:
        if node not in self.config.node_names:
            raise ClusterkitError(f"cluster {self.name!r} has no node {node!r}",
                                  fix=f"nodes are {', '.join(self.config.node_names)}")

    def _running_namespace(self, node: str) -> str:
        self._check_node(node)
        namespace = self._node_namespace(node)
        if namespace is None:
            raise ClusterkitError(f"node {node} of {self.name!r} is not running",
                                  fix=f"start it with `clusterkit local start-node {self.name} {node}`")
        return namespace

    def node_processes(self, node: str) -> list[int]:
        """The pids of every process of a running node: its slurmd and all it started (steps, tasks)."""
        return processes.pids_in_mount_namespace(self._running_namespace(node))

    def crash_node(self, node: str) -> list[int]:
        """SIGKILL the node's slurmd and everything it started, as a hardware fault would."""
        return self._kill_namespace(self._running_namespace(node))

    def _kill_namespace(self, namespace: str) -> list[int]:
        victims = processes.pids_in_mount_namespace(namespace)
        processes.kill_all(victims)  # SIGKILL ends stopped (frozen) processes too
        for victim in victims:
            processes.wait_until(lambda: not pid_alive(victim), 5, f"process {victim} to die")
        return victims

    # ----- replacement (the replacer daemon's steps) ----------------------------------------------
    def terminate_node(self, node: str, keep_faults: bool = False) -> None:
        """What terminating its instance does to a node: every process gone, whether it ran, hung or had
        crashed, and with them its injected faults (a fresh node has none; `keep_faults`: a reboot, the same
        hardware)."""
        namespace = self._node_namespace(node)
        if namespace is not None:
            self._kill_namespace(namespace)
        if not keep_faults:
            self._clear_faults(node)

    def boot_node(self, node: str) -> None:
        """Start a fresh slurmd for `node` and return it to service once it serves."""
        self._start_slurmd(node)
        if self._registered(node, "the replacement").base_state in ("down", "drain", "fail"):
            self._slurm.update_node(node, "RESUME")

    def _registered(self, node: str, what: str) -> NodeInfo:
        """Wait until the slurmd just started for `node` answers the controller; what the controller then says."""
        def registered() -> bool:
            if not pid_alive(self.pids[f"slurmd-{node}"]):
                raise ClusterkitError(f"{what} slurmd of {node} exited", fix=f"see {self.layout.log}/slurmd-"
                                                                             f"{node}.log")
            info = {n.name: n for n in self._slurm.nodes()}.get(node)
            return info is not None and info.responding

        processes.wait_until(registered, START_TIMEOUT, f"{what} of {node} to register", interval=0.2)
        return {n.name: n for n in self._slurm.nodes()}[node]

    @property
    def agent_log(self) -> Path:
        """Where the cluster agent logs what it did (`clusterkit.resilience.agent.read_agent_log` reads it)."""
        return self.layout.log / AGENT_LOG_NAME

    def replacements(self) -> dict[str, Replacement]:
        """Each node's latest replacement (booting or ready), from the replacer's log; empty where none ran."""
        return read_log(self.layout.log / LOG_NAME)

    def freeze_node(self, node: str) -> list[int]:
        """SIGSTOP the node's slurmd and everything it started: the node goes silent with every connection
        open, as a wedged GPU, a hung mount or a NIC that drops packets leave it (peers see no reset)."""
        return processes.signal_until_all(self._running_namespace(node), signal.SIGSTOP)

    def thaw_node(self, node: str) -> list[int]:
        """SIGCONT what freeze-node stopped: the node answers again."""
        return processes.signal_until_all(self._running_namespace(node), signal.SIGCONT)

    def fail_device(self, node: str, xid: int | None = None, ecc: int | None = None) -> str:
        """Make one of the node's GPUs report an error where the health check reads it: an Xid line in the
        node's kernel log, or an uncorrected ECC count. Returns what was written."""
        self._check_node(node)
        if (xid is None) == (ecc is None):
            raise ClusterkitError("fail-device needs exactly one of --xid N and --ecc COUNT",
                                  fix="e.g. `--xid 79` (GPU fallen off the bus) or `--ecc 2`")
        if xid is not None and not 0 < xid < 1000:
            raise ClusterkitError(f"--xid {xid} is no Xid", fix="give the driver's Xid number, 1 to 999 (e.g. 79)")
        if ecc is not None and ecc < 1:
            raise ClusterkitError(f"--ecc {ecc} is no error count", fix="give a count of at least 1")
        self.layout.faults.mkdir(exist_ok=True)
        if xid is not None:
            line = f"[{time.monotonic():12.6f}] NVRM: Xid ({LOCAL_GPU_PCI}): {xid}, pid=0, name=clusterkit, injected\n"
            with open(health.kernel_log_file(self.layout.faults, node), "a") as log:
                log.write(line)
        else:
            line = f"{LOCAL_GPU_BUS_ID}, {ecc}\n"
            health.ecc_file(self.layout.faults, node).write_text(line)
        return line.strip()

    def start_node(self, node: str, wait: bool = True) -> None:
        """Start the node's slurmd again (after a crash): a node Slurm set DOWN for not answering returns to service
        by itself; one marked DOWN for being gone (by clusterkit's beacons, say) is resumed once it answers. A drained
        one stays drained (its sickness is `heal`'s)."""
        self._check_node(node)
        pid = self._ours(f"slurmd-{node}")
        if pid is not None:
            raise ClusterkitError(f"node {node} of {self.name!r} is already running (slurmd pid {pid})")
        self._start_slurmd(node)
        if wait and self._registered(node, "the restarted").base_state == "down":
            self._slurm.update_node(node, "RESUME")

    def fail_health(self, node: str, reason: str = "injected by clusterkit local fail-health") -> None:
        """Make the node's health check fail (its slurmd keeps running): a sick node, not a dead one."""
        self._check_node(node)
        self.layout.faults.mkdir(exist_ok=True)
        (self.layout.faults / node).write_text(reason + "\n")

    def _clear_faults(self, node: str) -> None:
        self._check_node(node)
        for fault in (self.layout.faults / node, health.kernel_log_file(self.layout.faults, node),
                      health.ecc_file(self.layout.faults, node)):
            fault.unlink(missing_ok=True)

    def heal(self, node: str) -> None:
        """Remove an injected fault and return a drained node to service."""
        self._clear_faults(node)
        info = {n.name: n for n in self._slurm.nodes()}.get(node)
        if info is not None and info.base_state in ("drain", "drng", "down"):
            self._slurm.update_node(node, "RESUME")

    # ----- delete -------------------------------------------------------------------------------
    def plan_node_action(self, action: NodeAction, names: list[str]) -> NodeActionPlan:
        if self._as_hyperpod:  # its replacer acts on HyperPod's request from Slurm only
            reason = "Action:Replace" if action is NodeAction.REPLACE else "Action:Reboot"
            raise cannot_act_on_nodes(self.name, "local", action,
                                      f"ask as on HyperPod: SLURM_CONF={self.layout.slurm_conf} scontrol update "
                                      f"NodeName=NODE State=FAIL Reason={reason}")
        raise cannot_act_on_nodes(self.name, "local", action,
                                  f"crash or stop it with `clusterkit local crash-node {self.name} NODE`: with "
                                  "--replace-nodes (or --timings parallelcluster) a DOWN node is replaced")

    def act_on_nodes(self, plan: NodeActionPlan, progress: Progress = quiet) -> tuple[str, ...]:
        raise cannot_act_on_nodes(self.name, "local", plan.action, "see `clusterkit local --help`")

    def deletion(self) -> DeletionPlan:
        return DeletionPlan(name=self.name, deletes=(
            f"the daemons it started (munged, MariaDB, slurmdbd, slurmctld, {self.config.nodes} slurmd"
            f"{', the node replacer' if self.config.timings.replace_nodes else ''}, the cluster agent) and every "
            "process in its nodes", f"{self.layout.root} (configuration, state, logs, its accounting database)"))

    def delete(self, progress: Progress = quiet) -> None:
        self._teardown()
        processes.release_ports(self.layout.root)
        registry.remove(self.name)
        shutil.rmtree(self.layout.root, ignore_errors=True)

    def _teardown(self) -> None:
        """Stop every process this cluster started (by pid, all at once) and what its nodes started."""
        # First, so that they start no node and mark none down while the others stop.
        watchers = [pid for pid in (self._ours("replacer"), self._ours("agent")) if pid is not None]
        if watchers:
            processes.stop_pids(watchers)
        namespaces = [ns for ns in (self._node_namespace(node) for node in self.config.node_names) if ns]
        daemons = [pid for pid in (self._ours(key) for key in self.pids) if pid is not None]
        leftovers = [pid for ns in namespaces for pid in processes.pids_in_mount_namespace(ns)]
        sshd = self._ours("sshd")
        sessions = processes.descendants(sshd) if sshd else []  # logins (and shared connections) to the head node
        processes.stop_pids(daemons + leftovers + sessions)
        # Job processes that outlived their slurmd would keep ports and files busy.
        processes.kill_all(pid for ns in namespaces for pid in processes.pids_in_mount_namespace(ns))
