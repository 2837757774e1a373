"""How to reach the head node of an AWS cluster clusterkit made, over SSH, from ParallelCluster's view of it.

The head node's public address when it has one; else SSM Session Manager (every node role has
AmazonSSMManagedInstanceCore) as the ProxyCommand, to its instance id. The user is the image's (ParallelCluster's
own table); the key is the one given at create (`--identity-file`), else ~/.ssh/KEY_NAME.pem or ~/.ssh/KEY_NAME
when there, else the user's agent and ssh config. The head node's host key is trusted on first use and kept for
this cluster alone (`known_hosts` in its directory): a changed key later is refused.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from clusterkit.errors import ClusterkitError
from clusterkit.transport import SshTarget

# ParallelCluster 3.16's default user per OS (pcluster.constants.OS_MAPPING).
OS_USERS = {"alinux2": "ec2-user", "alinux2023": "ec2-user", "rhel8": "ec2-user", "rhel9": "ec2-user",
            "rocky8": "rocky", "rocky9": "rocky", "ubuntu2204": "ubuntu", "ubuntu2404": "ubuntu"}
KNOWN_HOSTS_FILE = "known_hosts"


def os_user(os_name: str) -> str:
    if os_name in OS_USERS:
        return OS_USERS[os_name]
    return "ubuntu" if os_name.startswith("ubuntu") else "ec2-user"


def key_file(key_name: str | None, identity_file: str | None, ssh_dir: Path | None = None) -> str | None:
    """The private key to offer: the one given, else the EC2 key pair's file in ~/.ssh when it is there."""
    if identity_file:
        return identity_file
    if not key_name:
        return None
    directory = ssh_dir or Path.home() / ".ssh"
    return next((str(path) for path in (directory / f"{key_name}.pem", directory / key_name) if path.is_file()),
                None)


def ssm_proxy_command(instance_id: str, region: str) -> str:
    """SSH through SSM Session Manager to the instance (the AWS CLI and its session-manager-plugin do it)."""
    return shlex.join(["aws", "ssm", "start-session", "--target", instance_id, "--region", region,
                       "--document-name", "AWS-StartSSHSession", "--parameters", "portNumber=%p"])


def head_node_target(described: dict[str, Any], *, region: str, os_name: str, key_name: str | None,
                     identity_file: str | None, known_hosts_file: str, ssh_dir: Path | None = None) -> SshTarget:
    """The SSH target of the head node in ParallelCluster's describe-cluster answer."""
    head = described.get("headNode") or {}
    instance_id = head.get("instanceId")
    if not instance_id:
        raise ClusterkitError(f"ParallelCluster reports no head node for this cluster in {region} (yet)",
                              fix="wait for the create to finish (`clusterkit describe-cluster NAME`)")
    trust = ("StrictHostKeyChecking=accept-new",)  # first use; the file then holds exactly that key
    key = key_file(key_name, identity_file, ssh_dir)
    public = head.get("publicIpAddress")
    if public:
        return SshTarget(host=public, user=os_user(os_name), identity_file=key, options=trust,
                         known_hosts_file=known_hosts_file)
    # No public address: through Session Manager. The instance id names the host key (it has no address here).
    return SshTarget(host=instance_id, user=os_user(os_name), identity_file=key,
                     options=(f"ProxyCommand={ssm_proxy_command(instance_id, region)}", *trust),
                     known_hosts_file=known_hosts_file)
