"""The contract between a rendered job and the clusterkit code that runs inside it.

The renderer (jobs), the submitter, the supervisor, the health check, heartbeats and the checkpoint
helpers all read their names from here: environment variables, where a run keeps its state, the
supervisor's decisions and arguments. Nothing here imports anything of clusterkit's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

# ----- environment variables a job's processes see ---------------------------------------------
RUN_ID_ENV = "CLUSTERKIT_RUN_ID"  # the run's logger id, kept across requeues
CHECKPOINT_DIR_ENV = "CLUSTERKIT_CHECKPOINT_DIR"  # the run's checkpoint root (spec: checkpoint_dir)
MAX_RESTARTS_ENV = "CLUSTERKIT_MAX_RESTARTS"  # the supervisor's restart budget (spec: max_restarts)
INSTANCE_TYPE_ENV = "CLUSTERKIT_INSTANCE_TYPE"  # the nodes' EC2 type: what health checks expect
HEARTBEAT_DIR_ENV = "CLUSTERKIT_HEARTBEAT_DIR"  # set by the supervisor for one try of the step
ATTEMPT_ID_ENV = "CLUSTERKIT_ATTEMPT_ID"  # set by the supervisor: job.restart.try
FAULTS_DIR_ENV = "CLUSTERKIT_FAULTS_DIR"  # local clusters: injected health-check faults
# checkpoint_every="auto": node failures per GPU-hour to plan the interval for (else Llama 3's rate)
FAILURES_PER_GPU_HOUR_ENV = "CLUSTERKIT_FAILURES_PER_GPU_HOUR"
# The spec's checkpoint_every (steps, or auto): what CheckpointManager uses where the training passes none
CHECKPOINT_EVERY_ENV = "CLUSTERKIT_CHECKPOINT_EVERY"
# Set by the supervisor of a job with spare nodes for each try: the step's nodes (comma-separated) and their count,
# which the rendered step's srun runs on (--nodelist, --nodes).
STEP_NODES_ENV = "CLUSTERKIT_STEP_NODES"
STEP_NUM_NODES_ENV = "CLUSTERKIT_STEP_NUM_NODES"
CLUSTER_ENV = "CLUSTERKIT_CLUSTER"  # the cluster job verbs use by default
# The request to save and stop that the job writes on a warning, read by heartbeat.stop_requested().
STOP_FILE_ENV = "CLUSTERKIT_STOP_FILE"
# torchrun's window between its SIGTERM to the workers and its SIGKILL (30 s; read only by recent torch).
TORCH_SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"

# ----- where a supervised run keeps its state ------------------------------------------------
STATE_DIR_NAME = ".clusterkit"
SUPERVISOR_STATE_FILE = "supervisor.json"
DECISIONS_FILE = "decisions.jsonl"
TRIES_FILE = "tries.jsonl"  # each try of the step: when it started and ended, where its steps went
HEARTBEATS_DIR_NAME = "heartbeats"
BEACONS_DIR_NAME = "beacons"  # one liveness beacon per node of the allocation (resilience/beacon.py)
# The job's Slurm comment that shows a cluster-level agent where the job's beacons are (the batch host's is the one
# it watches: the supervisor, which watches the others, dies with the batch host).
BEACONS_COMMENT_PREFIX = "clusterkit-beacons="
STOP_REQUEST_NAME = "stop-request"
# Beside the request: made by a rank's first stop_requested() (the ranks read requests, so the job writes one
# and waits for them instead of signalling at once), and by the first that saw the request (it was taken).
LISTENING_SUFFIX = ".listening"
TAKEN_SUFFIX = ".taken"
# Of the time left before a limit when the warning comes, what is kept for the requeue itself.
REQUEUE_MARGIN_S = 15


def run_state_dir(checkpoint_dir: str | Path, base: str | Path | None = None) -> Path:
    """The supervisor's state directory of a run: beside its checkpoints, so it survives requeues and
    resubmission. Relative checkpoint dirs are relative to the job's working directory (`base`)."""
    path = Path(checkpoint_dir) / STATE_DIR_NAME
    return Path(base) / path if base is not None else path


def stop_request_file(directory: str | Path) -> Path:
    """Where a job asks its ranks to save and stop: in the run's state directory (a batch script) or in one
    try's heartbeat directory (the supervisor), so that every node and container that sees the checkpoints
    sees it. Its markers are this path with LISTENING_SUFFIX and TAKEN_SUFFIX."""
    return Path(directory) / STOP_REQUEST_NAME


# ----- the supervisor's decisions (the `decision` field of decisions.jsonl) ---------------------
COMPLETED = "completed"
NODE_FAILURE = "node_failure"
HANG = "hang"
APPLICATION_ERROR = "application_error"
TIME_LIMIT = "time_limit"  # warned before the time limit: checkpointed and requeued (planned)
PREEMPTED = "preempted"  # warned of a preemption: checkpointed and requeued
CHECKPOINT_STORAGE_FULL = "checkpoint_storage_full"
BUDGET_EXHAUSTED = "budget_exhausted"
TERMINATED = "terminated"  # Slurm ended the attempt itself; Slurm's state says why
# The `action` of a node_failure after which the step went on in the same allocation, on the healthy nodes and
# spares (its `relaunched_on`), instead of a requeue.
RELAUNCH = "relaunch"


def read_decisions(path: Path) -> list[dict[str, Any]]:
    """The decisions in a run's decisions file (see `parse_decisions`); none when there is no file."""
    try:
        return parse_decisions(path.read_bytes())
    except OSError:
        return []


def parse_decisions(data: bytes) -> list[dict[str, Any]]:
    """A decisions file's content: one JSON object a line, then NUL padding (space the supervisor
    reserved so that a full disk cannot stop it). Lines cut short by a crash are skipped."""
    import json  # lazy: every CLI command loads this module, few read decisions

    text = data.rstrip(b"\0").decode("utf-8", "replace")
    found = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            found.append(entry)
    return found

# ----- how a batch script starts the supervisor ---------------------------------------------------
SUPERVISOR_MODULE = "clusterkit.resilience.supervisor"
HEALTH_MODULE = "clusterkit.stack.health"  # run on each node by the supervisor, through srun
BEACON_MODULE = "clusterkit.resilience.beacon"  # run on each node by the supervisor, through srun
BEACON_STEP_NAME = "clusterkit-beacons"  # the beacons' step: the supervisor stops a step without stopping them
DEFAULT_MAX_RESTARTS = 3
DEFAULT_MAX_TIME_LIMIT_REQUEUES = 100  # a run requeued at its time limit this often is not converging
UNBOUNDED = -1
# With hang detection on, a step that sends no heartbeat at all for this long (or 3 hang timeouts, if longer)
# is stuck before its first step: imports, rendezvous, a checkpoint load.
DEFAULT_STARTUP_TIMEOUT = 1800


def startup_timeout_for(hang_timeout: float, startup_timeout: float | None) -> float:
    """Seconds a step may take to its first heartbeat (0: no bound): as given, else the default when hang
    detection is on (a job without it may never call heartbeat())."""
    if startup_timeout is not None:
        return startup_timeout
    return max(DEFAULT_STARTUP_TIMEOUT, 3 * hang_timeout) if hang_timeout else 0


def supervisor_command(python: str, *, hang_timeout: int, app_retries: int, state_dir: str | Path | None,
                       signal_lead: int | None = None, max_time_limit_requeues: int | None = None,
                       max_preemptions: int | None = None, startup_timeout: int | None = None,
                       spares: int = 0) -> list[str]:
    """The words before the step's own command: `PYTHON -m clusterkit.resilience.supervisor ... --`."""
    optional = {"--state-dir": state_dir, "--signal-lead": signal_lead, "--startup-timeout": startup_timeout,
                "--spares": spares or None,
                "--max-time-limit-requeues": max_time_limit_requeues, "--max-preemptions": max_preemptions}
    return [python, "-m", SUPERVISOR_MODULE, f"--hang-timeout={hang_timeout}", f"--app-retries={app_retries}",
            *(f"{option}={value}" for option, value in optional.items() if value is not None), "--"]


def supervisor_parser() -> argparse.ArgumentParser:
    """The parser of the arguments `supervisor_command` writes (and a few for running it by hand)."""
    parser = argparse.ArgumentParser(prog=f"python -m {SUPERVISOR_MODULE}",
                                     description="Run a Slurm step and recover from node failures and hangs.")
    parser.add_argument("--max-restarts", type=int, default=None,
                        help=f"restarts after failures (default: ${MAX_RESTARTS_ENV}, else {DEFAULT_MAX_RESTARTS})")
    parser.add_argument("--max-time-limit-requeues", type=int, default=DEFAULT_MAX_TIME_LIMIT_REQUEUES,
                        help=f"requeues before a time limit (default {DEFAULT_MAX_TIME_LIMIT_REQUEUES}; "
                             f"{UNBOUNDED}: no bound)")
    parser.add_argument("--max-preemptions", type=int, default=UNBOUNDED,
                        help=f"requeues after a preemption (default {UNBOUNDED}: no bound)")
    parser.add_argument("--signal-lead", type=float, default=None,
                        help="seconds between the job's warning signal and its time limit (--signal=B:USR1@N)")
    parser.add_argument("--app-retries", type=int, default=1, help="retries of a step failing on healthy nodes")
    parser.add_argument("--hang-timeout", type=float, default=0.0,
                        help="seconds without heartbeat progress that count as a hang (0: off)")
    parser.add_argument("--startup-timeout", type=float, default=None,
                        help="seconds from the step's start to its first heartbeat before it counts as a hang "
                             f"(0: off; default with --hang-timeout: {DEFAULT_STARTUP_TIMEOUT} or 3 hang timeouts)")
    parser.add_argument("--health-timeout", type=float, default=60.0, help="seconds for one node's health check")
    parser.add_argument("--no-precheck", dest="precheck", action="store_false",
                        help="skip the health check of every node before the step")
    parser.add_argument("--no-beacons", dest="beacons", action="store_false",
                        help="start no liveness beacons (a node then counts as gone only when Slurm says so)")
    parser.add_argument("--spares", type=int, default=0,
                        help="nodes of the allocation held beside the step, which a node failure relaunches it onto")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help=f"where the run's budget and decisions live (default: $"
                             f"{CHECKPOINT_DIR_ENV}/{STATE_DIR_NAME})")
    parser.add_argument("step", nargs=argparse.REMAINDER, help="-- then the step's command (srun ...)")
    return parser
