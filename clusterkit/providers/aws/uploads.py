"""Putting clusterkit's node scripts where a cluster's nodes fetch them: one S3 bucket of the account.

The bucket is made when missing (private: every public access blocked), and each script is written
at its content-addressed key (`cluster.node_scripts`), only into a bucket this account owns. The bytes
are checked against the hash their URL names before they go. Writing the same bytes again is harmless,
so a second create (or a retry) simply uploads again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from clusterkit.errors import ClusterkitError
from clusterkit.providers.aws.access import Aws, call
from clusterkit.providers.base import Progress, quiet


def upload_node_scripts(aws: Aws, bucket: str, account: str, scripts: dict[str, str], create_bucket: bool,
                        progress: Progress = quiet) -> None:
    """Upload `scripts` (s3:// URL -> local file, as the plan holds them) into `bucket`."""
    objects = {}
    for url, path in scripts.items():
        data = Path(path).read_bytes()
        if f"/sha256-{hashlib.sha256(data).hexdigest()}/" not in url:
            raise ClusterkitError(f"node script {path} does not match {url}",
                                  fix="the installed clusterkit changed since the plan was made: plan again")
        objects[url] = data
    put_objects(aws, bucket, account, objects, create_bucket, progress)


def put_objects(aws: Aws, bucket: str, account: str, objects: dict[str, bytes], create_bucket: bool,
                progress: Progress = quiet) -> None:
    """Write `objects` (s3:// URL in `bucket` -> bytes), making the bucket first (private) when asked to."""
    if not objects:
        return
    if create_bucket:
        progress(f"creating S3 bucket {bucket} for clusterkit's node scripts")
        location = ({} if aws.region == "us-east-1"
                    else {"CreateBucketConfiguration": {"LocationConstraint": aws.region}})
        call(aws, "s3", "create_bucket", Bucket=bucket, **location)
        call(aws, "s3", "put_public_access_block", Bucket=bucket, ExpectedBucketOwner=account,
             PublicAccessBlockConfiguration={"BlockPublicAcls": True, "IgnorePublicAcls": True,
                                             "BlockPublicPolicy": True, "RestrictPublicBuckets": True})
    prefix = f"s3://{bucket}/"
    for url, data in objects.items():
        if not url.startswith(prefix):
            raise ClusterkitError(f"{url} is not in bucket {bucket}", fix="plan again")
        progress(f"uploading {url.rsplit('/', 1)[-1]} to {url}")
        call(aws, "s3", "put_object", Bucket=bucket, Key=url[len(prefix):], Body=data, ExpectedBucketOwner=account,
             ServerSideEncryption="AES256")
