"""The request against botocore's model of CreateCluster: types, required members, ranges, enums, patterns."""

from __future__ import annotations

import re
from collections.abc import Iterator

from clusterkit.findings import Finding, error
from clusterkit.providers.hyperpod import model
from clusterkit.providers.hyperpod.request import HyperPodDraft


def create_cluster_model(draft: HyperPodDraft) -> Iterator[Finding]:
    for problem in model.problems("CreateCluster", draft.request):
        if re.fullmatch(r"InstanceGroups\[\d+\]\.InstanceType", problem.path):
            continue  # instances.hyperpod_instance_types names the spec field, with HyperPod's types of the family
        yield error(f"create_cluster_request.{problem.path}", f"SageMaker's model refuses it: {problem.message}",
                    "change the spec field it comes from")
