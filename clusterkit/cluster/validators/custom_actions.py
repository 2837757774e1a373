"""Custom actions (their script URLs, the events each node kind runs) and the bucket clusterkit's node scripts
are uploaded to."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.render import PLACEHOLDER_ACCOUNT, installs_docker, installs_neuron
from clusterkit.cluster.spec import DEFAULT_SCRIPTS_BUCKET, ClusterSpec, CustomActionsSpec
from clusterkit.cluster.validators.common import matches
from clusterkit.findings import Finding, error, info

SCRIPT_URL_RE = r"(s3|https)://[^\s]+"
BUCKET_RE = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"


def _script_findings(path: str, actions: CustomActionsSpec | None) -> Iterator[Finding]:
    if actions is None:
        return
    for event in ("on_node_start", "on_node_configured", "on_node_updated"):
        for s, script in enumerate(getattr(actions, event)):
            if not matches(SCRIPT_URL_RE, script.script):
                yield error(f"{path}.{event}[{s}].script", "custom action scripts must be s3:// or https:// URLs",
                            "upload the script to S3 and give its s3:// URL", script.script)


def custom_actions(spec: ClusterSpec) -> Iterator[Finding]:
    yield from _script_findings("head_node.custom_actions", spec.head_node.custom_actions)
    for q, queue in enumerate(spec.queues):
        yield from _script_findings(f"queues[{q}].custom_actions", queue.custom_actions)
        if queue.custom_actions is not None and queue.custom_actions.on_node_updated:
            yield error(f"queues[{q}].custom_actions.on_node_updated", "on_node_updated runs on the head node only "
                        "(after a cluster update); compute nodes are replaced instead",
                        "move it to head_node.custom_actions, or use on_node_configured",
                        len(queue.custom_actions.on_node_updated))


def scripts_bucket(spec: ClusterSpec) -> Iterator[Finding]:
    bucket = spec.scripts_bucket
    if bucket is not None and (not matches(BUCKET_RE, bucket) or ".." in bucket):
        yield error("scripts_bucket", "not an S3 bucket name (3-63 lower-case letters, digits, '.' and '-')",
                    "e.g. my-team-cluster-scripts", bucket)
    elif bucket is None and (spec.pyxis.enabled or installs_docker(spec)
                             or any(installs_neuron(spec, queue) for queue in spec.queues)):
        default = DEFAULT_SCRIPTS_BUCKET.format(account="ACCOUNT", region=spec.region)
        yield info("scripts_bucket", f"clusterkit's node scripts are uploaded at create to {default} (made if "
                   f"missing); until then the config names account {PLACEHOLDER_ACCOUNT}",
                   "set scripts_bucket to use a bucket of your own")
