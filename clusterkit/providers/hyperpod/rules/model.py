"""The requests against botocore's models: SageMaker's CreateCluster and, for a new file system, FSx's
CreateFileSystem (types, required members, ranges, enums, patterns)."""

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


def create_file_system_model(draft: HyperPodDraft) -> Iterator[Finding]:
    if draft.file_system_request is None:
        return
    for problem in model.problems("CreateFileSystem", draft.file_system_request, service="fsx"):
        fix = ("give --subnet-id a subnet's id (subnet- and 8 or 17 hex digits)" if problem.path.startswith("SubnetIds")
               else "change the storage.lustre[0] field (or tag) it comes from")
        yield error(f"create_file_system_request.{problem.path}", f"FSx's model refuses it: {problem.message}", fix)
