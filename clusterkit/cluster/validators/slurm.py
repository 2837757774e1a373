"""Slurm: settings against ParallelCluster's deny lists and slurm.conf's syntax (a value hiding a second
setting), queue update strategy, room for the GPU health check's prolog, and the accounting database."""

from __future__ import annotations

import re
from collections.abc import Iterator

from clusterkit.cluster.render import (
    GPU_HEALTH_CHECK_BATCH_START_TIMEOUT_S,
    GPU_HEALTH_CHECK_TIMEOUT_S,
    batch_start_timeout_key,
    gpu_health_check_queues,
)
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.validators.common import compute_resources, matches, suggest
from clusterkit.findings import Finding, error, info, shorten, warning

QUEUE_UPDATE_STRATEGIES = ("DRAIN", "COMPUTE_FLEET_STOP", "TERMINATE")
# slurm.conf keys ParallelCluster manages itself (lower case: Slurm keys are case-insensitive).
SLURM_DENIED_SETTINGS = frozenset((
    "epilog", "grestypes", "launchparameters", "prolog", "reconfigflags", "resumefailprogram", "resumeprogram",
    "resumetimeout", "slurmctldhost", "slurmctldlogfile", "slurmctldparameters", "slurmdlogfile", "slurmuser",
    "suspendexcnodes", "suspendprogram", "suspendtime", "taskplugin", "treewidth",
))
SLURM_DENIED_WITH_ACCOUNTING = frozenset((
    "accountingstoragetype", "accountingstoragehost", "accountingstorageport", "accountingstorageuser",
    "jobacctgathertype",
))
SLURM_DENIED_NODE_SETTINGS = frozenset(("cpus", "gres", "nodeaddr", "nodehostname", "nodename", "state", "weight"))
SLURM_KEY_RE = r"[A-Za-z][A-Za-z0-9]*"
# A slurm.conf value: one word, or all of it in double quotes. Outside quotes a space ends the value and what
# follows is read as the line's next `Key=value`; `#` starts a comment even inside quotes (a separate check).
SLURM_VALUE_RE = r'[^\s"]*|"[^"]*"'
# A value that hides a second `Key=value` (slurm.conf lines hold several, separated by spaces).
SLURM_SECOND_SETTING_RE = r"\s[A-Za-z][A-Za-z0-9]*="
SECRET_ARN_RE = r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+"
DATABASE_URI_RE = r"(?P<host>[A-Za-z0-9.-]+)(:(?P<port>\d{1,5}))?"
DATABASE_USER_RE = r"[A-Za-z0-9_.@-]{1,32}"  # one word: it lands in slurmdbd.conf


def _slurm_settings_findings(path: str, settings: dict[str, str], denied: frozenset[str], level: str
                             ) -> Iterator[Finding]:
    for key, value in settings.items():
        field = f"{path}.{key}"
        if not matches(SLURM_KEY_RE, key):
            yield error(field, "a slurm.conf key holds only letters and digits", "e.g. RequeueExit", key)
        elif key.lower() in denied:
            yield error(field, f"ParallelCluster manages {key} itself and rejects it at {level} level",
                        f"remove {key}", value)
        if "#" in value:
            yield error(field, f"{shorten(value)!r} holds `#`, which starts a comment in slurm.conf even inside "
                        "quotes: the value would end there", "remove the `#`", value)
        elif not matches(SLURM_VALUE_RE, value):
            if re.search(SLURM_SECOND_SETTING_RE, value):
                yield error(field, "the value hides a second `Key=value` setting (slurm.conf reads every word of a "
                            "line)", "give each setting its own key", value)
            else:
                yield error(field, f"{shorten(value)!r}: a space outside double quotes ends a slurm.conf value (the "
                            'rest is read as another setting), and a `"` may only wrap the whole value',
                            'write one word, or wrap the whole value in double quotes ("a b")', value)


def slurm_settings(spec: ClusterSpec) -> Iterator[Finding]:
    slurm = spec.slurm
    if slurm.scaledown_idletime is not None and slurm.scaledown_idletime < -1:
        yield error("slurm.scaledown_idletime", "scaledown_idletime must be -1 (never) or more minutes",
                    "e.g. 10", slurm.scaledown_idletime)
    strategy = slurm.queue_update_strategy
    if strategy is not None and strategy not in QUEUE_UPDATE_STRATEGIES:
        yield error("slurm.queue_update_strategy", f"unknown queue update strategy {strategy!r}",
                    suggest(strategy, QUEUE_UPDATE_STRATEGIES), strategy)
    denied = SLURM_DENIED_SETTINGS | (SLURM_DENIED_WITH_ACCOUNTING if slurm.accounting else frozenset())
    yield from _slurm_settings_findings("slurm.custom_settings", slurm.custom_settings, denied, "cluster")
    for key, value in slurm.custom_settings.items():
        if key.lower() == "jobrequeue":
            yield warning(f"slurm.custom_settings.{key}", f"{key}={value} here wins over slurm.job_requeue",
                          "use slurm.job_requeue: true/false instead", value)
    for _, _, path, compute in compute_resources(spec):
        yield from _slurm_settings_findings(f"{path}.slurm_settings", compute.slurm_settings,
                                            SLURM_DENIED_NODE_SETTINGS, "compute resource")


def gpu_health_check_room(spec: ClusterSpec) -> Iterator[Finding]:
    """A BatchStartTimeout of the spec's own that leaves ParallelCluster's GPU health check too little time: the
    DCGM prolog runs before every job and requeue, and a job whose prolog outlasts it fails to start ("Prolog
    hung", aws/aws-parallelcluster known issue #6777). Without one, the config gives the check its room."""
    key = batch_start_timeout_key(spec)
    queues = gpu_health_check_queues(spec)
    if key is None or not queues:
        return
    value = spec.slurm.custom_settings[key]
    field = f"slurm.custom_settings.{key}"
    room = GPU_HEALTH_CHECK_BATCH_START_TIMEOUT_S
    if not value.isdigit():
        yield error(field, f"{key} is a whole number of seconds", f"e.g. {room}", value)
    elif int(value) < room:
        yield warning(field, f"queues[{queues[0]}] runs ParallelCluster's GPU health check (DCGM) in the prolog of "
                      f"every job, which may take up to {GPU_HEALTH_CHECK_TIMEOUT_S} s; {key}={value} gives the job's "
                      "start less, and a job whose prolog outlasts it fails to start (\"Prolog hung\", ParallelCluster "
                      "known issue #6777)", f"set {key} to {room} or more (or leave it out: clusterkit then writes "
                      f"{room}), or gpu_health_checks: false on the queue", value)


def slurm_accounting(spec: ClusterSpec) -> Iterator[Finding]:
    accounting = spec.slurm.accounting
    if accounting is None:
        yield warning("slurm.accounting", "no Slurm accounting database: sacct cannot tell how jobs ended, "
                      "so clusterkit's job tracking (requeues, watch) and its preflight will not work",
                      "set slurm.accounting: create (a small RDS database of clusterkit's own), or uri, "
                      "user_name, password_secret_arn of a MySQL-compatible database such as Amazon RDS or Aurora")
        return
    given = [key for key in ("uri", "user_name", "password_secret_arn") if getattr(accounting, key) is not None]
    if accounting.create and len(given) < 3:  # all three: filled in from the prerequisites stack
        if given:
            yield error(f"slurm.accounting.{given[0]}", "accounting: create makes its own database; its address, "
                        "user and secret come from the prerequisites stack", "leave out uri, user_name and "
                        "password_secret_arn, or create: false to use that database", None)
        else:
            yield info("slurm.accounting", "the config holds placeholders for the database until clusterkit's "
                       "prerequisites stack makes it at create (RDS for MySQL, encrypted, reachable from the head "
                       "node only, its password in Secrets Manager)", "set accounting: none to go without one")
        return
    missing = [key for key in ("uri", "user_name", "password_secret_arn") if key not in given]
    if missing:
        yield error(f"slurm.accounting.{missing[0]}", f"an existing accounting database needs "
                    f"{', '.join(missing)}", "give uri, user_name and password_secret_arn, or write "
                    "accounting: create for a database of clusterkit's own")
        return
    uri = re.fullmatch(DATABASE_URI_RE, accounting.uri)
    if uri is None:
        fix = ("write host:port without a scheme" if "://" in accounting.uri
               else "write host:port, e.g. slurm-db.cluster-abc.us-east-1.rds.amazonaws.com:3306")
        yield error("slurm.accounting.uri", "the database address is host:port (no scheme, no path)", fix,
                    accounting.uri)
    elif uri["port"] is not None and not 0 < int(uri["port"]) < 65536:
        yield error("slurm.accounting.uri", f"port {uri['port']} is not a TCP port", "e.g. 3306", accounting.uri)
    if not matches(DATABASE_USER_RE, accounting.user_name):
        yield error("slurm.accounting.user_name", "the database user is one word of letters, digits and _ . @ - "
                    "(at most 32; it is written into slurmdbd.conf)", "e.g. slurm", accounting.user_name)
    if not matches(SECRET_ARN_RE, accounting.password_secret_arn):
        yield error("slurm.accounting.password_secret_arn", "the database password must be a Secrets Manager "
                    "secret ARN, never the password itself", "store it in Secrets Manager and give its ARN",
                    "<hidden>")
