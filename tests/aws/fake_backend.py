"""A ClusterBackend that stands in for ParallelCluster: a real (moto) CloudFormation stack per cluster.

Like ParallelCluster, `create` also makes the shared storage the config asks for (FSx for Lustre, EFS)
and `delete` removes it only when its DeletionPolicy is Delete: CloudFormation's DeletionPolicy, which
ParallelCluster sets on those resources, decides what outlives the stack. A new FSx file system has its
network interface in the head node's subnet, as on AWS (moto's FSx makes none), so a kept one keeps its
network busy. `head_node` is what describe reports of the head node (tests give it a public address).
"""

from __future__ import annotations

import json
from typing import Any

from clusterkit.findings import Finding, Level

# Two resources, so that progress has something to count.
TEMPLATE = json.dumps({
    "Parameters": {"Size": {"Type": "String", "Default": "0"}},
    "Resources": {"SharedBucket": {"Type": "AWS::S3::Bucket"}, "LogBucket": {"Type": "AWS::S3::Bucket"}},
})
CLUSTER_TAG = "parallelcluster:cluster-name"


class FakeParallelCluster:
    """Records every call; `dry_run_findings` is what the dry run reports."""

    def __init__(self, dry_run_findings: list[Finding] | None = None) -> None:
        self.calls: list[tuple[str, str, dict[str, Any] | None]] = []
        self.suppressed: list[tuple[str, ...]] = []
        self.storage: dict[str, list[tuple[str, str, str]]] = {}  # cluster -> (service, id, DeletionPolicy)
        self.head_node: dict[str, Any] = {"instanceId": "i-0head", "state": "running",
                                           "privateIpAddress": "10.0.0.10"}
        self.dry_run_findings = dry_run_findings or [Finding(Level.INFO, "parallelcluster.DeletionPolicyValidator",
                                                             "storage 'fsx' is retained when the cluster is deleted")]

    def _client(self, service: str, region: str) -> Any:
        import boto3

        return boto3.client(service, region_name=region)

    def dry_run(self, name: str, config: dict[str, Any], region: str, suppress: tuple[str, ...] = ()) -> list[Finding]:
        self.calls.append(("dry_run", name, config))
        self.suppressed.append(tuple(suppress))
        return list(self.dry_run_findings)

    def create(self, name: str, config: dict[str, Any], region: str) -> str:
        self.calls.append(("create", name, config))
        self.storage[name] = self._make_storage(name, config, region)
        return self._client("cloudformation", region).create_stack(StackName=name, TemplateBody=TEMPLATE)["StackId"]

    def _make_storage(self, name: str, config: dict[str, Any], region: str) -> list[tuple[str, str, str]]:
        made: list[tuple[str, str, str]] = []
        subnet = config["HeadNode"]["Networking"]["SubnetId"]
        tags = [{"Key": CLUSTER_TAG, "Value": name}]
        for entry in config.get("SharedStorage", []):
            if entry["StorageType"] == "FsxLustre" and "FileSystemId" not in entry["FsxLustreSettings"]:
                settings = entry["FsxLustreSettings"]
                file_system = self._client("fsx", region).create_file_system(
                    FileSystemType="LUSTRE", StorageCapacity=settings["StorageCapacity"], SubnetIds=[subnet],
                    Tags=tags, LustreConfiguration={"DeploymentType": settings["DeploymentType"]},
                )["FileSystem"]["FileSystemId"]
                self._client("ec2", region).create_network_interface(
                    SubnetId=subnet, Description=f"ENI for FSx file system {file_system}")
                made.append(("fsx", file_system, settings.get("DeletionPolicy", "Delete")))
            elif entry["StorageType"] == "Efs" and "FileSystemId" not in entry["EfsSettings"]:
                made.append(("efs", self._client("efs", region).create_file_system(
                    CreationToken=f"{name}-{entry['Name']}", Tags=tags)["FileSystemId"],
                    entry["EfsSettings"].get("DeletionPolicy", "Delete")))
        return made

    def describe(self, name: str, region: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            stack = self._client("cloudformation", region).describe_stacks(StackName=name)["Stacks"][0]
        except ClientError:
            return None
        return {"clusterName": name, "clusterStatus": stack["StackStatus"],
                "cloudFormationStackStatus": stack["StackStatus"], "computeFleetStatus": "RUNNING",
                "headNode": dict(self.head_node),
                "instances": [{"instanceId": self.head_node["instanceId"], "nodeType": "HeadNode",
                               "instanceType": "c5.9xlarge", "state": "running",
                               "privateIpAddress": self.head_node["privateIpAddress"]}]}

    def update(self, name: str, config: dict[str, Any], region: str) -> str:
        self.calls.append(("update", name, config))
        size = str(len([c for c in self.calls if c[0] == "update"]))
        return self._client("cloudformation", region).update_stack(
            StackName=name, TemplateBody=TEMPLATE, Parameters=[{"ParameterKey": "Size", "ParameterValue": size}],
        )["StackId"]

    def delete(self, name: str, region: str) -> None:
        self.calls.append(("delete", name, None))
        for service, storage_id, policy in self.storage.pop(name, []):
            if policy != "Delete":
                continue
            if service == "fsx":
                self._client("fsx", region).delete_file_system(FileSystemId=storage_id)
                ec2 = self._client("ec2", region)
                for interface in ec2.describe_network_interfaces()["NetworkInterfaces"]:
                    if interface.get("Description") == f"ENI for FSx file system {storage_id}":
                        ec2.delete_network_interface(NetworkInterfaceId=interface["NetworkInterfaceId"])
            else:
                self._client("efs", region).delete_file_system(FileSystemId=storage_id)
        self._client("cloudformation", region).delete_stack(StackName=name)
