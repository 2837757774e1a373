"""Liveness beacons and the cluster agent, without a cluster: silence on the watcher's clock, what a probe proves,
the agent's reading of the queue, and what it does about a silent batch host and a requeued job."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.slurm import SlurmCommandError
from clusterkit.resilience import agent as agent_module
from clusterkit.resilience import beacon
from clusterkit.resilience.agent import Agent, HeldBack, QueuedJob, cred_expire_of, held_for_credentials, parse_queue
from clusterkit.resilience.decisions import Budget, Health, Kind, Outcome, decide
from clusterkit.slurm import NodeInfo


def test_a_beacon_is_silent_by_its_own_changes_on_the_watchers_clock(tmp_path: Path) -> None:
    watch = beacon.BeaconWatch(tmp_path, started=100.0, silence_s=4.0, start_s=20.0)
    beacon.beat(tmp_path, "n2", 0)
    assert watch.silent(["n2", "n3"], 101.0) == []  # n3 never beat, but the watch is young
    assert watch.silent(["n2"], 105.0) == []  # 4 s unchanged is not yet silent
    assert watch.silent(["n2"], 105.5) == [beacon.Silence("n2", 4.5)]
    beacon.beat(tmp_path, "n2", 1)  # a new beat: silence counts from when the watcher saw it
    assert watch.silent(["n2"], 106.0) == []
    assert watch.silent(["n2", "n3"], 121.0) == [beacon.Silence("n2", 15.0), beacon.Silence("n3", 21.0)]
    watch.alive("n3", 121.0)  # it answered a probe
    assert watch.silent(["n3"], 124.0) == []


def test_the_beacon_outlives_a_warning_and_ends_on_sigterm(tmp_path: Path) -> None:
    env = dict(os.environ, SLURMD_NODENAME="n7")
    process = subprocess.Popen([sys.executable, "-m", runtime.BEACON_MODULE, str(tmp_path), "--interval", "0.1"],
                               env=env)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "n7.beat").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        first = (tmp_path / "n7.beat").read_text()
        process.send_signal(signal.SIGUSR1)  # the job's warning reaches every step
        time.sleep(0.5)
        assert process.poll() is None and (tmp_path / "n7.beat").read_text() != first
        assert len(first) == beacon.BEAT_BYTES and first.split()[1] == str(process.pid)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()


class ProbedSlurm:
    """Answers `srun ... true` as the test says; records node updates and other commands."""

    def __init__(self, answer: str = "ok", queue: str = "", auth_info: str = "cred_expire=70") -> None:
        self.answer = answer
        self.queue_text = queue
        self.auth_info = auth_info
        self.updates: list[tuple[str, str, str]] = []
        self.commands: list[tuple[str, ...]] = []
        self.on_node = ""  # squeue -w: what else runs there
        self.stale_steps = (1, "", "srun: error: Unable to allocate resources: Requested reservation is invalid")
        self.drained_reason = ""

    def config(self) -> dict[str, str]:
        return {"AuthInfo": self.auth_info, "MessageTimeout": "60 sec"}

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo("n2", "drain", 2, "", self.drained_reason)]

    def run(self, command: str, *args: str, check: bool = True, timeout: float | None = None,
            **_: object) -> subprocess.CompletedProcess[str]:
        self.commands.append((command, *args))
        if command == "srun" and any(arg.startswith("--reservation=") for arg in args):
            return subprocess.CompletedProcess([command], *self.stale_steps)
        if command == "sinfo":
            return subprocess.CompletedProcess([command], 0, "train\ndebug\n", "")
        if command == "srun":
            if self.answer == "timeout":
                raise SlurmCommandError("`srun ...` did not answer within 3 s")
            code, err = {"ok": (0, ""), "pending": (1, "srun: error: Unable to confirm allocation for job 3: Job is "
                                                   "pending execution"),
                         "refused": (1, "srun: error: Task launch for StepId=3.4 failed on node n2: Connection "
                                        "refused")}[self.answer]
            return subprocess.CompletedProcess([command], code, "", err)
        if command == "squeue":
            return subprocess.CompletedProcess([command], 0, self.on_node if "-w" in args else self.queue_text, "")
        return subprocess.CompletedProcess([command], 0, "", "")

    def update_node(self, node: str, state: str, reason: str = "") -> None:
        self.updates.append((node, state, reason))
        self.commands.append(("update_node", node, state))

    def hostnames(self, node_list: str) -> list[str]:
        return node_list.split(",") if node_list else []


@pytest.mark.parametrize(("answer", "evidence"), [
    ("ok", ""),
    ("pending", ""),  # the job, not the node: no evidence
    ("timeout", "srun on n2 got no answer within 3 s"),
    ("refused", "srun on n2 failed: srun: error: Task launch for StepId=3.4 failed on node n2: Connection refused"),
])
def test_only_a_probe_the_node_does_not_answer_is_evidence(answer: str, evidence: str) -> None:
    assert beacon.probe(ProbedSlurm(answer), "n2", "3") == evidence  # type: ignore[arg-type]


def test_a_node_that_did_not_answer_is_marked_down_and_a_sick_one_drained() -> None:
    budget = Budget(max_restarts=3, app_retries=1)
    gone = Outcome(None, nodes=("n1", "n2"), spares=("n3",), bad_nodes=(("n2", "silent"),), unreachable=("n2",))
    relaunch = decide(gone, budget, Health())
    assert relaunch.kind is Kind.NODE_FAILURE and relaunch.down == ("n2",) and relaunch.nodes == ("n1", "n3")
    sick = decide(Outcome(1, nodes=("n1", "n2")), budget,
                  Health(bad_nodes=(("n1", "EFA 2 of 4"), ("n2", "no answer")), unreachable=("n2",)))
    assert sick.drain == (("n1", "EFA 2 of 4"), ("n2", "no answer")) and sick.down == ("n2",)
    spent = decide(gone, Budget(max_restarts=0, app_retries=1), Health())
    assert spent.kind is Kind.BUDGET_EXHAUSTED and spent.down == ("n2",)


QUEUE = ("7|RUNNING|n1|None|2026-12-01T10:00:00|n[1-2]|clusterkit-beacons=/fsx/run|x/.clusterkit/beacons\n"
         "8|RUNNING|n3|None|2026-12-01T10:00:00|n3|the user's own comment\n"
         "9|PENDING||BeginTime|2026-12-01T10:01:11|(null)|clusterkit-beacons=/fsx/other/.clusterkit/beacons\n"
         "garbage line\n")


def test_the_agent_reads_only_clusterkit_jobs_and_a_comment_with_the_separator_whole() -> None:
    jobs = [job for job in parse_queue(QUEUE) if job.beacons]
    assert [(job.job_id, job.state, job.batch_host, job.beacons) for job in jobs] == [
        ("7", "RUNNING", "n1", "/fsx/run|x/.clusterkit/beacons"),
        ("9", "PENDING", "", "/fsx/other/.clusterkit/beacons")]
    assert cred_expire_of("socket=/run/munge.socket,cred_expire=70") == 70 and cred_expire_of("") == 120


def test_only_a_hold_as_short_as_the_credentials_lifetime_is_released() -> None:
    now = dt.datetime(2026, 12, 1, 10, 0, 0)
    requeued = QueuedJob("9", "PENDING", "", "BeginTime", "2026-12-01T10:01:11", "", "/b")
    assert held_for_credentials(requeued, now, 70)
    later = QueuedJob("9", "PENDING", "", "BeginTime", "2026-12-01T12:00:00", "", "/b")  # the user's --begin
    assert not held_for_credentials(later, now, 70)
    assert not held_for_credentials(QueuedJob("9", "PENDING", "", "Resources", "2026-12-01T10:01:11", "", "/b"),
                                    now, 70)


def test_the_agent_marks_a_silent_batch_host_down_then_lets_go_and_releases_the_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    beacons = tmp_path / "beacons"
    beacons.mkdir()
    beacon.beat(beacons, "n1", 0)
    slurm = ProbedSlurm("timeout", queue=f"7|RUNNING|n1|None|2026-12-01T10:00:00|n1,n2|"
                                         f"{runtime.BEACONS_COMMENT_PREFIX}{beacons}\n")
    log = tmp_path / "agent.jsonl"
    agent = Agent(slurm, log, silence_s=0.2, probe_s=3)  # type: ignore[arg-type]
    agent.once()  # first look: n1's beat is new
    assert slurm.updates == []
    time.sleep(0.3)
    agent.once()
    (node, state, reason), = slurm.updates
    assert (node, state) == ("n1", "DOWN") and reason.startswith("clusterkit agent: n1's liveness beacon silent")
    assert ("scontrol", "requeue", "7") in slurm.commands  # a --no-kill job (spares) would run on without it
    agent.once()  # marked once, not every loop
    assert len(slurm.updates) == 1
    # Slurm requeued it: it stays COMPLETING on n2, whose step daemon reports to the dead host.
    slurm.queue_text = f"7|COMPLETING|n1|None|2026-12-01T10:00:00|n2|{runtime.BEACONS_COMMENT_PREFIX}{beacons}\n"
    agent.once()
    assert len(slurm.updates) == 1  # within the grace
    monkeypatch.setattr(agent_module, "COMPLETING_GRACE_S", 0.0)
    slurm.on_node = "7\n12\n"  # another job runs on n2: it is not touched
    agent.once()
    assert len(slurm.updates) == 1
    slurm.on_node = "7\n"
    agent.once()
    assert slurm.updates[1:] == [("n2", "DOWN", "clusterkit agent: job 7 completing behind its dead node"),
                                 ("n2", "RESUME", "")]
    # A step of root's own in the node's reservation would end the stale step daemon; here it could not start, so
    # the node waits it out.
    [ender] = [command for command in slurm.commands if command[0] == "srun" and "--reservation" in command[1]]
    assert ender[1:9] == ("--reservation=clusterkit-linger-7-n2", "-N1", "-n1", "-w", "n2", "--quiet", "--time=1",
                          "--job-name=clusterkit-stale-steps")
    assert ender[9:12] == ("--partition=train,debug", sys.executable, "-m") and ender[12:14] == (
        "clusterkit.resilience.stale_steps", "7")
    assert agent.linger_s == 6 * 60 + 5  # MessageTimeout 60 s, tried six times by the stale step daemon
    # Held in a reservation of its own until then (a drained idle node is one clustermgtd replaces), which ends
    # by itself: 7 minutes cover the 365 s.
    assert ("scontrol", "create", "reservation", "ReservationName=clusterkit-linger-7-n2", "Nodes=n2",
            "StartTime=now", "Duration=7", "Users=root", "Flags=IGNORE_JOBS") in slurm.commands
    agent.held_back["n2"] = HeldBack("7", 0.0)  # its time has come: the reservation ends, and the node was not drained
    slurm.drained_reason = ""
    start = (dt.datetime.now() + dt.timedelta(seconds=71)).isoformat(timespec="seconds")
    slurm.queue_text = f"7|PENDING||BeginTime|{start}|(null)|{runtime.BEACONS_COMMENT_PREFIX}{beacons}\n"
    agent.once()  # just requeued: its predecessor's credentials were revoked this very second
    assert ("scontrol", "update", "JobId=7", "StartTime=now") not in slurm.commands
    start = (dt.datetime.now() + dt.timedelta(seconds=71 - agent_module.REVOCATION_MARGIN_S)).isoformat(
        timespec="seconds")
    slurm.queue_text = f"7|PENDING||BeginTime|{start}|(null)|{runtime.BEACONS_COMMENT_PREFIX}{beacons}\n"
    agent.once()
    assert ("scontrol", "update", "JobId=7", "StartTime=now") in slurm.commands
    resumed = len([update for update in slurm.updates if update[1] == "RESUME"])
    assert ("scontrol", "delete", "ReservationName=clusterkit-linger-7-n2") in slurm.commands
    agent.held_back["n2"] = HeldBack("7", 0.0)  # Slurm drained it itself meanwhile, for the same stale step: it returns
    slurm.drained_reason = "Kill task failed"
    agent.once()
    agent.held_back["n2"] = HeldBack("7", 0.0)  # drained by someone for something else: left alone
    slurm.drained_reason = "admin: bad DIMM"
    agent.once()
    assert [update for update in slurm.updates if update[1] == "RESUME"][resumed - 1:] == [("n2", "RESUME", "")] * 2
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert events == ["marked_down", "requeued", "let_go", "end_stale_steps_failed", "released", "returned"]
    assert [event.event for event in agent_module.read_agent_log(log)] == events


def test_a_let_go_node_whose_stale_step_daemons_were_ended_goes_back_once_slurmd_has_seen_them_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_module, "COMPLETING_GRACE_S", 0.0)
    slurm = ProbedSlurm("timeout", queue=f"7|COMPLETING|n1|None|x|n2|{runtime.BEACONS_COMMENT_PREFIX}{tmp_path}\n")
    slurm.on_node = "7\n"
    slurm.stale_steps = (0, "stale_steps: job 7: 2 process(es) ended: 4711 4712\n", "")
    log = tmp_path / "agent.jsonl"
    agent = Agent(slurm, log, silence_s=0.1, probe_s=3)  # type: ignore[arg-type]
    agent.marked[("7", "n1")] = 0.0  # its batch host, marked DOWN
    before = time.time()
    agent.once()
    created = slurm.commands.index(("scontrol", "create", "reservation", "ReservationName=clusterkit-linger-7-n2",
                                    "Nodes=n2", "StartTime=now", "Duration=7", "Users=root", "Flags=IGNORE_JOBS"))
    [ender] = [i for i, command in enumerate(slurm.commands) if command[0] == "srun"]
    # Reserved before it is let go: the requeued job, pending for it, would take it the moment it is RESUMEd.
    assert created < slurm.commands.index(("update_node", "n2", "DOWN")) < slurm.commands.index(
        ("update_node", "n2", "RESUME")) < ender
    assert before - 0.001 <= float(slurm.commands[ender][-1].removeprefix("--before=")) <= time.time() + 0.001
    # Held a little longer: slurmd's own loop ending the old run kills whatever of that job id runs there when it
    # next looks (every 10 s), the requeued run included.
    held = agent.held_back["n2"]
    assert 0 < held.until - time.monotonic() <= agent_module.SLURMD_TERMINATE_LOOP_S < agent.linger_s
    assert "2 process(es) ended" in held.ended
    assert ("scontrol", "delete", "ReservationName=clusterkit-linger-7-n2") not in slurm.commands
    agent.held_back["n2"] = HeldBack("7", 0.0, held.ended)
    slurm.queue_text = ""
    agent.once()
    assert ("scontrol", "delete", "ReservationName=clusterkit-linger-7-n2") in slurm.commands
    assert agent.held_back == {} and ("n2", "RESUME", "") == slurm.updates[-1]  # not RESUMEd twice
    assert len([u for u in slurm.updates if u[1] == "RESUME"]) == 1
    [returned] = [event for event in agent_module.read_agent_log(log) if event.event == "returned"]
    assert returned.node == "n2" and returned.job == "7" and "2 process(es) ended" in returned.evidence


def test_a_batch_host_that_answers_its_probe_is_left_alone(tmp_path: Path) -> None:
    slurm = ProbedSlurm("ok", queue=f"7|RUNNING|n1|None|x|n1|{runtime.BEACONS_COMMENT_PREFIX}{tmp_path}\n")
    agent = Agent(slurm, None, silence_s=0.1, probe_s=3)  # type: ignore[arg-type]
    agent.watches["7"] = beacon.BeaconWatch(tmp_path, time.monotonic() - 100, 0.1, start_s=1)
    agent.once()  # never beat: probed, answered
    agent.once()
    assert slurm.updates == [] and [c for c in slurm.commands if c[0] == "srun"][:1]


class _SlowStdout:
    """A stdout that lets other threads run between writes, as a pipe to journald can: print's line and its newline
    are two writes."""

    def __init__(self) -> None:
        self.written: list[str] = []

    def write(self, text: str) -> int:
        self.written.append(text)
        time.sleep(0.002)
        return len(text)

    def flush(self) -> None:
        pass


def test_records_from_the_agents_worker_threads_stay_whole_lines(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = _SlowStdout()
    monkeypatch.setattr(sys, "stdout", stdout)
    log = tmp_path / "agent.jsonl"
    agent = Agent(ProbedSlurm(), log, silence_s=0.1, probe_s=3)  # type: ignore[arg-type]
    threads = [threading.Thread(target=lambda n=n: [agent.record("stale_steps_ended", node=f"n{n}", i=i)
                                                    for i in range(10)]) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = "".join(stdout.written).splitlines()
    assert len(lines) == 40
    assert all(line.startswith("time=") and line.count("event=") == 1 for line in lines)
    assert [json.loads(line)["event"] for line in log.read_text().splitlines()] == ["stale_steps_ended"] * 40
