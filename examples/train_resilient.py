"""A tiny deterministic distributed training that survives node failures (torchrun, gloo).

Every step's data is a function of (step, rank), so a run that resumes from a checkpoint ends with
bit-identical weights to one that never stopped; the SHA-256 of the final weights is written to
`$CLUSTERKIT_CHECKPOINT_DIR/final_weights.sha256` to prove it. Rank 0 saves a checkpoint every
CHECKPOINT_EVERY steps with clusterkit's CheckpointManager; every rank resumes from the newest
checkpoint that verifies (`resume()`, read before the rendezvous) and beats a heartbeat each step (the
supervisor's hang detection), and a last one when it is done (`heartbeat(step, done=True)`: the supervisor
then knows the run is complete even if a warning came at the end). When the job asks it to stop: through its
stop request (`stop_requested()`, looked at every step: on the warning before a time limit or a preemption the
job writes one before any signal, so the save is not bounded by torchrun's own 30 s window after a signal), or
by the signal it receives when asked to stop (SIGTERM through torchrun, or the job's own SIGUSR1/SIGUSR2 when
started directly; caught from before torch is imported): every rank agrees to stop at the same step, rank 0
saves a checkpoint, and the process exits 0; the job script (or the supervisor) then requeues the job, and the
next attempt resumes from that checkpoint.
A save that fails (a full disk) ends every rank with exit 1 and one line saying why; any other
clusterkit error, or ENOSPC, ends the process with one line and exit 1 as well.

Settings (environment): TRAIN_STEPS (60), CHECKPOINT_EVERY (10; `auto`: chosen by the manager from its measured
save costs and step time and the failure rate in $CLUSTERKIT_FAILURES_PER_GPU_HOUR, printed with why), STEP_SECONDS (0.2, a stand-in for
real work), SAVE_SECONDS (0: rank 0 takes this much longer for each save, as a large model's state on shared
storage would), EXAMPLE_FAULT (for tests: `always` fails on every attempt, `crash-once` kills rank 1's
process once, `hang-once` stops rank 1 once without exiting, `stuck-start-once` stops rank 1 once
before the rendezvous, so no rank ever beats, `slow-exit` has rank 0 take 10 s to exit after its last
step, as a slow teardown would), STEP_LOG (for benchmarks: rank 0 appends `STEP UNIX_TIME` to this file after every
step, the run's own record of when each step was done, against which bench/bench_goodput.py checks the ledger).
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import sys
import time
from pathlib import Path

stop_signalled = False


def on_stop_signal(signum: int, frame: object) -> None:
    global stop_signalled
    stop_signalled = True


# Before the imports, which take seconds on a busy node: a stop asked for that early still ends cleanly.
for _stop_signal in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(_stop_signal, on_stop_signal)
    signal.siginterrupt(_stop_signal, False)  # system calls in torch's C++ code restart, not fail

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from clusterkit.errors import ClusterkitError  # noqa: E402
from clusterkit.resilience import CheckpointManager, heartbeat, stop_requested  # noqa: E402

STEPS = int(os.environ.get("TRAIN_STEPS", "60"))
CHECKPOINT_EVERY = os.environ.get("CHECKPOINT_EVERY", "10")  # a number of steps, or auto
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.2"))
SAVE_SECONDS = float(os.environ.get("SAVE_SECONDS", "0"))
FAULT = os.environ.get("EXAMPLE_FAULT", "")
FAULT_STEP = 15
STEP_LOG = os.environ.get("STEP_LOG", "")
# Why the ranks stop, agreed with a MAX reduction: a request outranks a signal.
SIGNALLED, REQUESTED = 1, 2


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step * 1000 + rank)
    inputs = torch.randn(64, 16, generator=generator)
    targets = inputs[:, :4] * 2.0 - inputs[:, 4:8]
    return inputs, targets


def weights_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def inject_fault(step: int, rank: int, run_dir: Path) -> None:
    """Test faults: each `*-once` fault fires in one attempt only (a marker file remembers it)."""
    if step != FAULT_STEP or rank != 1 or not FAULT:
        return
    if FAULT == "always":
        raise RuntimeError("injected application error (EXAMPLE_FAULT=always)")
    marker = run_dir / f".fault-{FAULT}"
    if marker.exists():
        return
    marker.write_text("fired\n")
    if FAULT == "crash-once":
        os.kill(os.getpid(), signal.SIGKILL)
    if FAULT == "hang-once":
        while True:  # no heartbeat, no collective: the other ranks block in all_reduce
            time.sleep(1)


def stuck_before_the_rendezvous(run_dir: Path) -> None:
    """`stuck-start-once`: rank 1 never reaches the rendezvous (once), so rank 0 waits in it too."""
    marker = run_dir / ".fault-stuck-start-once"
    if FAULT != "stuck-start-once" or os.environ.get("RANK") != "1" or marker.exists():
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text("fired\n")
    while True:
        time.sleep(1)


def save_checkpoint(manager: CheckpointManager, rank: int, step: int, state: dict, loss: float) -> bool:
    """Rank 0 saves; every rank learns whether it worked (a full disk ends the run with one line)."""
    failed = torch.tensor([0])
    if rank == 0:
        try:
            time.sleep(SAVE_SECONDS)
            manager.save(step, state)
            print(f"checkpoint at step {step} (loss {loss:.5f})", flush=True)
        except ClusterkitError as error:
            print(f"training: stopping at step {step}: {error}", file=sys.stderr, flush=True)
            failed[0] = 1
    dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    return not failed.item()


def main() -> int:
    run_dir = Path(os.environ.get("CLUSTERKIT_CHECKPOINT_DIR", "checkpoints"))
    stop_requested()  # from here on the job asks through its request, which the loop looks at every step
    # Every rank holds the same replica; rank 0 alone writes it, as one shard (world_size=1).
    every = CHECKPOINT_EVERY if CHECKPOINT_EVERY == "auto" else int(CHECKPOINT_EVERY)
    manager = CheckpointManager(run_dir, keep=3, rank=0, world_size=1, checkpoint_every=every,
                                gpus=int(os.environ.get("WORLD_SIZE", "1")))
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    # Read before the rendezvous, which waits for the slowest rank anyway: no collective is needed,
    # and the newest checkpoint that verifies is the same for every rank.
    start = 0
    resumed = manager.resume()
    if resumed is not None:
        state = resumed[1]
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    stuck_before_the_rendezvous(run_dir)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"training: world {world}, {'resuming from step ' + str(start) if start else 'starting'}", flush=True)

    step, said = start, ""
    while step < STEPS:
        inject_fault(step, rank, run_dir)
        inputs, targets = batch(step, rank)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)
            parameter.grad /= world
        optimizer.step()
        step += 1
        heartbeat(step, min_interval_s=0.0)
        if STEP_LOG and rank == 0:
            with open(STEP_LOG, "a") as step_log:
                step_log.write(f"{step} {time.time():.3f}\n")
        time.sleep(STEP_SECONDS)
        stopping = torch.tensor([REQUESTED if stop_requested() else SIGNALLED if stop_signalled else 0])
        dist.all_reduce(stopping, op=dist.ReduceOp.MAX)  # all ranks agree to stop at the same step
        due, reason = manager.due(step), manager.schedule.reason  # every rank: with auto they agree on it
        if rank == 0 and every == "auto" and manager.schedule.interval_steps and reason != said:
            print(f"training: {reason}", flush=True)
            said = reason
        if due or stopping.item():
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            if not save_checkpoint(manager, rank, step, state, loss.item()):
                dist.destroy_process_group()
                return 1
        if stopping.item():
            if rank == 0:
                cause = "the stop request" if stopping.item() == REQUESTED else "a signal"
                print(f"stopping at step {step} on {cause}; checkpoint saved", flush=True)
            dist.destroy_process_group()
            return 0

    if rank == 0:
        digest = weights_digest(model)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "final_weights.sha256").write_text(digest + "\n")
        print(f"done: {STEPS} steps, final weights sha256 {digest}", flush=True)
    dist.destroy_process_group()
    heartbeat(STEPS, done=True)
    if FAULT == "slow-exit" and rank == 0:
        time.sleep(10)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ClusterkitError as error:  # one line; the job's log says why
        print(f"train_resilient: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        print(f"train_resilient: no space left on the device: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
