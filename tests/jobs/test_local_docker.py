"""Docker steps on the real local cluster, with a recording fake docker (tests/jobs/fake_docker.sh) whose
containers, like containerd's, are not in the task's process tree and outlive a killed client: however
the step ends (cancel, time limit, a node failure, a task killed by --kill-on-bad-exit, the supervisor
stopping a hung step), the job's containers are removed, and they ran as the job's user."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.jobs.spec import job_from_dict
from clusterkit.jobs.submit import submit
from clusterkit.providers.local import processes

pytestmark = pytest.mark.slurm
FAKE_DOCKER = Path(__file__).with_name("fake_docker.sh")
VENV_BIN = str(Path(sys.executable).parent)
# The program in the container: saves (here: says so) and exits when asked to stop, else runs long.
# It says "ready" once it can: a stop asked for before that would find no trap.
SAVES_ON_STOP = 'trap "echo saving; sleep 1; exit 0" TERM USR1; echo ready; sleep 300 & wait'


class Docker:
    """The fake's state: which containers were started, on which node, as whom, and which still exist."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.state = root / "state"
        self.bin.mkdir(parents=True)
        self.state.mkdir()
        shutil.copy(FAKE_DOCKER, self.bin / "docker")
        (self.bin / "docker").chmod(0o755)
        for path in (root, self.bin, self.state):
            path.chmod(0o777)

    def events(self, kind: str) -> list[list[str]]:
        log = self.state / "events.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [line.split()[1:] for line in lines if line.startswith(f"{kind} ")]

    def existing(self) -> list[str]:
        directory = self.state / "containers"
        return sorted(path.name for path in directory.iterdir()) if directory.exists() else []

    def running_processes(self) -> list[int]:
        pids = []
        for pid_file in (self.state / "containers").glob("*/pid"):
            pid = int(pid_file.read_text())
            try:
                os.kill(pid, 0)
                pids.append(pid)
            except ProcessLookupError:
                pass
        return pids

    def wait_started(self, count: int) -> list[list[str]]:
        processes.wait_until(lambda: len(self.events("started")) >= count, 60, f"{count} containers to start",
                             interval=0.2)
        return self.events("started")

    def wait_ready(self, count: int) -> None:
        """Until `count` containers' programs have said "ready" (they trap the stop signals)."""
        def ready() -> int:
            outputs = (self.state / "containers").glob("*/output")
            return sum("ready" in path.read_text(errors="replace") for path in outputs)
        processes.wait_until(lambda: ready() >= count, 60, f"{count} containers to be ready", interval=0.2)

    def wait_all_removed(self, timeout: float = 40) -> None:
        processes.wait_until(lambda: not self.existing(), timeout, "the job's containers to be removed", interval=0.3)
        assert self.running_processes() == []


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory any user can reach (pytest's own are root's only): jobs here may run as nobody."""
    path = Path(tempfile.mkdtemp(prefix="ck-docker-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def docker(workdir: Path) -> Docker:
    return Docker(workdir / "docker")


def docker_spec(docker: Docker, name: str, program: str = SAVES_ON_STOP, **fields: object) -> dict:
    return {"name": name, "instance": "local", "nodes": 2, "launcher": "srun",
            "container": {"runtime": "docker", "image": "example.com/app:1"},
            "command": ["bash", "-c", program],
            "env": {"PATH": f"{docker.bin}:{VENV_BIN}:/usr/bin:/bin", "FAKE_DOCKER_STATE": str(docker.state)},
            "logs": {"output": f"{name}_%j.out"}, **fields}


def test_cancel_removes_the_containers_which_ran_as_the_jobs_user(local_cluster, workdir, docker):
    handle = submit(job_from_dict(docker_spec(docker, "dock-cancel")), local_cluster.name, workdir=workdir)
    started = docker.wait_started(2)  # [NAME, "on", NODE, "as", USER]
    assert [user for _, _, _, _, user in started] == [f"{os.getuid()}:{os.getgid()}"] * 2
    assert {name for name, *_ in started} == {f"clusterkit-{local_cluster.config.slurm_cluster_name}-"
                                              f"{handle.job_id}-0-{task}" for task in (0, 1)}
    docker.wait_ready(2)
    handle.cancel()
    assert handle.wait(timeout=60, poll=0.3) == "CANCELLED"
    docker.wait_all_removed()
    assert handle.stdout().count("saving") == 2  # each program was asked to stop (SIGTERM), then removed


@pytest.mark.slow
def test_the_time_limit_removes_the_containers(local_cluster, workdir, docker):
    handle = submit(job_from_dict(docker_spec(docker, "dock-limit", time="1")), local_cluster.name,
                        workdir=workdir)
    docker.wait_started(2)
    assert handle.wait(timeout=200, poll=1) == "TIMEOUT"
    docker.wait_all_removed()
    assert "saving" in handle.stdout()  # the program was asked to stop (SIGTERM) before it was removed


def test_a_node_failure_removes_the_containers_on_the_surviving_nodes(local_cluster, workdir, docker):
    handle = submit(job_from_dict(docker_spec(docker, "dock-crash", requeue=False)), local_cluster.name,
                        workdir=workdir)
    started = docker.wait_started(2)
    victim = started[1][2]
    survivor = next(name for name, _, node, *_ in started if node != victim)
    local_cluster.crash_node(victim)
    try:
        assert handle.wait(timeout=120, poll=0.5) == "NODE_FAIL"
        processes.wait_until(lambda: survivor not in docker.existing(), 40, "the surviving node's container to go",
                             interval=0.3)
    finally:
        local_cluster.start_node(victim)


def test_a_task_killed_by_kill_on_bad_exit_leaves_no_container(local_cluster, workdir, docker):
    # Task 1 fails; srun kills task 0 outright (SIGKILL: its shell runs no trap). Its container keeps
    # running, as docker's would, until the step's cleanup removes it.
    program = 'if [[ $SLURM_PROCID == 1 ]]; then sleep 2; exit 3; fi; sleep 300'
    handle = submit(job_from_dict(docker_spec(docker, "dock-bad-exit", program=program)), local_cluster.name,
                        workdir=workdir)
    docker.wait_started(2)
    assert handle.wait(timeout=120, poll=0.5) == "FAILED"
    docker.wait_all_removed()
    cleanups = [line for line in (docker.state / "calls.log").read_text().splitlines() if " ps --all " in line]
    assert len(cleanups) == 2  # the step's cleanup, on each node


def test_the_supervisor_stopping_a_hung_step_removes_the_containers(local_cluster, workdir, docker):
    # One heartbeat, then nothing: the supervisor calls it a hang after 5 s, stops the step (SIGTERM to
    # the step's shell, which asks each task to stop its container), finds the nodes healthy, and with
    # no restart left, gives up.
    program = ("python3 -c 'from clusterkit.resilience import heartbeat; heartbeat(1, min_interval_s=0)'; "
               + SAVES_ON_STOP)
    spec = docker_spec(docker, "dock-hang", program=program, checkpoint_dir="run", max_restarts=0,
                       supervise={"hang_timeout": 5})
    handle = submit(job_from_dict(spec), local_cluster.name, workdir=workdir)
    docker.wait_started(2)
    assert handle.wait(timeout=120, poll=0.5) == "FAILED"
    docker.wait_all_removed()
    log = handle.stdout()
    # With no restart left the decision is budget_exhausted, with the hang as its evidence.
    assert "made no progress past step 1 for 5 s" in log and "asking the step to save and stop (SIGUSR2)" in log
    assert log.count("saving") == 2  # each container's program was asked to stop, then removed
