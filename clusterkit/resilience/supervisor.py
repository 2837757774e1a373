"""The in-job supervisor: HyperPod-style recovery on plain Slurm.

The batch script runs the training step under `python -m clusterkit.resilience.supervisor -- srun ...`.
When the step fails the supervisor tells apart

- a node failure (a node not responding, or its health check failing): drain the node with the
  evidence as reason and requeue the job, so that it restarts on healthy nodes;
- a hang (no heartbeat progress for `--hang-timeout` seconds): stop the step, check the nodes, then
  requeue (bad node) or retry the step on the same allocation (all healthy);
- an application error (all nodes healthy, non-zero exit): retry up to `--app-retries` times, then
  stop and say it was the application: no endless requeue.

Every restart, whoever caused it (a requeue by Slurm, by us, a retry), spends one unit of the
restart budget, kept with the run so that it survives requeues and resubmission. Each decision is
printed and appended, with its evidence, to `decisions.jsonl`. Training resumes from the latest
valid checkpoint by itself (CheckpointManager.latest()).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from clusterkit import runtime
from clusterkit.errors import ClusterkitError
from clusterkit.files import write_atomically
from clusterkit.resilience.heartbeat import read_heartbeats
from clusterkit.runtime import (APPLICATION_ERROR, BUDGET_EXHAUSTED, COMPLETED, HANG, NODE_FAILURE, PREEMPTED,
                                TERMINATED)
from clusterkit.slurm import Slurm

STOP_GRACE_S = 20.0


@dataclass
class BudgetState:
    """What the supervisor remembers across requeues: kept in the run's state directory."""

    restarts: int = 0
    application_failures: int = 0
    attempts_seen: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> BudgetState:
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            return cls()

    def save(self, path: Path) -> None:
        write_atomically(path, json.dumps(asdict(self)) + "\n")


@dataclass
class StepOutcome:
    exit_code: int | None  # None: we stopped it
    hang_evidence: str = ""
    signalled: bool = False  # the job was warned: save and requeue (time limit, preemption)
    terminated: bool = False  # Slurm is ending the job


class Supervisor:
    def __init__(self, step: list[str], state_dir: Path, max_restarts: int, app_retries: int,
                 hang_timeout: float, health_timeout: float, precheck: bool, slurm: Slurm | None = None) -> None:
        self.step = step
        self.state_dir = state_dir
        self.max_restarts = max_restarts
        self.app_retries = app_retries
        self.hang_timeout = hang_timeout
        self.health_timeout = health_timeout
        self.precheck = precheck
        self.slurm = slurm or Slurm()
        self.job_id = os.environ.get("SLURM_JOB_ID", "")
        self.attempt = f"{self.job_id}.{os.environ.get('SLURM_RESTART_COUNT', '0')}"
        self.state_path = state_dir / runtime.SUPERVISOR_STATE_FILE
        self.stop_requested = threading.Event()  # the warning before the time limit or a preemption
        self.terminating = threading.Event()  # Slurm is ending the job (cancel, node failure, limit)

    # ----- decisions ------------------------------------------------------------------------------
    def decide(self, decision: str, evidence: str, **details: object) -> None:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "job_id": self.job_id, "attempt": self.attempt,
                 "decision": decision, "evidence": evidence, **details}
        with open(self.state_dir / runtime.DECISIONS_FILE, "a") as log:
            log.write(json.dumps(entry) + "\n")
        print(f"clusterkit supervisor: {decision}: {evidence}", file=sys.stderr, flush=True)

    def spend_restart(self, state: BudgetState, why: str) -> bool:
        """Count one restart; False (and a decision) when the budget is spent."""
        if state.restarts >= self.max_restarts:
            self.decide(BUDGET_EXHAUSTED, f"{why}; the restart budget of {self.max_restarts} is spent",
                        restarts=state.restarts)
            return False
        state.restarts += 1
        state.save(self.state_path)
        return True

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
                                    sys.executable, "-m", "clusterkit.resilience.health", check=False,
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
    def run_step(self, try_number: int) -> StepOutcome:
        heartbeats = self.state_dir / runtime.HEARTBEATS_DIR_NAME / f"{self.attempt}.{try_number}"
        heartbeats.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **{runtime.HEARTBEAT_DIR_ENV: str(heartbeats),
                                  runtime.ATTEMPT_ID_ENV: f"{self.attempt}.{try_number}"})
        process = subprocess.Popen(self.step, env=env, start_new_session=True)
        progress: dict[int, tuple[int, float]] = {}  # rank -> (step, when we saw it change)
        while True:
            try:
                code = process.wait(timeout=1.0)
                return StepOutcome(code, signalled=self.stop_requested.is_set())
            except subprocess.TimeoutExpired:
                pass
            if self.terminating.is_set():
                # Pass it on so the ranks can save what they can, then go: Slurm decides what is next.
                self._stop(process)
                return StepOutcome(process.returncode, terminated=True)
            if self.stop_requested.is_set():
                # Time limit or preemption: the ranks save a checkpoint on SIGTERM, then we requeue.
                self._stop(process)
                return StepOutcome(process.returncode, signalled=True)
            evidence = self._hang_evidence(heartbeats, progress)
            if evidence:
                self._stop(process)
                return StepOutcome(None, hang_evidence=evidence)

    def _hang_evidence(self, heartbeats: Path, progress: dict[int, tuple[int, float]]) -> str:
        if not self.hang_timeout:
            return ""
        now = time.monotonic()
        for rank, beat in read_heartbeats(heartbeats).items():
            last = progress.get(rank)
            if last is None or beat.step != last[0]:
                progress[rank] = (beat.step, now)
            elif now - last[1] > self.hang_timeout:
                return (f"rank {rank} on {beat.node} made no progress past step {beat.step} "
                        f"for {now - last[1]:.0f} s")
        return ""

    def _stop(self, process: subprocess.Popen) -> None:
        """Stop the step: srun passes SIGTERM to every task; what is left after a grace gets SIGKILL."""
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            for step_id in self.slurm.steps(self.job_id):
                try:
                    self.slurm.cancel(step_id, signal="KILL")
                except ClusterkitError as error:  # the step may be gone already
                    print(f"clusterkit supervisor: scancel {step_id}: {error}", file=sys.stderr)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    # ----- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        state = BudgetState.load(self.state_path)
        if self.attempt not in state.attempts_seen:
            if state.attempts_seen and not self.spend_restart(state, f"job restarted as attempt {self.attempt}"):
                return 1
            state.attempts_seen.append(self.attempt)
            state.save(self.state_path)
        nodes = self.allocation_nodes()
        if self.precheck:
            bad = self.unhealthy_nodes(nodes)
            if bad:
                self.decide(NODE_FAILURE, "before the step: " + "; ".join(bad.values()), nodes=sorted(bad))
                self.drain(bad)
                return self.requeue()
        try_number = 0
        while True:
            outcome = self.run_step(try_number)
            if outcome.terminated:
                self.decide(TERMINATED, "Slurm terminated the job (cancelled, a node failed, or the time "
                            "limit); Slurm requeues it if it is requeueable", exit_code=outcome.exit_code)
                return outcome.exit_code or 143
            if outcome.exit_code == 0 and not outcome.signalled:
                self.decide(COMPLETED, f"step exited 0 on {','.join(nodes)}")
                return 0
            if outcome.signalled:
                self.decide(PREEMPTED, "the job was signalled before its time limit or preemption; "
                            "the step saved its checkpoint", exit_code=outcome.exit_code)
                return self.requeue()
            failure = outcome.hang_evidence or f"step exited {outcome.exit_code}"
            if not self.job_running():
                # Slurm is ending the job (a node it saw die, a cancel): health checks cannot run on a
                # job being torn down, so they prove nothing about the nodes. Slurm decides what is next.
                self.decide(TERMINATED, f"{failure} while Slurm was ending the job; no node judged",
                            exit_code=outcome.exit_code)
                return outcome.exit_code or 143
            bad = self.unhealthy_nodes(nodes)
            if bad:
                self.decide(NODE_FAILURE, f"{failure}; " + "; ".join(bad.values()), nodes=sorted(bad))
                self.drain(bad)
                return self.requeue()
            if outcome.hang_evidence:
                self.decide(HANG, f"{failure}; all nodes healthy: retrying the step on the same nodes")
            else:
                state.application_failures += 1
                state.save(self.state_path)
                if state.application_failures > self.app_retries:
                    self.decide(APPLICATION_ERROR, f"{failure} with all nodes healthy, "
                                f"{state.application_failures} times: the application fails; stopping",
                                exit_code=outcome.exit_code)
                    return outcome.exit_code or 1
                self.decide(APPLICATION_ERROR, f"{failure} with all nodes healthy: retrying the step "
                            f"({state.application_failures} of {self.app_retries})", exit_code=outcome.exit_code)
            if not self.spend_restart(state, failure):
                return outcome.exit_code or 1
            try_number += 1


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
    supervisor = Supervisor(step, args.state_dir or default_state_dir(), max_restarts, args.app_retries,
                            args.hang_timeout, args.health_timeout, args.precheck)
    # Slurm's warning before the time limit (--signal=B:USR1@N), or a preemption notice.
    signal.signal(signal.SIGUSR1, lambda *_: supervisor.stop_requested.set())
    signal.signal(signal.SIGTERM, lambda *_: supervisor.terminating.set())
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
