"""The local cluster's files are pure renderings, pinned by golden files."""

import dataclasses
from pathlib import Path

import pytest

from clusterkit.providers.local.config import (
    TIMINGS,
    LocalClusterConfig,
    LocalClusterState,
    LocalLayout,
    render_gres_conf,
    render_hosts,
    render_launcher,
    render_mysql_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
    timings_named,
)
from tests.golden import assert_matches_golden

GOLDEN = Path(__file__).parent / "golden"
LAYOUT = LocalLayout(Path("/ck/clusters/demo"))


def config(nodes: int = 4, gpus: int = 8, timings: str = "test") -> LocalClusterConfig:
    return LocalClusterConfig(name="demo", nodes=nodes, cpus_per_node=2, gpus_per_node=gpus,
                              memory_mb_per_node=4000, base_port=24000, controller_host="head",
                              timings=TIMINGS[timings])


@pytest.mark.parametrize("name, render", [
    ("slurm.conf", lambda: render_slurm_conf(config(), LAYOUT)),
    ("slurm-1node-nogpu.conf", lambda: render_slurm_conf(config(nodes=1, gpus=0), LAYOUT)),
    ("slurm-parallelcluster.conf", lambda: render_slurm_conf(config(timings="parallelcluster"), LAYOUT)),
    ("gres.conf", lambda: render_gres_conf(config(), LAYOUT)),
    ("slurmdbd.conf", lambda: render_slurmdbd_conf(config(), LAYOUT)),
    ("my.cnf", lambda: render_mysql_conf(LAYOUT)),
    ("hosts", lambda: render_hosts(config())),
    ("slurm-root", lambda: render_launcher(Path("/opt/clusterkit/slurm/24.11"))),
])
def test_rendered_files_match_golden(name, render):
    assert_matches_golden(render(), GOLDEN / name)


def test_ports_are_distinct_and_contiguous():
    ports = config(nodes=4).ports
    assert ports == list(range(24000, 24006))


def test_fast_failure_settings_are_on():
    text = render_slurm_conf(config(), LAYOUT)
    for setting in ("SlurmdTimeout=5", "JobRequeue=1", "ReturnToService=1", "cred_expire=5",
                    "AccountingStorageType=accounting_storage/slurmdbd"):
        assert setting in text


def test_node_names_resolve_in_hosts_file():
    hosts = render_hosts(config(nodes=3))
    assert hosts.splitlines()[0].split()[1:] == ["localhost", "head", "n1", "n2", "n3"]


def test_parallelcluster_timings_are_parallelcluster_3_16s_slurm_conf_and_clustermgtd_values():
    # aws-parallelcluster-cookbook, slurm.conf.erb's TIMERS; clustermgtd.py's LOOP_TIME.
    lines = render_slurm_conf(config(timings="parallelcluster"), LAYOUT).splitlines()
    for setting in ("SlurmctldTimeout=300", "SlurmdTimeout=180", "UnkillableStepTimeout=180", "MessageTimeout=60",
                    "KillWait=30", "MinJobAge=300", "InactiveLimit=0", "ReturnToService=1"):
        assert setting in lines
    assert any(line.endswith(",cred_expire=70") for line in lines if line.startswith("AuthInfo="))
    assert not any(line.startswith("SchedulerParameters=") for line in lines)  # Slurm's defaults, as there
    timings = TIMINGS["parallelcluster"]
    assert (timings.replace_nodes, timings.replace_loop_s) == (True, 60.0)


def test_timings_and_their_overrides_survive_the_record():
    chosen = timings_named("parallelcluster", replace_nodes=False, boot_delay_s=7)
    state = LocalClusterState(dataclasses.replace(config(), timings=chosen))
    assert LocalClusterState.from_json("demo", state.to_json()).config.timings == chosen
    old_record = {key: value for key, value in state.to_json().items() if key != "timings"}
    assert LocalClusterState.from_json("demo", old_record).config.timings == TIMINGS["test"]


def test_the_slurm_a_cluster_runs_survives_the_record():
    state = LocalClusterState(dataclasses.replace(config(), slurm="24.11"))
    assert LocalClusterState.from_json("demo", state.to_json()).config.slurm == "24.11"
    assert LocalClusterState.from_json("demo", state.to_json()).config.slurm_root == Path("/opt/clusterkit/slurm/24.11")
    old_record = {key: value for key, value in state.to_json().items() if key != "slurm"}
    assert LocalClusterState.from_json("demo", old_record).config.slurm == "host"  # made before the choice
    assert LocalClusterState.from_json("demo", old_record).config.slurm_root is None


def test_a_slurm_root_not_built_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from clusterkit.errors import MissingDependency
    from clusterkit.providers.local import slurms

    monkeypatch.setattr(slurms, "ROOTS_DIR", tmp_path / "roots")
    with pytest.raises(MissingDependency) as raised:
        slurms.check_installed("24.11")
    assert raised.value.fix == "build it once with `scripts/install-slurm.sh --slurm 24.11` (it is then reused)"
    (tmp_path / "roots" / "24.11").mkdir(parents=True)  # half-built: no marker yet
    with pytest.raises(MissingDependency):
        slurms.check_installed("24.11")
    (tmp_path / "roots" / "24.11" / slurms.ROOT_MARKER).write_text("trixie ...\n")
    slurms.check_installed("24.11")
    slurms.check_installed("host")
