"""Two ranks save shards of one checkpoint; exactly one commit, and none when a rank dies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.resilience.resilience_helpers import run_workers

from clusterkit.resilience.checkpoint import CheckpointManager, verify_checkpoint


def run_two_ranks(mode: str, tmp_path: Path) -> list[dict]:
    root = tmp_path / "checkpoints"
    rendezvous = tmp_path / "rendezvous"
    results = run_workers(*([mode, str(root), str(rank), "2", str(rendezvous)] for rank in (0, 1)))
    reports = []
    commits = 0
    for rank, result in enumerate(results):
        commits += result.stdout.count("COMMIT")
        lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
        if mode.endswith("-crash") and rank == 1:
            assert result.returncode == 17, result.stderr
            continue
        assert result.returncode == 0 and lines, result.stderr
        reports.append(json.loads(lines[-1]))
    return [*reports, {"commits": commits}]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["gloo", "files"])
def test_both_shards_committed_once(tmp_path: Path, mode: str) -> None:
    *reports, counts = run_two_ranks(mode, tmp_path)

    manager = CheckpointManager(tmp_path / "checkpoints")
    if mode == "gloo":
        assert counts == {"commits": 2}  # step 7 and the DCP step 8, once each
        assert [r["returned"] for r in reports] == [7, 7]  # collectives tell every rank
        assert manager.latest().step == 8
        assert all(r["dcp_returned"] == 8 and r["dcp_latest"] == 8 and r["dcp_loaded"] for r in reports)
        assert [r["own_shard"] for r in reports] == [0, 1]
    else:
        assert counts == {"commits": 1}
        assert [r["returned"] for r in reports] == [7, None]  # only the committing rank knows
        assert manager.latest().step == 7
    sharded, problem = verify_checkpoint(tmp_path / "checkpoints" / "step-00000007")
    assert sharded is not None, problem
    assert sorted(sharded.manifest["files"]) == ["rank-00000.pt", "rank-00001.pt"]
    assert sharded.manifest["world_size"] == 2
    assert [manager.load(sharded, rank=rank)["rank"] for rank in (0, 1)] == [0, 1]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["gloo-crash", "files-crash"])
def test_rank_dying_mid_shard_prevents_commit(tmp_path: Path, mode: str) -> None:
    survivor, counts = run_two_ranks(mode, tmp_path)

    assert counts == {"commits": 0}
    assert "error" in survivor
    if mode == "files-crash":
        assert "rank(s) [1] did not finish" in survivor["error"]
    assert CheckpointManager(tmp_path / "checkpoints").latest() is None
    assert not list((tmp_path / "checkpoints").glob("step-*"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["gloo-damaged", "files-damaged"])
def test_ranks_agree_to_skip_a_checkpoint_whose_shard_on_one_rank_is_damaged(tmp_path: Path, mode: str) -> None:
    """Rank 1's shard of step 9 is damaged, rank 0's is intact: both ranks resume from step 7,
    each with its own shard (with collectives they compare verdicts; without, every rank also
    checks the other ranks' shards)."""
    *reports, _ = run_two_ranks(mode, tmp_path)
    assert [r["resumed"] for r in reports] == [[7, 0, 0.0], [7, 1, 1.0]]


@pytest.mark.slow
def test_a_checkpoint_without_a_shard_for_some_rank_stops_every_rank(tmp_path: Path) -> None:
    """Saved by one rank, resumed by two: no rank may start from it alone, and none waits forever."""
    *reports, _ = run_two_ranks("gloo-one-shard", tmp_path)
    for report in reports:
        assert "cannot resume from" in report["error"] and "rank 1:" in report["error"]
        assert "has no shard for rank 1" in report["error"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["gloo-async-full", "files-async-full"])
def test_a_failed_background_save_reaches_every_rank(tmp_path: Path, mode: str) -> None:
    """save_async of state in host memory writes during the call: the rank whose write fails raises
    there, after telling its peer, whose background part then fails too; nothing is committed."""
    *reports, counts = run_two_ranks(mode, tmp_path)

    rank0, rank1 = reports
    assert rank1["call"].startswith("no space left on the device holding"), rank1
    assert rank0["call"] == "returned", rank0
    assert "was not committed: rank 1: no space left" in rank0["wait"], rank0
    assert counts == {"commits": 1}  # step 8 alone: the managers go on working after the error
    assert [r["next"] for r in reports] == ([8, 8] if mode.startswith("gloo") else [8, None])
    assert [c.name for c in (tmp_path / "checkpoints").glob("step-*")] == ["step-00000008"]
