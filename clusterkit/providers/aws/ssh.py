"""How to reach the head node of an AWS cluster clusterkit made, over SSH, from ParallelCluster's view of it.

The head node's public address when it has one; else SSM Session Manager (every node role has
AmazonSSMManagedInstanceCore) as the ProxyCommand, to its instance id. The user is the image's (ParallelCluster's
own table); the key is the one given at create (`--identity-file`), else ~/.ssh/KEY_NAME.pem or ~/.ssh/KEY_NAME
when there, else the user's agent and ssh config. The head node's host key is trusted on first use and kept for
this cluster alone (`known_hosts` in its directory): a changed key later is refused.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clusterkit.errors import ClusterkitError, MissingDependency
from clusterkit.findings import shorten
from clusterkit.transport import SshTarget

if TYPE_CHECKING:
    from clusterkit.slurm import Slurm

# ParallelCluster 3.16's default user per OS (pcluster.constants.OS_MAPPING).
OS_USERS = {"alinux2": "ec2-user", "alinux2023": "ec2-user", "rhel8": "ec2-user", "rhel9": "ec2-user",
            "rocky8": "rocky", "rocky9": "rocky", "ubuntu2204": "ubuntu", "ubuntu2404": "ubuntu"}
KNOWN_HOSTS_FILE = "known_hosts"
TRUST_ON_FIRST_USE = "StrictHostKeyChecking=accept-new"  # the cluster's own known_hosts then holds exactly that key
_REGION_RE = re.compile(r"[a-z]{2}(?:-[a-z]+)+-[0-9]{1,2}")
_SSM_PROXY = "ProxyCommand=" + shlex.join(["aws", "ssm", "start-session"])


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


def ssm_proxy_command(target: str, region: str) -> str:
    """SSH through SSM Session Manager to `target` (an instance id, or a HyperPod node's `sagemaker-cluster:` target);
    the AWS CLI and its session-manager-plugin do it. ssh runs the command through a shell after expanding its
    %-tokens, so the target and the region are checked to be plain first (a value from a record or an AWS answer)."""
    if not _REGION_RE.fullmatch(region):
        raise ClusterkitError(f"{shorten(region)!r} is not an AWS region, so it is not put on an ssh command line",
                              fix="check the region in the cluster's record (clusterkit describe-cluster NAME)")
    if not re.fullmatch(r"[A-Za-z0-9:_.-]{1,300}", target):
        raise ClusterkitError(f"{shorten(target)!r} is not an SSM target, so it is not put on an ssh command line",
                              fix="check the cluster with `clusterkit describe-cluster NAME`")
    return shlex.join(["aws", "ssm", "start-session", "--target", target, "--region", region,
                       "--document-name", "AWS-StartSSHSession", "--parameters", "portNumber=%p"])


def check_ssm_client(target: SshTarget) -> None:
    """A target reached through SSM needs the AWS CLI and its session-manager-plugin here: one line naming what is
    missing, before ssh would fail with the proxy's own words."""
    if not any(option.startswith(_SSM_PROXY) for option in target.options):
        return
    if shutil.which("aws") is None:
        raise MissingDependency(f"the AWS CLI (aws) is not installed, and {target.host} is reached through SSM "
                                "Session Manager with it", fix="install the AWS CLI v2 and the Session Manager plugin "
                                "(docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html)")
    if shutil.which("session-manager-plugin") is None:
        raise MissingDependency(f"the Session Manager plugin (session-manager-plugin) is not installed, and "
                                f"{target.host} is reached through SSM Session Manager with it",
                                fix="install it (docs.aws.amazon.com/systems-manager/latest/userguide/"
                                    "session-manager-working-with-install-plugin.html)")


def slurm_over_ssh(find_target: Callable[[], SshTarget], unreachable: str, or_else: str) -> Slurm:
    """Slurm on a cluster's node reached over SSH (perhaps through SSM): `find_target`'s failure is one line,
    `unreachable` and why, with `or_else` (running clusterkit there instead) among the fixes."""
    from clusterkit.slurm import Slurm
    from clusterkit.transport import SshTransport

    try:
        target = find_target()
    except ClusterkitError as error:
        raise ClusterkitError(f"{unreachable}: {error.message}",
                              fix=(f"{error.fix}; " if error.fix else "") + or_else) from None
    check_ssm_client(target)
    return Slurm(transport=SshTransport(target))


def head_node_target(described: dict[str, Any], *, region: str, os_name: str, key_name: str | None,
                     identity_file: str | None, known_hosts_file: str, ssh_dir: Path | None = None) -> SshTarget:
    """The SSH target of the head node in ParallelCluster's describe-cluster answer."""
    head = described.get("headNode") or {}
    instance_id = head.get("instanceId")
    if not instance_id:
        raise ClusterkitError(f"ParallelCluster reports no head node for this cluster in {region} (yet)",
                              fix="wait for the create to finish (`clusterkit describe-cluster NAME`)")
    trust = (TRUST_ON_FIRST_USE,)
    key = key_file(key_name, identity_file, ssh_dir)
    public = head.get("publicIpAddress")
    if public:
        return SshTarget(host=public, user=os_user(os_name), identity_file=key, options=trust,
                         known_hosts_file=known_hosts_file)
    # No public address: through Session Manager. The instance id names the host key (it has no address here).
    return SshTarget(host=instance_id, user=os_user(os_name), identity_file=key,
                     options=(f"ProxyCommand={ssm_proxy_command(instance_id, region)}", *trust),
                     known_hosts_file=known_hosts_file)
