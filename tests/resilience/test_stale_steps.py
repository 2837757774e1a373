"""Which processes the cluster agent's step ends on a let-go node: the job's step daemons that started before it let go,
in the node's own namespace, with what they started; nothing of another job, another node or the requeued run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit.resilience import stale_steps
from clusterkit.resilience.stale_steps import ProcessInfo, read_process, stale, step_title

NODE, OTHER_NODE = "mnt:[4026531840]", "mnt:[4026532999]"


def test_a_step_daemon_is_known_by_its_title_and_job_id_whole() -> None:
    title = step_title("7")
    assert title.match("slurmstepd: [7.0]") and title.match("slurmstepd: [7.batch]")
    assert title.match("slurmstepd: [7.extern]")
    assert not title.match("slurmstepd: [17.0]") and not title.match("slurmstepd: [70.0]")
    assert not title.match("python train.py slurmstepd: [7.0]") and not title.match("slurmd -D")


def test_only_the_jobs_older_step_daemons_on_this_node_and_their_children_are_stale() -> None:
    everything = [
        ProcessInfo(10, 1, 100.0, "slurmstepd: [7.0]", NODE),  # stale
        ProcessInfo(11, 10, 101.0, "python train.py", NODE),  # what it started
        ProcessInfo(12, 11, 102.0, "python -c pass", NODE),  # and what that started
        ProcessInfo(20, 1, 100.0, "slurmstepd: [8.0]", NODE),  # another job
        ProcessInfo(30, 1, 100.0, "slurmstepd: [7.1]", OTHER_NODE),  # the same job on another (frozen) node
        ProcessInfo(40, 1, 500.0, "slurmstepd: [7.0]", NODE),  # the requeued run's, younger than the let-go
        ProcessInfo(41, 40, 501.0, "python train.py", NODE),
    ]
    assert stale(everything, "7", 400.0, NODE) == [10, 11, 12]
    assert stale(everything, "9", 400.0, NODE) == []


def test_a_process_is_read_from_proc_with_a_command_name_holding_parentheses(tmp_path: Path) -> None:
    entry = tmp_path / "42"
    (entry / "ns").mkdir(parents=True)
    fields = ["S", "7"] + ["0"] * 17 + ["250"] + ["0"] * 30  # ppid 7; starttime (field 22) 250 ticks after boot
    (entry / "stat").write_text("42 (slurm (x) d) " + " ".join(fields) + "\n")
    (entry / "cmdline").write_bytes(b"slurmstepd: [7.0]\0\0\0")
    os.symlink(NODE, entry / "ns" / "mnt")
    info = read_process(42, 1000.0, 100, tmp_path)
    assert info == ProcessInfo(42, 7, 1002.5, "slurmstepd: [7.0]", NODE)
    assert read_process(43, 1000.0, 100, tmp_path) is None  # ended meanwhile


def test_this_machines_processes_have_their_real_start_times() -> None:
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        [mine] = [info for info in stale_steps.processes() if info.pid == child.pid]
        assert mine.parent == os.getpid() and "time.sleep(30)" in mine.title
        assert before - 1 <= mine.started <= time.time() + 1  # clock ticks: 10 ms
        assert mine.mount_namespace == os.readlink(f"/proc/{os.getpid()}/ns/mnt")
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("job_id", ["7; rm -rf /", "$(id)", "7\n8", "", "1" * 13])
def test_anything_but_a_job_id_is_refused(job_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert stale_steps.main([job_id, "--before", "1"]) == 2
    assert "is not a Slurm job id" in capsys.readouterr().err
