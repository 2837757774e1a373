"""A ClusterBackend that stands in for ParallelCluster: a real (moto) CloudFormation stack per cluster."""

from __future__ import annotations

import json
from typing import Any

from clusterkit.findings import Finding, Level

# Two resources, so that progress has something to count.
TEMPLATE = json.dumps({
    "Parameters": {"Size": {"Type": "String", "Default": "0"}},
    "Resources": {"SharedBucket": {"Type": "AWS::S3::Bucket"}, "LogBucket": {"Type": "AWS::S3::Bucket"}},
})


class FakeParallelCluster:
    """Records every call; `dry_run_findings` is what the dry run reports."""

    def __init__(self, dry_run_findings: list[Finding] | None = None) -> None:
        self.calls: list[tuple[str, str, dict[str, Any] | None]] = []
        self.dry_run_findings = dry_run_findings or [Finding(Level.INFO, "parallelcluster.DeletionPolicyValidator",
                                                             "storage 'fsx' is deleted with the cluster")]

    def _cloudformation(self, region: str) -> Any:
        import boto3

        return boto3.client("cloudformation", region_name=region)

    def dry_run(self, name: str, config: dict[str, Any], region: str) -> list[Finding]:
        self.calls.append(("dry_run", name, config))
        return list(self.dry_run_findings)

    def create(self, name: str, config: dict[str, Any], region: str) -> str:
        self.calls.append(("create", name, config))
        return self._cloudformation(region).create_stack(StackName=name, TemplateBody=TEMPLATE)["StackId"]

    def describe(self, name: str, region: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            stack = self._cloudformation(region).describe_stacks(StackName=name)["Stacks"][0]
        except ClientError:
            return None
        return {"clusterName": name, "clusterStatus": stack["StackStatus"],
                "cloudFormationStackStatus": stack["StackStatus"], "computeFleetStatus": "RUNNING",
                "headNode": {"instanceId": "i-0head", "state": "running", "privateIpAddress": "10.0.0.10"},
                "instances": [{"instanceId": "i-0head", "nodeType": "HeadNode", "instanceType": "c5.9xlarge",
                               "state": "running", "privateIpAddress": "10.0.0.10"}]}

    def update(self, name: str, config: dict[str, Any], region: str) -> str:
        self.calls.append(("update", name, config))
        size = str(len([c for c in self.calls if c[0] == "update"]))
        return self._cloudformation(region).update_stack(
            StackName=name, TemplateBody=TEMPLATE, Parameters=[{"ParameterKey": "Size", "ParameterValue": size}],
        )["StackId"]

    def delete(self, name: str, region: str) -> None:
        self.calls.append(("delete", name, None))
        self._cloudformation(region).delete_stack(StackName=name)
