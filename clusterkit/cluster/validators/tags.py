"""Tags: AWS's rules for keys and values, and the prefixes AWS and ParallelCluster keep for themselves."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.spec import ClusterSpec
from clusterkit.findings import Finding, error

TAG_KEY_MAX = 128
TAG_VALUE_MAX = 256
TAG_PUNCTUATION = frozenset(" _.:/=+-@")  # AWS tags: letters, digits, spaces and these
MAX_TAGS = 40


def _tag_text_ok(text: str) -> bool:
    return all(character.isalnum() or character in TAG_PUNCTUATION for character in text)


def tags(spec: ClusterSpec) -> Iterator[Finding]:
    if len(spec.tags) > MAX_TAGS:
        yield error("tags", f"{len(spec.tags)} tags; at most {MAX_TAGS}", "drop some tags", len(spec.tags))
    for key, value in spec.tags.items():
        if not key or len(key) > TAG_KEY_MAX or key.startswith("parallelcluster:") or key.startswith("aws:"):
            yield error(f"tags.{key}", "tag keys are 1-128 characters and may not start with 'aws:' or "
                        "'parallelcluster:'", "rename the tag", key)
        elif not _tag_text_ok(key):
            yield error(f"tags.{key}", "tag keys hold letters, digits, spaces and _ . : / = + - @ only",
                        "rename the tag", key)
        if len(value) > TAG_VALUE_MAX or not _tag_text_ok(value):
            yield error(f"tags.{key}", f"tag values are at most {TAG_VALUE_MAX} letters, digits, spaces and "
                        "_ . : / = + - @", "drop the other characters", value)
