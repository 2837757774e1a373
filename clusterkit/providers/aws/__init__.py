"""The `aws` provider: real clusters through AWS ParallelCluster.

    access   one boto3 session per region; AWS refusals as one clear line
    resolve  spec + account → resolved spec (subnet, reservations, key pair, storage, AMI) and findings
    backend  the ParallelCluster interface (ClusterBackend) and its pcluster.lib implementation
    cloudformation  following a CloudFormation stack, and explaining its failures
    cluster  the provider (plan / prepare / apply / open) and AwsCluster (describe / resize / delete)

boto3 and pcluster are imported inside functions only, so importing this package stays cheap.
"""

from __future__ import annotations

from clusterkit.providers.aws.access import AccessProblem, Aws, check_caller
from clusterkit.providers.aws.backend import ClusterBackend, ParallelClusterBackend
from clusterkit.providers.aws.cloudformation import StackFailed, StackFailure, follow_stack
from clusterkit.providers.aws.cluster import AwsCluster, AwsProvider, resize_queue
from clusterkit.providers.aws.resolve import Resolution, resolve

__all__ = [
    "AccessProblem",
    "Aws",
    "AwsCluster",
    "AwsProvider",
    "ClusterBackend",
    "ParallelClusterBackend",
    "Resolution",
    "StackFailed",
    "StackFailure",
    "check_caller",
    "follow_stack",
    "resize_queue",
    "resolve",
]
