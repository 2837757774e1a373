"""heartbeat() writes a rate-limited per-rank beacon; read_heartbeats() collects them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from clusterkit.resilience.heartbeat import heartbeat, read_heartbeats, stop_requested


def test_no_op_without_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERKIT_HEARTBEAT_DIR", raising=False)
    assert heartbeat(1) is False


def test_written_per_rank_and_readable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_HEARTBEAT_DIR", str(tmp_path / "hb"))
    before = time.time()
    for rank, step in ((0, 10), (3, 12)):
        monkeypatch.setenv("RANK", str(rank))
        assert heartbeat(step) is True
    (tmp_path / "hb" / "rank-00007.hb").write_text("garbage")  # a torn or foreign file is ignored

    beats = read_heartbeats(tmp_path / "hb")
    assert sorted(beats) == [0, 3]
    assert beats[3][0] == 12
    assert before - 1 <= beats[0][1] <= time.time() + 1
    assert [p.name for p in (tmp_path / "hb").iterdir() if p.name.endswith(".tmp")] == []


def test_rate_limited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_HEARTBEAT_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    assert heartbeat(1, min_interval_s=60) is True
    assert heartbeat(2, min_interval_s=60) is False
    assert read_heartbeats(tmp_path)[1][0] == 1
    assert heartbeat(3, min_interval_s=0) is True
    assert read_heartbeats(tmp_path)[1][0] == 3


def test_reading_a_missing_directory(tmp_path: Path) -> None:
    assert read_heartbeats(tmp_path / "absent") == {}


def test_a_done_beat_is_written_at_once_and_says_how_many_ranks_there_are(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterkit.resilience.heartbeat import every_rank_done

    monkeypatch.setenv("CLUSTERKIT_HEARTBEAT_DIR", str(tmp_path))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert heartbeat(149, min_interval_s=60) is True
    assert heartbeat(150, min_interval_s=60, done=True) is True  # not dropped by the rate limit
    monkeypatch.setenv("RANK", "1")
    assert heartbeat(150, min_interval_s=60) is True
    beats = read_heartbeats(tmp_path)
    assert (beats[0].step, beats[0].done, beats[0].world) == (150, True, 2) and not beats[1].done
    assert not every_rank_done(beats)  # rank 1 has not finished
    assert heartbeat(150, min_interval_s=0, done=True) is True
    assert every_rank_done(read_heartbeats(tmp_path))
    assert not every_rank_done({})


def test_no_stop_is_requested_outside_a_clusterkit_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERKIT_STOP_FILE", raising=False)
    assert stop_requested() is False


def test_the_first_look_says_the_ranks_listen_and_a_request_is_seen_and_taken(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    request = tmp_path / "state" / "stop-request"  # the state directory does not exist yet
    monkeypatch.setenv("CLUSTERKIT_STOP_FILE", str(request))
    assert stop_requested(min_interval_s=60) is False
    assert (tmp_path / "state" / "stop-request.listening").exists()  # the job now asks instead of signalling
    request.write_text("42.0\n")
    assert stop_requested(min_interval_s=60) is False  # looked at no more often than asked
    assert not (tmp_path / "state" / "stop-request.taken").exists()
    assert stop_requested(min_interval_s=0) is True
    assert (tmp_path / "state" / "stop-request.taken").exists()  # the script then knows the step stopped for it
    request.unlink()
    assert stop_requested(min_interval_s=0) is True  # once seen, it holds for the life of the process


def test_a_marker_that_cannot_be_written_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CLUSTERKIT_STOP_FILE", str(tmp_path / "file" / "stop-request"))  # under a file
    assert stop_requested() is False
    assert "the job signals the step instead" in caplog.text
