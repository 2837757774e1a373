"""Recovery from a node crash on the local cluster, step by step, idle and under CPU load.

The resilient training example runs on 2 of 4 nodes under clusterkit's supervisor; halfway, one of
its nodes is crashed. Measured in the same run, for each condition (idle, then with `--busy` busy
loops beside it):

    crash -> requeued          Slurm notices the dead node and requeues the job (Slurm's own time)
    requeued -> eligible       Slurm holds a requeued job until the credentials of its last run expire
                               (`cred_expire`: 5 s on the local cluster, Slurm's least; 120 s by default)
    eligible -> running        Slurm starts it again
    running -> supervisor      the job's start on the node, the batch script, the supervisor's start-up
    supervisor -> step         the supervisor's accounting of the previous attempt, up to the step's start
    step -> first resumed step torchrun, imports, rendezvous, checkpoint load, the first step

and the total beyond Slurm's detect-and-requeue, from the moment Slurm lets the requeued job run (targets:
10 s idle, 15 s loaded; the total from the requeue itself is printed too), and the steps lost (target: at
most one checkpoint interval). Slurm reports the eligible time to the second: it is taken as the start
of that second, which can only lengthen the time counted beyond it.

    python bench/bench_recovery.py [--timings test] [--checkpoint-every 10] [--busy 2]

At `--timings parallelcluster` (ParallelCluster 3.16's Slurm timers: SlurmdTimeout 180 s, MessageTimeout 60 s,
cred_expire 70 s; clustermgtd's 60 s loop) it measures instead, for each fault {crash (SIGKILL of the node's
processes), freeze (SIGSTOP of them: silence, no reset)} x place {batch, the job's batch host; other, its other
node} x path:

    spare     a 2-node job with `supervise: {spares: 1}` on a 4-node cluster (the allocation holds a spare)
    free      a 2-node job on a 4-node cluster: a requeue finds free nodes
    replace   a 2-node job on a 2-node cluster whose replacer (clustermgtd's part: 60 s loop, 30 s boot) brings
              back a failed node: the requeued job waits for the replacement (the table shows when the
              replacement served, from the replacer's log, and the seconds after it to the first resumed step);
              each case waits a time drawn from `--seed` (0 to one loop) before it starts, so that its fault
              comes at a random point of the replacer's loop, as a user's does, not in step with it

the seconds from the fault to the first resumed training step: the first heartbeat a rank writes after it (a
rank beats right after each optimizer step). With clusterkit: the job supervised, the cluster agent running.
With `--baseline`, Slurm alone as well: the same job unsupervised (no supervisor, no beacons, so the agent does
nothing; Slurm's JobRequeue requeues it). Slurm alone has no spare path: its figure for `spare` is its `free`
figure (the same unsupervised job on the same cluster), marked so. Every case also checks that the job ends
COMPLETED with final weights bit-identical to an uninterrupted run, and prints the steps lost (the step at the
fault less the step resumed from). One table per condition (idle; with `--busy N`, N busy loops beside it), with
the ratio clusterkit / Slurm alone where both ran and the targets (another node with a spare <= 20 s, the batch
host <= 45 s, every path <= 0.2x Slurm alone) met or not.

    python bench/bench_recovery.py --timings parallelcluster [--busy 2] [--loaded-only] [--baseline]
        [--only 'crash-other-*,freeze-batch-free']
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import fnmatch
import json
import multiprocessing
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS_S = {"idle": 10.0, "loaded": 15.0}


def busy_loop() -> None:
    while True:
        pass


def one_recovery(cluster, checkpoint_every: int, steps: int) -> dict[str, float]:  # noqa: ANN001
    from clusterkit.jobs.spec import job_from_dict
    from clusterkit.jobs.submit import submit
    from clusterkit.providers.local import processes
    from clusterkit.resilience.heartbeat import read_heartbeats

    workdir = Path(tempfile.mkdtemp(prefix="ck-bench-run-"))
    (workdir / "examples").symlink_to(REPO / "examples")
    spec = job_from_dict({
        "name": "bench-recovery", "instance": "local", "nodes": 2, "processes_per_node": 1,
        "launcher": "torchrun", "command": ["examples/train_resilient.py"], "checkpoint_dir": "run",
        "max_restarts": 3, "supervise": True, "time": "10", "logs": {"output": "train_%j.out"},
        "env": {"TRAIN_STEPS": str(steps), "STEP_SECONDS": "0.2", "CHECKPOINT_EVERY": str(checkpoint_every)},
    })
    handle = submit(spec, cluster.name, workdir=workdir)
    beats_root = workdir / "run" / ".clusterkit" / "heartbeats"
    first_try = beats_root / f"{handle.job_id}.0.0"

    def last_step(directory: Path) -> int:
        beats = read_heartbeats(directory) if directory.is_dir() else {}
        return max((beat.step for beat in beats.values()), default=0)

    crash_at = checkpoint_every * 2 + checkpoint_every // 2
    processes.wait_until(lambda: last_step(first_try) >= crash_at, 180, "training to reach the crash step",
                         interval=0.05)
    nodes = cluster.slurm().hostnames(cluster.slurm().job_details(handle.job_id)["NodeList"])
    step_at_crash = last_step(first_try)
    crashed = time.time()
    cluster.crash_node(nodes[-1])
    try:
        processes.wait_until(lambda: handle.tracker.state(handle.job_id, fresh=True) in ("PENDING", "REQUEUED"),
                             120, "Slurm to requeue the job", interval=0.1)
        requeued = time.time()
        eligible = max(requeued, _eligible_time(cluster.slurm().job_details(handle.job_id)))
        processes.wait_until(lambda: handle.tracker.state(handle.job_id, fresh=True) == "RUNNING", 120,
                             "Slurm to start the job again", interval=0.1)
        running = time.time()
        resumed_dir = beats_root / f"{handle.job_id}.1.0"
        processes.wait_until(lambda: bool(read_heartbeats(resumed_dir)) if resumed_dir.is_dir() else False,
                             180, "the resumed training's first step", interval=0.05)
        beats = read_heartbeats(resumed_dir).values()
        first_resumed = min(beat.time for beat in beats)
        resumed_step = min(beat.step for beat in beats) - 1
        supervisor_started = _logged_time(handle.stdout(), f"attempt {handle.job_id}.1 started at ")
        step_started = _logged_time(handle.stdout(), f"(attempt {handle.job_id}.1, try 0) at ")
        assert handle.wait(timeout=300) == "COMPLETED"
    finally:
        cluster.start_node(nodes[-1])
    return {"crash_to_requeued_s": requeued - crashed, "requeued_to_eligible_s": eligible - requeued,
            "eligible_to_running_s": running - eligible,
            "running_to_supervisor_s": supervisor_started - running,
            "supervisor_to_step_start_s": step_started - supervisor_started,
            "step_start_to_first_step_s": first_resumed - step_started,
            "beyond_slurm_requeue_s": first_resumed - eligible,
            "beyond_the_requeue_itself_s": first_resumed - requeued,
            "crash_to_first_resumed_step_s": first_resumed - crashed,
            "steps_lost": step_at_crash - resumed_step, "checkpoint_interval": checkpoint_every}


def _eligible_time(details: dict[str, str]) -> float:
    """When Slurm lets the job start (its EligibleTime, local time to the second), as a Unix time."""
    return time.mktime(time.strptime(details["EligibleTime"], "%Y-%m-%dT%H:%M:%S"))


def _logged_time(log: str, marker: str) -> float:
    """The time the supervisor printed after `marker` in the job's log."""
    return float(log.split(marker, 1)[1].split()[0])


# ----- --timings parallelcluster: the matrix of faults, places and paths ------------------------------------------
FAULTS = ("crash", "freeze")
PLACES = ("other", "batch")
PATHS = ("spare", "free", "replace")
CASES = tuple(f"{fault}-{place}-{path}" for path in PATHS for fault in FAULTS for place in PLACES)
PC_STEPS = 40
PC_CHECKPOINT_EVERY = 10
FAULT_STEP = 25  # halfway through a checkpoint interval: the steps lost show
OTHER_WITH_SPARE_TARGET_S = 20.0
BATCH_HOST_TARGET_S = 45.0
RATIO_TARGET = 0.2
NEW_BEAT_AFTER_S = 1.0  # a beat this long after the fault is the resumed run's: the old one cannot step on


@dataclasses.dataclass
class CaseResult:
    """One case under one condition, by one of clusterkit or Slurm alone."""

    case: str
    by: str  # "clusterkit" or "slurm"
    seconds: float | None = None  # fault -> first resumed heartbeat; None: no resumed step came
    first_step: int | None = None  # the step of that heartbeat
    resumed_from: int | None = None
    step_at_fault: int = 0
    state: str = ""
    bit_identical: bool = False
    recovery: str = ""  # what happened, from the supervisor's decisions or the attempts
    replaced_s: float | None = None  # replace path: fault -> the failed node's replacement ready (the replacer's log)
    failure: str = ""  # why the case failed: the log's tail and the agent's lines

    @property
    def ok(self) -> bool:
        return self.seconds is not None and self.state == "COMPLETED" and self.bit_identical

    @property
    def steps_lost(self) -> int | None:
        return None if self.resumed_from is None else self.step_at_fault - self.resumed_from


def uninterrupted_digest(steps: int = PC_STEPS, every: int = PC_CHECKPOINT_EVERY) -> str:
    """The final weights of the same training run never stopped (world size 2, no Slurm), as the tests make it."""
    run = Path(tempfile.mkdtemp(prefix="ck-bench-uninterrupted-"))
    env = dict(os.environ, TRAIN_STEPS=str(steps), CHECKPOINT_EVERY=str(every), STEP_SECONDS="0",
               CLUSTERKIT_CHECKPOINT_DIR=str(run))
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    str(REPO / "examples" / "train_resilient.py")], env=env, check=True, capture_output=True)
    return (run / "final_weights.sha256").read_text().strip()


def newest_beats(workdir: Path) -> list[tuple[int, float]]:
    """(step, time) of every rank's latest heartbeat in the run: every try's directory (supervised) and the
    bench's own (Slurm alone)."""
    from clusterkit.resilience.heartbeat import read_heartbeats

    directories = [workdir / "hb", *(workdir / "run" / ".clusterkit" / "heartbeats").glob("*")]
    return [(beat.step, beat.time) for directory in directories if directory.is_dir()
            for beat in read_heartbeats(directory).values()]


def wait_for_idle_nodes(cluster, timeout: float = 600) -> None:  # noqa: ANN001
    from clusterkit.providers.local import processes

    processes.wait_until(lambda: all(node.state == "idle" for node in cluster.slurm().nodes()), timeout,
                         "every node of the cluster to be idle", interval=1.0)


def restore(cluster, node: str, replaced: bool) -> None:  # noqa: ANN001
    """Give the next case a whole cluster: the replacer's fresh node where it replaces (else a fresh one now)."""
    from clusterkit.providers.local import processes

    if replaced:
        try:
            processes.wait_until(lambda: (r := cluster.replacements().get(node)) is not None and not r.in_progress
                                 and {n.name: n for n in cluster.slurm().nodes()}[node].state == "idle", 240,
                                 f"the replacement of {node}", interval=1.0)
            return
        except Exception:  # noqa: BLE001  (no replacement came: the bench makes the node fresh itself)
            pass
    cluster.terminate_node(node)
    cluster.boot_node(node)


def replacement_ready_after(cluster, node: str, faulted: float) -> float | None:  # noqa: ANN001
    """Seconds from the fault to `node`'s replacement serving (to the second, as the replacer logs); None where no
    replacement of it began after the fault and ended."""
    from clusterkit.jobs.recoveries import parse_time

    replacement = cluster.replacements().get(node)
    if replacement is None or replacement.ready_at is None:
        return None
    began, ready = parse_time(replacement.terminated_at), parse_time(replacement.ready_at)
    if began is None or ready is None or began < faulted - 1:  # a replacement from before this case
        return None
    return ready - faulted


def run_case(cluster, case: str, supervised: bool, digest: str, step_seconds: float,  # noqa: ANN001
             phase_s: float = 0.0) -> CaseResult:
    from clusterkit import runtime
    from clusterkit.jobs.spec import job_from_dict
    from clusterkit.jobs.submit import submit
    from clusterkit.providers.local import processes
    from clusterkit.resilience.agent import read_agent_log

    fault, place, path = case.split("-")
    result = CaseResult(case, "clusterkit" if supervised else "slurm")
    workdir = Path(tempfile.mkdtemp(prefix=f"ck-bench-{case}-"))
    (workdir / "examples").symlink_to(REPO / "examples")
    env = {"TRAIN_STEPS": str(PC_STEPS), "STEP_SECONDS": str(step_seconds),
           "CHECKPOINT_EVERY": str(PC_CHECKPOINT_EVERY)}
    spec: dict[str, object] = {
        "name": f"bench-{case}", "instance": "local", "nodes": 2, "processes_per_node": 1, "launcher": "torchrun",
        "command": ["examples/train_resilient.py"], "checkpoint_dir": "run", "max_restarts": 3, "time": "30",
        "logs": {"output": "train_%j.out"}, "env": env}
    if supervised:
        spec["supervise"] = {"spares": 1} if path == "spare" else True
    else:
        # Without a supervisor no one sets the heartbeat directory: the bench names one, to see the first step.
        (workdir / "hb").mkdir()
        env[runtime.HEARTBEAT_DIR_ENV] = str(workdir / "hb")
    wait_for_idle_nodes(cluster)
    time.sleep(phase_s)  # a case starts as the last replacement ends: in step with the replacer's loop, unless moved
    handle = submit(job_from_dict(spec), cluster.name, workdir=workdir)
    victim = ""
    faulted = time.time()
    try:
        processes.wait_until(lambda: max((s for s, _ in newest_beats(workdir)), default=0) >= FAULT_STEP, 300,
                             "training to reach the fault's step", interval=0.05)
        details = cluster.slurm().job_details(handle.job_id)
        held = cluster.slurm().hostnames(details["NodeList"])
        batch_host = details["BatchHost"]
        step_nodes = held[:2]  # a spare is the last node held
        victim = batch_host if place == "batch" else next(node for node in step_nodes if node != batch_host)
        result.step_at_fault = max(s for s, _ in newest_beats(workdir))
        faulted = time.time()
        (cluster.freeze_node if fault == "freeze" else cluster.crash_node)(victim)
        resume_timeout = 420 if supervised else 1200

        looked = [time.time()]

        def resumed() -> bool:
            new = [t for _, t in newest_beats(workdir) if t > faulted + NEW_BEAT_AFTER_S]
            if not new and time.time() - looked[0] > 2:  # Slurm's state every 2 s, not at the beats' pace
                looked[0] = time.time()
                if handle.tracker.state(handle.job_id, fresh=True) in ("FAILED", "CANCELLED", "TIMEOUT"):
                    raise RuntimeError("the job ended without a resumed step")
            return bool(new)

        processes.wait_until(resumed, resume_timeout, "the first resumed step", interval=0.05)
        first = min((b for b in newest_beats(workdir) if b[1] > faulted + NEW_BEAT_AFTER_S), key=lambda b: b[1])
        result.first_step, result.seconds = first[0], first[1] - faulted
        result.state = handle.wait(timeout=600, poll=0.5)
    except Exception as error:  # noqa: BLE001  (a failed case is reported with its evidence; the others go on)
        result.failure = f"{type(error).__name__}: {error}"
        handle.cancel()
        if not result.state:
            result.state = handle.tracker.state(handle.job_id, fresh=True)
    finally:
        log = handle.stdout() if handle.log_exists() else ""
        resumes = re.findall(r"resuming from step (\d+)", log)
        result.resumed_from = int(resumes[-1]) if resumes else None
        weights = workdir / "run" / "final_weights.sha256"
        result.bit_identical = weights.is_file() and weights.read_text().strip() == digest
        agent = [f"{e.event} +{e.unix - faulted:.1f}s {e.node}: {e.evidence[:160]}"
                 for e in read_agent_log(cluster.agent_log) if e.unix >= faulted]
        if supervised:  # what the supervisor decided, and when (its record is to the second)
            made = runtime.read_decisions(workdir / "run" / ".clusterkit" / "decisions.jsonl")
            result.recovery = "; ".join(
                f"{d['decision']} ({d.get('action', 'requeue')} {','.join(d.get('nodes', []))}) "
                f"+{dt.datetime.fromisoformat(d['time']).timestamp() - faulted:.0f}s" for d in made[:-1])
        result.recovery += (f" [attempts: {' '.join(a.base_state for a in handle.attempts())}]"
                            f" [agent: {'; '.join(agent) or 'nothing'}]")
        if not result.ok:
            result.failure += "\n    log tail:\n      " + "\n      ".join(log.splitlines()[-25:])
        if victim and path == "replace":
            result.replaced_s = replacement_ready_after(cluster, victim, faulted)
        if victim:
            restore(cluster, victim, replaced=path == "replace")
    return result


def pc_condition(clusters: dict[str, object], cases: list[str], baseline: bool, digest: str,
                 step_seconds: float, condition: str, phases: random.Random) -> list[CaseResult]:
    """Every chosen case with clusterkit, then (with --baseline) with Slurm alone; each printed as it ends."""
    results: list[CaseResult] = []
    runs = [(case, True) for case in cases]
    if baseline:  # Slurm alone's spare figure is its free-node figure: that case once
        runs += [(case, False) for case in dict.fromkeys(c.replace("-spare", "-free") for c in cases)]
    for case, supervised in runs:
        cluster = clusters["replace" if case.endswith("-replace") else "four"]
        # A user's fault comes at any point of clustermgtd's loop: each replace case at a phase drawn from --seed.
        phase = phases.uniform(0, cluster.config.timings.replace_loop_s) if case.endswith("-replace") else 0.0
        result = run_case(cluster, case, supervised, digest, step_seconds, phase)
        results.append(result)
        late = f" (started {phase:.0f} s late)" if phase else ""
        print(f"[{condition}] {case} {result.by}{late}: " + (f"{result.seconds:.1f} s to the first resumed step "
              f"(step {result.first_step})" if result.seconds is not None else "no resumed step")
              + f", {result.state}, bit-identical {result.bit_identical}, steps lost {result.steps_lost}, "
              f"{result.recovery}" + (f"\n  FAILED CASE: {result.failure}" if not result.ok else ""), flush=True)
    return results


def targets(case: str, seconds: float | None, slurm: float | None) -> list[str]:
    """The issue's targets that apply to the case, each met or not."""
    _, place, path = case.split("-")
    shown = []
    if place == "other" and path == "spare":
        shown.append(("<=20s", seconds is not None and seconds <= OTHER_WITH_SPARE_TARGET_S))
    if place == "batch":
        shown.append(("<=45s", seconds is not None and seconds <= BATCH_HOST_TARGET_S))
    if slurm is not None:
        shown.append(("<=0.2x", seconds is not None and seconds <= RATIO_TARGET * slurm))
    return [f"{name} {'met' if met else 'MISSED'}" for name, met in shown]


def pc_table(condition: str, results: list[CaseResult]) -> str:
    def cell(result: CaseResult | None) -> str:
        if result is None:
            return "-"
        if not result.ok:
            return f"{result.seconds:.1f} FAIL" if result.seconds is not None else "FAIL"
        return f"{result.seconds:.1f}"

    clusterkit = {r.case: r for r in results if r.by == "clusterkit"}
    slurm = {r.case: r for r in results if r.by == "slurm"}
    lines = [f"{condition}: seconds from the fault to the first resumed step (first heartbeat after it)",
             f"  {'case':<20} {'clusterkit':>11} {'slurm alone':>12} {'ratio':>6} {'lost':>5} "
             f"{'replaced':>9} {'after it':>9}  targets"]
    for case in CASES:
        ours = clusterkit.get(case)
        theirs = slurm.get(case) or (slurm.get(case.replace("-spare", "-free")) if case.endswith("-spare") else None)
        if ours is None and theirs is None:
            continue
        borrowed = "*" if theirs is not None and theirs.case != case else ""
        slurm_s = theirs.seconds if theirs is not None and theirs.ok else None
        ratio = (f"{ours.seconds / slurm_s:.2f}" if ours is not None and ours.ok and slurm_s else "-")
        lost = ours.steps_lost if ours is not None else None
        shown = targets(case, ours.seconds if ours is not None and ours.ok else None, slurm_s) if ours else []
        replaced = ours.replaced_s if ours is not None else None
        after = (ours.seconds - replaced if ours is not None and ours.seconds is not None and replaced is not None
                 else None)
        lines.append(f"  {case:<20} {cell(ours):>11} {cell(theirs) + borrowed:>12} {ratio:>6} "
                     f"{'-' if lost is None else lost:>5} {'-' if replaced is None else f'{replaced:.0f}':>9} "
                     f"{'-' if after is None else f'{after:.1f}':>9}  {', '.join(shown)}")
    lines.append("  * Slurm alone has no spare path: its figure is the free-node requeue's (same job, unsupervised)")
    if any(r.replaced_s is not None for r in clusterkit.values()):
        lines.append("  replaced: fault -> the failed node's replacement serving (the replacer: 60 s loop, 30 s boot); "
                     "after it: to the first resumed step")
    return "\n".join(lines)


def parallelcluster(options: argparse.Namespace) -> None:
    from clusterkit import ClusterRequest, create_cluster

    chosen = [case for case in CASES if any(fnmatch.fnmatch(case, pattern.strip())
                                            for pattern in options.only.split(","))]
    if not chosen:
        raise SystemExit(f"--only {options.only!r} names no case; cases are {', '.join(CASES)}")
    digest = uninterrupted_digest()
    clusters: dict[str, object] = {}
    conditions = ([] if options.loaded_only else ["idle"]) + ([f"busy {options.busy}"] if options.busy else [])
    tables = []
    try:
        # Spares and free nodes: 4 nodes, no replacer (the bench gives a failed node back itself, so that every
        # case starts on 4 healthy nodes). Waiting for a replacement: 2 nodes, the replacer at its 60 s loop.
        if any(not case.endswith("-replace") for case in chosen):
            clusters["four"] = create_cluster(ClusterRequest("bench-pc4", provider="local", nodes=4,
                                                             cpus_per_node=2, timings="parallelcluster",
                                                             replace_nodes=False))
        if any(case.endswith("-replace") for case in chosen):
            clusters["replace"] = create_cluster(ClusterRequest("bench-pc2", provider="local", nodes=2,
                                                                cpus_per_node=2, timings="parallelcluster",
                                                                replace_nodes=True, boot_delay=30))
        for condition in conditions:
            loops = [multiprocessing.Process(target=busy_loop, daemon=True)
                     for _ in range(options.busy if condition != "idle" else 0)]
            for loop in loops:
                loop.start()
            try:
                results = pc_condition(clusters, chosen, options.baseline, digest, options.step_seconds, condition,
                                       random.Random(options.seed))
            finally:
                for loop in loops:
                    loop.terminate()
            tables.append(pc_table(condition, results))
            print(tables[-1], flush=True)
            print(json.dumps({"condition": condition, "results": [
                dataclasses.asdict(r) | {"steps_lost": r.steps_lost, "ok": r.ok} for r in results]}), flush=True)
    finally:
        for cluster in clusters.values():
            cluster.delete()
    print("\n\n".join(tables))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timings", choices=("test", "parallelcluster"), default="test",
                        help="test: one crash, step by step (default); parallelcluster: the matrix of faults and paths")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="test timings")
    parser.add_argument("--steps", type=int, default=80, help="test timings")
    parser.add_argument("--busy", type=int, default=None,
                        help="busy loops beside the loaded run (test timings: default 2; parallelcluster: default "
                             "none, idle only)")
    parser.add_argument("--only", default="*", help="parallelcluster: comma-separated case patterns, e.g. "
                                                    "'crash-*-free,freeze-batch-spare'")
    parser.add_argument("--baseline", action="store_true", help="parallelcluster: Slurm alone as well")
    parser.add_argument("--loaded-only", action="store_true", help="parallelcluster: skip the idle condition")
    parser.add_argument("--step-seconds", type=float, default=0.15, help="parallelcluster: a training step's sleep")
    parser.add_argument("--seed", type=int, default=1,
                        help="parallelcluster: draws each replace case's point in the replacer's loop")
    options = parser.parse_args()
    os.environ["CLUSTERKIT_HOME"] = tempfile.mkdtemp(prefix="ck-bench-")
    if options.timings == "parallelcluster":
        options.busy = options.busy or 0
        parallelcluster(options)
        return
    options.busy = 2 if options.busy is None else options.busy
    from clusterkit import ClusterRequest, create_cluster

    cluster = create_cluster(ClusterRequest("bench", provider="local", nodes=4, cpus_per_node=2))
    results = {}
    try:
        results["idle"] = one_recovery(cluster, options.checkpoint_every, options.steps)
        loops = [multiprocessing.Process(target=busy_loop, daemon=True) for _ in range(options.busy)]
        for loop in loops:
            loop.start()
        try:
            results["loaded"] = one_recovery(cluster, options.checkpoint_every, options.steps)
        finally:
            for loop in loops:
                loop.terminate()
    finally:
        cluster.delete()
    for condition, figures in results.items():
        beyond = figures["beyond_slurm_requeue_s"]
        print(f"{condition}: " + ", ".join(f"{key} {value:.1f}" if isinstance(value, float) else f"{key} {value}"
                                           for key, value in figures.items()))
        print(f"  target: beyond Slurm's requeue <= {TARGETS_S[condition]:.0f} s: "
              f"{'met' if beyond <= TARGETS_S[condition] else 'MISSED'} ({beyond:.1f} s)")
    print(json.dumps({condition: {k: round(v, 1) if isinstance(v, float) else v for k, v in figures.items()}
                      for condition, figures in results.items()}))


if __name__ == "__main__":
    main()
