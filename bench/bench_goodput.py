"""Goodput under chaos: a long training run on the local cluster at ParallelCluster's timings, faults injected at
random (seeded) points, the goodput ledger checked against the run's own record, clusterkit against Slurm alone, and
the simulator set to the run's size checked against both.

The run: the resilient training example on 2 nodes of a 4-node local cluster at `--timings parallelcluster`
(SlurmdTimeout 180 s, MessageTimeout 60 s, cred_expire 70 s) whose replacer does clustermgtd's part (a DOWN or idle
drained node replaced on a 60 s loop, a 30 s boot), `--minutes` of steps (15 by default; 0.5 s a step), a
checkpoint every `--checkpoint-every` steps, supervised with a hang timeout. `--faults` faults (6 by default, every
kind at least once), each at a random step of the training's progress (drawn once from `--seed`, at least 60 steps
apart), while the training is running, on a random node of the step:

    crash    the node's processes SIGKILLed (connections reset)            node loss
    freeze   the node's processes SIGSTOPped: silence, no reset            node loss
    hang     one rank SIGSTOPped: every slurmd alive, the ranks block      hang
    device   an Xid 79 in the node's kernel log and its rank killed        device (the health check fails)

Ground truth is the run's own record, not clusterkit's: rank 0 writes every step's time (the example's STEP_LOG);
the injector writes the faults and the submission and end times. Productive seconds are the steps kept (the final
step) times the median step time; goodput is that over the wall-clock from submission to the end. The ledger
(`handle.goodput()`) must be within 2 points of it.

Slurm alone: the same job unsupervised (Slurm requeues it after a node failure; nothing watches ranks or health),
meeting the same faults at the same steps, in a window as long as clusterkit's run took. Its progress is the last
checkpoint it reached in the window. Where its run can no longer progress in the window (a failed step ends the job;
a hung rank blocks the rest until gloo's 30-minute timeout, longer than the window), the bench stops it there.

The simulator: the same size (2 ranks on 2 nodes, 2 free nodes, the replacer's timing), the run's failure rate per
second of training, the kinds injected, and the costs this run measured (the ledger's detection and recovery per
fault, each kind's mean; the save's stall), over the run's time from its first step; its mean goodput over 1,000
runs must be within 2 points of the ledger's goodput over the same time.

    python bench/bench_goodput.py [--minutes 15] [--faults 6] [--seed 1] [--checkpoint-every 20]
        [--step-seconds 0.5] [--no-baseline]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import signal
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KINDS = ("crash", "freeze", "hang", "device")
MANIFESTATION = {"crash": "node_loss", "freeze": "node_loss", "hang": "hang", "device": "device"}
MIN_GAP_STEPS = 60
HANG_TIMEOUT_S = 20
TARGET_POINTS = 2.0
GLOO_TIMEOUT_S = 1800  # torch.distributed's default for gloo: a hung rank blocks its peers this long


@dataclasses.dataclass
class Fault:
    step: int  # the training progress (highest step reached) at which it was due
    kind: str
    node: str = ""
    at: float = 0.0  # unix time it was injected; 0: never (the run could not reach it)
    at_step: int = 0  # the step the run was at


@dataclasses.dataclass
class ChaosRun:
    by: str  # "clusterkit" or "slurm alone"
    job_id: str
    submitted: float
    end: float
    state: str
    faults: list[Fault]
    step_log: Path
    workdir: Path
    handle: object  # the JobHandle
    stopped: str = ""  # why the bench stopped a run that could no longer progress


def plan_faults(count: int, steps: int, seed: int) -> list[Fault]:
    """`count` faults at random steps (at least MIN_GAP_STEPS apart, none in the first or last 60), every kind at
    least once when count allows."""
    rng = random.Random(seed)
    kinds = list(KINDS[:count]) + [rng.choice(KINDS) for _ in range(count - len(KINDS))]
    rng.shuffle(kinds)
    room = steps - 2 * MIN_GAP_STEPS - (count - 1) * MIN_GAP_STEPS
    if room < 0:
        raise SystemExit(f"{count} faults do not fit in {steps} steps: fewer faults or more minutes")
    offsets = sorted(rng.randint(0, room) for _ in range(count))
    return [Fault(MIN_GAP_STEPS + offset + i * MIN_GAP_STEPS, kind) for i, (offset, kind) in
            enumerate(zip(offsets, kinds))]


def read_step_log(path: Path) -> list[tuple[int, float]]:
    if not path.is_file():
        return []
    entries = []
    for line in path.read_text().splitlines():
        step, _, at = line.partition(" ")
        if step.isdigit() and at:
            entries.append((int(step), float(at)))
    return entries


def rank_pid(cluster, node: str) -> int:  # noqa: ANN001
    """The training rank's process on the node (a torchrun worker, not torchrun itself)."""
    for pid in cluster.node_processes(node):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"train_resilient.py") for arg in argv) and not any(
                b"torchrun" in arg or b"torch.distributed.run" in arg for arg in argv):
            return pid
    raise RuntimeError(f"no training rank on {node}")


def inject(cluster, fault: Fault) -> None:  # noqa: ANN001
    if fault.kind == "crash":
        cluster.crash_node(fault.node)
    elif fault.kind == "freeze":
        cluster.freeze_node(fault.node)
    elif fault.kind == "hang":
        os.kill(rank_pid(cluster, fault.node), signal.SIGSTOP)
    else:  # a GPU falls off the bus: the driver logs Xid 79 and the rank on it dies
        cluster.fail_device(fault.node, xid=79)
        os.kill(rank_pid(cluster, fault.node), signal.SIGKILL)


def job_spec(name: str, steps: int, step_seconds: float, every: int, step_log: Path, supervised: bool,
             heartbeats: Path) -> dict[str, object]:
    from clusterkit import runtime

    env = {"TRAIN_STEPS": str(steps), "STEP_SECONDS": str(step_seconds), "CHECKPOINT_EVERY": str(every),
           "STEP_LOG": str(step_log)}
    spec: dict[str, object] = {
        "name": name, "instance": "local", "nodes": 2, "processes_per_node": 1, "launcher": "torchrun",
        "command": ["examples/train_resilient.py"], "checkpoint_dir": "run", "max_restarts": 30, "time": "120",
        "logs": {"output": "train_%j.out"}, "env": env}
    if supervised:
        spec["supervise"] = {"hang_timeout": HANG_TIMEOUT_S, "app_retries": 3}
    else:
        env[runtime.HEARTBEAT_DIR_ENV] = str(heartbeats)
    return spec


def run_chaos(cluster, by: str, faults: list[Fault], steps: int, step_seconds: float, every: int,  # noqa: ANN001
              window_s: float | None) -> ChaosRun:
    """Submit the training, inject each fault once the run reaches its step (while it trains), and wait for its end
    (or, for Slurm alone, the window's end or the point after which it cannot progress)."""
    from clusterkit.jobs.spec import job_from_dict
    from clusterkit.jobs.submit import submit

    supervised = by == "clusterkit"
    workdir = Path(tempfile.mkdtemp(prefix=f"ck-bench-chaos-{by.split()[0]}-"))
    (workdir / "examples").symlink_to(REPO / "examples")
    (workdir / "hb").mkdir()
    step_log = workdir / "steps.log"
    faults = [dataclasses.replace(fault) for fault in faults]
    spec = job_spec(f"chaos-{by.split()[0]}", steps, step_seconds, every, step_log, supervised, workdir / "hb")
    submitted = time.time()
    handle = submit(job_from_dict(spec), cluster.name, workdir=workdir)
    pending = list(faults)
    stopped, state, looked = "", "", 0.0
    rng = random.Random(f"{handle.job_id}-victims")
    while True:
        now = time.time()
        if window_s is not None and now - submitted >= window_s:
            stopped = "the window (as long as clusterkit's run) ended"
            break
        if now - looked >= 1.0:
            looked = now
            state = handle.tracker.state(handle.job_id, fresh=True)
            if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY"):
                break
        entries = read_step_log(step_log)
        live = bool(entries) and now - entries[-1][1] < 2.0
        reached = max((step for step, _ in entries), default=0)
        if pending and live and reached >= pending[0].step:
            fault = pending.pop(0)
            nodes = cluster.slurm().hostnames(cluster.slurm().job_details(handle.job_id)["NodeList"])
            fault.node, fault.at, fault.at_step = rng.choice(nodes[:2]), time.time(), reached
            inject(cluster, fault)
            print(f"  [{by}] +{fault.at - submitted:6.1f} s step {reached}: {fault.kind} {fault.node}", flush=True)
            if not supervised and fault.kind == "hang":
                stopped = (f"a rank hung at step {reached}: nothing watches it, and gloo's timeout "
                           f"({GLOO_TIMEOUT_S} s) is longer than the window")
                break
        time.sleep(0.1)
    end = time.time()
    if stopped:
        handle.cancel()
        state = handle.tracker.state(handle.job_id, fresh=True)
    elif state != "COMPLETED" and not supervised:
        stopped = f"the job ended {state}: a failed step is not retried, and nothing resubmits it"
    return ChaosRun(by, handle.job_id, submitted, end, state, faults, step_log, workdir, handle, stopped)


def step_time(entries: list[tuple[int, float]]) -> float:
    """The median time between a step and the next within one try."""
    gaps = [b[1] - a[1] for a, b in zip(entries, entries[1:]) if b[0] == a[0] + 1 and 0 < b[1] - a[1] < 5]
    return statistics.median(gaps)


def truth(run: ChaosRun, steps: int, every: int, window_s: float | None) -> dict[str, float]:
    """Goodput from the run's own record: steps kept x the median step time, over submission to the end (or the
    window)."""
    entries = read_step_log(run.step_log)
    step_s = step_time(entries)
    end = run.end if window_s is None else run.submitted + window_s
    reached = max((step for step, at in entries if at <= end), default=0)
    kept = steps if run.state == "COMPLETED" else reached // every * every  # the checkpoint it would resume from
    wall = end - run.submitted
    return {"wall_s": wall, "step_s": step_s, "steps_kept": kept, "productive_s": kept * step_s,
            "goodput": kept * step_s / wall}


def measured_costs(ledger, faults: list[Fault]) -> list[tuple[str, float, float]]:  # noqa: ANN001
    """(kind, detection s, recovery s) of each fault, in order, from the ledger: each gap between two stretches of
    productive steps is one failure; its detection (or hang) spans are the detection, its recovery and other spans
    (the step's end, the requeue, the start-up) the recovery. Lost work and save stalls the simulator models itself.
    A failure acted on within the second of its last beat shows no detection span (decisions are recorded to the
    second): it is 0 here."""
    gaps: list[list[float]] = []
    current: list[float] | None = None
    for span in ledger.spans:
        if span.category == "productive":
            if current is not None:
                gaps.append(current)
            current = [0.0, 0.0]
        elif current is not None and span.category in ("detection", "hang"):
            current[0] += span.end - span.start
        elif current is not None and span.category in ("recovery", "other"):
            current[1] += span.end - span.start
    injected = [fault for fault in faults if fault.at]
    if len(gaps) != len(injected):
        spans = "\n  ".join(f"{s.start:.1f}-{s.end:.1f} {s.category}: {s.what}" for s in ledger.spans)
        raise RuntimeError(f"the ledger shows {len(gaps)} failures for {len(injected)} faults injected:\n  {spans}")
    return [(fault.kind, detect, recover) for fault, (detect, recover) in zip(injected, gaps)]


def from_first_step(ledger) -> tuple[float, float]:  # noqa: ANN001
    """(seconds, goodput) of the ledger from the first step on: the simulator's clock starts there."""
    first = next(span.start for span in ledger.spans if span.category == "productive")
    wall = ledger.end - first
    return wall, ledger.categories["productive"] / wall


def simulated(ledger, faults: list[Fault], every: int, step_s: float, stall_per_save: float) -> dict[str, object]:  # noqa: ANN001
    """The simulator at the chaos run's size, rate and measured costs: its mean goodput over 1,000 runs."""
    from clusterkit.goodput.model import (
        GB,
        GIB,
        MANIFESTATIONS,
        Detection,
        Policy,
        Scenario,
        Span,
    )
    from clusterkit.goodput.simulator import simulate

    costs = measured_costs(ledger, faults)
    wall, _ = from_first_step(ledger)
    training = sum(ledger.categories[name] for name in ("productive", "lost_work", "checkpoint_stall"))

    def mean_of(kinds: set[str], which: int) -> Span:
        values = [cost[which] for cost in costs if MANIFESTATION[cost[0]] in kinds]
        value = statistics.fmean(values) if values else 0.0
        return Span(value, value)

    detection = Detection(**{m: mean_of({m}, 1) for m in MANIFESTATIONS})
    node_path = mean_of({"node_loss", "device"}, 2)
    in_place = mean_of({"hang", "software"}, 2)
    policy = Policy("chaos-measured", "clusterkit as this run measured it", True, detection, node_path, in_place,
                    "free_nodes")
    counts = {m: sum(MANIFESTATION[c[0]] == m for c in costs) for m in MANIFESTATIONS}
    # Saves: a blocking write of the measured stall (size and bandwidth chosen to give it); loading is inside the
    # measured recovery, and so is the restart.
    scenario = Scenario(gpus=2, gpus_per_node=1, days=wall / 86_400, free_nodes=2,
                        failures_per_gpu_hour=len(costs) / 2 / (training / 3600), checkpoint_gib=max(
                            stall_per_save, 1e-6) * GB / GIB, save_gbps=1.0, restart_s=0.0,
                        hang_timeout=HANG_TIMEOUT_S, mix={m: float(counts[m]) for m in MANIFESTATIONS})
    result = simulate(scenario, policy, every * step_s, runs=1000, seed=0)
    return {"goodput": result.goodput, "failures": result.failures, "interval_s": every * step_s,
            "costs": [{"kind": k, "detection_s": round(d, 1), "recovery_s": round(r, 1)} for k, d, r in costs]}


def points(a: float, b: float) -> str:
    off = (a - b) * 100
    return f"{off:+.1f} pts ({'met' if abs(off) <= TARGET_POINTS else 'MISSED'}: within {TARGET_POINTS:g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="minutes of training steps (default 15)")
    parser.add_argument("--faults", type=int, default=6, help="faults injected (default 6; every kind from 4)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints")
    parser.add_argument("--step-seconds", type=float, default=0.5)
    parser.add_argument("--no-baseline", action="store_true", help="skip Slurm alone")
    options = parser.parse_args()
    os.environ["CLUSTERKIT_HOME"] = tempfile.mkdtemp(prefix="ck-bench-")
    from bench_recovery import uninterrupted_digest  # noqa: PLC0415  (bench/ is this script's directory)

    from clusterkit import ClusterRequest, create_cluster

    steps = int(options.minutes * 60 / options.step_seconds)
    every = options.checkpoint_every
    faults = plan_faults(options.faults, steps, options.seed)
    print(f"chaos run: {steps} steps of {options.step_seconds} s ({options.minutes:g} min), a checkpoint every "
          f"{every} steps, faults at steps {', '.join(f'{f.step} ({f.kind})' for f in faults)}", flush=True)
    digest = uninterrupted_digest(steps, every)
    cluster = create_cluster(ClusterRequest("bench-chaos", provider="local", nodes=4, cpus_per_node=2,
                                            timings="parallelcluster", replace_nodes=True, boot_delay=30))
    try:
        ours = run_chaos(cluster, "clusterkit", faults, steps, options.step_seconds, every, None)
        ledger = ours.handle.goodput()
        weights = ours.workdir / "run" / "final_weights.sha256"
        identical = weights.is_file() and weights.read_text().strip() == digest
        theirs = None
        if not options.no_baseline:
            wait_for_a_whole_cluster(cluster)
            theirs = run_chaos(cluster, "slurm alone", faults, steps, options.step_seconds, every,
                               ours.end - ours.submitted)
    finally:
        cluster.delete()

    ours_truth = truth(ours, steps, every, None)
    stall = ledger.categories["checkpoint_stall"] / max(1, steps // every)
    sim = simulated(ledger, ours.faults, every, ours_truth["step_s"], stall)
    first_wall, first_goodput = from_first_step(ledger)
    injected = [f for f in ours.faults if f.at]
    kinds = {kind: sum(f.kind == kind for f in injected) for kind in KINDS}
    print(f"\nclusterkit: {ours.state}, bit-identical {identical}, {len(injected)} faults "
          f"({', '.join(f'{k} {n}' for k, n in kinds.items())}), wall {ours_truth['wall_s']:.0f} s")
    for fault, cost in zip(injected, sim["costs"]):
        print(f"  step {fault.at_step:5d} {fault.kind:<7} {fault.node}: detection {cost['detection_s']:5.1f} s, "
              f"recovery {cost['recovery_s']:5.1f} s")
    print("\n" + "  ".join(f"{name} {seconds:.0f} s" for name, seconds in ledger.categories.items()))
    rows = [("ground truth goodput", f"{ours_truth['goodput']:.1%}",
             f"{truth(theirs, steps, every, ours.end - ours.submitted)['goodput']:.1%}" if theirs else "-"),
            ("ledger goodput", f"{ledger.goodput:.1%}", "-")]
    print(f"\n{'':<34}{'clusterkit':>12}{'slurm alone':>14}")
    for label, a, b in rows:
        print(f"{label:<34}{a:>12}{b:>14}")
    print(f"ledger vs ground truth: {points(ledger.goodput, ours_truth['goodput'])}")
    print(f"from the first step ({first_wall:.0f} s): ledger {first_goodput:.1%}, simulator {sim['goodput']:.1%} "
          f"({sim['failures']:.2f} failures a run): {points(sim['goodput'], first_goodput)}")
    if theirs:
        print(f"slurm alone: {theirs.state}; {theirs.stopped or 'ran to its end'}; faults it met: "
              + ", ".join(f"{f.kind} at step {f.at_step}" for f in theirs.faults if f.at))
    print(json.dumps({
        "steps": steps, "step_s": round(ours_truth["step_s"], 4), "checkpoint_every": every, "seed": options.seed,
        "clusterkit": {"state": ours.state, "bit_identical": identical, "truth": ours_truth,
                       "ledger": ledger.to_dict(),
                       "faults": [dataclasses.asdict(f) for f in ours.faults]},
        "simulator": sim | {"from_first_step_ledger_goodput": first_goodput},
        "slurm_alone": None if theirs is None else {
            "state": theirs.state, "stopped": theirs.stopped,
            "truth": truth(theirs, steps, every, ours.end - ours.submitted),
            "faults": [dataclasses.asdict(f) for f in theirs.faults]},
    }, default=str))


def wait_for_a_whole_cluster(cluster, timeout: float = 600) -> None:  # noqa: ANN001
    """Every node idle again (the replacer's replacements done, the injected faults gone)."""
    from clusterkit.providers.local import processes

    processes.wait_until(lambda: all(node.state == "idle" for node in cluster.slurm().nodes()), timeout,
                         "every node of the cluster to be idle", interval=1.0)


if __name__ == "__main__":
    main()
