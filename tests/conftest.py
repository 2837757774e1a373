"""Shared fixtures: one real local Slurm cluster per test session, in a private CLUSTERKIT_HOME."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.fakes import FakeSlurm, make_fake_slurm

if TYPE_CHECKING:
    from clusterkit.providers.local.cluster import LocalCluster

# Every test runs with its own clusterkit home; nothing touches ~/.clusterkit.
_SESSION_HOME = Path(tempfile.mkdtemp(prefix="ck-"))
os.environ["CLUSTERKIT_HOME"] = str(_SESSION_HOME)
# AWS calls in tests only ever reach moto.
for variable in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
    os.environ.pop(variable, None)
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

SHARED_CLUSTER = "pytest"
# Which Slurm the local clusters of this session run: the host's packages (the default) or a root that
# `scripts/install-slurm.sh --slurm 24.11` built. CI runs the tests marked slurm once per Slurm.
TEST_SLURM = os.environ.get("CLUSTERKIT_TEST_SLURM", "host")
os.environ["CLUSTERKIT_LOCAL_SLURM"] = TEST_SLURM  # every local cluster a test creates, in this process or a CLI
RESILIENT_STEPS = 40  # examples/train_resilient.py's length in the end-to-end tests


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group into the test's id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (scripts/test.sh runs two workers), the tests on the real local cluster all go to one
    worker, in order: they share one cluster per session."""
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group("slurm"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under xdist, the other tests yield the CPU to those on the real cluster, which Slurm times
    (warnings, heartbeats, KillWait) and which mostly wait: the others soak up the idle time."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if item.get_closest_marker("slurm") and item.config.getvalue("loadgroup") and "@slurm" not in item.nodeid:
        # Two workers on one cluster time each other out: fail clearly rather than at random.
        pytest.fail("pytest-xdist did not keep the local cluster's tests on one worker; install the pytest and "
                    "pytest-xdist versions pyproject.toml's dev extra names", pytrace=False)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0 if item.get_closest_marker("slurm") else 10)
    except PermissionError:  # only root may lower it again, and only root runs the cluster's tests
        pass


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_SESSION_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """A 4-node cluster with 2 CPUs and 8 fake GPUs per node and an sshd (for remote use), shared by the
    whole session."""
    from clusterkit import ClusterRequest, create_cluster
    from clusterkit.providers.local.cluster import check_prerequisites

    try:
        check_prerequisites(ssh=True, slurm=TEST_SLURM)
    except Exception as error:
        if os.environ.get("CI"):  # CI installs Slurm itself: a skip there would hide a broken install
            pytest.fail(f"no local Slurm cluster possible in CI: {error}")
        pytest.skip(f"no local Slurm cluster possible here: {error}")
    cluster = create_cluster(ClusterRequest(SHARED_CLUSTER, provider="local", nodes=4, cpus_per_node=2,
                                            gpus_per_node=8, ssh=True))
    try:
        yield cluster
    finally:
        cluster.delete()


@pytest.fixture
def own_cluster() -> Iterator[LocalCluster]:
    """A small cluster of the test's own (a second cluster beside the shared one, or one whose daemons
    the test stops); deleted afterwards, with no process left."""
    from clusterkit import ClusterRequest, create_cluster
    from clusterkit.pids import pid_alive
    from clusterkit.providers.local.cluster import LocalCluster

    cluster = create_cluster(ClusterRequest("own", provider="local", nodes=2))
    try:
        yield cluster
    finally:
        pids = list(cluster.pids.values())
        LocalCluster.get("own").delete()
        assert not [pid for pid in pids if pid_alive(pid)]


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    """A directory every node can write to (all nodes share this machine's file system)."""
    tmp_path.chmod(0o777)
    return tmp_path


@pytest.fixture
def fake_slurm(tmp_path: Path) -> FakeSlurm:
    """Fake srun/scontrol (and recorders of the programs steps start) on a PATH of their own."""
    return make_fake_slurm(tmp_path)


def uninterrupted_digest_of(world: int, run: Path) -> str:
    """The final weights of a training run of `world` ranks that never stopped, no Slurm (its checkpoints in `run`)."""
    import subprocess
    import sys

    env = dict(os.environ, TRAIN_STEPS=str(RESILIENT_STEPS), STEP_SECONDS="0", CLUSTERKIT_CHECKPOINT_DIR=str(run))
    examples = Path(__file__).resolve().parents[1] / "examples"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
                    str(examples / "train_resilient.py")], env=env, check=True, capture_output=True)
    return (run / "final_weights.sha256").read_text().strip()


@pytest.fixture(scope="session")
def uninterrupted_digest(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final weights of a training run that never stopped: same world size (2), no Slurm."""
    return uninterrupted_digest_of(2, tmp_path_factory.mktemp("uninterrupted"))
