"""Monitoring: CloudWatch log retention."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.spec import ClusterSpec
from clusterkit.findings import Finding, error

LOG_RETENTION_DAYS = (0, 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653)


def monitoring(spec: ClusterSpec) -> Iterator[Finding]:
    days = spec.monitoring.log_retention_days
    if days not in LOG_RETENTION_DAYS:
        yield error("monitoring.log_retention_days", f"CloudWatch keeps logs for set periods, not {days} days",
                    f"use one of {', '.join(map(str, LOG_RETENTION_DAYS))}", days)
