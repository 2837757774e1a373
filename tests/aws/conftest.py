"""AWS tests: moto in-process with fake keys, and botocore-level fills for what moto lacks.

moto 5.2 has no capacity reservations (DescribeCapacityReservations is not implemented); tests answer
that call, and inject CloudFormation stack states and events, with `before-call` event handlers on the
client, which return a canned response or raise the ClientError AWS would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from . import moto_gaps

moto_gaps.fill()  # CloudFormation resource types moto lacks, for clusterkit's prerequisites stack

REGION = "us-east-1"
FAKE_SECRET = "fake-secret-c0ffee-never-print-me"


def _offline_aws(monkeypatch: pytest.MonkeyPatch, scratch: Path) -> None:
    for variable in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(scratch / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(scratch / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    """Fake keys, no profile, no endpoint, no config files and no instance metadata: nothing reaches AWS."""
    _offline_aws(monkeypatch, tmp_path)


def parallelcluster_world(tmp_path_factory: pytest.TempPathFactory, **options: Any) -> Iterator[Any]:
    """ParallelCluster's full validation under moto (tests/aws/parallelcluster_world.py); `options` go to
    ParallelClusterWorld (e.g. empty_account=True)."""
    pytest.importorskip("pcluster", reason="aws-parallelcluster (the `validate` extra) is not installed")
    import shutil

    if shutil.which("node") is None:
        pytest.skip("ParallelCluster needs Node.js on PATH")
    from moto import mock_aws

    from .parallelcluster_world import ParallelClusterWorld, use_local_region_list

    with pytest.MonkeyPatch.context() as monkeypatch:
        _offline_aws(monkeypatch, tmp_path_factory.mktemp("aws"))
        # ParallelCluster checks the node roles' AWS-managed policies (SSM, ECR): moto holds them when asked.
        monkeypatch.setenv("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
        with mock_aws():
            use_local_region_list()
            world = ParallelClusterWorld(**options)
            try:
                yield world
            finally:
                world.close()


@pytest.fixture(scope="module")
def pcluster_world(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """One ParallelCluster world per test module."""
    yield from parallelcluster_world(tmp_path_factory)


def use_fake_parallelcluster(fake: Any, monkeypatch: pytest.MonkeyPatch, home: Path) -> Any:
    """`fake` in place of ParallelCluster's create, describe, update and delete; clusterkit's records under
    `home`; stacks followed without waiting."""
    from clusterkit.providers.aws import cluster as aws_cluster

    monkeypatch.setenv("CLUSTERKIT_HOME", str(home))
    monkeypatch.setattr(aws_cluster, "ParallelClusterBackend", lambda: fake)
    monkeypatch.setattr(aws_cluster, "POLL_SECONDS", 0)
    return fake


@pytest.fixture
def mocked(aws_env: None) -> Iterator[None]:
    from moto import mock_aws

    with mock_aws():
        yield


@pytest.fixture
def aws(mocked: None):  # noqa: ANN201
    from clusterkit.providers.aws import Aws

    return Aws(REGION)


def answer(client: Any, operation: str, respond: Callable[[], dict[str, Any]]) -> None:
    """Make `client.<operation>` return `respond()` (parsed response) without reaching moto."""
    from botocore.awsrequest import AWSResponse

    def handler(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        return AWSResponse("https://stub", 200, {}, None), {**respond(), "ResponseMetadata": {"HTTPStatusCode": 200}}

    client.meta.events.register(f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}",
                                handler)


def refuse(client: Any, operation: str, code: str, message: str) -> None:
    """Make `client.<operation>` fail as AWS would, with this error code and message."""
    from botocore.exceptions import ClientError

    def handler(**_: Any) -> None:
        raise ClientError({"Error": {"Code": code, "Message": message}}, operation)

    client.meta.events.register(f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}",
                                handler)


def reservation(reservation_id: str = "cr-0123456789abcdef0", instance_type: str = "p4de.24xlarge",
                zone: str = "us-east-1c", count: int = 4, state: str = "active",
                kind: str = "default") -> dict[str, Any]:
    return {"CapacityReservationId": reservation_id, "InstanceType": instance_type, "AvailabilityZone": zone,
            "TotalInstanceCount": count, "AvailableInstanceCount": count, "State": state,
            "ReservationType": kind, "InstancePlatform": "Linux/UNIX"}


def answer_reservations(ec2: Any, *reservations: dict[str, Any]) -> None:
    """DescribeCapacityReservations as EC2 answers it: the named ids, or NotFound."""
    from botocore.exceptions import ClientError

    known = {r["CapacityReservationId"]: r for r in reservations}

    def handler(params: dict[str, Any], **_: Any):  # noqa: ANN202
        from botocore.awsrequest import AWSResponse

        wanted = [value for key, value in params["body"].items() if key.startswith("CapacityReservationId.")]
        missing = [i for i in wanted if i not in known]
        if missing:
            raise ClientError({"Error": {"Code": "InvalidCapacityReservationId.NotFound",
                                         "Message": f"The capacity reservation ID '{missing[0]}' does not exist"}},
                              "DescribeCapacityReservations")
        return AWSResponse("https://stub", 200, {}, None), {"CapacityReservations": [known[i] for i in wanted]}

    ec2.meta.events.register("before-call.ec2.DescribeCapacityReservations", handler)


def private_subnets(ec2: Any, *zones: str) -> dict[str, str]:
    """A private subnet (no public IPs) per zone in the default VPC, as GPU queues with several cards need."""
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    made = {}
    for index, zone in enumerate(zones):
        made[zone] = ec2.create_subnet(VpcId=vpc, CidrBlock=f"172.31.{128 + 16 * index}.0/20",
                                       AvailabilityZone=zone)["Subnet"]["SubnetId"]
    return made


def fill_fsx(client: Any, lifecycles: tuple[str, ...] = ("CREATING", "AVAILABLE"),
             failure: str = "") -> list[tuple[str, dict[str, Any]]]:
    """FSx under moto with what moto 5.2 lacks, at the boto3 level: every FSx request is checked against botocore's
    model before moto sees it (and recorded: the list returned holds (operation, request) as sent), and
    DescribeFileSystems' answers get what moto leaves out: a `Lifecycle`, each file system going through `lifecycles`
    one look at a time and staying at the last, FSx's `FailureDetails` (`failure`) when that is FAILED, and a Lustre
    file system's `MountName`."""
    import hashlib
    import json

    from clusterkit.providers.hyperpod.model import problems, service_model

    sent: list[tuple[str, dict[str, Any]]] = []
    looks: dict[str, int] = {}
    known = service_model("fsx").shape_for("FileSystemLifecycle").enum

    def check(params: dict[str, Any], model: Any, **_: Any) -> None:
        request = json.loads(params["body"] or b"{}")  # the request as sent (FSx speaks JSON)
        assert problems(model.name, request, service="fsx") == [], problems(model.name, request, service="fsx")
        sent.append((model.name, request))

    def fill(parsed: dict[str, Any], **_: Any) -> None:
        for system in parsed.get("FileSystems", []):
            look = looks[system["FileSystemId"]] = looks.get(system["FileSystemId"], -1) + 1
            lifecycle = lifecycles[min(look, len(lifecycles) - 1)]
            assert lifecycle in known, lifecycle
            system["Lifecycle"] = lifecycle
            if lifecycle == "FAILED":
                system["FailureDetails"] = {"Message": failure}
            if system.get("FileSystemType") == "LUSTRE":
                digest = hashlib.sha256(system["FileSystemId"].encode()).hexdigest()
                mount_name = "".join(chr(ord("a") + int(c, 16)) for c in digest[:8])  # FSx's: 8 lowercase letters
                system.setdefault("LustreConfiguration", {}).setdefault("MountName", mount_name)

    client.meta.events.register("before-call.fsx", check)
    client.meta.events.register("after-call.fsx.DescribeFileSystems", fill)
    return sent
