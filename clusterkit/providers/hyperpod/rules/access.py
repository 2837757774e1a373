"""Who HyperPod's nodes act as: the execution role every instance group needs."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.findings import Finding, error
from clusterkit.providers.hyperpod.request import HyperPodDraft, account_of


def execution_role(draft: HyperPodDraft) -> Iterator[Finding]:
    role = draft.execution_role
    if not role:
        yield error("--execution-role", "HyperPod needs an execution role for every instance group",
                    "pass --execution-role arn:aws:iam::ACCOUNT:role/NAME (a role SageMaker may assume, with "
                    "AmazonSageMakerClusterInstanceRolePolicy and read access to the lifecycle bucket)")
    elif account_of(role) is None:
        yield error("--execution-role", "not an IAM role ARN", "pass arn:aws:iam::ACCOUNT:role/NAME", role)
