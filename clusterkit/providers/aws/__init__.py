"""The `aws` provider: real clusters through AWS ParallelCluster.

    access   one boto3 session per region; AWS refusals as one clear line
    resolve  spec + account → resolved spec (subnet, reservations, key pair, storage, AMI) and findings
    backend  the ParallelCluster interface (ClusterBackend) and its pcluster.lib implementation
    cloudformation  following a CloudFormation stack, and explaining its failures
    cluster  the provider (plan / prepare / apply / open) and AwsCluster (describe / resize / delete)

boto3 and pcluster are imported inside functions only, `resolve` and `cloudformation` (import them from their
modules) only when an account is asked or a stack followed, so importing this package stays cheap.
"""

from __future__ import annotations

from clusterkit.providers.aws.access import AccessProblem, Aws, check_caller
from clusterkit.providers.aws.backend import ClusterBackend, ParallelClusterBackend
from clusterkit.providers.aws.cluster import AwsCluster, AwsProvider, resize_queue

__all__ = [
    "AccessProblem",
    "Aws",
    "AwsCluster",
    "AwsProvider",
    "ClusterBackend",
    "ParallelClusterBackend",
    "check_caller",
    "resize_queue",
]
