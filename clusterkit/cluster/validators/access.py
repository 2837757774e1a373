"""Access: who may reach the head node over SSH, and which IAM policies the nodes get."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.spec import DEFAULT_SSH_CIDR, ClusterSpec, IamSpec
from clusterkit.cluster.validators.common import matches
from clusterkit.findings import Finding, error, info, warning

POLICY_ARN_RE = r"arn:aws[a-z-]*:iam::(aws|\d{12}):policy/[\w+=,.@/-]{1,512}"
POLICY_NAME_RE = r"[\w+=,.@-]{1,128}"
PREFIX_LIST_RE = r"pl-[a-zA-Z0-9]+"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
IPV4_CIDR_RE = rf"({_OCTET}\.){{3}}{_OCTET}/(3[0-2]|[12][0-9]|[0-9])"  # the mask is required
WORLD_CIDR = "0.0.0.0/0"


def ssh_access(spec: ClusterSpec) -> Iterator[Finding]:
    cidr = spec.ssh.allowed_cidr
    if cidr is None:
        yield info("ssh.allowed_cidr", f"SSH to the head node is allowed from {DEFAULT_SSH_CIDR} only",
                   "set ssh.allowed_cidr to your network, or connect with SSM Session Manager", DEFAULT_SSH_CIDR)
    elif matches(PREFIX_LIST_RE, cidr):
        pass
    elif not matches(IPV4_CIDR_RE, cidr):
        yield error("ssh.allowed_cidr", f"{cidr!r} is not an IPv4 CIDR block with a mask, nor a prefix list id",
                    "write it like 203.0.113.0/24 (a single address as 203.0.113.7/32), or pl-...", cidr)
    elif cidr == WORLD_CIDR:
        yield warning("ssh.allowed_cidr", "SSH to the head node is open to the whole internet",
                      "restrict it to your network, e.g. 203.0.113.0/24", cidr)
    if not spec.ssh.key_name:
        yield warning("ssh.key_name", "no SSH key pair: you reach the head node through SSM Session Manager",
                      "pass --key-name or set ssh.key_name (an ed25519 key; RSA fails on ubuntu2204)")


def _iam_entries(spec: ClusterSpec) -> Iterator[tuple[str, IamSpec]]:
    yield "head_node.iam", spec.head_node.iam
    for q, queue in enumerate(spec.queues):
        yield f"queues[{q}].iam", queue.iam
    for p, pool in enumerate(spec.login_nodes):
        yield f"login_nodes[{p}].iam", pool.iam


def iam_policies(spec: ClusterSpec) -> Iterator[Finding]:
    for path, iam in _iam_entries(spec):
        for i, policy in enumerate(iam.effective_policies):
            if policy.startswith("arn:") and not matches(POLICY_ARN_RE, policy):
                yield error(f"{path}.additional_policies[{i}]", "not an IAM policy ARN",
                            "e.g. arn:aws:iam::123456789012:policy/read-datasets", policy)
            elif not policy.startswith("arn:") and not matches(POLICY_NAME_RE, policy):
                yield error(f"{path}.additional_policies[{i}]", "neither a policy ARN nor the name of an "
                            "AWS-managed policy", "e.g. AmazonSSMManagedInstanceCore", policy)
