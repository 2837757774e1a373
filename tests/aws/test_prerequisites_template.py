"""clusterkit's prerequisites template, judged by cfn-lint (AWS's own template linter) and deployed by moto's
CloudFormation; the stack's outputs become the cluster config's subnets, security group and database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterkit.cluster import load_spec_data, render_config
from clusterkit.cluster.prerequisites import Prerequisites, template, template_text, with_outputs
from clusterkit.providers.aws import prerequisites as stacks

KINDS = [Prerequisites(network=True, database=True), Prerequisites(network=True, database=False),
         Prerequisites(network=False, database=True)]
LINT_REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1"]


def lint(text: str) -> list[str]:
    cfnlint = pytest.importorskip("cfnlint.api", reason="cfn-lint (the `dev` extra) is not installed")
    matches = cfnlint.lint(text, config=cfnlint.ManualArgs(regions=LINT_REGIONS))
    return [f"{match.rule.id} {match.message} (line {match.linenumber})" for match in matches]


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: "+".join(k for k, v in kind.to_dict().items() if v))
def test_the_template_passes_cfn_lint(kind: Prerequisites) -> None:
    assert lint(template_text(kind, "train")) == []


def test_cfn_lint_would_see_a_broken_template() -> None:
    broken = template(Prerequisites(network=True, database=True), "train")
    broken["Resources"]["PrivateSubnet"]["Properties"]["CidrBlock"] = "10.0.64.0/33"
    broken["Resources"]["Database"]["Properties"]["DBInstanceClass"] = "db.nonexistent.huge"
    found = lint(yaml.safe_dump(broken))
    assert any("10.0.64.0/33" in line for line in found), found
    assert any("db.nonexistent.huge" in line for line in found), found


def _default_vpc_subnets(ec2: Any) -> tuple[str, list[str]]:
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
    return vpc, sorted({s["AvailabilityZone"]: s["SubnetId"] for s in subnets}.values())[:2]


def test_network_and_database_deploy_under_moto_and_feed_the_cluster_config(aws: Any) -> None:
    kind = Prerequisites(network=True, database=True)
    outputs = stacks.create(aws, "clusterkit-prerequisites-train", template_text(kind, "train"),
                            {"AvailabilityZone": "us-east-1b", "DatabaseAvailabilityZone": "us-east-1c"}, "train",
                            poll_seconds=0)
    ec2 = aws.client("ec2")
    private = ec2.describe_subnets(SubnetIds=[outputs["PrivateSubnetId"]])["Subnets"][0]
    public = ec2.describe_subnets(SubnetIds=[outputs["PublicSubnetId"]])["Subnets"][0]
    assert (private["MapPublicIpOnLaunch"], public["MapPublicIpOnLaunch"]) == (False, True)
    assert private["VpcId"] == outputs["VpcId"] and private["AvailabilityZone"] == "us-east-1b"
    (database,) = aws.client("rds").describe_db_instances()["DBInstances"]
    assert database["StorageEncrypted"] and not database["PubliclyAccessible"]
    assert outputs["DatabaseUri"] == f"{database['Endpoint']['Address']}:{database['Endpoint']['Port']}"
    aws.client("secretsmanager").get_secret_value(SecretId=outputs["DatabaseSecretArn"])  # it exists

    spec, findings = load_spec_data(_p4de_data())
    assert spec is not None, findings
    config = render_config(with_outputs(spec, outputs))
    assert config["HeadNode"]["Networking"] == {"SubnetId": outputs["PublicSubnetId"],
                                                "AdditionalSecurityGroups": [outputs["DatabaseClientSecurityGroupId"]]}
    assert {s for q in config["Scheduling"]["SlurmQueues"] for s in q["Networking"]["SubnetIds"]} == {
        outputs["PrivateSubnetId"]}
    assert config["Scheduling"]["SlurmSettings"]["Database"] == {
        "Uri": outputs["DatabaseUri"], "UserName": "clusterkit", "PasswordSecretArn": outputs["DatabaseSecretArn"]}


def test_a_database_alone_deploys_into_an_existing_vpc(aws: Any) -> None:
    vpc, subnets = _default_vpc_subnets(aws.client("ec2"))
    outputs = stacks.create(aws, "clusterkit-prerequisites-db", template_text(Prerequisites(False, True), "db"),
                            {"VpcId": vpc, "DatabaseSubnetIds": ",".join(subnets)}, "db", poll_seconds=0)
    assert set(outputs) == {"DatabaseUri", "DatabaseUserName", "DatabaseSecretArn", "DatabaseClientSecurityGroupId"}
    group = aws.client("ec2").describe_security_groups(GroupIds=[outputs["DatabaseClientSecurityGroupId"]])
    assert group["SecurityGroups"][0]["VpcId"] == vpc


def _p4de_data() -> dict[str, Any]:
    return yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster-configs" / "p4de.yaml").read_text())
