"""The cluster agent: recovery for what the in-job supervisor cannot see, from outside every job (HyperPod's health
agents, on plain Slurm).

`python -m clusterkit.resilience.agent [--log FILE]` runs where Slurm's commands work with an operator's rights: one
more daemon of a local cluster, a service on a ParallelCluster head node (node-scripts/clusterkit-agent.sh). Every
`--interval` seconds it reads the queue once and, for each clusterkit job (its comment names its beacons' directory,
set by the supervisor):

- a running job's node whose liveness beacon went silent and that does not answer a probe is marked DOWN with
  the evidence as reason. For the batch host only the agent can: the supervisor, which watches the job's other
  nodes, runs there and dies with it; for the others it can where the supervisor, an ordinary user's process on
  ParallelCluster, may not. Slurm alone would wait SlurmdTimeout (180 s on ParallelCluster) to notice. DOWN makes
  Slurm requeue the job at once (or take the node out of a --no-kill allocation), and ParallelCluster's
  clustermgtd replace the node; on SageMaker HyperPod it is then also marked FAIL with HyperPod's "Action:Replace"
  (node_marks.py), HyperPod's own way to ask for a replacement from Slurm.
- a job whose batch host it marked DOWN is requeued (Slurm keeps a --no-kill job, one with spares, running without
  its batch script);
- a job one of whose nodes it marked DOWN and that then stays COMPLETING on its other nodes (their step daemons
  report to the dead host) has those nodes let go (DOWN, then at once RESUME), where no other job runs on them, and
  holds them in a reservation while a step of root's own ends those step daemons there (stale_steps.py; the requeued
  job must not meet them), or, should that fail, until they have given up by themselves (6 x MessageTimeout);
- a job it saw running that is now pending on its BeginTime within the credential lifetime of now (Slurm holds a
  requeued job until the credentials of its last run expire: `cred_expire`, 70 s on ParallelCluster) is released
  (`scontrol update JobId=X StartTime=now`), REVOCATION_MARGIN_S after the requeue. The launch credentials it waits
  out are signed with their creation time; a new run's, seconds newer than the revocation, are taken by slurmd.

Each act is a JSON line in the log: what was seen, the evidence, what was done.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from clusterkit import runtime
from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.resilience import beacon, stale_steps
from clusterkit.resilience.node_marks import marks_for
from clusterkit.slurm import Flavor, Slurm, flavor_of

INTERVAL_S = 1.0
DEFAULT_CRED_EXPIRE_S = 120  # Slurm's own, where AuthInfo does not say
_QUEUE_FORMAT = "%A|%T|%B|%r|%S|%N|%k"  # the comment last: it may hold the separator
# Slurm's credential times are whole seconds: a run started in the second its predecessor's credentials were revoked
# can be refused by slurmd (seen once under load: a job released at once after its requeue ended FAILED at its start).
REVOCATION_MARGIN_S = 3
LINGER_PREFIX = "clusterkit-linger"  # the reservation that keeps jobs off a let-go node while its stale step lingers
# What Slurm itself drains such a node for meanwhile, when the stale step outlasts UnkillableStepTimeout.
UNKILLABLE_REASON = "Kill task failed"
# A step daemon tries its dead parent this many times (Slurm's REVERSE_TREE_PARENT_RETRY, 5, and the first), each up
# to MessageTimeout, before it reports to the controller and ends.
PARENT_TRIES = 6
# After a node of it is marked DOWN, how long a job may stay COMPLETING on its other nodes before they are let go.
COMPLETING_GRACE_S = 5.0
# A node other than the batch host is the supervisor's to judge first; the agent, its backstop, waits this much
# longer (a supervisor without the right to mark a node still gets it marked well within 15 s).
BACKSTOP_S = beacon.SILENCE_S
STALE_STEPS_JOB_NAME = "clusterkit-stale-steps"
STALE_STEPS_TIMEOUT_S = 30.0  # a job start and a look at /proc, on a node no other job holds
# slurmd's thread that ends the old run (_pause_for_job_completion) looks again every 10 s once it has waited 10 s,
# and SIGKILLs whatever runs of that job id when it does: the requeued run's steps, were they there by then.
SLURMD_TERMINATE_LOOP_S = 12.0


@lean_dataclass(frozen=True)
class QueuedJob:
    job_id: str
    state: str
    batch_host: str
    reason: str
    start: str  # StartTime as squeue prints it (the expected start of a pending job)
    nodes: str  # the nodes it holds (of a COMPLETING job: those still completing), compact
    beacons: str  # the directory in the job's comment, '' for a job that is not clusterkit's


@lean_dataclass(frozen=True)
class AgentEvent:
    """One act of the agent, as its log keeps it."""

    event: str  # marked_down, requeued, let_go, returned, released, answered (a probe answered), *_failed
    unix: float
    job: str
    node: str = ""
    evidence: str = ""


@lean_dataclass(frozen=True)
class HeldBack:
    """A node let go of a job, held in its reservation until its stale step daemon is surely gone."""

    job_id: str
    until: float  # monotonic
    ended: str = ""  # the evidence that the agent ended the daemon, '' while it waits for it to give up


def linger_reservation(job_id: str, node: str) -> str:
    """The reservation that holds a node let go of `job_id` while its stale step daemon lingers."""
    return f"{LINGER_PREFIX}-{job_id}-{node}"


def read_agent_log(path: Path) -> list[AgentEvent]:
    """The agent's acts, oldest first (a line cut short by a crash is skipped)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    events = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            events.append(AgentEvent(str(entry["event"]), float(entry["unix"]), str(entry["job"]),
                                     str(entry.get("node", "")), str(entry.get("evidence", ""))))
        except (ValueError, KeyError, TypeError):
            continue
    return events


def parse_queue(output: str) -> list[QueuedJob]:
    """squeue's lines in _QUEUE_FORMAT; a job whose comment does not name beacons has beacons ''."""
    jobs = []
    for line in output.splitlines():
        fields = line.split("|", 6)
        if len(fields) != 7:
            continue
        comment = fields[6].strip()
        beacons = comment.removeprefix(runtime.BEACONS_COMMENT_PREFIX) if comment.startswith(
            runtime.BEACONS_COMMENT_PREFIX) else ""
        jobs.append(QueuedJob(fields[0].strip(), fields[1].strip(), fields[2].strip(), fields[3].strip(),
                              fields[4].strip(), fields[5].strip(), beacons))
    return jobs


def slurm_seconds(value: str, default: int) -> int:
    """A duration as `scontrol show config` prints it ("60 sec"), else `default`."""
    number = value.split()[0] if value.split() else ""
    return int(number) if number.isdigit() else default


def cred_expire_of(auth_info: str) -> int:
    """`cred_expire` from slurm.conf's AuthInfo (`socket=...,cred_expire=70`), else Slurm's default."""
    for part in auth_info.split(","):
        key, _, value = part.partition("=")
        if key.strip() == "cred_expire" and value.strip().isdigit():
            return int(value)
    return DEFAULT_CRED_EXPIRE_S


def held_for_credentials(job: QueuedJob, now: dt.datetime, cred_expire: int) -> bool:
    """Whether a pending job waits on the BeginTime that a requeue sets (now + cred_expire + 1 at most)."""
    if job.state != "PENDING" or job.reason != "BeginTime":
        return False
    try:
        start = dt.datetime.fromisoformat(job.start)
    except ValueError:
        return False
    return (start - now).total_seconds() <= cred_expire + 2


def releasable(job: QueuedJob, now: dt.datetime, cred_expire: int) -> bool:
    """Whether a job held for its credentials may start now: REVOCATION_MARGIN_S after its requeue (the hold then
    ends at most cred_expire + 1 - margin from now)."""
    if not held_for_credentials(job, now, cred_expire):
        return False
    start = dt.datetime.fromisoformat(job.start)
    return (start - now).total_seconds() <= cred_expire + 1 - REVOCATION_MARGIN_S


class Agent:
    def __init__(self, slurm: Slurm, log: Path | None = None, silence_s: float = beacon.SILENCE_S,
                 probe_s: float = beacon.PROBE_S, flavor: Flavor | None = None) -> None:
        self.slurm = slurm
        # How a gone node is marked (node_marks.py): on HyperPod also for HyperPod's replacement. None: this node's.
        self.flavor = flavor if flavor is not None else flavor_of()
        self.log = log
        self.silence_s = silence_s
        self.probe_s = probe_s
        config = slurm.config()
        self.cred_expire = cred_expire_of(config.get("AuthInfo", ""))
        self.watches: dict[str, beacon.BeaconWatch] = {}  # job -> its nodes' beacons' watch
        self.expanded: dict[str, list[str]] = {}  # a compact node list -> its names
        self.seen_running: set[str] = set()
        self.marked: dict[tuple[str, str], float] = {}  # (job, node) -> when it was marked DOWN (monotonic)
        self.held_back: dict[str, HeldBack] = {}  # node let go of a job -> until when it is held
        timeout = slurm_seconds(config.get("MessageTimeout", ""), 10)
        self.linger_s = PARENT_TRIES * timeout + 5
        self._record_lock = threading.Lock()  # the stale-step ends record from worker threads

    def record(self, event: str, **details: object) -> None:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "unix": round(time.time(), 3), "event": event,
                 **details}
        with self._record_lock:
            print(" ".join(f"{key}={value}" for key, value in entry.items()), flush=True)
            if self.log is not None:
                with open(self.log, "a") as handle:
                    handle.write(json.dumps(entry) + "\n")

    def queue(self) -> list[QueuedJob]:
        result = self.slurm.run("squeue", "-h", "-a", "-t", "RUNNING,PENDING,COMPLETING", "-o", _QUEUE_FORMAT)
        return [job for job in parse_queue(result.stdout) if job.beacons]

    def once(self) -> None:
        """One look at the queue: watch, probe, mark, release."""
        jobs = self.queue()
        now_local = dt.datetime.now()
        for job in jobs:
            if job.state == "RUNNING" and job.batch_host:
                self.seen_running.add(job.job_id)
                self._watch_nodes(job)
            elif job.state == "COMPLETING":
                self._let_go_of_completing(job)
            elif job.job_id in self.seen_running and releasable(job, now_local, self.cred_expire):
                self._release(job)
        self._return_held_back()
        running = {job.job_id for job in jobs if job.state == "RUNNING"}
        for job_id in set(self.watches) - running:
            del self.watches[job_id]
        self.seen_running &= {job.job_id for job in jobs}

    def _nodes_of(self, job: QueuedJob) -> list[str]:
        if job.nodes not in self.expanded:
            self.expanded[job.nodes] = self.slurm.hostnames(job.nodes)
        return self.expanded[job.nodes]

    def _watch_nodes(self, job: QueuedJob) -> None:
        """Probe each node of the job whose beacon went silent; mark the ones that do not answer DOWN. The batch host
        is the one only the agent can judge; the others' supervisor judges them too, but may lack the right to mark
        a node (an ordinary user on ParallelCluster)."""
        now = time.monotonic()
        watch = self.watches.setdefault(job.job_id, beacon.BeaconWatch(job.beacons, now, self.silence_s))
        nodes = [node for node in self._nodes_of(job) if (job.job_id, node) not in self.marked]
        for silence in watch.silent(nodes, now):
            node = silence.node
            if node != job.batch_host and silence.seconds <= self.silence_s + BACKSTOP_S:
                continue
            answer = beacon.probe(self.slurm, node, job.job_id, self.probe_s)
            if not answer:
                watch.alive(node, time.monotonic())
                self.record("answered", job=job.job_id, node=node, silent_s=round(silence.seconds, 1))
                continue
            evidence = beacon.evidence(silence, answer)
            try:
                for mark in marks_for(node, evidence, True, self.flavor, who="clusterkit agent"):
                    self.slurm.update_node(mark.node, mark.state, mark.reason)
            except ClusterkitError as error:
                self.record("mark_failed", job=job.job_id, node=node, evidence=evidence, error=str(error))
                continue
            self.marked[(job.job_id, node)] = time.monotonic()
            self.record("marked_down", job=job.job_id, node=node,
                        role="batch host" if node == job.batch_host else "node", evidence=evidence,
                        **({"replacement": "asked of HyperPod"} if self.flavor is Flavor.HYPERPOD else {}))
            if node == job.batch_host:
                self._requeue(job)

    def _requeue(self, job: QueuedJob) -> None:
        """Requeue a job whose batch host is gone. Slurm does so itself for most jobs when the host goes DOWN, but
        keeps a --no-kill one (a job with spares) RUNNING on its other nodes with no batch script, for ever."""
        result = self.slurm.run("scontrol", "requeue", job.job_id, check=False)
        if result.returncode == 0:
            self.record("requeued", job=job.job_id, node=job.batch_host, evidence="its batch host is gone")
        elif "pending" not in result.stderr.lower():  # pending: Slurm requeued it already
            self.record("requeue_failed", job=job.job_id, error=result.stderr.strip()[:200])

    def _let_go_of_completing(self, job: QueuedJob) -> None:
        """A job one of whose nodes (its batch host, say) we marked DOWN stays COMPLETING on its other nodes while their
        step daemons report to the dead host (Slurm's reverse tree: MessageTimeout, 60 s on ParallelCluster, several
        times over). Once that lasts COMPLETING_GRACE_S, each such node that holds no other job is set DOWN and at
        once RESUMEd (the administrator's way to clear a job stuck completing), so that the requeued job can start,
        held meanwhile in a reservation of its own until its stale step daemon is gone, ended by a step of root's own
        there or given up by itself (`linger_s`): the requeued job, the same job id, must not land there meanwhile
        (Slurm's kill of the old run reaches the new run's tasks there, and its steps fail). A
        reservation, not a drain: ParallelCluster's clustermgtd replaces a drained idle node (terminate_drain_nodes),
        which would cost a healthy instance, and ignores reservations that are not its own (its
        StaticNode.is_state_healthy and _find_unhealthy_slurm_nodes); the reservation ends by itself."""
        marked = [when for (job_id, _), when in self.marked.items() if job_id == job.job_id]
        if not marked or time.monotonic() - max(marked) < COMPLETING_GRACE_S or not job.nodes:
            return
        dead = {host for job_id, host in self.marked if job_id == job.job_id}
        let_go_at = time.time()
        let_go = []
        for node in self.slurm.hostnames(job.nodes):
            if node in dead or self._other_jobs_on(node, job.job_id):
                continue
            reason = f"clusterkit agent: job {job.job_id} completing behind its dead node"
            try:
                # The reservation first: the requeued job, pending for these very nodes, would take one the moment
                # it is RESUMEd, and meet the stale step daemon there.
                self.slurm.run("scontrol", "create", "reservation",
                               f"ReservationName={linger_reservation(job.job_id, node)}", f"Nodes={node}",
                               "StartTime=now", f"Duration={math.ceil(self.linger_s / 60)}", "Users=root",
                               "Flags=IGNORE_JOBS")
                self.slurm.update_node(node, "DOWN", reason)
                self.slurm.update_node(node, "RESUME")
            except ClusterkitError as error:
                self.record("let_go_failed", job=job.job_id, node=node, error=str(error))
                continue
            self.record("let_go", job=job.job_id, node=node, evidence=reason)
            let_go.append(node)
        if let_go:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(let_go), 16)) as pool:
                ended = list(pool.map(lambda node: self._end_stale_steps(job.job_id, node, let_go_at), let_go))
            for node, evidence in zip(let_go, ended):
                held_for = SLURMD_TERMINATE_LOOP_S if evidence else self.linger_s
                self.held_back[node] = HeldBack(job.job_id, time.monotonic() + held_for, evidence)
        for key in [key for key in self.marked if key[0] == job.job_id]:
            self.marked[key] = time.monotonic()  # look again after another grace, not every loop

    def _end_stale_steps(self, job_id: str, node: str, before: float) -> str:
        """End the stale step daemons of `job_id` on `node` (held in its reservation: no other job is there) by a step
        of root's own there; the evidence, or '' where that failed and the node waits them out (`linger_s`). The
        agent's own Python runs it: clusterkit's virtualenv is on shared storage."""
        partitions = self.slurm.run("sinfo", "-h", "-n", node, "-o", "%R", check=False).stdout.split()
        command = ["srun", f"--reservation={linger_reservation(job_id, node)}", "-N1", "-n1", "-w", node, "--quiet",
                   "--time=1", f"--job-name={STALE_STEPS_JOB_NAME}",
                   *([f"--partition={','.join(partitions)}"] if partitions else []),
                   sys.executable, "-m", stale_steps.__name__, job_id, f"--before={before:.3f}"]
        try:
            result = self.slurm.run(*command, check=False, timeout=STALE_STEPS_TIMEOUT_S)
        except ClusterkitError as error:
            self.record("end_stale_steps_failed", job=job_id, node=node, error=str(error)[:200])
            return ""
        if result.returncode != 0:
            self.record("end_stale_steps_failed", job=job_id, node=node,
                        error=(result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1][:200])
            return ""
        return f"its stale step daemons ended ({result.stdout.strip()[:200]})"

    def _return_held_back(self) -> None:
        """Once a let-go node's stale step daemon is surely gone (ended, and slurmd's own loop has seen it; or given up
        by itself), end its reservation (whole minutes: it would end by itself up to a minute later, or should the
        agent stop), and RESUME the node if Slurm drained it meanwhile for that same stale step (it outlasted
        UnkillableStepTimeout)."""
        due = [node for node, held in self.held_back.items() if time.monotonic() >= held.until]
        if not due:
            return
        states = {info.name: info for info in self.slurm.nodes()}
        for node in due:
            held = self.held_back.pop(node)
            self.slurm.run("scontrol", "delete", f"ReservationName={linger_reservation(held.job_id, node)}",
                           check=False)
            info = states.get(node)
            drained_for_it = info is not None and info.reason.startswith(UNKILLABLE_REASON)
            if drained_for_it:
                self.slurm.update_node(node, "RESUME")
            if held.ended or drained_for_it:
                self.record("returned", job=held.job_id, node=node,
                            evidence=held.ended or "its stale step daemon has given up")

    def _other_jobs_on(self, node: str, job_id: str) -> bool:
        result = self.slurm.run("squeue", "-h", "-a", "-w", node, "-o", "%A", check=False)
        return any(line.strip() not in ("", job_id) for line in result.stdout.splitlines())

    def _release(self, job: QueuedJob) -> None:
        try:
            self.slurm.run("scontrol", "update", f"JobId={job.job_id}", "StartTime=now")
        except ClusterkitError as error:
            self.record("release_failed", job=job.job_id, error=str(error))
            return
        self.seen_running.discard(job.job_id)
        self.record("released", job=job.job_id, held_until=job.start,
                    because=f"requeued: held until its last run's credentials expire (cred_expire={self.cred_expire})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusterkit.resilience.agent",
                                     description="watch clusterkit jobs' nodes; release requeued jobs")
    parser.add_argument("--log", type=Path, default=None, help="append each act as a JSON line here")
    parser.add_argument("--pid-file", type=Path, default=None)
    parser.add_argument("--interval", type=float, default=INTERVAL_S)
    parser.add_argument("--beacon-timeout", type=float, default=beacon.SILENCE_S,
                        help="seconds of a silent beacon before its node is probed")
    parser.add_argument("--probe-timeout", type=float, default=beacon.PROBE_S)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.log is not None:
        args.log.parent.mkdir(parents=True, exist_ok=True)
    if args.pid_file is not None:
        args.pid_file.write_text(f"{os.getpid()}\n")
    agent = None
    while True:
        started = time.monotonic()
        try:
            agent = agent or Agent(Slurm(), args.log, args.beacon_timeout, args.probe_timeout)
            agent.once()
        except ClusterkitError as error:  # the controller restarting: next loop
            print(f"loop failed: {error}", flush=True)
        time.sleep(max(0.0, args.interval - (time.monotonic() - started)))


if __name__ == "__main__":
    sys.exit(main())
