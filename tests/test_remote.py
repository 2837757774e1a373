"""Jobs from a laptop: the shared local cluster's sshd, reached from a second clusterkit home that has no
Slurm configuration of its own (the stand-in for a laptop or a hosted notebook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

from clusterkit.providers.local import processes
from clusterkit.transport import SshTarget, SshTransport

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[1]
REMOTE = "far"
# The nodes cannot import this test module: ship its functions by value, as cells of a notebook are.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def square(x: int) -> int:
    return x * x


@pytest.fixture(scope="module")
def laptop(local_cluster, tmp_path_factory) -> dict[str, str]:
    """The laptop's environment: its own clusterkit home, no SLURM_CONF; `far` connected to the cluster."""
    home = tmp_path_factory.mktemp("laptop")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM")}
    env["CLUSTERKIT_HOME"] = str(home)
    target = local_cluster.ssh_target()
    runs = tmp_path_factory.mktemp("runs-on-the-cluster")
    connected = clusterkit(env, "connect", REMOTE, "--ssh", target.destination, "--port", str(target.port),
                           "--identity-file", target.identity_file, "--known-hosts", target.known_hosts_file,
                           "--python", sys.executable, "--runs-dir", str(runs), "-o", "json")
    assert connected.returncode == 0, connected.stderr
    assert json.loads(connected.stdout)["status"] == "running"
    return env


def clusterkit(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """The job's code on the laptop: a copy of the examples (what `--sync examples` sends)."""
    work = tmp_path / "project"
    work.mkdir()
    subprocess.run(["cp", "-r", str(REPO / "examples"), str(work / "examples")], check=True)
    return work


def test_a_two_node_job_submitted_from_afar_completes_and_every_verb_works(laptop, code):
    submitted = clusterkit(laptop, "submit", "examples/jobs/local-allreduce.yaml", "--cluster", REMOTE,
                           "--sync", "examples", "--wait", "-o", "json", cwd=code)
    assert submitted.returncode == 0, submitted.stderr
    result = json.loads(submitted.stdout)
    assert result["state"] == "COMPLETED" and not Path(result["stdout"]).is_relative_to(code)
    logs = clusterkit(laptop, "logs", result["job_id"], "--cluster", REMOTE)
    assert "all-reduce over 4 ranks" in logs.stdout, logs.stderr
    status = json.loads(clusterkit(laptop, "status", result["job_id"], "--cluster", REMOTE, "-o", "json").stdout)
    assert [a["classification"] for a in status["attempts"]] == ["completed"]
    assert result["job_id"] in [j["job_id"] for j in json.loads(clusterkit(laptop, "jobs", "--cluster", REMOTE,
                                                                         "-o", "json").stdout)]


def test_submit_says_what_it_copies_and_a_dry_run_copies_nothing(laptop, code):
    dry = clusterkit(laptop, "submit", "examples/jobs/local-allreduce.yaml", "--cluster", REMOTE, "--sync",
                     "examples", "--dry-run", "-o", "json", cwd=code)
    plan = json.loads(dry.stdout)
    assert "examples/allreduce.py" in plan["uploads"] and not Path(plan["workdir"]).exists()


def test_cancel_from_afar(laptop, tmp_path):
    spec = tmp_path / "sleeper.yaml"
    spec.write_text("name: sleeper\nlauncher: srun\ncommand: [sleep, '300']\nlogs: {output: s_%j.out}\n")
    submitted = clusterkit(laptop, "submit", str(spec), "--cluster", REMOTE, "--sync", "sleeper.yaml", "-o", "json",
                           cwd=tmp_path)
    job_id = json.loads(submitted.stdout)["job_id"]
    env = {**laptop}
    processes.wait_until(lambda: json.loads(clusterkit(env, "status", job_id, "--cluster", REMOTE, "-o",
                                                       "json").stdout)["state"] == "RUNNING", 60, "the job to run",
                         interval=0.5)
    assert clusterkit(laptop, "cancel", job_id, "--cluster", REMOTE).returncode == 0
    processes.wait_until(lambda: json.loads(clusterkit(env, "status", job_id, "--cluster", REMOTE, "-o",
                                                       "json").stdout)["state"] == "CANCELLED", 60, "the cancel",
                         interval=0.5)


def test_functions_and_an_array_from_afar_return_their_results(laptop, monkeypatch):
    from clusterkit.jobs.submit import map_array, submit_function

    monkeypatch.setenv("CLUSTERKIT_HOME", laptop["CLUSTERKIT_HOME"])
    monkeypatch.delenv("SLURM_CONF", raising=False)
    assert submit_function(square, 12, cluster=REMOTE, time_minutes=5).result(timeout=120) == 144
    handles = map_array(square, range(20), cluster=REMOTE, time_minutes=5)
    assert len({h.job_id.split("_")[0] for h in handles}) == 1
    assert [h.result(timeout=180) for h in handles] == [x * x for x in range(20)]


def test_bad_connections_fail_in_one_line(laptop, local_cluster, tmp_path):
    target = local_cluster.ssh_target()
    wrong_key = tmp_path / "wrong"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)], check=True)
    other_host_key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_host_key)], check=True)
    changed = tmp_path / "known_hosts"
    changed.write_text(f"[127.0.0.1]:{target.port} {' '.join(Path(f'{other_host_key}.pub').read_text().split()[:2])}\n")
    # A shared connection would skip the host key check: start from none.
    SshTransport(target).close()
    cases = {
        "unreachable": (["--ssh", "root@127.0.0.1", "--port", "1"], "cannot reach root@127.0.0.1:1"),
        "bad key": (["--ssh", "root@127.0.0.1", "--port", str(target.port), "--identity-file", str(wrong_key),
                     "--known-hosts", target.known_hosts_file], "refused the login"),
        "changed host key": (["--ssh", "root@127.0.0.1", "--port", str(target.port), "--identity-file",
                              target.identity_file, "--known-hosts", str(changed)], "host key of"),
    }
    for index, (argv, expected) in enumerate(cases.values()):
        result = clusterkit(laptop, "connect", f"bad{index}", *argv, "-o", "json")  # json: no progress lines
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 1 and len(lines) == 1 and expected in lines[0], (argv, result.stderr)
        assert "Traceback" not in result.stderr
        assert "BEGIN" not in result.stderr and "PRIVATE" not in result.stderr  # no secret printed
    listed = json.loads(clusterkit(laptop, "list-clusters", "-o", "json").stdout)
    assert [c["name"] for c in listed] == [REMOTE]  # nothing half-registered


def test_no_slurm_on_the_far_side_is_one_line(laptop, local_cluster):
    target = local_cluster.ssh_target()
    transport = SshTransport(SshTarget(**{**target.__dict__}))
    from clusterkit.slurm import Slurm

    slurm = Slurm(transport=transport, extra_env={"PATH": "/nonexistent"})
    from clusterkit.errors import MissingDependency

    with pytest.raises(MissingDependency, match="is not on the PATH of root@127.0.0.1"):
        slurm.run("sinfo")


from tests.conftest import RESILIENT_STEPS as STEPS


def resilient_spec(**changes: object) -> dict:
    spec = {"name": "far-train", "instance": "local", "nodes": 2, "processes_per_node": 1, "launcher": "torchrun",
            "command": ["examples/train_resilient.py"], "checkpoint_dir": "run", "max_restarts": 3, "time": "10",
            "supervise": {"hang_timeout": 0}, "logs": {"output": "train_%j.out"},
            "env": {"TRAIN_STEPS": str(STEPS), "STEP_SECONDS": "0.15"}}
    spec.update(changes)
    return spec


def final_digest(handle) -> str:  # noqa: ANN001 - a JobHandle
    from clusterkit.transport import read_bytes

    data = read_bytes(handle.transport, f"{handle.record.workdir}/run/final_weights.sha256")
    return data.decode().strip() if data else ""


def crash_one_node_of(local_cluster, handle) -> str:  # noqa: ANN001
    processes.wait_until(lambda: "checkpoint at step 20" in handle.stdout(), 120, "a checkpoint", interval=0.3)
    nodes = local_cluster.slurm().hostnames(local_cluster.slurm().job_details(handle.job_id)["NodeList"])
    local_cluster.crash_node(nodes[-1])
    return nodes[-1]


@pytest.mark.slow
def test_a_resilient_run_from_afar_survives_a_node_crash_bit_identical(laptop, local_cluster, code, monkeypatch,
                                                                        uninterrupted_digest):
    from clusterkit.jobs.spec import job_from_dict
    from clusterkit.jobs.submit import submit

    monkeypatch.setenv("CLUSTERKIT_HOME", laptop["CLUSTERKIT_HOME"])
    handle = submit(job_from_dict(resilient_spec()), REMOTE, sync=["examples"], source=code)
    victim = crash_one_node_of(local_cluster, handle)
    try:
        assert handle.wait(timeout=240, poll=1) == "COMPLETED"
    finally:
        local_cluster.start_node(victim)
    assert [a.classification for a in handle.status().attempts] == ["node_failure", "completed"]
    assert final_digest(handle) == uninterrupted_digest


@pytest.mark.slow
def test_watch_resubmits_from_afar(laptop, local_cluster, code, monkeypatch, uninterrupted_digest):
    from clusterkit.jobs.spec import job_from_dict
    from clusterkit.jobs.submit import submit

    monkeypatch.setenv("CLUSTERKIT_HOME", laptop["CLUSTERKIT_HOME"])
    handle = submit(job_from_dict(resilient_spec(requeue=False)), REMOTE, sync=["examples"], source=code)
    watcher = subprocess.Popen([sys.executable, "-m", "clusterkit", "watch", handle.job_id, "--resubmit", "--cluster",
                                REMOTE, "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=laptop)
    victim = crash_one_node_of(local_cluster, handle)
    try:
        out, err = watcher.communicate(timeout=300)
    finally:
        local_cluster.start_node(victim)
    assert watcher.returncode == 0, err
    result = json.loads(out)
    assert result["state"] == "COMPLETED" and result["resubmissions"] == 1
    assert final_digest(handle) == uninterrupted_digest
