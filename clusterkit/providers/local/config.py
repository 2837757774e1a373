"""Pure rendering of a local cluster's files: slurm.conf, gres.conf, slurmdbd.conf, my.cnf, hosts.

Same layout in, same text out; golden files pin the text. Nothing here touches the system.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import shlex
from dataclasses import field
from pathlib import Path

from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers.local import slurms
from clusterkit.registry import JsonObject


@lean_dataclass(frozen=True)
class LocalLayout:
    """Where everything of one local cluster lives, all under one directory."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.etc / "gres.conf"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.etc / "slurmdbd.conf"

    @property
    def mysql_conf(self) -> Path:
        return self.etc / "my.cnf"

    @property
    def hosts_file(self) -> Path:
        return self.etc / "hosts"

    @property
    def munge_key(self) -> Path:
        return self.etc / "munge.key"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def munge_socket_dir(self) -> Path:
        return self.run / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_socket_dir / "munge.socket"

    @property
    def mysql_socket(self) -> Path:
        return self.run / "mysql.sock"

    @property
    def mysql_data(self) -> Path:
        return self.root / "mysql"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def faults(self) -> Path:
        """Injected health-check faults, one file per node (`clusterkit local fail-health`)."""
        return self.root / "faults"

    @property
    def gpu_devices(self) -> Path:
        return self.root / "dev"

    @property
    def sshd_config(self) -> Path:
        return self.etc / "sshd_config"

    @property
    def ssh_host_key(self) -> Path:
        return self.etc / "ssh_host_ed25519_key"

    @property
    def ssh_client_key(self) -> Path:
        """The key that logs in to the head node as root (given to `clusterkit connect --identity-file`)."""
        return self.etc / "ssh_client_ed25519_key"

    @property
    def authorized_keys(self) -> Path:
        return self.etc / "authorized_keys"

    @property
    def known_hosts(self) -> Path:
        """The head node's host key as a known_hosts line (for `clusterkit connect --known-hosts`)."""
        return self.etc / "known_hosts"

    @property
    def hyperpod_opt(self) -> Path:
        """What each node of a cluster replacing nodes as HyperPod does sees over /opt (this machine's /opt below)."""
        return self.root / "hyperpod" / "opt"

    @property
    def hyperpod_resource_config(self) -> Path:
        """HyperPod's resource config as a node sees it at /opt/ml/config/resource_config.json."""
        return self.hyperpod_opt / "ml" / "config" / "resource_config.json"

    @property
    def bin(self) -> Path:
        """A cluster on a Slurm root: its launcher and a link to it per client command (first on the PATH)."""
        return self.root / "bin"

    @property
    def launcher(self) -> Path:
        return self.bin / "slurm-root"

    def pid_file(self, daemon: str) -> Path:
        return self.run / f"{daemon}.pid"

    def node_spool(self, node: str) -> Path:
        return self.spool / node


class ReplacementStyle(str, enum.Enum):
    """Whose node replacement the replacer does.

    clustermgtd (ParallelCluster): every static node DOWN or DRAINED, whatever the reason, running or not.
    hyperpod (SageMaker HyperPod's automatic node recovery, driven from Slurm): only a node marked FAIL with the reason
    exactly `Action:Replace` (new hardware) or `Action:Reboot` (the same instance), once no job runs on it; a node
    merely DOWN or drained is left alone. Per AWS's "Manually replace or reboot a node using Slurm" (SageMaker
    developer guide, sagemaker-hyperpod-resiliency-slurm-replace-faulty-instance): after `scontrol update node=X
    state=fail reason="Action:Replace"` the node "waits for the currently running jobs to finish, is replaced with a
    healthy instance, and is recovered with the same host name"; `state=down` with the same reason is the last
    resort that kills the node's jobs at once (so a DOWN node with HyperPod's reason is replaced too). The
    workshop's resiliency drill (awsome-distributed-training, "Testing Resiliency with HyperPod Slurm") shows the
    states: `failg` while the job runs, `fail` after it ends, then the replacement. HyperPod's auto-resume also
    watches nodes that turn fail or down, but only for a step started with --auto-resume=1, which a local cluster's
    stock srun lacks and a supervised step never has."""

    CLUSTERMGTD = "clustermgtd"
    HYPERPOD = "hyperpod"


@lean_dataclass(frozen=True)
class Timings:
    """How fast a local cluster notices and handles failures: Slurm's timers, and the node replacer's loop.

    Two named sets: `test` (seconds: a dead node is down in ~8 s, a requeued job starts again at once) and
    `parallelcluster`, ParallelCluster 3.16's own values (its cookbook's slurm.conf.erb "TIMERS" block;
    clustermgtd's LOOP_TIME 60 s, which replaces static nodes DOWN or DRAINED)."""

    name: str
    slurmd_timeout: int  # s without an answer before slurmctld marks a node down
    message_timeout: int
    cred_expire: int  # s a requeued job waits before it may start again
    kill_wait: int
    slurmctld_timeout: int | None = None  # None: Slurm's default, not written
    unkillable_step_timeout: int | None = None
    scheduler_parameters: str | None = None
    replace_nodes: bool = False  # whether the replacer daemon runs (clustermgtd's job)
    replace_loop_s: float = 1.0  # how often the replacer looks for failed nodes
    boot_delay_s: float = 0.0  # how long a replacement node takes to "boot"
    replacement: ReplacementStyle = ReplacementStyle.CLUSTERMGTD  # which nodes the replacer takes, and how

    def slurm_conf_lines(self) -> list[str]:
        """slurm.conf's failure-handling lines (cred_expire goes into AuthInfo, with the munge socket)."""
        lines = ["ReturnToService=1", "JobRequeue=1"]
        if self.slurmctld_timeout is not None:
            lines.append(f"SlurmctldTimeout={self.slurmctld_timeout}")
        lines += [f"SlurmdTimeout={self.slurmd_timeout}", f"MessageTimeout={self.message_timeout}"]
        if self.unkillable_step_timeout is not None:
            lines.append(f"UnkillableStepTimeout={self.unkillable_step_timeout}")
        lines += [f"KillWait={self.kill_wait}", "InactiveLimit=0", "MinJobAge=300"]
        if self.scheduler_parameters:
            lines.append(f"SchedulerParameters={self.scheduler_parameters}")
        return lines

    def describe(self) -> JsonObject:
        """What describe-cluster and a dry run show: the name, the timers that decide how long a failure
        costs, and what the replacer does."""
        shown = {"name": self.name, "SlurmdTimeout": self.slurmd_timeout, "MessageTimeout": self.message_timeout,
                 "cred_expire": self.cred_expire, "replace_nodes": self.replace_nodes}
        if self.replace_nodes:
            shown |= {"replace_loop_s": self.replace_loop_s, "boot_delay_s": self.boot_delay_s,
                      "replacement": self.replacement.value}
        return shown  # type: ignore[return-value]

    def to_json(self) -> JsonObject:
        return {"name": self.name, "replace_nodes": self.replace_nodes, "boot_delay_s": self.boot_delay_s,
                "replacement": self.replacement.value}

    @classmethod
    def from_json(cls, data: JsonObject | None) -> Timings:
        """The saved choice (a name and the two values a create may override); a record from before
        timings existed ran at test timings."""
        if not data:
            return TIMINGS["test"]
        named = TIMINGS[str(data["name"])]
        return dataclasses.replace(named, replace_nodes=bool(data["replace_nodes"]),
                                   boot_delay_s=float(data["boot_delay_s"]),  # type: ignore[arg-type]
                                   replacement=ReplacementStyle(data.get("replacement", "clustermgtd")))


TIMINGS = {
    "test": Timings("test", slurmd_timeout=5, message_timeout=5, cred_expire=5, kill_wait=5,
                    scheduler_parameters="bf_interval=1,sched_interval=2"),
    "parallelcluster": Timings("parallelcluster", slurmd_timeout=180, message_timeout=60, cred_expire=70,
                               kill_wait=30, slurmctld_timeout=300, unkillable_step_timeout=180,
                               replace_nodes=True, replace_loop_s=60.0, boot_delay_s=30.0),
}


def timings_named(name: str, replace_nodes: bool | None = None, boot_delay_s: float | None = None,
                  replacement: str | None = None) -> Timings:
    """A named set of timings with a create's overrides; a bad value is one error naming it and the fix.
    `replacement` (a ReplacementStyle's value) turns the replacer on; with `replace_nodes` False it is refused."""
    if name not in TIMINGS:
        raise ClusterkitError(f"--timings {name!r} is not a set of timings",
                              fix=f"use one of: {', '.join(TIMINGS)}")
    styles = [style.value for style in ReplacementStyle]
    if replacement is not None and replacement not in styles:
        raise ClusterkitError(f"--replacement {replacement!r} is not a way of replacing nodes",
                              fix=f"use one of: {', '.join(styles)}")
    if replacement is not None and replace_nodes is False:
        raise ClusterkitError(f"--replacement {replacement} with --no-replace-nodes: nothing would replace nodes",
                              fix="drop one of them")
    if boot_delay_s is not None and not 0 <= boot_delay_s <= 3600:
        raise ClusterkitError(f"--boot-delay {boot_delay_s:g} is out of range",
                              fix="give the seconds a replacement node takes to boot, 0 to 3600")
    named = TIMINGS[name]
    if replacement is not None:
        replace_nodes = True
    return dataclasses.replace(named, replace_nodes=named.replace_nodes if replace_nodes is None else replace_nodes,
                               boot_delay_s=named.boot_delay_s if boot_delay_s is None else float(boot_delay_s),
                               replacement=named.replacement if replacement is None else ReplacementStyle(replacement))


@lean_dataclass(frozen=True)
class LocalClusterConfig:
    """What a local cluster is: its name, nodes and the ports its daemons listen on."""

    name: str
    nodes: int
    cpus_per_node: int
    gpus_per_node: int
    memory_mb_per_node: int
    base_port: int  # slurmctld; slurmdbd is base+1; slurmd of node k is base+1+k; sshd after them
    controller_host: str  # this machine's short host name: slurmctld checks it
    ssh: bool = False  # an sshd for the head node (`create-cluster --ssh`): the cluster reached from afar
    timings: Timings = field(default_factory=lambda: TIMINGS["test"])
    slurm: str = slurms.HOST  # which Slurm it runs: the host's packages or a root (slurms.CHOICES)

    @property
    def slurm_root(self) -> Path | None:
        return slurms.root_of(self.slurm)

    @property
    def node_names(self) -> list[str]:
        return [f"n{k}" for k in range(1, self.nodes + 1)]

    @property
    def slurm_cluster_name(self) -> str:
        # Slurm lowercases cluster names and uses them in table names.
        return self.name.lower().replace("-", "_")

    @property
    def slurmctld_port(self) -> int:
        return self.base_port

    @property
    def slurmdbd_port(self) -> int:
        return self.base_port + 1

    def slurmd_port(self, node: str) -> int:
        return self.base_port + 1 + self.node_names.index(node) + 1

    @property
    def sshd_port(self) -> int:
        return self.base_port + 2 + self.nodes

    @property
    def ports(self) -> list[int]:
        ports = [self.slurmctld_port, self.slurmdbd_port] + [self.slurmd_port(n) for n in self.node_names]
        return ports + ([self.sshd_port] if self.ssh else [])


@lean_dataclass(frozen=True)
class LocalPlanDetails:
    """A local plan: the cluster's shape and ports, and the directory its files go to."""

    config: LocalClusterConfig
    directory: str

    @property
    def complete(self) -> bool:
        return True

    document = None  # no configuration file of the cluster's own to print or write (--output-config)
    prerequisites_template = None

    @property
    def where(self) -> str:
        return f"in {self.directory}"

    def notes(self) -> tuple[str, ...]:
        return ()

    def summary_lines(self) -> tuple[str, ...]:
        return ()

    def plan_fields(self) -> JsonObject:
        return {"details": {"directory": self.directory, "ports": list(self.config.ports),  # type: ignore[dict-item]
                            "timings": self.config.timings.describe(), "slurm": self.config.slurm}}


@lean_dataclass
class LocalClusterState:
    """What a local cluster's record keeps: its shape, and the processes it started (pid, start time, and for a
    node its mount namespace), so that describe and delete find exactly them."""

    config: LocalClusterConfig
    pids: dict[str, int] = field(default_factory=dict)
    start_times: dict[str, str | None] = field(default_factory=dict)
    namespaces: dict[str, str | None] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        config = self.config
        return {"nodes": config.nodes, "cpus_per_node": config.cpus_per_node, "gpus_per_node": config.gpus_per_node,
                "memory_mb_per_node": config.memory_mb_per_node, "base_port": config.base_port,
                "controller_host": config.controller_host, "ssh": config.ssh, "timings": config.timings.to_json(),
                "slurm": config.slurm,
                "pids": dict(self.pids),
                "start_times": dict(self.start_times), "namespaces": dict(self.namespaces)}  # type: ignore[dict-item]

    @classmethod
    def from_json(cls, name: str, data: JsonObject) -> LocalClusterState:
        config = LocalClusterConfig(
            name=name, nodes=int(data["nodes"]), cpus_per_node=int(data["cpus_per_node"]),  # type: ignore[arg-type]
            gpus_per_node=int(data["gpus_per_node"]),  # type: ignore[arg-type]
            memory_mb_per_node=int(data["memory_mb_per_node"]), base_port=int(data["base_port"]),  # type: ignore
            controller_host=str(data["controller_host"]), ssh=bool(data.get("ssh", False)),
            timings=Timings.from_json(data.get("timings")),  # type: ignore[arg-type]
            slurm=str(data.get("slurm", slurms.HOST)))  # a record from before the choice ran the host's

        def strings(key: str) -> dict[str, str | None]:
            return {str(k): None if v is None else str(v) for k, v in (data.get(key) or {}).items()}  # type: ignore

        return cls(config, pids={str(k): int(v) for k, v in (data.get("pids") or {}).items()},  # type: ignore
                   start_times=strings("start_times"), namespaces=strings("namespaces"))


def render_slurm_conf(config: LocalClusterConfig, layout: LocalLayout) -> str:
    nodes = config.node_names
    node_range = f"n[1-{config.nodes}]" if config.nodes > 1 else "n1"
    first_slurmd, last_slurmd = config.slurmd_port(nodes[0]), config.slurmd_port(nodes[-1])
    port_spec = f"[{first_slurmd}-{last_slurmd}]" if config.nodes > 1 else str(first_slurmd)
    gres = f" Gres=gpu:{config.gpus_per_node}" if config.gpus_per_node else ""
    lines = [
        f"# clusterkit local cluster {config.name!r}: generated, do not edit.",
        f"ClusterName={config.slurm_cluster_name}",
        f"SlurmctldHost={config.controller_host}(127.0.0.1)",
        f"SlurmctldPort={config.slurmctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        # Our own munged, on its own key and socket; the credential lifetime is the timings' (a requeued
        # job waits that long before it may start again).
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket},cred_expire={config.timings.cred_expire}",
        f"StateSaveLocation={layout.state}",
        f"SlurmdSpoolDir={layout.spool}/%n",
        f"SlurmctldPidFile={layout.pid_file('slurmctld')}",
        f"SlurmdPidFile={layout.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={layout.log}/slurmctld.log",
        f"SlurmdLogFile={layout.log}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # Many slurmd on one host without cgroups: track processes by parent, no task binding.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides",
        "MpiDefault=none",
        "MailProg=/bin/true",
        *config.timings.slurm_conf_lines(),
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=localhost",
        f"AccountingStoragePort={config.slurmdbd_port}",
        f"AccountingStoragePass={layout.munge_socket}",
        "JobCompType=jobcomp/none",
    ]
    if config.gpus_per_node:
        lines += ["GresTypes=gpu", "AccountingStorageTRES=gres/gpu"]
    lines += [
        f"NodeName={node_range} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port_spec} "
        f"CPUs={config.cpus_per_node} RealMemory={config.memory_mb_per_node}{gres} State=UNKNOWN",
        f"PartitionName=compute Nodes={node_range} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
    ]
    return "\n".join(lines) + "\n"


def render_gres_conf(config: LocalClusterConfig, layout: LocalLayout) -> str:
    if not config.gpus_per_node:
        return "# no GPUs\n"
    last = config.gpus_per_node - 1
    files = f"{layout.gpu_devices}/gpu[0-{last}]" if last else f"{layout.gpu_devices}/gpu0"
    # Fake GPUs: gres needs one character device per GPU; symlinks to /dev/null serve.
    return f"AutoDetect=off\nName=gpu File={files}\n"


ACCOUNTING_DATABASE = "slurm_acct_db"  # slurmdbd's database in the cluster's own MariaDB


def render_slurmdbd_conf(config: LocalClusterConfig, layout: LocalLayout) -> str:
    return "\n".join([
        "AuthType=auth/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        "DbdHost=localhost",
        f"DbdPort={config.slurmdbd_port}",
        "SlurmUser=root",
        f"LogFile={layout.log}/slurmdbd.log",
        f"PidFile={layout.pid_file('slurmdbd')}",
        "StorageType=accounting_storage/mysql",
        "StorageHost=localhost",
        "StorageUser=root",
        f"StorageLoc={ACCOUNTING_DATABASE}",
        "",
    ])


def render_mysql_conf(layout: LocalLayout) -> str:
    # Socket only (no TCP port), and small InnoDB files: this database holds a few job records.
    return "\n".join([
        "[mysqld]",
        f"datadir={layout.mysql_data}",
        f"socket={layout.mysql_socket}",
        f"pid-file={layout.pid_file('mariadb')}",
        f"log-error={layout.log}/mariadb.log",
        "user=root",
        "skip-networking",
        "skip-name-resolve",
        "performance_schema=off",
        "innodb_log_file_size=8M",
        "innodb_buffer_pool_size=32M",
        "innodb_data_file_path=ibdata1:4M:autoextend",
        "innodb_doublewrite=0",
        "innodb_flush_log_at_trx_commit=2",
        "",
        "[client]",
        f"socket={layout.mysql_socket}",
        "",
    ])


def render_hyperpod_resource_config(config: LocalClusterConfig) -> str:
    """HyperPod's resource config as its nodes carry it (the fields its lifecycle scripts read): what makes clusterkit
    on a node of a cluster that replaces nodes as HyperPod does (`slurm.flavor_of`) act as on HyperPod."""
    instances = [{"InstanceName": node, "InstanceId": f"local-{config.name}-{node}", "CustomerIpAddress": "127.0.0.1"}
                 for node in config.node_names]
    document = {"ClusterConfig": {"ClusterArn": f"local:{config.name}", "ClusterName": config.name},
                "InstanceGroups": [{"Name": "compute", "InstanceType": "local", "Instances": instances}]}
    return json.dumps(document, indent=2) + "\n"


def render_hosts(config: LocalClusterConfig) -> str:
    """The /etc/hosts every node's daemons and jobs see: node names resolve to this machine."""
    names = " ".join(config.node_names)
    return (
        f"127.0.0.1\tlocalhost {config.controller_host} {names}\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
    )


def render_launcher(root: Path) -> str:
    """The launcher of a cluster on a Slurm root: runs the command it is called as (a link named after a client
    command) or is given, with the root's /usr over /usr. In such a namespace already (a job step, a daemon) it
    only runs the root's command: a second namespace would hide a step's processes from its node's."""
    return "\n".join([
        "#!/bin/sh",
        "# clusterkit: Slurm from " + str(root) + " (generated, do not edit).",
        f"root={shlex.quote(str(root))}",
        'command=$(basename "$0")',
        'if [ "$command" = slurm-root ]; then command=$1; shift; fi',
        'self=$(dirname "$0")/slurm-root',
        'if [ /usr -ef "$root/usr" ]; then',
        '  case "$command" in',
        '    */*) exec "$command" "$@" ;;',
        "  esac",
        '  for dir in /usr/bin /usr/sbin; do [ -x "$dir/$command" ] && exec "$dir/$command" "$@"; done',
        '  echo "slurm-root: no $command in $root" >&2; exit 127',
        "fi",
        # Slave propagation: mounts made on this machine later still reach the command.
        'exec unshare --mount --propagation slave -- sh -c \'mount --rbind "$0/usr" /usr && exec "$@"\' '
        '"$root" "$self" "$command" "$@"',
        "",
    ])


SSHD_PRIVSEP_DIR = Path("/run/sshd")  # Debian's sshd refuses to start without it


def render_sshd_config(config: LocalClusterConfig, layout: LocalLayout, path: str) -> str:
    """The head node's sshd: this machine's loopback only, key login only, Slurm's config and the
    driving Python on the PATH of every session (what a login node of a real cluster gives)."""
    return "\n".join([
        f"# sshd of clusterkit local cluster {config.name!r}: generated, do not edit.",
        f"Port {config.sshd_port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {layout.ssh_host_key}",
        f"PidFile {layout.pid_file('sshd')}",
        f"AuthorizedKeysFile {layout.authorized_keys}",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "PrintMotd no",
        f"SetEnv SLURM_CONF={layout.slurm_conf}",
        # The login shell's profile may put other interpreters first (pyenv shims, modules): the command
        # itself runs with the cluster's PATH, as the local cluster's own jobs do.
        f'ForceCommand exec env PATH={path} sh -c "$SSH_ORIGINAL_COMMAND"',
        "",
    ])
