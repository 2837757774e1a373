"""One rank of a sharded-save scenario, run as a subprocess by test_checkpoint_sharded.py.

usage: checkpoint_worker.py MODE ROOT RANK WORLD_SIZE RENDEZVOUS_FILE
MODE: gloo | gloo-crash | gloo-damaged | gloo-one-shard | gloo-async-full | files | files-crash |
files-damaged | files-async-full. "-crash": rank 1 dies halfway through its shard. "-async-full": both
ranks save_async step 7 and rank 1's disk is full; then both save_async step 8. "-damaged": after
step 7, both ranks save step 9, a byte of rank 1's shard of it flips, and both resume.
"gloo-one-shard": rank 0 alone saves step 5 (world_size=1), then both ranks resume with collectives.
Prints one JSON line with what this rank saw; prints COMMIT each time this rank commits.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from tests.resilience.resilience_helpers import flip_byte

from clusterkit.errors import ClusterkitError
from clusterkit.resilience import checkpoint as checkpoint_module
from clusterkit.resilience import checkpoint_files
from clusterkit.resilience.checkpoint import CheckpointManager, verify_checkpoint
from clusterkit.resilience.checkpoint_commit import CommitProtocol


def announce_commits() -> None:
    commit = CommitProtocol._commit

    def announced(self, *args, **kwargs):
        print("COMMIT", flush=True)
        return commit(self, *args, **kwargs)

    CommitProtocol._commit = announced


def die_halfway_through_the_shard() -> None:
    emit = checkpoint_files.ChecksummedFile._emit

    def dying(self, view, **kwargs):
        if self.tell() > len(view):
            os._exit(17)
        emit(self, view, **kwargs)

    checkpoint_files.ChecksummedFile._emit = dying


def save_async_on_a_full_disk(manager: CheckpointManager, rank: int, shard: dict) -> dict[str, object]:
    """Step 7 with rank 1's writes failing (ENOSPC), then step 8 with none failing."""
    report: dict[str, object] = {}
    start_torch_file = checkpoint_module._start_torch_file
    if rank == 1:
        def disk_full(*args: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        checkpoint_module._start_torch_file = disk_full
    for when, action in (("call", lambda: manager.save_async(7, shard)), ("wait", manager.wait)):
        try:
            action()
            report[when] = "returned"
        except ClusterkitError as exc:
            report[when] = str(exc)
    checkpoint_module._start_torch_file = start_torch_file
    manager.save_async(8, shard)
    committed = manager.wait()
    report["next"] = committed.step if committed else None
    return report


def flip_a_byte_of_rank_1s_shard(checkpoint: Path, rank: int, flipped: Path, mode: str) -> None:
    """Rank 1 flips a byte of its shard once the checkpoint is committed; then both ranks go on."""
    if mode.startswith("gloo"):
        dist.barrier()
    if rank == 1:
        deadline = time.monotonic() + 60
        while not (checkpoint / "manifest.json").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        flip_byte(checkpoint / "rank-00001.pt", 2000)
        flipped.write_text("flipped")
    if mode.startswith("gloo"):
        dist.barrier()
    else:
        while not flipped.exists():
            time.sleep(0.01)


def main() -> None:
    mode, root, rendezvous = sys.argv[1], Path(sys.argv[2]), sys.argv[5]
    rank, world_size = int(sys.argv[3]), int(sys.argv[4])
    announce_commits()
    if mode.endswith("-crash") and rank == 1:
        die_halfway_through_the_shard()
    if mode.startswith("gloo"):
        dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world_size)
        manager = CheckpointManager(root)
    else:
        timeout_s = 3 if mode.endswith("-crash") else 60
        manager = CheckpointManager(root, rank=rank, world_size=world_size, commit_timeout_s=timeout_s)

    report: dict[str, object] = {"rank": rank}
    if mode == "gloo-one-shard":
        if rank == 0:
            CheckpointManager(root, world_size=1).save(5, {"rank": 0})
        dist.barrier()
        try:
            report["resumed"] = manager.resume()[0].step
        except ClusterkitError as exc:
            report["error"] = str(exc)
        dist.destroy_process_group()
        print(json.dumps(report), flush=True)
        return

    shard = {"rank": rank, "w": torch.full((3_000_000,), float(rank))}  # 12 MB: several writes
    if mode.endswith("-async-full"):
        report.update(save_async_on_a_full_disk(manager, rank, shard))
        if mode.startswith("gloo"):
            dist.destroy_process_group()
        print(json.dumps(report), flush=True)
        return
    try:
        committed = manager.save(7, shard)
        report["returned"] = committed.step if committed else None
    except ClusterkitError as exc:
        report["error"] = str(exc)
    except RuntimeError as exc:  # gloo noticing a dead peer
        report["error"] = f"RuntimeError: {exc}"

    if mode.endswith("-damaged"):
        manager.save(9, {"rank": rank, "w": torch.full((1000,), 9.0)})
        flip_a_byte_of_rank_1s_shard(root / "step-00000009", rank, Path(f"{rendezvous}.flipped"), mode)
        resumed, state = manager.resume()
        report["resumed"] = [resumed.step, state["rank"], state["w"][0].item()]
    if mode == "gloo":
        state = {"w": torch.arange(10.0) + 1, "b": torch.ones(3)}
        report["dcp_returned"] = manager.save_dcp(8, state).step
        target = {"w": torch.zeros(10), "b": torch.zeros(3)}
        report["dcp_latest"] = manager.load_dcp(target).step
        report["dcp_loaded"] = bool(torch.equal(target["w"], state["w"]) and torch.equal(target["b"], state["b"]))
        sharded, _ = verify_checkpoint(root / "step-00000007")
        report["own_shard"] = manager.load(sharded)["rank"]
    if mode.startswith("gloo"):
        dist.destroy_process_group()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
