"""Where HyperPod fetches the lifecycle scripts: a bucket whose name starts with sagemaker-."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.findings import Finding, error
from clusterkit.providers.hyperpod.request import LIFECYCLE_BUCKET_PREFIX, HyperPodDraft


def lifecycle_bucket(draft: HyperPodDraft) -> Iterator[Finding]:
    if not draft.bucket.startswith(LIFECYCLE_BUCKET_PREFIX):
        yield error("scripts_bucket", f"HyperPod reads lifecycle scripts only from buckets named "
                    f"{LIFECYCLE_BUCKET_PREFIX}*", f"name a bucket {LIFECYCLE_BUCKET_PREFIX}..., or leave "
                    "scripts_bucket out (clusterkit's own: sagemaker-clusterkit-ACCOUNT-REGION)", draft.bucket)
