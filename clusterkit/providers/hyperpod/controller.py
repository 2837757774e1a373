"""How to reach a HyperPod cluster's controller node from elsewhere, over SSH through SSM Session Manager.

HyperPod's nodes have no address of their own outside the cluster's VPC; SSM reaches each one as the target
`sagemaker-cluster:CLUSTERID_GROUP-INSTANCEID` (the cluster id is the last part of its ARN), and SSH goes through it
with the `AWS-StartSSHSession` document as the ProxyCommand, the way HyperPod's samples (`easy-ssh.sh`) reach the
controller. The user is the image's, `ubuntu`; the public key beside `--identity-file` (KEY.pub) goes into the
lifecycle parameters, and the lifecycle script authorizes it for ubuntu on the controller and login nodes. The
controller's instance id comes from ListClusterNodes, its group from the cluster's own CreateCluster request. Every
part of the target is checked against botocore's pattern for it before it reaches the ssh command line (ssh runs a
ProxyCommand through a shell). The caller asks SageMaker.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from clusterkit.errors import ClusterkitError, NotFound
from clusterkit.findings import Finding, error, shorten, warning
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers.aws.ssh import TRUST_ON_FIRST_USE, ssm_proxy_command
from clusterkit.providers.hyperpod.request import CONTROLLER_GROUP
from clusterkit.registry import JsonObject
from clusterkit.transport import SshTarget

CONTROLLER_USER = "ubuntu"  # HyperPod's images are Ubuntu DLAMIs; the samples' easy-ssh.sh logs in as ubuntu
SSM_TARGET = "sagemaker-cluster:{cluster_id}_{group}-{instance_id}"
RUNNING = "Running"
# An OpenSSH public key's type and base64 (on_create.sh checks the same); its comment is left behind.
PUBLIC_KEY_RE = re.compile(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521)|sk-ssh-ed25519@openssh\.com|"
                           r"sk-ecdsa-sha2-nistp256@openssh\.com) ([A-Za-z0-9+/]{16,8192}={0,3})(?:[ \t][^\n]*)?")
PUBLIC_KEY_MAX_BYTES = 16384


@lean_dataclass(frozen=True)
class ControllerAccess:
    """The controller node and the SSH target that reaches it."""

    instance_id: str
    ssm_target: str
    ssh: SshTarget

    @property
    def proxy_command(self) -> str:
        return next(option for option in self.ssh.options if option.startswith("ProxyCommand=")).partition("=")[2]

    def to_dict(self) -> JsonObject:
        return {"instance_id": self.instance_id, "ssh": self.ssh.destination, "ssm_target": self.ssm_target,
                "proxy_command": self.proxy_command, "identity_file": self.ssh.identity_file,
                "known_hosts_file": self.ssh.known_hosts_file}


def checked(value: object, shape: str, what: str) -> str:
    """`value` when it matches botocore's pattern and length for SageMaker's `shape`; else one line (the value is
    from a record or an AWS answer, and is bound for a shell)."""
    from clusterkit.providers.hyperpod.model import service_model

    metadata = service_model().shape_for(shape).metadata
    if (isinstance(value, str) and len(value) <= metadata.get("max", 256)
            and re.fullmatch(metadata["pattern"], value) is not None):
        return value
    raise ClusterkitError(f"{what} {shorten(value)!r} does not match botocore's {shape} pattern "
                          f"{metadata['pattern']}, so it is not put on an ssh command line",
                          fix="check the cluster with `clusterkit describe-cluster NAME` and the AWS console")


def controller_group(request: Mapping[str, object]) -> str:
    """The Controller group's name in the cluster's CreateCluster request."""
    groups = request.get("InstanceGroups")
    for group in groups if isinstance(groups, list) else []:
        slurm = group.get("SlurmConfig") if isinstance(group, dict) else None
        if isinstance(slurm, dict) and slurm.get("NodeType") == "Controller":
            return checked(group.get("InstanceGroupName"), "ClusterInstanceGroupName", "the controller group name")
    raise ClusterkitError("the cluster's CreateCluster request names no Controller group",
                          fix="check the request file in the cluster's directory (clusterkit describe-cluster NAME)")


def controller_access(cluster_arn: str | None, group: str, nodes: Sequence[Mapping[str, object]], *, region: str,
                      identity_file: str | None, known_hosts_file: str) -> ControllerAccess:
    """The controller among ListClusterNodes' `nodes` (a running one first) and how SSH reaches it through SSM."""
    if not cluster_arn:
        raise ClusterkitError("SageMaker has not given the cluster an ARN (its create did not get that far)",
                              fix="see it with `clusterkit describe-cluster NAME`")
    cluster_id = checked(cluster_arn, "ClusterArn", "the cluster ARN").rsplit("/", 1)[1]
    mine = [node for node in nodes if node.get("InstanceGroupName") == group]
    if not mine:
        raise NotFound(f"ListClusterNodes lists no node of the controller group {group!r} (yet)",
                       fix="wait for the cluster to be InService (clusterkit describe-cluster NAME)")
    node = next((node for node in mine if _status(node) == RUNNING), mine[0])
    if _status(node) != RUNNING:
        raise ClusterkitError(f"the controller node is {shorten(_status(node))!r}, not {RUNNING}",
                              fix="wait for HyperPod to bring it up (clusterkit describe-cluster NAME)")
    instance_id = checked(node.get("InstanceId"), "ClusterNodeId", "the controller's instance id")
    target = SSM_TARGET.format(cluster_id=cluster_id, group=group, instance_id=instance_id)
    # The instance id names the host key: the node has no address here.
    ssh = SshTarget(host=instance_id, user=CONTROLLER_USER, identity_file=identity_file,
                    options=(f"ProxyCommand={ssm_proxy_command(target, region)}", TRUST_ON_FIRST_USE),
                    known_hosts_file=known_hosts_file)
    return ControllerAccess(instance_id, target, ssh)


def authorized_keys(identity_file: str | None) -> tuple[tuple[str, ...], list[Finding]]:
    """The public key beside `identity_file` (KEY.pub), as the lifecycle script authorizes it: type and base64."""
    if not identity_file:
        return (), []
    key = Path(identity_file).expanduser()
    public = key.with_name(key.name + ".pub")
    try:
        with open(public, "rb") as stream:
            text = stream.read(PUBLIC_KEY_MAX_BYTES).decode()
    except (OSError, UnicodeDecodeError) as failure:
        why = failure.strerror if isinstance(failure, OSError) else "it is not text"
        return (), [warning("identity_file", f"its public key {public} cannot be read ({why}): the controller will "
                            "not be told to accept the key", f"write it (ssh-keygen -y -f {shlex.quote(str(key))} > "
                            f"{shlex.quote(str(public))}) and plan again, or add the key to ubuntu's "
                            "~/.ssh/authorized_keys on the controller yourself", identity_file)]
    first = text.split("\n", 1)[0].strip()
    match = PUBLIC_KEY_RE.fullmatch(first)
    if match is None:
        return (), [error("identity_file", f"{public} does not hold an OpenSSH public key (TYPE BASE64 [COMMENT], "
                          "TYPE ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256/384/521 or a security key's)",
                          f"write it again: ssh-keygen -y -f {shlex.quote(str(key))} > {shlex.quote(str(public))}",
                          shorten(first))]
    return (f"{match[1]} {match[2]}",), []


def planned_access(region: str, identity_file: str | None) -> JsonObject | None:
    """How a cluster made from a plan will be reached (its ids are known once it exists); None for a region that
    no ssh command line takes (the plan has that finding)."""
    target = SSM_TARGET.format(cluster_id="CLUSTERID", group=CONTROLLER_GROUP, instance_id="INSTANCEID")
    try:
        proxy = ssm_proxy_command(target, region)
    except ClusterkitError:
        return None
    return {"ssh": f"{CONTROLLER_USER}@INSTANCEID", "ssm_target": target, "proxy_command": proxy,
            "identity_file": identity_file}


def _status(node: Mapping[str, object]) -> str:
    status = node.get("InstanceStatus")
    return str(status.get("Status", "?")) if isinstance(status, dict) else "?"
