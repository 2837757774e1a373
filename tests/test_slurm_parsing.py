"""slurm.py against recorded outputs of Slurm's commands (the suite's fake binaries on PATH): parsing edge cases."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clusterkit.errors import ClusterkitError
from clusterkit.slurm import Slurm

from tests.fakes import FakeSlurm


@pytest.fixture
def fake_slurm_bin(fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", f"{fake_slurm.bin}{os.pathsep}{os.environ['PATH']}")
    return fake_slurm.record


def test_accounting_keeps_job_names_that_contain_the_separator(fake_slurm_bin):
    fake_slurm_bin("sacct", "7|train|a|b|NODE_FAIL|0:0|n[1-2]|2026-01-01T00:00:00|2026-01-01T00:01:00\n"
                            "7|train|a|b|COMPLETED|0:0|n[3-4]|2026-01-01T00:02:00|2026-01-01T00:03:00\n")
    records = Slurm().accounting(["7"])
    assert [(r.name, r.base_state, r.node_list) for r in records] == [
        ("train|a|b", "NODE_FAIL", "n[1-2]"), ("train|a|b", "COMPLETED", "n[3-4]")]


def test_cancelled_by_user_has_a_plain_base_state(fake_slurm_bin):
    fake_slurm_bin("sacct", "9|x|CANCELLED by 0|0:15|n1|2026-01-01T00:00:00|2026-01-01T00:00:09\n")
    assert Slurm().accounting(["9"])[0].base_state == "CANCELLED"


def test_job_details_keep_paths_with_spaces(fake_slurm_bin):
    fake_slurm_bin("scontrol", "JobId=5 JobName=my job UserId=root(0) NodeList=n[1-2] "
                               "StdOut=/data/my runs/logs/x_5.out StdErr=/data/e.err Power=\n")
    details = Slurm().job_details("5")
    assert details["StdOut"] == "/data/my runs/logs/x_5.out" and details["JobName"] == "my job"
    assert details["NodeList"] == "n[1-2]" and details["Power"] == ""


@pytest.mark.parametrize("ending", [
    " StdOut=/data/my runs/x_5.out Power= \n",  # 22.05: every field ends with a space, the empty Power= last
    " StdOut=/data/my runs/x_5.out \n",  # 24.11: no Power=, so the log path ends the line, then the space
])
def test_job_details_end_at_the_space_after_the_last_field_in_either_release(fake_slurm_bin, ending):
    fake_slurm_bin("scontrol", "JobId=5 JobName=j StdErr=/data/e.err" + ending)
    assert Slurm().job_details("5")["StdOut"] == "/data/my runs/x_5.out"


def test_the_controllers_version_is_read_from_it_once(fake_slurm_bin, tmp_path):
    fake_slurm_bin("scontrol", "Configuration data as of 2026-12-06T18:00:00\nSLURM_CONF              = /x/slurm.conf\n"
                               "SLURM_VERSION           = 24.11.5\nSrunEpilog              = (null)\n")
    slurm = Slurm()
    assert slurm.version() == "24.11.5"
    fake_slurm_bin("scontrol", "SLURM_VERSION           = 22.05.8\n")
    assert slurm.version() == "24.11.5"  # one cluster, one controller: asked once
    assert Slurm().version() == "22.05.8"


def test_a_controller_that_gives_no_version_is_a_one_line_error(fake_slurm_bin):
    fake_slurm_bin("scontrol", "SLURM_VERSION           = (null)\n")
    with pytest.raises(ClusterkitError, match="the controller reported no Slurm version"):
        Slurm().version()


@pytest.mark.parametrize("job_id", ["", " ", "5 6", "-a"])
def test_job_details_of_no_job_id_never_describe_every_job(fake_slurm_bin, job_id):
    fake_slurm_bin("scontrol", "JobId=5 JobName=someone-elses StdOut=/data/theirs.out\n")
    with pytest.raises(ClusterkitError, match="is not a Slurm job id"):
        Slurm().job_details(job_id)


def test_partitions_mark_the_default_one(fake_slurm_bin):
    fake_slurm_bin("sinfo", "gpu*|4|gpu:8|96\ncpu|2|(null)|36\n")
    rows = Slurm().partitions()
    assert [(r["name"], r["nodes"]) for r in rows] == [("gpu*", "4"), ("cpu", "2")]


def test_queue_lists_array_tasks_one_by_one(fake_slurm_bin):
    fake_slurm_bin("squeue", "12_0|RUNNING\n12_1|PENDING\n13|REQUEUED\n")
    assert Slurm().queue() == {"12_0": "RUNNING", "12_1": "PENDING", "13": "REQUEUED"}


def test_environment_sets_and_restores_only_the_clusters_variables(monkeypatch):
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setenv("UNRELATED", "kept")
    slurm = Slurm(Path("/c/slurm.conf"), extra_env={"PATH": "/venv/bin:/usr/bin"})
    before = dict(os.environ)
    with slurm.environment():
        assert os.environ["SLURM_CONF"] == "/c/slurm.conf" and os.environ["PATH"] == "/venv/bin:/usr/bin"
        assert os.environ["UNRELATED"] == "kept"
    assert dict(os.environ) == before


class ThisMachineAsIfRemote:
    """A transport that runs here but says it is remote: the code paths for SSH, without sshd."""

    label = "as-if-remote"
    remote = True

    def run(self, argv, *, env=None, input_bytes=None, timeout=None):  # noqa: ANN001, ANN201
        import subprocess

        # Through a shell, as sshd runs commands: a missing command is exit 127, not an exception.
        return subprocess.run(["sh", "-c", 'exec "$@"', "sh", *argv], env={**os.environ, **(env or {})},
                              input=input_bytes, capture_output=True, timeout=timeout)


def test_several_commands_in_one_round_trip_keep_their_outputs_and_exit_codes():
    slurm = Slurm(transport=ThisMachineAsIfRemote())
    results = slurm.run_many([["echo", "a"], ["sh", "-c", "printf 'b\\nno newline'; exit 3"], ["true"],
                              ["printf", "%s", "--clusterkit-not-the-marker--"]])
    assert [r.returncode for r in results] == [0, 3, 0, 0]
    assert [r.stdout for r in results] == ["a\n", "b\nno newline", "", "--clusterkit-not-the-marker--"]


def test_a_missing_command_on_the_far_side_is_one_clear_error():
    from clusterkit.errors import MissingDependency

    with pytest.raises(MissingDependency, match="'no-such-slurm-command' is not on the PATH of as-if-remote"):
        Slurm(transport=ThisMachineAsIfRemote()).run("no-such-slurm-command")
