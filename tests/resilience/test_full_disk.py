"""A full checkpoint disk: heartbeats never raise, the supervisor still records why it stops."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.resilience.heartbeat import heartbeat, read_heartbeats
from clusterkit.resilience.run_state import Budget, RunState
from clusterkit.resilience.supervisor import Supervisor

from tests.fakes import ScriptedSlurm

# The package exports the function `heartbeat` under the module's name: reach the module itself.
heartbeat_module = importlib.import_module("clusterkit.resilience.heartbeat")


def fill(directory: Path) -> None:
    """Write until the file system says ENOSPC."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as error:
        assert error.errno == 28  # ENOSPC
    finally:
        os.close(fd)
    assert os.statvfs(directory).f_bavail == 0


@pytest.fixture(autouse=True)
def fresh_heartbeat_files(tiny_filesystem: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This test's heartbeat files only, closed afterwards (so that the tmpfs can be unmounted)."""
    opened: dict[Path, int] = {}
    monkeypatch.setattr(heartbeat_module, "_descriptors", opened)
    monkeypatch.setattr(heartbeat_module, "_last_write", {})
    monkeypatch.setattr(heartbeat_module, "_reported", set())
    yield
    for fd in opened.values():
        os.close(fd)


def test_heartbeats_keep_landing_on_a_full_disk(tiny_filesystem: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_HEARTBEAT_DIR", str(tiny_filesystem / "hb"))
    monkeypatch.setenv("RANK", "0")
    assert heartbeat(1, min_interval_s=0)
    fill(tiny_filesystem)
    assert heartbeat(2, min_interval_s=0)  # in place: no new block needed
    assert read_heartbeats(tiny_filesystem / "hb")[0].step == 2


def test_a_heartbeat_that_cannot_be_written_never_raises(tiny_filesystem: Path, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    (tiny_filesystem / "hb").mkdir()
    fill(tiny_filesystem)
    monkeypatch.setenv("CLUSTERKIT_HEARTBEAT_DIR", str(tiny_filesystem / "hb" / "deeper"))
    monkeypatch.setenv("RANK", "3")
    with caplog.at_level(logging.WARNING, logger=heartbeat_module.__name__):
        assert heartbeat(1, min_interval_s=0) is False
        assert heartbeat(2, min_interval_s=0) is False  # tried again, reported once
    assert len([r for r in caplog.records if "No space left" in r.getMessage()]) == 1
    (tiny_filesystem / "filler").unlink()
    assert heartbeat(3, min_interval_s=0) is True  # space came back: so do the beats


def test_the_run_state_is_written_in_its_reserved_space_on_a_full_disk(tiny_filesystem: Path) -> None:
    state = RunState(tiny_filesystem / ".clusterkit")
    state.open()
    fill(tiny_filesystem)
    assert state.save(Budget(failures=2, attempts_seen=["7.0", "7.1"]))
    for index in range(200):
        assert state.append({"attempt": "7.1", "decision": "hang", "evidence": f"decision {index}"})
    assert state.load().failures == 2
    assert len(runtime.read_decisions(state.decisions_path)) == 200


def supervisor_on(directory: Path, step: str, slurm: ScriptedSlurm) -> Supervisor:
    return Supervisor([sys.executable, "-c", step], directory / ".clusterkit", max_restarts=3, app_retries=1,
                      hang_timeout=0, health_timeout=10, precheck=False, slurm=slurm, checkpoint_dir=directory,
                      beacons=False)


def test_a_step_that_fills_the_checkpoint_disk_stops_with_the_reason(tiny_filesystem: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("SLURM_JOB_ID", "7"), ("SLURM_RESTART_COUNT", "0"), ("SLURM_JOB_NODELIST", "n[1-2]")):
        monkeypatch.setenv(name, value)
    (tiny_filesystem / "step-00000010").mkdir()
    (tiny_filesystem / "step-00000010" / "rank-00000.pt").write_bytes(b"w" * 300_000)
    fills = (f"import sys\nf = open({str(tiny_filesystem / 'step-00000020.tmp')!r}, 'wb')\n"
             "try:\n    while True: f.write(b'x' * 65536); f.flush()\n"
             "except OSError: sys.exit(1)  # what a save gets on a full disk\n")
    slurm = ScriptedSlurm(queued={"7": "RUNNING"})
    code = supervisor_on(tiny_filesystem, fills, slurm).run()
    made = runtime.read_decisions(tiny_filesystem / ".clusterkit" / runtime.DECISIONS_FILE)
    assert code == 1 and [d["decision"] for d in made] == ["checkpoint_storage_full"]
    assert "less than one checkpoint" in made[0]["evidence"] and made[0]["free_bytes"] < 300_000
    assert slurm.requeued == [] and slurm.drained == []  # no node blamed, no restart spent
    assert RunState(tiny_filesystem / ".clusterkit").load().failures == 0


def test_a_full_disk_before_the_step_starts_nothing(tiny_filesystem: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("SLURM_JOB_ID", "8"), ("SLURM_RESTART_COUNT", "0"), ("SLURM_JOB_NODELIST", "n1")):
        monkeypatch.setenv(name, value)
    RunState(tiny_filesystem / ".clusterkit").open()
    fill(tiny_filesystem)
    marker = tiny_filesystem.parent / "step-ran"
    code = supervisor_on(tiny_filesystem, f"open({str(marker)!r}, 'w')", ScriptedSlurm(queued={"8": "RUNNING"})).run()
    made = runtime.read_decisions(tiny_filesystem / ".clusterkit" / runtime.DECISIONS_FILE)
    assert code == 1 and [d["decision"] for d in made] == ["checkpoint_storage_full"] and not marker.exists()
