"""The in-job supervisor: HyperPod-style recovery on plain Slurm.

The batch script runs the training step under `python -m clusterkit.resilience.supervisor -- srun ...`.
When the step fails the supervisor tells apart

- a node failure (a node not responding, or its health check failing): drain the node with the
  evidence as reason and requeue the job, so that it restarts on healthy nodes; a node that is gone (its liveness
  beacon silent and a probe unanswered, see beacon.py; or its health check unable to reach it) is marked DOWN
  instead, within seconds and without waiting for Slurm's SlurmdTimeout (180 s on ParallelCluster), so that Slurm
  lets go of it at once and ParallelCluster replaces it; on SageMaker HyperPod the node is also marked for HyperPod's
  own replacement (State=FAIL Reason=Action:Replace, node_marks.py). A supervised step is rendered without HyperPod's
  `--auto-resume=1`: the supervisor alone restarts it, so a failure spends the restart budget once; a node of the
  step that HyperPod's health agent (or an operator) marks for replacement while the step runs on unharmed
  (Reason=Action:Replace or Action:Reboot, read every MARK_CHECK_S) is a node failure too, after the ranks saved a
  checkpoint: HyperPod replaces a node only once no job holds it, so the run moves off it without losing a step;
  where the job holds spare nodes (`--spares`, the job spec's `supervise.spares`, with --no-kill) and a healthy
  one is left for each bad node, relaunch the step instead on its healthy nodes and the spares, in the same
  allocation (no requeue, no scheduling); Slurm takes a node it sets DOWN out of the --no-kill allocation itself
  (a drained one stays held, unused, until the job ends);
- a hang (no heartbeat progress for `--hang-timeout` seconds, or no heartbeat at all for `--startup-timeout`
  seconds after the step started): stop the step, check the nodes, then requeue (bad node) or retry the step
  on the same allocation (all healthy);
- an application error (all nodes healthy, non-zero exit): retry up to `--app-retries` times, then
  stop and say it was the application: no endless requeue.

- the warning before the time limit, or of a preemption (`--signal=B:USR1@N`): have the step save
  its checkpoint, then requeue: a planned requeue, not a failure. Ranks that read stop requests
  (`heartbeat.stop_requested()`) get one first and the time left before the limit (less the requeue's margin) to
  save and exit; only a step still running then, or one whose ranks do not read requests, gets SIGTERM (after
  which torchrun gives its workers its own window: 30 s where torch does not read TORCH_ELASTIC_SHUTDOWN_TIMEOUT);
- checkpoint storage that is full: stop and say so (a restart would fail the same way).

A step that exits 0 is complete unless the supervisor had asked it to stop; when it had, the step is complete
if every rank said it finished its training (`heartbeat(step, done=True)`). An attempt of a job whose earlier
attempt completed the run completes at once, without starting the step again.

Failures (node, hang, application; and attempts Slurm ended with NODE_FAIL or the like) spend the
restart budget (`max_restarts`). Time-limit requeues and preemptions have bounds of their own
(preemptions unlimited by default), so a week-long run on a 48-hour partition never runs out of
budget without failing. The counts live with the run (see run_state.py: reserved space, so a full
disk cannot stop the supervisor) and survive requeues and resubmission. Each decision is printed and
appended, with its evidence, to `decisions.jsonl`; one after which the supervisor ended the run itself is
marked `stopped`, so a resubmission of that run (as the decision may advise) goes on without a charge.
Training resumes from the latest valid checkpoint by itself (CheckpointManager.latest()).

The choice after each try of the step is `decisions.decide(outcome, budget, health)`, a pure function whose
docstring's table is the spec; this module runs the step, gathers what that choice needs and carries it out.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from clusterkit import runtime
from clusterkit.errors import ClusterkitError
from clusterkit.resilience import beacon, decisions
from clusterkit.resilience.checkpoint_layout import step_dirs
from clusterkit.resilience.decisions import Action, Bound, Decision, Health, Kind, NodeEvidence, Outcome
from clusterkit.resilience.heartbeat import every_rank_done, read_heartbeats, read_try
from clusterkit.resilience.node_marks import marked_by_clusterkit, marks_for
from clusterkit.resilience.run_state import Budget, RunState
from clusterkit.slurm import REBOOT_REASON, REPLACE_REASON, AccountingRecord, Flavor, Slurm, flavor_of

STOP_GRACE_S = 20.0  # SIGTERM to SIGKILL when nothing says how long there is
REQUEUE_WAIT_S = 60.0  # after our requeue, for Slurm's SIGTERM to this script
GONE_GRACE_S = 2.0  # the same once a node of the step is gone or it hangs: ranks wait in a collective, can't save
WATCH_S = 1.0  # how often a running step's heartbeats, warnings and health check are looked at
# On HyperPod, how often the step's nodes' states are read while it runs: a node HyperPod's health agent (or an
# operator) marks for replacement is replaced only once no job holds it, so the run saves and moves off it.
MARK_CHECK_S = 5.0
# Decisions after which the supervisor requeued the job itself (and spent for it when it decided).
REQUEUED_BY_US = (Kind.NODE_FAILURE, Kind.TIME_LIMIT, Kind.PREEMPTED)
# How Slurm ended an attempt the supervisor did not end itself, and which bound that counts against.
_ENDED_BY_SLURM = {"PREEMPTED": Bound.PREEMPTIONS, "TIMEOUT": Bound.TIME_LIMIT_REQUEUES}
LOG_TAIL_BYTES = 256 << 10  # of the step's output, searched for what killed a rank


class Supervisor:
    def __init__(self, step: list[str], state_dir: Path, max_restarts: int, app_retries: int,
                 hang_timeout: float, health_timeout: float, precheck: bool, slurm: Slurm | None = None,
                 max_time_limit_requeues: int | None = None, max_preemptions: int | None = None,
                 signal_lead: float | None = None, checkpoint_dir: Path | None = None,
                 startup_timeout: float | None = None, spares: int = 0, beacons: bool = True,
                 flavor: Flavor | None = None) -> None:
        self.step = step
        # How a bad node is marked (node_marks.py): on HyperPod also for HyperPod's replacement. None: this node's.
        self.flavor = flavor if flavor is not None else flavor_of()
        self.beacons = beacons  # start a liveness beacon on each node and watch the others' (beacon.py)
        self.own_node = os.environ.get("SLURMD_NODENAME", "")  # the batch host: the agent watches its beacon
        self.spares = spares  # nodes of the allocation held beside the step (the job runs with --no-kill)
        self.state_dir = state_dir
        self.max_restarts = max_restarts
        self.max_time_limit_requeues = max_time_limit_requeues  # None: no bound
        self.max_preemptions = max_preemptions  # None: no bound
        self.app_retries = app_retries
        self.hang_timeout = hang_timeout
        self.startup_timeout = runtime.startup_timeout_for(hang_timeout, startup_timeout)
        self.health_timeout = health_timeout
        self.precheck = precheck
        self.signal_lead = signal_lead  # seconds between the warning and the time limit (--signal=...@N)
        self.checkpoint_dir = checkpoint_dir
        self.slurm = slurm or Slurm()
        self.job_id = os.environ.get("SLURM_JOB_ID", "")
        self.attempt = f"{self.job_id}.{os.environ.get('SLURM_RESTART_COUNT', '0')}"
        self.run_state = RunState(state_dir)
        self.stop_requested = threading.Event()  # the warning before the time limit or a preemption
        self.terminating = threading.Event()  # Slurm is ending the job (cancel, node failure, limit)
        self.warned_with_time_left: float | None = None  # seconds left when the warning came
        self.unreachable: set[str] = set()  # nodes found gone: marked DOWN rather than drained
        self.beacon_step: subprocess.Popen | None = None
        self.beacon_watch: beacon.BeaconWatch | None = None

    # ----- decisions ------------------------------------------------------------------------------
    def record(self, kind: Kind, evidence: str, attempt: str | None = None, **details: object) -> None:
        """Print a decision and append it, with its evidence, to decisions.jsonl."""
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "unix": round(time.time(), 3), "job_id": self.job_id,
                 "attempt": attempt or self.attempt, "decision": kind.value, "evidence": evidence, **details}
        print(f"clusterkit supervisor: {kind.value}: {evidence}", file=sys.stderr, flush=True)
        self.run_state.append(entry)

    def note(self, decision: Decision, **details: object) -> None:
        """Record `decision` with what its kind carries."""
        if decision.stopped:
            details["stopped"] = True
        if decision.kind is Kind.NODE_FAILURE:
            details["nodes"] = sorted(node for node, _ in decision.drain)
            if decision.down:
                details["marked_down"] = list(decision.down)
        if decision.action is Action.RELAUNCH:
            details["action"] = decision.action.value
            details["relaunched_on"] = list(decision.nodes)
        if decision.kind is Kind.CHECKPOINT_STORAGE_FULL:
            details["free_bytes"] = decision.free_bytes
        if decision.spent is not None:
            details[decision.spent.value] = decision.budget.used(decision.spent)
        self.record(decision.kind, decision.evidence, **details)

    def budget_of(self, counts: Budget) -> decisions.Budget:
        """The run's counts with this supervisor's bounds, as decide() takes them."""
        return decisions.Budget(self.max_restarts, self.app_retries, self.max_time_limit_requeues, self.max_preemptions,
                                failures=counts.failures, application_failures=counts.application_failures,
                                time_limit_requeues=counts.time_limit_requeues, preemptions=counts.preemptions)

    def keep(self, counts: Budget, budget: decisions.Budget) -> None:
        """Save `budget`'s counts with the run, when they changed."""
        now = (budget.failures, budget.application_failures, budget.time_limit_requeues, budget.preemptions)
        if now != (counts.failures, counts.application_failures, counts.time_limit_requeues, counts.preemptions):
            counts.failures, counts.application_failures, counts.time_limit_requeues, counts.preemptions = now
            self.run_state.save(counts)

    def spend(self, counts: Budget, bound: Bound, why: str) -> bool:
        """Count one more of `bound`; False (and a decision) when its bound is reached."""
        budget = self.budget_of(counts)
        after = decisions.charge(budget, bound)
        if after is None:
            self.note(decisions.exhausted(budget, bound, why))
            return False
        self.keep(counts, after)
        return True

    def carry_out(self, decision: Decision, counts: Budget) -> int:
        """The effects of a decision after a step: save the counts, drain, record, requeue. The exit status."""
        self.keep(counts, decision.budget)
        self.drain(decision.drain, decision.down)
        self.note(decision, exit_code=decision.step_exit)
        if decision.action is Action.REQUEUE:
            self.requeue()
        return decision.exit_code

    def account_for_previous_attempt(self, budget: Budget) -> bool:
        """A new attempt: spend for the way the previous one ended, unless the supervisor already did
        (its own decisions spend when they are made). False when a bound is reached."""
        previous = budget.attempts_seen[-1]
        made = [d for d in runtime.read_decisions(self.run_state.decisions_path) if d.get("attempt") == previous]
        # A relaunch inside the allocation is no requeue: an attempt that ended after one (its batch host died) is
        # charged below like any other that Slurm ended.
        if made and made[-1].get("decision") in REQUEUED_BY_US and made[-1].get("action") != Action.RELAUNCH.value:
            return True
        if made and made[-1].get("stopped"):
            # The supervisor ended the run there itself (full storage, a failing application, a spent bound) and
            # the run was started again, as its decision may advise: its history goes on, uncharged and unchanged.
            print(f"clusterkit supervisor: attempt {previous} ended with {made[-1].get('decision')}; the run goes on "
                  f"in attempt {self.attempt}", file=sys.stderr, flush=True)
            return True
        record = self._slurm_record_of(previous)
        state = record.base_state if record else ""
        bound = _ENDED_BY_SLURM.get(state, Bound.FAILURES)
        again = ("Slurm requeued the job" if previous.partition(".")[0] == self.job_id
                 else f"the run was resubmitted as job {self.job_id}")
        why = f"attempt {previous} ended {state or 'without a record'} and {again}"
        if bound is Bound.FAILURES:
            node_failure = state in ("NODE_FAIL", "BOOT_FAIL")
            marked = self._marked_nodes(self._nodes_of(previous, record)) if node_failure else {}
            details: dict[str, object] = {"slurm_state": state}
            if marked:
                # Who found the node (the cluster agent, for a batch host) said why in its reason, and when: status
                # and the goodput ledger show both.
                why += "; " + "; ".join(f"{node}: {reason}" for node, (_, reason, _) in marked.items())
                details.update(nodes=sorted(marked), marked_down=sorted(node for node, (state_, _, _) in
                                                                        marked.items() if state_ == "down"))
                since = sorted(when for _, _, when in marked.values() if when)
                if since:
                    details["acted_at"] = since[0]
            self.record(Kind.NODE_FAILURE if node_failure else Kind.TERMINATED, why, attempt=previous, **details)
        return self.spend(budget, bound, why)

    def _slurm_record_of(self, attempt: str) -> AccountingRecord | None:
        job_id, _, restart = attempt.partition(".")
        try:
            records = self.slurm.accounting([job_id])
        except Exception as error:  # no accounting: count it as a failure, the safe side
            print(f"clusterkit supervisor: sacct failed: {error}", file=sys.stderr)
            return None
        if job_id == self.job_id and restart.isdigit() and int(restart) < len(records):
            return records[int(restart)]
        return records[-1] if records else None

    def _nodes_of(self, attempt: str, record: AccountingRecord | None) -> set[str]:
        """The nodes an earlier attempt ran its step on (its tries' record: accounting's record of a requeued attempt
        can name the next attempt's nodes, Slurm keeps one row per submit time), and those accounting names."""
        nodes = {str(node) for entry in runtime.read_decisions(self.run_state.tries_path)
                 if entry.get("attempt") == attempt and entry.get("event") == "started"
                 for node in entry.get("nodes", [])}
        try:
            return nodes | set(self.slurm.hostnames(record.node_list) if record and record.node_list else [])
        except Exception:  # a node list scontrol cannot expand: the tries' record stands alone
            return nodes

    def _marked_nodes(self, wanted: set[str]) -> dict[str, tuple[str, str, str]]:
        """Node -> (state, reason, when the reason was set) for those of `wanted` that clusterkit (supervisor or
        agent) marked down or drained and that still say so."""
        try:
            return {node.name: (node.base_state, node.reason, node.reason_time) for node in self.slurm.nodes()
                    if node.name in wanted and marked_by_clusterkit(node.reason)
                    and node.base_state in ("down", "drain", "fail", "failg")}
        except Exception as error:  # the evidence is a nicety: the controller not answering changes nothing
            print(f"clusterkit supervisor: could not read the nodes' reasons: {error}", file=sys.stderr)
            return {}

    # ----- checkpoint storage ---------------------------------------------------------------------
    def storage_full(self) -> str:
        """Evidence that the checkpoint storage cannot hold the next checkpoint, else ''."""
        directory = self.checkpoint_dir or self.state_dir.parent
        try:
            usage = shutil.disk_usage(directory)
        except OSError:
            return ""
        newest = _newest_checkpoint_bytes(directory)
        needed = max(newest, 1 << 20)
        if usage.free >= needed:
            return ""
        return (f"{usage.free / 2**20:.1f} MiB free of {usage.total / 2**20:.0f} MiB on {directory}, "
                f"less than one checkpoint ({needed / 2**20:.1f} MiB)")

    def saved_on_stop(self, newest_before: Path | None, exit_code: int | None) -> str:
        """What the stopped step left: a checkpoint newer than the attempt's start, or none (the next
        attempt then repeats the steps since the previous one)."""
        if self.checkpoint_dir is None:
            return f"the step exited {exit_code}"
        newest = _newest_checkpoint(self.checkpoint_dir)
        if newest is not None and newest != newest_before:
            return f"the step saved {newest.name} (exit {exit_code})"
        return f"the step exited {exit_code} with no new checkpoint; the next attempt repeats the steps since " \
               f"{newest_before.name if newest_before else 'the start'}"

    # ----- the allocation ---------------------------------------------------------------------------
    def allocation_nodes(self) -> list[str]:
        return self.slurm.hostnames(os.environ.get("SLURM_JOB_NODELIST", ""))

    def unhealthy_nodes(self, nodes: list[str]) -> dict[str, str]:
        """Node -> evidence, for nodes Slurm sees as down or whose health check fails or cannot run (those of
        them that do not answer a probe either are added to `self.unreachable`)."""
        bad: dict[str, str] = {}
        try:
            states = {n.name: n for n in self.slurm.nodes()}
        except Exception as error:  # the controller itself not answering is no node's fault
            states = {}
            print(f"clusterkit supervisor: sinfo failed: {error}", file=sys.stderr)
        for node in nodes:
            info = states.get(node)
            # FAIL (failg while it runs jobs): marked for replacement, by HyperPod's health agent or an operator.
            if info is not None and (not info.responding or info.base_state in ("down", "fail", "failg")):
                bad[node] = f"Slurm reports {node} {info.state}"
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            checks = {node: pool.submit(self._health_check, node) for node in nodes if node not in bad}
        for node, future in checks.items():
            evidence = future.result()
            if evidence:
                bad[node] = evidence
        could_not_run = [node for node in checks if "could not run" in bad.get(node, "")]
        for node, answer in zip(could_not_run, self._probe_all(could_not_run)):
            if answer:
                bad[node] += f"; {answer}"
                self.unreachable.add(node)
        return bad

    def _probe_all(self, nodes: list[str]) -> list[str]:
        """beacon.probe() of each node, side by side: '' for each that answers, else the evidence."""
        if not nodes:
            return []
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            return list(pool.map(lambda node: beacon.probe(self.slurm, node), nodes))

    def _health_check(self, node: str) -> str:
        """'' when the node's health check passes, else the evidence."""
        try:
            result = self.slurm.run("srun", "--overlap", "-N1", "-n1", "-w", node, "--kill-on-bad-exit=1",
                                    sys.executable, "-m", runtime.HEALTH_MODULE, check=False,
                                    timeout=self.health_timeout)
        except ClusterkitError as error:  # srun missing or not answering
            return f"health check on {node} could not run: {error}"
        report = None
        for line in result.stdout.splitlines():
            try:
                report = json.loads(line)
            except ValueError:
                continue
        if not isinstance(report, dict) or "healthy" not in report:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            return f"health check could not run on {node}: {detail}"
        if report["healthy"]:
            return ""
        return "; ".join(f"{r['check']}: {r['evidence']}" for r in report["results"] if not r["ok"])

    def superseded(self) -> str:
        """Why this supervisor's attempt is no longer the job's ('' while it is): its node was cut off (frozen, a
        network partition) long enough for Slurm to requeue the job, and came back. Such a supervisor must not act:
        the nodes it would judge and the budget it would spend are the new attempt's."""
        try:
            details = self.slurm.job_details(self.job_id)
        except Exception:  # the controller not answering says nothing about the attempt
            return ""
        restarts, host = details.get("Restarts", ""), details.get("BatchHost", "")
        mine = self.attempt.rpartition(".")[2]
        if not details:
            return f"Slurm no longer knows job {self.job_id}"
        if restarts.isdigit() and restarts != mine:
            return f"attempt {self.attempt} was superseded: Slurm requeued the job (attempt {self.job_id}.{restarts})"
        if self.own_node and host and host != self.own_node:
            return f"attempt {self.attempt} was superseded: the job's batch script now runs on {host}"
        return ""

    def job_running(self) -> bool:
        if self.terminating.is_set():
            return False
        try:
            return self.slurm.queue().get(self.job_id, "RUNNING") == "RUNNING"
        except Exception:
            return True  # the controller not answering is no reason to stop judging

    def drain(self, bad: NodeEvidence, down: tuple[str, ...] = ()) -> None:
        """Drain each bad node with its evidence as the reason; mark those in `down` DOWN; on HyperPod also ask for
        its replacement (node_marks.marks_for), unless it is being replaced already (FAIL): HyperPod's replacement may
        fail if the node's state changes meanwhile."""
        replacing = self._being_replaced() if self.flavor is Flavor.HYPERPOD else set()
        for node, evidence in bad:
            if node in replacing:
                print(f"clusterkit supervisor: {node} is being replaced already; not marked again", file=sys.stderr)
                continue
            for mark in marks_for(node, evidence, node in down, self.flavor):
                try:
                    self.slurm.update_node(mark.node, mark.state, mark.reason)
                except Exception as error:
                    print(f"clusterkit supervisor: could not mark {node} {mark.state}: {error}", file=sys.stderr)
                    break

    def _marked_for_replacement(self, nodes: tuple[str, ...]) -> dict[str, str]:
        """Node -> evidence, for nodes of `nodes` marked for HyperPod's replacement or reboot (its reasons), by its
        health agent or an operator."""
        try:
            states = self.slurm.nodes()
        except Exception as error:  # the controller not answering: look again later
            print(f"clusterkit supervisor: sinfo failed: {error}", file=sys.stderr)
            return {}
        return {node.name: f"Slurm reports {node.name} {node.state}: {node.reason}" for node in states
                if node.name in nodes and node.reason in (REPLACE_REASON, REBOOT_REASON)}

    def _being_replaced(self) -> set[str]:
        """Nodes marked FAIL or for HyperPod's replacement (by its health agent, an operator, or this supervisor)."""
        try:
            return {node.name for node in self.slurm.nodes()
                    if node.base_state in ("fail", "failg") or node.reason == REPLACE_REASON}
        except Exception as error:  # the controller not answering: mark as usual
            print(f"clusterkit supervisor: sinfo failed: {error}", file=sys.stderr)
            return set()

    def time_left(self) -> float | None:
        try:
            return self.slurm.time_left(self.job_id)
        except Exception:  # the controller not answering: the warning's cause stays unknown
            return None

    def requeue(self) -> None:
        """Requeue this job: Slurm stops this script and starts it again elsewhere."""
        try:
            self.slurm.requeue(self.job_id)
        except Exception as error:
            if "pending" in str(error).lower():  # a node we marked DOWN: Slurm requeued the job itself
                print("clusterkit supervisor: Slurm requeued the job itself", file=sys.stderr, flush=True)
            else:
                print(f"clusterkit supervisor: requeue failed: {error}", file=sys.stderr, flush=True)
            return
        # Slurm ends this batch script (SIGTERM): leave then, not after KillWait (30 s on ParallelCluster), which
        # the requeued job would wait out COMPLETING.
        self.terminating.wait(REQUEUE_WAIT_S)

    def health_after_failure(self, nodes: list[str]) -> Health:
        """What decide() weighs after a failed step, looked at in its order (see Health)."""
        if not self.job_running():
            return Health(job_ending=True)
        full = self.storage_full()
        if full:
            return Health(storage_full=full, free_bytes=_free_bytes(self.checkpoint_dir or self.state_dir.parent))
        bad = self.unhealthy_nodes(nodes)
        return Health(bad_nodes=tuple(bad.items()), unreachable=tuple(sorted(self.unreachable & set(bad))))

    # ----- the step -----------------------------------------------------------------------------
    def run_step(self, try_number: int, nodes: list[str], newest_before: Path | None,
                 precheck: concurrent.futures.Future | None = None, spares: tuple[str, ...] = ()) -> Outcome:
        """Run the step once. `precheck`: the nodes' health check, still running beside the step (it is
        off the resume's critical path); a bad node it finds stops the step."""
        heartbeats = self.state_dir / runtime.HEARTBEATS_DIR_NAME / f"{self.attempt}.{try_number}"
        heartbeats.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **{runtime.HEARTBEAT_DIR_ENV: str(heartbeats),
                                  runtime.ATTEMPT_ID_ENV: f"{self.attempt}.{try_number}",
                                  runtime.STOP_FILE_ENV: str(runtime.stop_request_file(heartbeats))})
        if self.spares:
            # The rendered step's srun runs on exactly these (--nodes, --nodelist); the spares wait beside it.
            env.update({runtime.STEP_NODES_ENV: ",".join(nodes), runtime.STEP_NUM_NODES_ENV: str(len(nodes))})
            # srun would take the allocation's task count from these (nodes + spares): the step's comes from its
            # --nodes and --ntasks-per-node.
            for name in ("SLURM_NTASKS", "SLURM_NPROCS"):
                env.pop(name, None)
        # A line in the job's log with the time: where a resume's seconds go can be read from it.
        print(f"clusterkit supervisor: starting the step (attempt {self.attempt}, try {try_number}) on "
              f"{','.join(nodes)} at {time.time():.3f}", file=sys.stderr, flush=True)
        output_start = _output_end()
        self.run_state.append_try({"attempt": self.attempt, "try": try_number, "event": "started",
                                   "time": round(time.time(), 3), "nodes": list(nodes)})
        process = subprocess.Popen(self.step, env=env, start_new_session=True)
        watched = tuple(node for node in (*nodes, *spares) if node != self.own_node)
        outcome = self._watch(process, heartbeats, precheck, watched, tuple(nodes))
        self.run_state.append_try({"attempt": self.attempt, "try": try_number, "event": "ended",
                                   "time": round(time.time(), 3), **read_try(heartbeats)._asdict()})
        return dataclasses.replace(
            outcome, nodes=tuple(nodes), spares=spares, finished=every_rank_done(read_heartbeats(heartbeats)),
            log_tail=_output_since(output_start) if outcome.exit_code else "",
            time_left=self.warned_with_time_left, signal_lead=self.signal_lead,
            saved=self.saved_on_stop(newest_before, outcome.exit_code) if outcome.signalled else "")

    def _watch(self, process: subprocess.Popen, heartbeats: Path, precheck: concurrent.futures.Future | None,
               watched: tuple[str, ...] = (), step_nodes: tuple[str, ...] = ()) -> Outcome:
        started = marks_read = time.monotonic()
        progress: dict[int, tuple[int, float]] = {}  # rank -> (step, when we saw it change)
        while True:
            try:
                code = process.wait(timeout=WATCH_S)
                return Outcome(code, signalled=self.stop_requested.is_set())
            except subprocess.TimeoutExpired:
                pass
            if self.terminating.is_set():
                # Pass it on so the ranks can save what they can, then go: Slurm decides what is next.
                self._stop(process)
                return Outcome(process.returncode, terminated=True)
            if self.stop_requested.is_set():
                # Time limit or preemption: the ranks save a checkpoint, then we requeue. They get what is left
                # before the limit, less the requeue's own margin.
                left = self.warned_with_time_left
                self._stop_to_save(process, runtime.stop_request_file(heartbeats),
                                   max(left - runtime.REQUEUE_MARGIN_S, 5.0) if left is not None else STOP_GRACE_S)
                return Outcome(process.returncode, signalled=True, asked_to_stop=True)
            if precheck is not None and precheck.done():
                bad = precheck.result()
                precheck = None
                if bad:
                    self._stop(process)
                    return Outcome(None, bad_nodes=tuple(bad.items()),
                                   unreachable=tuple(sorted(self.unreachable & set(bad))))
            if self.flavor is Flavor.HYPERPOD and time.monotonic() - marks_read >= MARK_CHECK_S:
                marks_read = time.monotonic()
                marked = self._marked_for_replacement(step_nodes)
                if marked:
                    # Nothing is wrong with the step yet: its ranks save, then the node failure path moves the run
                    # off the node (requeue, or a spare), so that HyperPod can replace it.
                    print(f"clusterkit supervisor: {', '.join(marked.values())}: saving and moving off it",
                          file=sys.stderr, flush=True)
                    self._stop_to_save(process, runtime.stop_request_file(heartbeats), STOP_GRACE_S)
                    if process.returncode == 0 and every_rank_done(read_heartbeats(heartbeats)):
                        # It finished its training meanwhile: nothing to move. HyperPod replaces the node once the
                        # job has ended.
                        return Outcome(0)
                    return Outcome(None, bad_nodes=tuple(marked.items()))
            gone = self._gone_nodes(watched)
            if gone and self.superseded():
                self._stop(process, grace=GONE_GRACE_S)
                return Outcome(None, terminated=True)
            if gone:
                # DOWN before the stop: until Slurm lets go of a silent node, signalling the step waits on it.
                self.drain(tuple(gone.items()), down=tuple(gone))
                self._stop(process, grace=GONE_GRACE_S)
                return Outcome(None, bad_nodes=tuple(gone.items()), unreachable=tuple(sorted(gone)))
            evidence = self._hang_evidence(heartbeats, progress, started, time.monotonic())
            if evidence:
                self._stop(process, grace=GONE_GRACE_S)  # a hung step's ranks cannot save: no 20 s for it
                return Outcome(None, hang_evidence=evidence)

    # ----- liveness beacons ---------------------------------------------------------------------------
    def start_beacons(self, nodes: list[str]) -> None:
        """One beacon per node of `nodes` (what the allocation holds), as an overlapping step beside a try of the
        training step (--no-kill: a lost node's beacon ends alone), and the job's comment pointing the cluster agent
        at them."""
        if not self.beacons or not self.job_id or not nodes or shutil.which("srun") is None:
            return
        directory = (self.state_dir / runtime.BEACONS_DIR_NAME).resolve()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self.beacon_step = subprocess.Popen(
                ["srun", "--overlap", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
                 "--cpus-per-task=1", f"--nodelist={','.join(nodes)}", "--no-kill", "--kill-on-bad-exit=0",
                 f"--job-name={runtime.BEACON_STEP_NAME}", "--quiet", sys.executable, "-m", runtime.BEACON_MODULE,
                 str(directory)],
                stdout=subprocess.DEVNULL, start_new_session=True)
        except OSError as error:
            print(f"clusterkit supervisor: no liveness beacons ({error.strerror or error}); a node counts as gone "
                  "only when Slurm says so", file=sys.stderr, flush=True)
            return
        self.beacon_watch = beacon.BeaconWatch(directory, time.monotonic())
        self._point_agent_at(directory)

    def _point_agent_at(self, directory: Path) -> None:
        """Set the job's comment to the beacons' directory (unless the comment is the user's own)."""
        try:
            comment = self.slurm.job_details(self.job_id).get("Comment", "")
            if comment not in ("", "(null)") and not comment.startswith(runtime.BEACONS_COMMENT_PREFIX):
                print("clusterkit supervisor: the job has a comment of its own; the cluster agent does not watch its "
                      "batch host", file=sys.stderr, flush=True)
                return
            self.slurm.run("scontrol", "update", f"JobId={self.job_id}",
                           f"Comment={runtime.BEACONS_COMMENT_PREFIX}{directory}")
        except ClusterkitError as error:
            print(f"clusterkit supervisor: could not point the cluster agent at the beacons: {error}", file=sys.stderr,
                  flush=True)

    def stop_beacons(self) -> None:
        step, self.beacon_step, self.beacon_watch = self.beacon_step, None, None
        if step is None or step.poll() is not None:
            return
        step.send_signal(signal.SIGTERM)  # srun ends its step
        try:
            step.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(step.pid, signal.SIGKILL)
            step.wait()

    def _gone_nodes(self, watched: tuple[str, ...]) -> dict[str, str]:
        """Node -> evidence, for watched nodes whose beacon went silent and that do not answer a probe."""
        watch = self.beacon_watch
        if watch is None or self.beacon_step is None:
            return {}
        if self.beacon_step.poll() is not None:
            print(f"clusterkit supervisor: the beacons' step ended (exit {self.beacon_step.returncode}); nodes are "
                  "no longer watched", file=sys.stderr, flush=True)
            self.beacon_watch = None
            return {}
        silent = watch.silent(watched, time.monotonic())
        gone: dict[str, str] = {}
        for silence, answer in zip(silent, self._probe_all([quiet.node for quiet in silent])):
            if answer:
                gone[silence.node] = beacon.evidence(silence, answer)
                self.unreachable.add(silence.node)
            else:
                watch.alive(silence.node, time.monotonic())
        return gone

    def _hang_evidence(self, heartbeats: Path, progress: dict[int, tuple[int, float]], started: float,
                       now: float) -> str:
        """Evidence that the step hangs at `now` (the monotonic clock, as `started`), else ''."""
        if not self.hang_timeout and not self.startup_timeout:
            return ""
        beats = read_heartbeats(heartbeats)
        if not beats:
            # Hang detection watches ranks that beat; before the first beat (imports, the rendezvous, loading a
            # checkpoint) only this bound does.
            if self.startup_timeout and now - started > self.startup_timeout:
                return (f"no rank sent a heartbeat within {self.startup_timeout:.0f} s of the step's start "
                        "(stuck in imports, the rendezvous or loading a checkpoint?)")
            return ""
        if not self.hang_timeout:
            return ""
        for rank, beat in beats.items():
            last = progress.get(rank)
            if last is None or beat.step != last[0]:
                progress[rank] = (beat.step, now)
            elif now - last[1] > self.hang_timeout:
                return (f"rank {rank} on {beat.node} made no progress past step {beat.step} "
                        f"for {now - last[1]:.0f} s")
        return ""

    def _stop_to_save(self, process: subprocess.Popen, request: Path, seconds: float) -> None:
        """Have the step save and stop within `seconds`: through a stop request where its ranks read them (no
        signal reaches torchrun, whose own window would bound the save), then by SIGTERM if it still runs."""
        deadline = time.monotonic() + seconds
        if Path(f"{request}{runtime.LISTENING_SUFFIX}").exists() and _write_request(request, self.attempt):
            print(f"clusterkit supervisor: asking the ranks to save and stop ({request}); SIGTERM to the step if it "
                  f"still runs in {seconds:.0f} s", file=sys.stderr, flush=True)
            while not self.terminating.is_set() and time.monotonic() < deadline:
                try:
                    process.wait(timeout=min(WATCH_S, max(deadline - time.monotonic(), 0.01)))
                    return
                except subprocess.TimeoutExpired:
                    continue
        self._stop(process, grace=max(deadline - time.monotonic(), 5.0))

    def _stop(self, process: subprocess.Popen, grace: float = STOP_GRACE_S) -> None:
        """Stop the step: srun passes SIGTERM to every task; what is left after `grace` gets SIGKILL."""
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            for step_id in self.slurm.steps(self.job_id, but=runtime.BEACON_STEP_NAME):
                try:
                    self.slurm.cancel(step_id, signal="KILL")
                except ClusterkitError as error:  # the step may be gone already
                    print(f"clusterkit supervisor: scancel {step_id}: {error}", file=sys.stderr)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def warned(self) -> None:
        """The signal before the time limit or a preemption (from the signal handler's thread)."""
        self.warned_with_time_left = self.time_left()
        self.stop_requested.set()

    # ----- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        print(f"clusterkit supervisor: attempt {self.attempt} started at {time.time():.3f}", file=sys.stderr,
              flush=True)
        try:
            self.run_state.open()
        except OSError as error:
            full = self.storage_full()
            print(f"clusterkit supervisor: {CHECKPOINT_STORAGE_FULL if full else 'error'}: cannot keep the run's "
                  f"state in {self.state_dir}: {error.strerror or error}" + (f"; {full}" if full else ""),
                  file=sys.stderr, flush=True)
            return 1
        budget = self.run_state.load()
        self.end_orphaned_tries()
        completed_in = self._completed_attempt()
        if completed_in:
            # Requeued after it completed (a warning or a requeue that came too late): starting the step again
            # would only have the ranks leave at once, and a peer still in its rendezvous fail.
            self.record(Kind.COMPLETED, f"attempt {completed_in} completed the run; the step is not started again",
                        stopped=True)
            return 0
        if self.attempt not in budget.attempts_seen:
            if budget.attempts_seen and not self.account_for_previous_attempt(budget):
                return 1
            budget.attempts_seen.append(self.attempt)
            self.run_state.save(budget)
        full = self.storage_full()
        if full:
            self.record(Kind.CHECKPOINT_STORAGE_FULL, f"before the step: {full}; free space there, then resubmit",
                        stopped=True, free_bytes=_free_bytes(self.checkpoint_dir or self.state_dir.parent))
            return 1
        newest_before = _newest_checkpoint(self.checkpoint_dir) if self.checkpoint_dir else None
        allocation = self.allocation_nodes()
        self.start_beacons(allocation)
        try:
            return self._supervise(budget, allocation, newest_before)
        finally:
            self.stop_beacons()

    def _supervise(self, budget: Budget, allocation: list[str], newest_before: Path | None) -> int:
        """Run the step, decide, carry out, until a decision ends the attempt; the supervisor's exit status."""
        # With spares the step runs on the allocation's first nodes (the batch host among them) and the rest wait.
        held = min(self.spares, max(len(allocation) - 1, 0))
        nodes, spares = allocation[:len(allocation) - held], tuple(allocation[len(allocation) - held:])
        # The health check of the step's nodes runs beside its first try (and of the spares that join a relaunched
        # one), not before it: a resume does not wait for it, and a bad node it finds stops the step.
        joined = nodes
        try_number = 0
        while True:
            outcome = self.run_step(try_number, nodes, newest_before, self._precheck(joined), spares)
            superseded = self.superseded()
            if superseded:
                print(f"clusterkit supervisor: {superseded}: leaving without judging or marking any node",
                      file=sys.stderr, flush=True)
                return 0 if outcome.exit_code is None else outcome.exit_code
            health = self.health_after_failure(nodes) if outcome.failed else Health()
            decision = decisions.decide(outcome, self.budget_of(budget), health)
            code = self.carry_out(decision, budget)
            if decision.action is Action.RELAUNCH:
                joined = [node for node in decision.nodes if node not in nodes]
                drained = {node for node, _ in decision.drain}
                nodes = list(decision.nodes)
                spares = tuple(node for node in spares if node not in nodes and node not in drained)
            elif decision.action is Action.RETRY:
                joined = []
            else:
                return code
            # The stop reached every step of the job (the step's own `scancel --signal`), and Slurm ends a step
            # that spans a node it took out of the allocation: the beacons start again on what is held.
            self.stop_beacons()
            self.start_beacons([*nodes, *spares])
            try_number += 1

    def _precheck(self, nodes: list[str]) -> concurrent.futures.Future | None:
        """The health check of `nodes`, started in the background; None when there is none to run."""
        if not self.precheck or not nodes:
            return None
        checker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="clusterkit-precheck")
        try:
            return checker.submit(self.unhealthy_nodes, nodes)
        finally:
            checker.shutdown(wait=False)

    def end_orphaned_tries(self) -> None:
        """Record the end of earlier attempts' tries whose supervisor died with its node (the batch host): what their
        heartbeats say, without an end time (the last beat's is the best there is)."""
        started, ended = set(), set()
        for entry in runtime.read_decisions(self.run_state.tries_path):
            key = (str(entry.get("attempt", "")), entry.get("try"))
            (started if entry.get("event") == "started" else ended).add(key)
        for attempt, try_number in sorted(started - ended, key=str):
            if attempt == self.attempt:
                continue
            heartbeats = self.state_dir / runtime.HEARTBEATS_DIR_NAME / f"{attempt}.{try_number}"
            self.run_state.append_try({"attempt": attempt, "try": try_number, "event": "ended", "time": None,
                                       **read_try(heartbeats)._asdict()})

    def _completed_attempt(self) -> str:
        """An earlier attempt of this job that completed the run, else ''."""
        for made in runtime.read_decisions(self.run_state.decisions_path):
            attempt = str(made.get("attempt", ""))
            if (made.get("decision") == Kind.COMPLETED.value and attempt != self.attempt
                    and attempt.partition(".")[0] == self.job_id):
                return attempt
        return ""



def _write_request(request: Path, attempt: str) -> bool:
    """Write the stop request the ranks look for; False (and why, on stderr) where it cannot be written."""
    try:
        request.write_text(f"{attempt} {time.time():.3f}\n")
        return True
    except OSError as error:
        print(f"clusterkit supervisor: cannot write the stop request {request}: {error.strerror or error}; "
              "signalling the step instead", file=sys.stderr, flush=True)
        return False


def _output_end() -> int | None:
    """Where the step's output (this process's stderr, which the step inherits) ends now, if it is a file."""
    try:
        info = os.fstat(2)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _output_since(start: int | None) -> str:
    """The step's output since `start` (its last LOG_TAIL_BYTES), '' where it did not go to a file."""
    if start is None:
        return ""
    try:
        with open("/proc/self/fd/2", "rb") as stream:  # stderr is open for writing only: read it anew
            end = stream.seek(0, os.SEEK_END)
            stream.seek(max(start, end - LOG_TAIL_BYTES))
            return stream.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _newest_checkpoint(directory: Path) -> Path | None:
    """The newest committed checkpoint under `directory`, None without one (or when it cannot be read)."""
    try:
        return next((path for _, path in step_dirs(directory)), None)
    except OSError:
        return None


def _newest_checkpoint_bytes(directory: Path) -> int:
    """Bytes of the newest committed checkpoint under `directory`, 0 without one."""
    newest = _newest_checkpoint(directory)
    try:
        return sum(f.stat().st_size for f in newest.rglob("*") if f.is_file()) if newest else 0
    except OSError:
        return 0


def _free_bytes(directory: Path) -> int | None:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def default_state_dir() -> Path:
    checkpoint_dir = os.environ.get(runtime.CHECKPOINT_DIR_ENV)
    if checkpoint_dir:
        return runtime.run_state_dir(checkpoint_dir)
    return Path(f".clusterkit-run-{os.environ.get('SLURM_JOB_ID', 'local')}")


def main(argv: list[str] | None = None) -> int:
    parser = runtime.supervisor_parser()
    args = parser.parse_args(argv)
    step = args.step[1:] if args.step[:1] == ["--"] else args.step
    if not step:
        parser.error("give the step to run after --")
    max_restarts = args.max_restarts
    if max_restarts is None:
        max_restarts = int(os.environ.get(runtime.MAX_RESTARTS_ENV) or runtime.DEFAULT_MAX_RESTARTS)
    checkpoint_dir = os.environ.get(runtime.CHECKPOINT_DIR_ENV)
    supervisor = Supervisor(step, args.state_dir or default_state_dir(), max_restarts, args.app_retries,
                            args.hang_timeout, args.health_timeout, args.precheck,
                            max_time_limit_requeues=_bound(args.max_time_limit_requeues),
                            max_preemptions=_bound(args.max_preemptions), signal_lead=args.signal_lead,
                            checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None,
                            startup_timeout=args.startup_timeout, spares=args.spares, beacons=args.beacons)
    # Slurm's warning before the time limit (--signal=B:USR1@N), or a preemption notice. The handler
    # only starts a thread: asking Slurm for the time left must not run inside a signal handler.
    signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=supervisor.warned, daemon=True).start())
    signal.signal(signal.SIGTERM, lambda *_: supervisor.terminating.set())
    code = supervisor.run()
    # A warning that lands while the interpreter exits meets SIGUSR1's default action (Python restores it at
    # finalization): this batch script would die of it, and Slurm record a completed run FAILED.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    return code


def _bound(value: int) -> int | None:
    return None if value < 0 else value


if __name__ == "__main__":
    sys.exit(main())
