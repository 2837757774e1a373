"""clusterkit: train large models on AWS with Slurm.

The names a notebook needs, at the top:

    import clusterkit
    cluster = clusterkit.connect("research", "me@login.example.com")       # or open_cluster("dev")
    dev = clusterkit.create_cluster(clusterkit.ClusterRequest("dev", provider="local", nodes=2))
    job = clusterkit.submit("jobs/train.yaml", cluster="research")         # a spec file, dict or JobSpec
    job = clusterkit.submit_function(train, 200, cluster="research")       # a Python function
    jobs = clusterkit.map_array(evaluate, range(20), cluster="research")   # a sweep, one job array
    job.wait(progress=True); job.result(); job.status(); clusterkit.job("42", cluster="research")

Kept import-light on purpose: these names load their modules when first used, so `import
clusterkit` (and `clusterkit --help`) pull in no boto3, submitit or jinja2.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name -> "module:attribute", imported on first use.
_LAZY = {
    "submit": "clusterkit.jobs.submit:submit",
    "submit_function": "clusterkit.jobs.submit:submit_function",
    "map_array": "clusterkit.jobs.submit:map_array",
    "job": "clusterkit.jobs.submit:job_handle",
    "plan_job": "clusterkit.jobs.plan:plan_job",
    "open_cluster": "clusterkit.providers:open_cluster",
    "create_cluster": "clusterkit.providers:create_cluster",
    "ClusterRequest": "clusterkit.providers.plan:ClusterRequest",
    "connect": "clusterkit.providers.ssh:connect",
    "CheckpointManager": "clusterkit.resilience.checkpoint:CheckpointManager",
    "heartbeat": "clusterkit.resilience.heartbeat:heartbeat",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    try:
        module, _, attribute = _LAZY[name].partition(":")
    except KeyError:
        raise AttributeError(f"module 'clusterkit' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
