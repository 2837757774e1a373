"""The in-job supervisor: HyperPod-style recovery on plain Slurm.

The batch script runs the training step under `python -m clusterkit.resilience.supervisor -- srun ...`.
When the step fails the supervisor tells apart

- a node failure (a node not responding, or its health check failing): drain the node with the
  evidence as reason and requeue the job, so that it restarts on healthy nodes;
- a hang (no heartbeat progress for `--hang-timeout` seconds, or no heartbeat at all for `--startup-timeout`
  seconds after the step started): stop the step, check the nodes, then requeue (bad node) or retry the step
  on the same allocation (all healthy);
- an application error (all nodes healthy, non-zero exit): retry up to `--app-retries` times, then
  stop and say it was the application: no endless requeue.

- the warning before the time limit, or of a preemption (`--signal=B:USR1@N`): have the step save
  its checkpoint, then requeue: a planned requeue, not a failure;
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
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import field
from pathlib import Path

from clusterkit import runtime
from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.resilience.heartbeat import every_rank_done, read_heartbeats
from clusterkit.resilience.run_state import Budget, RunState
from clusterkit.runtime import (APPLICATION_ERROR, BUDGET_EXHAUSTED, CHECKPOINT_STORAGE_FULL, COMPLETED, HANG,
                                NODE_FAILURE, PREEMPTED, TERMINATED, TIME_LIMIT)
from clusterkit.slurm import Slurm

STOP_GRACE_S = 20.0  # SIGTERM to SIGKILL when nothing says how long there is
WATCH_S = 1.0  # how often a running step's heartbeats, warnings and health check are looked at
REQUEUE_MARGIN_S = 15.0  # of the time left before a limit, kept for the requeue itself
UNKNOWN_LEAD_S = 900.0  # without --signal-lead: a warning this close to the limit is the time limit's
# Decisions after which the supervisor requeued the job itself (and spent for it when it decided).
REQUEUED_BY_US = (NODE_FAILURE, TIME_LIMIT, PREEMPTED)
# How Slurm ended an attempt the supervisor did not end itself, and which bound that counts against.
_ENDED_BY_SLURM = {"PREEMPTED": "preemption", "TIMEOUT": "time_limit"}
LOG_TAIL_BYTES = 256 << 10  # of the step's output, searched for what killed a rank
# How launchers say a rank died of a signal: torchrun's failure summary, and srun's line per task.
_TORCHRUN_SIGNAL = re.compile(r"host\s*: (?P<node>\S+)\s+rank\s*: (?P<rank>\d+)[^\n]*\s+exitcode\s*: -(?P<signal>\d+)")
_SRUN_KILLED = re.compile(r"srun: error: (?P<node>\S+): tasks? (?P<rank>[\d,\-]+): Killed")


@lean_dataclass
class StepOutcome:
    exit_code: int | None  # None: we stopped it
    hang_evidence: str = ""
    bad_nodes: dict[str, str] = field(default_factory=dict)  # the check that ran beside the step found them
    signalled: bool = False  # the job was warned: save and requeue (time limit, preemption)
    asked_to_stop: bool = False  # the supervisor passed the warning on to the step
    finished: bool = False  # every rank said it finished its training
    terminated: bool = False  # Slurm is ending the job
    log_tail: str = ""  # the step's output (its end), where it went to a file


class Supervisor:
    def __init__(self, step: list[str], state_dir: Path, max_restarts: int, app_retries: int,
                 hang_timeout: float, health_timeout: float, precheck: bool, slurm: Slurm | None = None,
                 max_time_limit_requeues: int | None = None, max_preemptions: int | None = None,
                 signal_lead: float | None = None, checkpoint_dir: Path | None = None,
                 startup_timeout: float | None = None) -> None:
        self.step = step
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

    # ----- decisions ------------------------------------------------------------------------------
    def decide(self, decision: str, evidence: str, attempt: str | None = None, **details: object) -> None:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "job_id": self.job_id,
                 "attempt": attempt or self.attempt, "decision": decision, "evidence": evidence, **details}
        print(f"clusterkit supervisor: {decision}: {evidence}", file=sys.stderr, flush=True)
        self.run_state.append(entry)

    def spend(self, budget: Budget, kind: str, why: str) -> bool:
        """Count one restart of `kind` (failure, time_limit, preemption); False (and a decision) when its
        bound is reached."""
        counter, bound, what = {
            "failure": ("failures", self.max_restarts, "the restart budget"),
            "time_limit": ("time_limit_requeues", self.max_time_limit_requeues, "the bound on time-limit requeues"),
            "preemption": ("preemptions", self.max_preemptions, "the bound on preemptions"),
        }[kind]
        used = getattr(budget, counter)
        if bound is not None and used >= bound:
            self.decide(BUDGET_EXHAUSTED, f"{why}; {what} of {bound} is spent", stopped=True, **{counter: used})
            return False
        setattr(budget, counter, used + 1)
        self.run_state.save(budget)
        return True

    def account_for_previous_attempt(self, budget: Budget) -> bool:
        """A new attempt: spend for the way the previous one ended, unless the supervisor already did
        (its own decisions spend when they are made). False when a bound is reached."""
        previous = budget.attempts_seen[-1]
        made = [d for d in runtime.read_decisions(self.run_state.decisions_path) if d.get("attempt") == previous]
        if made and made[-1].get("decision") in REQUEUED_BY_US:
            return True
        if made and made[-1].get("stopped"):
            # The supervisor ended the run there itself (full storage, a failing application, a spent bound) and
            # the run was started again, as its decision may advise: its history goes on, uncharged and unchanged.
            print(f"clusterkit supervisor: attempt {previous} ended with {made[-1].get('decision')}; the run goes on "
                  f"in attempt {self.attempt}", file=sys.stderr, flush=True)
            return True
        state = self._slurm_state_of(previous)
        kind = _ENDED_BY_SLURM.get(state, "failure")
        again = ("Slurm requeued the job" if previous.partition(".")[0] == self.job_id
                 else f"the run was resubmitted as job {self.job_id}")
        why = f"attempt {previous} ended {state or 'without a record'} and {again}"
        if kind == "failure":
            self.decide(NODE_FAILURE if state in ("NODE_FAIL", "BOOT_FAIL") else TERMINATED, why, attempt=previous,
                        slurm_state=state)
        return self.spend(budget, kind, why)

    def _slurm_state_of(self, attempt: str) -> str:
        job_id, _, restart = attempt.partition(".")
        try:
            records = self.slurm.accounting([job_id])
        except Exception as error:  # no accounting: count it as a failure, the safe side
            print(f"clusterkit supervisor: sacct failed: {error}", file=sys.stderr)
            return ""
        if job_id == self.job_id and restart.isdigit() and int(restart) < len(records):
            return records[int(restart)].base_state
        return records[-1].base_state if records else ""

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

    def saved_on_stop(self, newest_before: Path | None, exit_code: int) -> str:
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
        """Node -> evidence, for nodes Slurm sees as down or whose health check fails or cannot run."""
        bad: dict[str, str] = {}
        try:
            states = {n.name: n for n in self.slurm.nodes()}
        except Exception as error:  # the controller itself not answering is no node's fault
            states = {}
            print(f"clusterkit supervisor: sinfo failed: {error}", file=sys.stderr)
        for node in nodes:
            info = states.get(node)
            if info is not None and (not info.responding or info.base_state in ("down", "fail")):
                bad[node] = f"Slurm reports {node} {info.state}"
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            checks = {node: pool.submit(self._health_check, node) for node in nodes if node not in bad}
        for node, future in checks.items():
            evidence = future.result()
            if evidence:
                bad[node] = evidence
        return bad

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

    def job_running(self) -> bool:
        if self.terminating.is_set():
            return False
        try:
            return self.slurm.queue().get(self.job_id, "RUNNING") == "RUNNING"
        except Exception:
            return True  # the controller not answering is no reason to stop judging

    def drain(self, bad: dict[str, str]) -> None:
        for node, evidence in bad.items():
            try:
                self.slurm.update_node(node, "DRAIN", f"clusterkit: {evidence}"[:200])
            except Exception as error:
                print(f"clusterkit supervisor: could not drain {node}: {error}", file=sys.stderr)

    def time_left(self) -> float | None:
        try:
            return self.slurm.time_left(self.job_id)
        except Exception:  # the controller not answering: the warning's cause stays unknown
            return None

    def requeue(self) -> int:
        """Requeue this job: Slurm stops this script and starts it again elsewhere."""
        try:
            self.slurm.requeue(self.job_id)
        except Exception as error:
            print(f"clusterkit supervisor: requeue failed: {error}", file=sys.stderr, flush=True)
            return 1
        # Slurm ends this batch script; wait for that rather than racing it.
        time.sleep(60)
        return 1

    # ----- the step -----------------------------------------------------------------------------
    def run_step(self, try_number: int, precheck: concurrent.futures.Future | None = None) -> StepOutcome:
        """Run the step once. `precheck`: the nodes' health check, still running beside the step (it is
        off the resume's critical path); a bad node it finds stops the step."""
        heartbeats = self.state_dir / runtime.HEARTBEATS_DIR_NAME / f"{self.attempt}.{try_number}"
        heartbeats.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **{runtime.HEARTBEAT_DIR_ENV: str(heartbeats),
                                  runtime.ATTEMPT_ID_ENV: f"{self.attempt}.{try_number}"})
        # A line in the job's log with the time: where a resume's seconds go can be read from it.
        print(f"clusterkit supervisor: starting the step (attempt {self.attempt}, try {try_number}) at "
              f"{time.time():.3f}", file=sys.stderr, flush=True)
        output_start = _output_end()
        process = subprocess.Popen(self.step, env=env, start_new_session=True)
        outcome = self._watch(process, heartbeats, precheck)
        outcome.finished = every_rank_done(read_heartbeats(heartbeats))
        if outcome.exit_code:
            outcome.log_tail = _output_since(output_start)
        return outcome

    def _watch(self, process: subprocess.Popen, heartbeats: Path,
               precheck: concurrent.futures.Future | None) -> StepOutcome:
        started = time.monotonic()
        progress: dict[int, tuple[int, float]] = {}  # rank -> (step, when we saw it change)
        while True:
            try:
                code = process.wait(timeout=WATCH_S)
                return StepOutcome(code, signalled=self.stop_requested.is_set())
            except subprocess.TimeoutExpired:
                pass
            if self.terminating.is_set():
                # Pass it on so the ranks can save what they can, then go: Slurm decides what is next.
                self._stop(process)
                return StepOutcome(process.returncode, terminated=True)
            if self.stop_requested.is_set():
                # Time limit or preemption: the ranks save a checkpoint on SIGTERM, then we requeue. They
                # get what is left before the limit, less the requeue's own margin.
                left = self.warned_with_time_left
                self._stop(process, grace=max(left - REQUEUE_MARGIN_S, 5.0) if left is not None else STOP_GRACE_S)
                return StepOutcome(process.returncode, signalled=True, asked_to_stop=True)
            if precheck is not None and precheck.done():
                bad = precheck.result()
                precheck = None
                if bad:
                    self._stop(process)
                    return StepOutcome(None, bad_nodes=bad)
            evidence = self._hang_evidence(heartbeats, progress, started)
            if evidence:
                self._stop(process)
                return StepOutcome(None, hang_evidence=evidence)

    def _hang_evidence(self, heartbeats: Path, progress: dict[int, tuple[int, float]], started: float) -> str:
        if not self.hang_timeout and not self.startup_timeout:
            return ""
        now = time.monotonic()
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

    def _stop(self, process: subprocess.Popen, grace: float = STOP_GRACE_S) -> None:
        """Stop the step: srun passes SIGTERM to every task; what is left after `grace` gets SIGKILL."""
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            for step_id in self.slurm.steps(self.job_id):
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

    def warning_cause(self) -> str:
        """TIME_LIMIT when the warning came as close to the limit as the job asked for, else PREEMPTED."""
        left = self.warned_with_time_left
        if left is None:
            return TIME_LIMIT if self.signal_lead is not None else PREEMPTED
        lead = self.signal_lead if self.signal_lead is not None else UNKNOWN_LEAD_S
        return TIME_LIMIT if left <= lead + 60 else PREEMPTED

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
        completed_in = self._completed_attempt()
        if completed_in:
            # Requeued after it completed (a warning or a requeue that came too late): starting the step again
            # would only have the ranks leave at once, and a peer still in its rendezvous fail.
            self.decide(COMPLETED, f"attempt {completed_in} completed the run; the step is not started again",
                        stopped=True)
            return 0
        if self.attempt not in budget.attempts_seen:
            if budget.attempts_seen and not self.account_for_previous_attempt(budget):
                return 1
            budget.attempts_seen.append(self.attempt)
            self.run_state.save(budget)
        full = self.storage_full()
        if full:
            self.decide(CHECKPOINT_STORAGE_FULL, f"before the step: {full}; free space there, then resubmit",
                        stopped=True, free_bytes=_free_bytes(self.checkpoint_dir or self.state_dir.parent))
            return 1
        newest_before = _newest_checkpoint(self.checkpoint_dir) if self.checkpoint_dir else None
        nodes = self.allocation_nodes()
        # The health check of every node runs beside the first try of the step, not before it: a resume
        # does not wait for it, and a bad node it finds stops the step.
        checker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="clusterkit-precheck")
        precheck = checker.submit(self.unhealthy_nodes, nodes) if self.precheck else None
        checker.shutdown(wait=False)
        try_number = 0
        while True:
            outcome = self.run_step(try_number, precheck if try_number == 0 else None)
            if outcome.bad_nodes:
                return self.node_failure("the check beside the step: " + "; ".join(outcome.bad_nodes.values()),
                                         outcome.bad_nodes, budget)
            if outcome.terminated:
                self.decide(TERMINATED, "Slurm terminated the job (cancelled, a node failed, or the time "
                            "limit); Slurm requeues it if it is requeueable", exit_code=outcome.exit_code)
                return outcome.exit_code or 143
            # Exit 0 is complete unless it answers our stop. A step we stopped is complete when every rank said
            # it finished its training: the warning came after the last step, and its exit code is our stop's.
            if outcome.finished and outcome.asked_to_stop:
                self.decide(COMPLETED, f"every rank finished its training on {','.join(nodes)} before the warning "
                            f"stopped the step (exit {outcome.exit_code})", stopped=True)
                return 0
            if outcome.exit_code == 0 and not outcome.asked_to_stop:
                late = "; it finished before the warning was passed on" if outcome.signalled else ""
                self.decide(COMPLETED, f"step exited 0 on {','.join(nodes)}{late}", stopped=True)
                return 0
            if outcome.signalled:
                cause = self.warning_cause()
                left = self.warned_with_time_left
                why = (f"warned {'before the time limit' if cause == TIME_LIMIT else 'of a preemption'}"
                       + (f" with {left:.0f} s left" if left is not None else "")
                       + "; " + self.saved_on_stop(newest_before, outcome.exit_code))
                if not self.spend(budget, "time_limit" if cause == TIME_LIMIT else "preemption", why):
                    return 1
                self.decide(cause, why, exit_code=outcome.exit_code)
                return self.requeue()
            failure = outcome.hang_evidence or exit_evidence(outcome.exit_code, outcome.log_tail)
            if not self.job_running():
                # Slurm is ending the job (a node it saw die, a cancel): health checks cannot run on a
                # job being torn down, so they prove nothing about the nodes. Slurm decides what is next.
                self.decide(TERMINATED, f"{failure} while Slurm was ending the job; no node judged",
                            exit_code=outcome.exit_code)
                return outcome.exit_code or 143
            full = self.storage_full()
            if full:
                self.decide(CHECKPOINT_STORAGE_FULL, f"{failure}; {full}: a restart would fail the same way; "
                            "free space there, then resubmit", exit_code=outcome.exit_code, stopped=True,
                            free_bytes=_free_bytes(self.checkpoint_dir or self.state_dir.parent))
                return outcome.exit_code or 1
            bad = self.unhealthy_nodes(nodes)
            if bad:
                return self.node_failure(f"{failure}; " + "; ".join(bad.values()), bad, budget)
            if outcome.hang_evidence:
                decision, evidence = HANG, f"{failure}; all nodes healthy: retrying the step on the same nodes"
            else:
                budget.application_failures += 1
                self.run_state.save(budget)
                if budget.application_failures > self.app_retries:
                    self.decide(APPLICATION_ERROR, f"{failure} with all nodes healthy, "
                                f"{budget.application_failures} times: the application fails; stopping",
                                exit_code=outcome.exit_code, stopped=True)
                    return outcome.exit_code or 1
                decision, evidence = APPLICATION_ERROR, (f"{failure} with all nodes healthy: retrying the step "
                                                         f"({budget.application_failures} of {self.app_retries})")
            if not self.spend(budget, "failure", failure):
                return outcome.exit_code or 1
            self.decide(decision, evidence, exit_code=outcome.exit_code)
            try_number += 1

    def _completed_attempt(self) -> str:
        """An earlier attempt of this job that completed the run, else ''."""
        for made in runtime.read_decisions(self.run_state.decisions_path):
            attempt = str(made.get("attempt", ""))
            if (made.get("decision") == COMPLETED and attempt != self.attempt
                    and attempt.partition(".")[0] == self.job_id):
                return attempt
        return ""

    def node_failure(self, evidence: str, bad: dict[str, str], budget: Budget) -> int:
        """Drain the bad nodes with their evidence and requeue, if the budget allows a restart."""
        self.drain(bad)
        if not self.spend(budget, "failure", evidence):
            return 1
        self.decide(NODE_FAILURE, evidence, nodes=sorted(bad))
        return self.requeue()


def exit_evidence(code: int | None, output: str) -> str:
    """'step exited N', or which rank a signal killed where the launcher's report (torchrun's failure
    summary, srun's line per task) or the return code (-N, or 128+N from a shell) says so."""
    # A SIGKILL is the cause; SIGTERMs in the same report are often torchrun's own teardown of the others.
    reports = sorted(_TORCHRUN_SIGNAL.finditer(output), key=lambda match: match["signal"] != str(int(signal.SIGKILL)))
    torchrun = reports[0] if reports else None
    srun = _SRUN_KILLED.search(output)
    if torchrun:
        number, who = int(torchrun["signal"]), f"rank {torchrun['rank']} on {torchrun['node']}"
    elif srun:
        number, who = signal.SIGKILL, f"task {srun['rank']} on {srun['node']}"
    elif code is not None and (code < 0 or 128 < code < 128 + signal.NSIG):
        number, who = abs(code) if code < 0 else code - 128, "the step"
    else:
        return f"step exited {code}"
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    hint = " (out of memory?)" if number == signal.SIGKILL else ""
    return f"{who} killed by {name}{hint}, step exited {code}"


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
    """The newest committed checkpoint (`step-*`) under `directory`, None without one."""
    try:
        steps = [p for p in directory.iterdir() if p.name.startswith("step-") and p.is_dir()]
    except OSError:
        return None
    return max(steps, key=lambda p: (len(p.name), p.name), default=None)  # step numbers may outgrow 8 digits


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
                            startup_timeout=args.startup_timeout)
    # Slurm's warning before the time limit (--signal=B:USR1@N), or a preemption notice. The handler
    # only starts a thread: asking Slurm for the time left must not run inside a signal handler.
    signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=supervisor.warned, daemon=True).start())
    signal.signal(signal.SIGTERM, lambda *_: supervisor.terminating.set())
    return supervisor.run()


def _bound(value: int) -> int | None:
    return None if value < 0 else value


if __name__ == "__main__":
    sys.exit(main())
