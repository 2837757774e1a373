"""SageMaker HyperPod clusters: the `hyperpod` provider.

    provider = HyperPodProvider()
    plan = provider.plan(ClusterRequest(name="train", provider="hyperpod", preset="p5",
                                        execution_role="arn:aws:iam::111122223333:role/hyperpod"))
    plan.details.request     # the exact keyword arguments of boto3's sagemaker.create_cluster, checked offline

Planning is built: the request from the same specs and presets as `aws`, HyperPod's rules and botocore's model,
the lifecycle set it would upload. Creating is not built yet: `prepare` (and so create-cluster without --dry-run)
refuses in one line, and so does opening a record.
"""

from __future__ import annotations

from clusterkit import registry
from clusterkit.cluster.loader import load_spec_data
from clusterkit.cluster.node_scripts import lifecycle_scripts
from clusterkit.cluster.plan import spec_data
from clusterkit.errors import ClusterkitError
from clusterkit.providers.base import Cluster, Progress, quiet
from clusterkit.providers.hyperpod.plan import HyperPodClusterState, HyperPodPlanDetails
from clusterkit.providers.hyperpod.request import (
    PARAMETERS_FILE,
    HyperPodDraft,
    create_cluster_request,
    lifecycle_bucket,
    lifecycle_files,
    lifecycle_parameters,
    lifecycle_prefix,
    parameters_text,
)
from clusterkit.providers.plan import ClusterPlan, ClusterRequest, Option, refuse_foreign_options
from clusterkit.registry import JsonObject

PROVIDER = "hyperpod"
NOT_BUILT = ("creating and managing HyperPod clusters is not built yet: clusterkit plans them "
             "(the CreateCluster request, its findings and the lifecycle files)")
NOT_BUILT_FIX = "see the plan with `clusterkit create-cluster --provider hyperpod ... --dry-run`"


class HyperPodProvider:
    """SageMaker HyperPod clusters with Slurm, from clusterkit's cluster specs and presets."""

    name = PROVIDER
    options = (Option("preset", "--preset"), Option("spec_file", "--file"), Option("region", "--region"),
               Option("subnet_id", "--subnet-id"), Option("execution_role", "--execution-role"),
               Option("output_config", "--output-config"))

    def plan(self, request: ClusterRequest) -> ClusterPlan[HyperPodPlanDetails]:
        """The CreateCluster request, HyperPod's findings and the lifecycle set, from the request alone."""
        refuse_foreign_options(self, request.given())
        overrides = {path: value for path, value in (("name", request.name), ("region", request.region),
                                                     ("subnet_id", request.subnet_id)) if value is not None}
        spec, findings = load_spec_data(spec_data(request.preset, request.spec_file, overrides))
        if spec is None:
            return ClusterPlan(PROVIDER, request.name, HyperPodPlanDetails(), tuple(findings))
        from clusterkit.providers.hyperpod.rules import check  # lazy: the rules read botocore's model

        parameters = lifecycle_parameters(spec)
        bucket = lifecycle_bucket(spec, request.execution_role)
        files = lifecycle_files(parameters)
        prefix = lifecycle_prefix(bucket, files)
        create = create_cluster_request(spec, request.execution_role, prefix)
        findings += check(HyperPodDraft(spec, request.execution_role, create, bucket))
        parameters_file = registry.cluster_dir(spec.name) / PARAMETERS_FILE
        shipped = {name: str(path) for name, path in lifecycle_scripts().items()}
        uploads = {prefix + name: shipped.get(name, str(parameters_file)) for name in sorted(files)}
        details = HyperPodPlanDetails(spec=spec, region=spec.region, request=create, lifecycle_uri=prefix,
                                      uploads=uploads)
        return ClusterPlan(PROVIDER, spec.name, details, tuple(findings),
                           files={str(parameters_file): parameters_text(parameters)},
                           actions=(f"check the AWS caller (sts get-caller-identity) in {spec.region}",
                                    "find the FSx for Lustre file system's DNS and mount names "
                                    "(fsx describe-file-systems)",
                                    *(f"upload {name} to {prefix}{name}" for name in sorted(files)),
                                    "call sagemaker create_cluster with create_cluster_request and follow it to "
                                    "InService"))

    def prepare(self, plan: ClusterPlan[HyperPodPlanDetails],
                progress: Progress = quiet) -> ClusterPlan[HyperPodPlanDetails]:
        raise ClusterkitError(NOT_BUILT, fix=NOT_BUILT_FIX)

    def apply(self, plan: ClusterPlan[HyperPodPlanDetails], progress: Progress = quiet) -> Cluster:
        raise ClusterkitError(NOT_BUILT, fix=NOT_BUILT_FIX)

    def read_state(self, record: registry.ClusterRecord[JsonObject]) -> registry.ClusterRecord[HyperPodClusterState]:
        return registry.ClusterRecord(record.name, record.provider, record.created,
                                      HyperPodClusterState.from_json(record.details))

    def open(self, record: registry.ClusterRecord[HyperPodClusterState]) -> Cluster:
        raise ClusterkitError(NOT_BUILT, fix=NOT_BUILT_FIX)
