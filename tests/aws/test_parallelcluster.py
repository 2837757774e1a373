"""ParallelCluster's own dry run of a p4de config, through the real `pcluster.lib`, under moto.

moto lacks three things ParallelCluster's validators ask for; they are filled at the botocore level on
the default boto3 session that pcluster's clients come from:
- DescribeImages for the official ParallelCluster AMI (Amazon-owned; moto has none of that name),
- the KeyType of a key pair (moto leaves it out; pcluster rejects RSA keys on ubuntu2204),
- RunInstances with DryRun, which pcluster expects to fail with DryRunOperation.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from clusterkit.cluster import ClusterRequest, plan_spec, spec_data
from clusterkit.findings import Level
from clusterkit.providers.aws import ParallelClusterBackend

from .conftest import REGION, private_subnets

pytest.importorskip("pcluster", reason="aws-parallelcluster (the `validate` extra) is not installed")
pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="ParallelCluster needs Node.js on PATH")


@pytest.fixture
def pcluster_session(mocked: None) -> Iterator[Any]:
    """The default boto3 session (pcluster's), with moto's gaps filled."""
    import boto3
    from botocore.awsrequest import AWSResponse
    from botocore.exceptions import ClientError

    ec2 = boto3.client("ec2", region_name=REGION)
    from pcluster.utils import get_installed_version

    image_id = ec2.register_image(
        Name=f"aws-parallelcluster-{get_installed_version()}-ubuntu-2204-lts-hvm-x86_64-202601010000",
        RootDeviceName="/dev/sda1", BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 40}}],
    )["ImageId"]
    official_image = {**ec2.describe_images(ImageIds=[image_id])["Images"][0], "Architecture": "x86_64"}

    def official_images(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        return AWSResponse("https://stub", 200, {}, None), {"Images": [official_image]}

    def key_type(parsed: dict[str, Any], **_: Any) -> None:
        for key in parsed.get("KeyPairs", []):
            key.setdefault("KeyType", "ed25519")

    def dry_run_succeeds(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "DryRunOperation",
                                     "Message": "Request would have succeeded, but DryRun flag is set."}},
                          "RunInstances")

    from pcluster.aws.aws_api import AWSApi

    # pcluster keeps its clients in a singleton: one made earlier in the session (the schema tests)
    # holds no credentials. Start from a fresh one inside moto, and leave none behind.
    AWSApi.reset()
    boto3.setup_default_session(region_name=REGION)
    events = boto3.DEFAULT_SESSION.events
    events.register("before-call.ec2.DescribeImages", official_images)
    events.register("after-call.ec2.DescribeKeyPairs", key_type)
    events.register("before-call.ec2.RunInstances", dry_run_succeeds)
    try:
        yield ec2
    finally:
        boto3.DEFAULT_SESSION = None
        AWSApi.reset()


def _p4de_config(ec2: Any, key_name: str | None = None) -> dict[str, Any]:
    subnet = private_subnets(ec2, "us-east-1b")["us-east-1b"]
    request = ClusterRequest(name="train", preset="p4de", region=REGION, subnet_id=subnet, key_name=key_name)
    checked = plan_spec(spec_data(request))
    assert checked.ok
    return checked.config  # type: ignore[return-value]


def test_p4de_config_passes_parallelclusters_dry_run(pcluster_session: Any) -> None:
    pcluster_session.create_key_pair(KeyName="me", KeyType="ed25519")
    findings = ParallelClusterBackend().dry_run("train", _p4de_config(pcluster_session, "me"), REGION)
    assert not [f for f in findings if f.level is Level.ERROR], findings


def test_parallelclusters_rejection_becomes_error_findings(pcluster_session: Any) -> None:
    config = _p4de_config(pcluster_session)
    config["HeadNode"]["Networking"]["SubnetId"] = "subnet-0123456789abcdef0"  # not in this account
    findings = ParallelClusterBackend().dry_run("train", config, REGION)
    errors = [f for f in findings if f.level is Level.ERROR]
    assert errors and all(f.path.startswith("parallelcluster") for f in errors)
    assert any("subnet-0123456789abcdef0" in f.message for f in errors), errors


def test_without_node_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterkit.errors import MissingDependency
    from clusterkit.providers.aws import backend

    monkeypatch.setattr(backend.shutil, "which", lambda program: None)
    with pytest.raises(MissingDependency, match=r"needs Node.js \(`node` on PATH\)"):
        backend.ParallelClusterBackend().create("train", {}, REGION)
