"""The ParallelCluster edge (`ParallelClusterBackend`): its dry run's verdicts become findings.

ParallelCluster runs for real (`pcluster.lib`), under moto with moto's gaps filled
(tests/aws/parallelcluster_world.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from clusterkit.cluster import plan_spec, spec_data
from clusterkit.findings import Level
from clusterkit.providers.aws import ParallelClusterBackend

from .conftest import REGION
from .parallelcluster_world import KEY_NAME


def _p4de_config(world: Any) -> dict[str, Any]:
    subnet = world.region(REGION).private(1)
    checked = plan_spec(spec_data("p4de", None, {"name": "train", "region": REGION, "subnet_id": subnet,
                                                 "ssh.key_name": KEY_NAME}))
    assert checked.ok, checked.findings
    return checked.config  # type: ignore[return-value]


def test_p4de_config_passes_parallelclusters_dry_run(pcluster_world: Any) -> None:
    findings = pcluster_world.validate("train", _p4de_config(pcluster_world), REGION)
    assert not [f for f in findings if f.level is Level.ERROR], findings


def test_parallelclusters_rejection_becomes_error_findings(pcluster_world: Any) -> None:
    config = _p4de_config(pcluster_world)
    config["HeadNode"]["Networking"]["SubnetId"] = "subnet-0123456789abcdef0"  # not in this account
    findings = pcluster_world.validate("train", config, REGION)
    errors = [f for f in findings if f.level is Level.ERROR]
    assert errors and all(f.path.startswith("parallelcluster") for f in errors)
    assert any("subnet-0123456789abcdef0" in f.message for f in errors), errors


def test_a_refusal_before_validation_is_a_finding_too(pcluster_world: Any) -> None:
    """pcluster.lib checks the cluster name itself, before its validators: still one finding, no crash."""
    pcluster_world.region(REGION)
    findings = ParallelClusterBackend().dry_run("2train", _p4de_config(pcluster_world), REGION)
    (error,) = [f for f in findings if f.level is Level.ERROR]
    assert "'2train' does not match" in error.message


def test_suppressed_validators_do_not_run(pcluster_world: Any) -> None:
    config = _p4de_config(pcluster_world)
    config["Scheduling"]["SlurmQueues"][0]["CustomActions"] = {
        "OnNodeStart": {"Script": f"s3://training-data-{REGION}/not-uploaded-yet.sh"}}
    pcluster_world.region(REGION)
    backend = ParallelClusterBackend()
    checked = backend.dry_run("train", config, REGION)
    assert any("not-uploaded-yet" in f.message or "404" in f.message for f in checked if f.level is Level.WARNING)
    quiet = backend.dry_run("train", config, REGION, suppress=("AsyncTimedUrlValidator",))
    assert not any("404" in f.message for f in quiet)


def test_without_node_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterkit.errors import MissingDependency
    from clusterkit.providers.aws import backend

    monkeypatch.setattr(backend.shutil, "which", lambda program: None)
    with pytest.raises(MissingDependency, match=r"needs Node.js \(`node` on PATH\)"):
        backend.ParallelClusterBackend().create("train", {}, REGION)
