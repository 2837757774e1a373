"""clusterkit's prerequisites stack in an account: create it (with progress), read its outputs, tell whether
anything else lives in it, delete it. The template itself is `clusterkit.cluster.prerequisites` (pure).

A stack carries two tags: the layout (so a later create in the region reuses it) and the cluster whose create
made it. `delete-cluster` removes it only when that cluster made it, no other cluster clusterkit knows uses
it, and nothing else lives in its network or joins its database's client group (a kept FSx file system, another
cluster's nodes): those would keep AWS from deleting it anyway.
"""

from __future__ import annotations

from typing import Any

from clusterkit.cluster.prerequisites import CREATED_FOR_TAG, LAYOUT, LAYOUT_TAG
from clusterkit.providers.aws.access import Aws, call
from clusterkit.providers.base import Progress, quiet

# Network interfaces that belong to the stack itself: its NAT gateway's and its database's.
_OWN_INTERFACE_TYPES = ("nat_gateway",)
_OWN_REQUESTERS = ("amazon-rds",)


def create(aws: Aws, stack: str, template_text: str, parameters: dict[str, str], cluster: str,
           progress: Progress = quiet, poll_seconds: float = 15.0) -> dict[str, str]:
    """Create the stack, follow it to CREATE_COMPLETE and return its outputs. A failed create deletes what it
    made (OnFailure DELETE), so a retry starts clean."""
    from clusterkit.providers.aws.cloudformation import follow_stack  # lazy: a dry run follows no stack

    progress(f"creating prerequisites stack {stack} in {aws.region}")
    created = call(aws, "cloudformation", "create_stack", StackName=stack, TemplateBody=template_text,
                   Parameters=[{"ParameterKey": key, "ParameterValue": value} for key, value in parameters.items()],
                   Tags=[{"Key": LAYOUT_TAG, "Value": LAYOUT}, {"Key": CREATED_FOR_TAG, "Value": cluster}],
                   OnFailure="DELETE")
    follow_stack(aws.client("cloudformation"), created["StackId"], "CREATE", progress, poll_seconds=poll_seconds)
    return outputs(aws, created["StackId"])


def outputs(aws: Aws, stack: str) -> dict[str, str]:
    found = call(aws, "cloudformation", "describe_stacks", StackName=stack)["Stacks"][0]
    return {output["OutputKey"]: output["OutputValue"] for output in found.get("Outputs", [])}


def describe(aws: Aws, stack: str) -> dict[str, Any] | None:
    """The stack's status, tags and outputs; None when it is gone."""
    from botocore.exceptions import ClientError

    try:
        found = call(aws, "cloudformation", "describe_stacks", StackName=stack)["Stacks"][0]
    except ClientError as error:
        if "does not exist" in str(error):
            return None
        raise
    return {"status": found["StackStatus"], "tags": {t["Key"]: t["Value"] for t in found.get("Tags", [])},
            "outputs": {o["OutputKey"]: o["OutputValue"] for o in found.get("Outputs", [])}}


def users(aws: Aws, stack_outputs: dict[str, str]) -> list[str]:
    """What else lives in the stack's network or joins its database's client group, in words."""
    found: dict[str, str] = {}
    for key, name in (("VpcId", "vpc-id"), ("DatabaseClientSecurityGroupId", "group-id")):
        if key not in stack_outputs:
            continue
        interfaces = call(aws, "ec2", "describe_network_interfaces",
                          Filters=[{"Name": name, "Values": [stack_outputs[key]]}]).get("NetworkInterfaces", [])
        for interface in interfaces:
            if interface.get("InterfaceType") in _OWN_INTERFACE_TYPES or \
                    interface.get("RequesterId") in _OWN_REQUESTERS:
                continue
            description = interface.get("Description") or interface.get("InterfaceType") or "in use"
            found[interface["NetworkInterfaceId"]] = f"{interface['NetworkInterfaceId']} ({description})"
    return [found[key] for key in sorted(found)]


def kept_because(aws: Aws, stack: str, cluster: str) -> str:
    """Why the prerequisites stack stays once `cluster` is gone, asking AWS ('' when it can go): already gone, made for
    another cluster, or still used by something in its network."""
    found = describe(aws, stack)
    if found is None:
        return "already gone"
    if found["tags"].get(CREATED_FOR_TAG) != cluster:
        return "made for another cluster"
    in_use = users(aws, found["outputs"])
    return f"still used by {', '.join(in_use[:3])}" if in_use else ""


def delete(aws: Aws, stack: str, progress: Progress = quiet, poll_seconds: float = 15.0) -> None:
    from clusterkit.providers.aws.cloudformation import follow_stack  # lazy: a dry run follows no stack

    progress(f"deleting prerequisites stack {stack} in {aws.region}")
    call(aws, "cloudformation", "delete_stack", StackName=stack)
    follow_stack(aws.client("cloudformation"), stack, "DELETE", progress, poll_seconds=poll_seconds)
