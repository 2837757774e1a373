"""Checkpoint write speed and training-loop stall, against simple baselines on the same disk.

    PYTHONPATH=. python bench/bench_checkpoint.py [--size-mb 1024] [--dir DIR] [--repeats 3]

1. Save throughput of CheckpointManager.save (write, digest, fsync, manifest, rename, pointer)
   against `dd if=<the same bytes> of=<target> bs=4M conv=fsync` and against torch.save + fsync.
   Runs are interleaved and the median is reported, because a shared disk is noisy.
2. save_async stall (time inside the call) against a plain in-memory copy of the same tensors
   (the floor: targets <= 1.2x) and against a synchronous save (target <= 0.5x).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from clusterkit.resilience.checkpoint import CheckpointManager

TENSOR_MB = 64


def make_state(size_mb: int) -> dict[str, torch.Tensor]:
    """Random float32 tensors of 64 MiB each (random so nothing on the way can compress them)."""
    count = max(1, size_mb // TENSOR_MB)
    floats = TENSOR_MB * 2**20 // 4
    return {f"layer{i}.weight": torch.randn(floats) for i in range(count)}


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def dd(source: Path, target: Path) -> None:
    subprocess.run(
        ["dd", f"if={source}", f"of={target}", "bs=4M", "conv=fsync"], check=True, capture_output=True
    )


def torch_save_fsync(state: dict[str, torch.Tensor], target: Path) -> None:
    torch.save(state, target)
    fd = os.open(target, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def bench_throughput(state: dict[str, torch.Tensor], work: Path, repeats: int) -> dict[str, float]:
    source = work / "dd-source.bin"
    with open(source, "wb") as f:  # the same bytes, laid out flat; stays in the page cache
        for tensor in state.values():
            f.write(tensor.numpy().tobytes())
    total_bytes = source.stat().st_size
    seconds: dict[str, list[float]] = {"dd": [], "torch.save+fsync": [], "CheckpointManager.save": []}
    for repeat in range(repeats):
        seconds["dd"].append(timed(lambda: dd(source, work / "dd-target.bin")))
        (work / "dd-target.bin").unlink()
        seconds["torch.save+fsync"].append(timed(lambda: torch_save_fsync(state, work / "plain.pt")))
        (work / "plain.pt").unlink()
        manager = CheckpointManager(work / "checkpoints", keep=1)
        seconds["CheckpointManager.save"].append(timed(lambda: manager.save(repeat, state)))
        shutil.rmtree(work / "checkpoints")
    source.unlink()
    rates = {name: total_bytes / statistics.median(values) / 1e6 for name, values in seconds.items()}
    print(f"\n== save throughput, {total_bytes / 2**20:.0f} MiB, median of {repeats} (MB/s) ==")
    for name, values in seconds.items():
        runs = ", ".join(f"{total_bytes / s / 1e6:.0f}" for s in values)
        print(f"{name:24s} {rates[name]:7.0f}   runs: {runs}")
    print(f"ratio CheckpointManager.save / dd          = {rates['CheckpointManager.save'] / rates['dd']:.2f}  (target >= 0.9)")
    print(f"ratio torch.save+fsync / dd                = {rates['torch.save+fsync'] / rates['dd']:.2f}")
    print(f"ratio CheckpointManager.save / torch.save  = {rates['CheckpointManager.save'] / rates['torch.save+fsync']:.2f}")
    best = {name: total_bytes / min(values) / 1e6 for name, values in seconds.items()}
    print(  # other tenants of a shared disk only ever slow a run down: the best run is the cleanest
        f"best runs: dd {best['dd']:.0f}, torch.save+fsync {best['torch.save+fsync']:.0f}, "
        f"CheckpointManager.save {best['CheckpointManager.save']:.0f} MB/s; "
        f"ratio to dd {best['CheckpointManager.save'] / best['dd']:.2f}"
    )
    return rates


def bench_async_stall(state: dict[str, torch.Tensor], work: Path, repeats: int) -> None:
    copy_s = statistics.median(
        timed(lambda: {name: tensor.clone() for name, tensor in state.items()}) for _ in range(repeats)
    )
    manager = CheckpointManager(work / "checkpoints", keep=1)
    sync_s = statistics.median(timed(lambda: manager.save(step, state)) for step in range(repeats))
    stalls = []
    for step in range(repeats + 1):
        manager.wait()  # measure the call itself, not waiting for the previous write
        stalls.append(timed(lambda: manager.save_async(100 + step, state)))
    manager.close()
    shutil.rmtree(work / "checkpoints")
    first, steady = stalls[0], statistics.median(stalls[1:])
    print("\n== save_async: training-loop stall (s) ==")
    print(f"plain in-memory copy (floor)   {copy_s:.3f}")
    print(f"synchronous save               {sync_s:.3f}")
    print(f"save_async, first call         {first:.3f}   (allocates host buffers)")
    print(f"save_async, later calls        {steady:.3f}   (reuses them)")
    print(f"ratio first call / copy        = {first / copy_s:.2f}  (target <= 1.2)")
    print(f"ratio later calls / copy       = {steady / copy_s:.2f}")
    print(f"ratio first call / sync save   = {first / sync_s:.2f}  (target <= 0.5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="state size (default 1024)")
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to test (default: a temporary one)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-checkpoint-", dir=args.dir))
    try:
        state = make_state(args.size_mb)
        print(f"state: {len(state)} float32 tensors, {args.size_mb} MiB; directory {work}")
        bench_throughput(state, work, args.repeats)
        bench_async_stall(state, work, args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
