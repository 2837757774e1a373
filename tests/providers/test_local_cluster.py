"""The local provider against real Slurm daemons: jobs, accounting, node crashes, clean deletion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clusterkit import ClusterRequest, create_cluster, registry
from clusterkit.errors import AlreadyExists
from clusterkit.pids import pid_alive
from clusterkit.providers.local import processes
from clusterkit.providers.local.cluster import LocalCluster
from clusterkit.slurm import release

pytestmark = pytest.mark.slurm


def wait_for(predicate, timeout: float, what: str):
    processes.wait_until(predicate, timeout, what, interval=0.2)


def sacct_states(cluster: LocalCluster, job_id: str) -> list[tuple[str, str]]:
    return [(r.base_state, r.node_list) for r in cluster.slurm().accounting([job_id])]


def clusterkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True)


def test_two_node_job_runs_on_both_nodes_and_sacct_sees_it(local_cluster, job_dir):
    out = job_dir / "out.txt"
    script = textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH --nodes=2 --output={out}
        srun bash -c 'echo "$SLURMD_NODENAME $(hostname) $(getent hosts n2 | cut -d" " -f1)"'
        """)
    job_id = local_cluster.slurm().sbatch(script)
    wait_for(lambda: sacct_states(local_cluster, job_id)[-1:][0][0] == "COMPLETED"
             if sacct_states(local_cluster, job_id) else False, 30, "the job to complete")
    lines = sorted(out.read_text().split("\n")[:-1])
    nodes = [line.split()[0] for line in lines]
    assert len(set(nodes)) == 2, lines
    # Each node has its own host name, and other nodes' names resolve inside jobs.
    assert all(line.split()[0] == line.split()[1] and line.split()[2] == "127.0.0.1" for line in lines)


def test_gpu_jobs_schedule_on_fake_gpus(local_cluster, job_dir):
    out = job_dir / "gpus.txt"
    job_id = local_cluster.slurm().sbatch(
        f"#!/bin/bash\n#SBATCH --nodes=1 --gpus-per-node=8 --output={out}\necho \"$CUDA_VISIBLE_DEVICES\"\n")
    wait_for(lambda: any(s == "COMPLETED" for s, _ in sacct_states(local_cluster, job_id)), 30, "the GPU job")
    assert out.read_text().strip() == "0,1,2,3,4,5,6,7"


def test_crashed_node_goes_down_and_its_requeueable_job_completes_elsewhere(local_cluster, job_dir):
    out = job_dir / "requeue.txt"
    script = textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH --nodes=1 --requeue --open-mode=append --output={out}
        echo "attempt ${{SLURM_RESTART_COUNT:-0}} on $SLURMD_NODENAME"
        if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then srun sleep 300; fi
        """)
    job_id = local_cluster.slurm().sbatch(script)
    wait_for(lambda: local_cluster.slurm().queue().get(job_id) == "RUNNING", 30, "the job to start")
    wait_for(lambda: out.exists() and "attempt 0" in out.read_text(), 30, "the first attempt's log")
    first_node = out.read_text().split()[-1]

    killed = local_cluster.crash_node(first_node)
    assert killed, "crash-node killed nothing"
    try:
        wait_for(lambda: {n.name: n for n in local_cluster.slurm().nodes()}[first_node].base_state == "down",
                 60, f"{first_node} to be DOWN")
        wait_for(lambda: [s for s, _ in sacct_states(local_cluster, job_id)][-1:] == ["COMPLETED"],
                 90, "the requeued job to complete")
        attempts = sacct_states(local_cluster, job_id)
        assert attempts[0] == ("NODE_FAIL", first_node)
        assert attempts[-1][1] != first_node
        assert "attempt 1" in out.read_text()
    finally:
        local_cluster.start_node(first_node)
    assert {n.name: n for n in local_cluster.slurm().nodes()}[first_node].base_state == "idle"


def test_describe_cluster_json_has_the_documented_fields(local_cluster):
    result = clusterkit("describe-cluster", local_cluster.name, "--output", "json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["name"] == local_cluster.name and info["provider"] == "local"
    assert info["status"] == "running"
    assert Path(info["slurm_conf"]).is_file()
    assert [n["name"] for n in info["nodes"]] == ["n1", "n2", "n3", "n4"]
    assert all(n["state"] for n in info["nodes"])


def test_creating_the_same_cluster_twice_is_a_clear_error(local_cluster):
    with pytest.raises(AlreadyExists):
        create_cluster(ClusterRequest(local_cluster.name, provider="local", nodes=1))
    result = clusterkit("create-cluster", "--provider", "local", "--name", local_cluster.name)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: a cluster named {local_cluster.name!r} already exists "
        f"(use it, or delete it first with `clusterkit delete-cluster {local_cluster.name}`)"]


def test_delete_cluster_leaves_no_process_and_no_listening_port(local_cluster):
    result = clusterkit("create-cluster", "--provider", "local", "--name", "short-lived", "--nodes", "2",
                        "--output", "json")
    assert result.returncode == 0, result.stderr
    cluster = LocalCluster.get("short-lived")
    pids, ports = list(cluster.pids.values()), cluster.config.ports
    assert all(pid_alive(pid) for pid in pids)
    assert processes.port_listening(cluster.config.slurmctld_port)

    result = clusterkit("delete-cluster", "short-lived")
    assert result.returncode == 0, result.stderr
    assert not any(pid_alive(pid) for pid in pids)
    assert not any(processes.port_listening(port) for port in ports)
    assert not registry.exists("short-lived")
    assert not cluster.layout.root.exists()
    # The shared cluster was not touched.
    assert local_cluster.describe().status == "running"


def test_eight_concurrent_creates_of_one_name_make_exactly_one_cluster():
    name = "contested"
    creates = [subprocess.Popen([sys.executable, "-m", "clusterkit", "create-cluster", "--provider", "local",
                                 "--name", name, "--nodes", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(8)]
    results = [(create.wait(timeout=120), create.stderr.read()) for create in creates]
    try:
        winners = [err for code, err in results if code == 0]
        losers = [err.strip() for code, err in results if code != 0]
        assert len(winners) == 1, results
        for error in losers:
            assert len(error.splitlines()) == 1 and error.startswith("error: "), error
            assert f"cluster {name!r} is being created right now" in error or "already exists" in error
        assert LocalCluster.get(name).describe().status == "running"
    finally:
        assert clusterkit("delete-cluster", name).returncode == 0
    assert not registry.exists(name) and not registry.cluster_dir(name).exists()


def test_watch_rides_through_a_controller_restart(own_cluster, job_dir):
    spec = job_dir / "sleeper.yaml"
    spec.write_text("name: sleeper\nlauncher: srun\ncommand: [bash, -c, 'sleep 30; echo slept']\n"
                    "logs: {output: sleeper_%j.out}\n")
    submitted = subprocess.run([sys.executable, "-m", "clusterkit", "submit", str(spec), "--cluster", "own",
                                "-o", "json"], capture_output=True, text=True, cwd=job_dir)
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["job_id"]
    wait_for(lambda: own_cluster.slurm().queue().get(job_id) == "RUNNING", 30, "the job to run")
    # A controller that dies before it saved the running job forgets it ran (Slurm's own limit):
    # crash it once its state file is newer than the job's start.
    running_since = time.time()
    job_state = own_cluster.layout.state / "job_state"
    wait_for(lambda: job_state.exists() and job_state.stat().st_mtime > running_since, 30, "slurmctld to save state")
    watcher = subprocess.Popen([sys.executable, "-m", "clusterkit", "watch", job_id, "--resubmit", "--cluster",
                                "own", "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    controller = own_cluster._ours("slurmctld")
    processes.kill_all([controller])  # the controller dies: nothing restarts it by itself
    wait_for(lambda: not pid_alive(controller), 10, "slurmctld to die")
    assert LocalCluster.get("own").describe().status == "stopped"
    restarted = clusterkit("local", "restart-controller", "own", "-o", "json")
    assert restarted.returncode == 0, restarted.stderr
    assert json.loads(restarted.stdout)["pid"] != controller
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    assert json.loads(out)["state"] == "COMPLETED" and json.loads(out)["resubmissions"] == 0
    assert LocalCluster.get("own").describe().status == "running"


def test_a_daemon_restarted_by_hand_is_still_seen_and_stopped_by_delete(own_cluster):
    old = own_cluster._ours("slurmctld")
    processes.stop_pids([old])
    # On a Slurm root, by hand is through the cluster's launcher: the host's slurmctld is another release.
    launch = [str(own_cluster.layout.launcher)] if own_cluster.config.slurm_root else []
    by_hand = processes.spawn([*launch, "slurmctld", "-D", "-i", "-f", str(own_cluster.layout.slurm_conf)],
                              own_cluster.layout.log / "by-hand.stdout")
    wait_for(lambda: processes.port_listening(own_cluster.config.slurmctld_port), 30, "slurmctld by hand")
    again = LocalCluster.get("own")
    assert again.describe().status == "running" and again._ours("slurmctld") == by_hand
    again.delete()
    assert not pid_alive(by_hand)
    create_cluster(ClusterRequest("own", provider="local", nodes=1))  # for the fixture to delete


def test_a_file_system_mounted_after_create_reaches_the_nodes(local_cluster, tmp_path):
    mount_point = tmp_path / "late"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], check=True)
    try:
        out = tmp_path / "out.txt"
        job_id = local_cluster.slurm().sbatch(
            f"#!/bin/bash\n#SBATCH --nodes=1 --output={out}\necho \"from $SLURMD_NODENAME\" > {mount_point}/hello\n")
        wait_for(lambda: any(s == "COMPLETED" for s, _ in sacct_states(local_cluster, job_id)), 30, "the job")
        assert (mount_point / "hello").read_text().startswith("from n")  # the host reads what the node wrote
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_logs_of_a_job_named_with_a_line_separator(local_cluster, tmp_path):
    job_id = local_cluster.slurm().sbatch(f"#!/bin/bash\n#SBATCH --output={tmp_path}/%x_%j.out\necho printed\n",
                                        "--job-name=odd\u2028name")
    wait_for(lambda: any(s == "COMPLETED" for s, _ in sacct_states(local_cluster, job_id)), 30, "the job")
    logs = clusterkit("logs", job_id, "--cluster", local_cluster.name)
    assert logs.returncode == 0 and logs.stdout.strip() == "printed", logs.stderr


def test_logs_of_a_log_path_with_a_backslash(local_cluster, tmp_path):
    # clusterkit's own job specs refuse such a path; a job submitted with plain sbatch may have one.
    script = tmp_path / "odd.sh"
    script.write_text("#!/bin/bash\necho printed\n")
    job_id = local_cluster.slurm().sbatch(script, "--output=lit\\eral_%j.out", f"--chdir={tmp_path}")
    # Slurm's rule: a backslash makes the pattern literal (no %j) and is dropped.
    log = tmp_path / "literal_%j.out"
    wait_for(lambda: log.exists() and log.read_text().strip() == "printed", 60, "the job's log")
    # scontrol reports the pattern expanded (lit\eral_ID.out), so the literal name cannot be known: say so.
    logs = clusterkit("logs", job_id, "--cluster", local_cluster.name)
    assert logs.returncode == 1 and "without the backslashes and with %j" in logs.stderr, logs.stderr


def test_status_shows_both_attempts_after_two_nodes_crash_at_once(local_cluster, tmp_path):
    import threading

    from clusterkit.jobs.spec import job_from_dict
    from clusterkit.jobs.submit import submit

    spec = job_from_dict({"name": "twin-crash", "nodes": 2, "launcher": "srun", "logs": {"output": "twin_%j.out"},
                          "command": ["bash", "-c", 'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 300; fi']})
    handle = submit(spec, local_cluster.name, workdir=tmp_path)
    wait_for(lambda: handle.state == "RUNNING", 30, "the job to run")
    nodes = local_cluster.slurm().hostnames(local_cluster.slurm().job_details(handle.job_id)["NodeList"])
    crashes = [threading.Thread(target=local_cluster.crash_node, args=(node,)) for node in nodes]
    for crash in crashes:
        crash.start()
    for crash in crashes:
        crash.join()
    try:
        assert handle.wait(timeout=120, poll=0.5) == "COMPLETED"
    finally:
        for node in nodes:
            local_cluster.start_node(node)
    status = json.loads(clusterkit("status", handle.job_id, "--cluster", local_cluster.name, "-o", "json").stdout)
    # Slurm 22.05's accounting keeps one record for both attempts here (the controller's restart count still
    # shows the first); 24.11's keeps the first attempt's own, NODE_FAIL.
    first = "requeued (not in accounting)" if release(local_cluster.slurm().version()) == "22.05" else "node_failure"
    assert [(a["attempt"], a["classification"]) for a in status["attempts"]] == [(0, first), (1, "completed")], status


def test_describe_and_doctor_report_the_slurm_the_cluster_runs(local_cluster, job_dir):
    """The version comes from the running controller; what the test expects, from the daemon's own binary."""
    root = local_cluster.config.slurm_root
    launch = [str(local_cluster.layout.launcher)] if root else []
    said = subprocess.run([*launch, "slurmctld", "-V"], capture_output=True, text=True, check=True).stdout
    expected = said.split()[-1]  # "slurm-wlm 24.11.5"
    described = json.loads(clusterkit("describe-cluster", local_cluster.name, "-o", "json").stdout)
    assert (described["slurm"], described["slurm_version"]) == (local_cluster.config.slurm, expected)
    assert (root is None) == (local_cluster.config.slurm == "host")
    # The doctor, as a person runs it with the cluster's clients (`eval "$(clusterkit local env NAME)"`), and inside
    # a job step on a node.
    shell = dict(os.environ, **local_cluster.env)
    doctor = json.loads(subprocess.run([sys.executable, "-m", "clusterkit", "doctor", "-o", "json"], env=shell,
                                       capture_output=True, text=True).stdout)
    (slurm,) = [check for check in doctor["checks"] if check["name"] == "slurm"]
    assert slurm["status"] == "pass" and slurm["detail"] == f"Slurm {expected} (controller), clients {expected}"
    out = job_dir / "doctor.json"
    job_id = local_cluster.slurm().sbatch(f"#!/bin/bash\n#SBATCH --output={out}\n{sys.executable} -m clusterkit "
                                          "doctor -o json\n")
    wait_for(lambda: [s for s, _ in sacct_states(local_cluster, job_id)] == ["FAILED"] or
             [s for s, _ in sacct_states(local_cluster, job_id)] == ["COMPLETED"], 60, "the doctor's job")
    (in_job,) = [check for check in json.loads(out.read_text())["checks"] if check["name"] == "slurm"]
    assert in_job == slurm
