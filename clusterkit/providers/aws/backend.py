"""The ParallelCluster edge: a small interface, and the real one built on `pcluster.lib`.

`ClusterBackend` is what the AWS provider needs from ParallelCluster; tests put a fake in its place.
The real one imports `pcluster` (the `validate` extra, ~0.5 s) only when called; creating and
updating need Node.js on PATH, which ParallelCluster's CDK uses to build the stack.
"""

from __future__ import annotations

import shutil
from typing import Any, Protocol

from clusterkit.errors import ClusterkitError, MissingDependency
from clusterkit.findings import Finding, error, has_errors, info, warning
from clusterkit.registry import JsonObject

Config = JsonObject  # a ParallelCluster configuration, as its YAML reads


class ClusterBackend(Protocol):
    def dry_run(self, name: str, config: Config, region: str, suppress: tuple[str, ...] = ()) -> list[Finding]:
        """ParallelCluster's full validation of a config against the account; errors are findings.
        `suppress`: names of ParallelCluster validators not to run."""

    def create(self, name: str, config: Config, region: str) -> str:
        """Start creating the cluster; returns its CloudFormation stack id."""

    def describe(self, name: str, region: str) -> dict[str, Any] | None:
        """ParallelCluster's view: clusterStatus, cloudFormationStackStatus, headNode, instances; None if gone."""

    def update(self, name: str, config: Config, region: str) -> str:
        """Start updating the cluster to `config`; returns the stack id."""

    def delete(self, name: str, region: str) -> None:
        """Start deleting the cluster."""


class ParallelClusterBackend:
    """ClusterBackend through the `pcluster.lib` Python API of aws-parallelcluster 3.16."""

    def dry_run(self, name: str, config: Config, region: str, suppress: tuple[str, ...] = ()) -> list[Finding]:
        check_node()  # fail before the checks, not after them at create
        lib = _pcluster_lib()
        from pcluster.api.errors import DryrunOperationException

        suppressed = {"suppress_validators": [f"type:{validator}" for validator in suppress]} if suppress else {}
        try:
            lib.create_cluster(cluster_name=name, cluster_configuration=config, region=region, dryrun=True,
                               **suppressed)
        except DryrunOperationException as success:  # ParallelCluster's way of saying "would succeed"
            return _findings(_content(success).get("validation_messages"))
        except Exception as error:  # noqa: BLE001 - every pcluster API error carries its content
            return _rejection(error)
        raise ClusterkitError("ParallelCluster's dry run created nothing and reported nothing",
                              fix="report this: aws-parallelcluster may have changed its API")

    def create(self, name: str, config: Config, region: str) -> str:
        check_node()
        lib = _pcluster_lib()
        try:
            result = lib.create_cluster(cluster_name=name, cluster_configuration=config, region=region,
                                        rollback_on_failure=False)
        except Exception as error:  # noqa: BLE001
            raise _as_error(error, f"ParallelCluster did not start creating {name!r}") from None
        return result["cluster"]["cloudformationStackArn"]

    def describe(self, name: str, region: str) -> dict[str, Any] | None:
        lib = _pcluster_lib()
        from pcluster.api.errors import NotFoundException

        try:
            cluster = lib.describe_cluster(cluster_name=name, region=region)
            instances = lib.describe_cluster_instances(cluster_name=name, region=region).get("instances", [])
        except NotFoundException:
            return None
        except Exception as error:  # noqa: BLE001
            raise _as_error(error, f"cannot describe cluster {name!r} in {region}") from None
        return {**cluster, "instances": instances}

    def update(self, name: str, config: Config, region: str) -> str:
        check_node()
        lib = _pcluster_lib()
        try:
            result = lib.update_cluster(cluster_name=name, cluster_configuration=config, region=region)
        except Exception as error:  # noqa: BLE001
            raise _as_error(error, f"ParallelCluster refused to update {name!r}") from None
        return result["cluster"]["cloudformationStackArn"]

    def delete(self, name: str, region: str) -> None:
        lib = _pcluster_lib()
        try:
            lib.delete_cluster(cluster_name=name, region=region)
        except Exception as error:  # noqa: BLE001
            raise _as_error(error, f"ParallelCluster did not start deleting {name!r}") from None


def check_node() -> None:
    if shutil.which("node") is None:
        raise MissingDependency("ParallelCluster needs Node.js (`node` on PATH) to build the cluster's stack",
                                fix="install Node.js 18 or newer (e.g. `apt-get install nodejs`), then retry")


def _pcluster_lib() -> Any:
    try:
        import pcluster.lib as lib
    except ImportError:
        raise MissingDependency("aws-parallelcluster is not installed",
                                fix="pip install 'clusterkit[validate]'") from None
    import logging  # here, not at the top: a dry run never gets this far and need not load it

    # ParallelCluster logs each failed AWS call, and Python's last-resort handler would print that beside
    # clusterkit's own one-line error: its logger gets a handler that drops them (one, however often called).
    pcluster_logger = logging.getLogger("pcluster")
    if not any(isinstance(handler, logging.NullHandler) for handler in pcluster_logger.handlers):
        pcluster_logger.addHandler(logging.NullHandler())
    return lib


def _content(error: BaseException) -> dict[str, Any]:
    # API errors carry `content`; errors of pcluster.lib's own argument checks (a cluster name its
    # pattern refuses, say) carry `data`, e.g. {"message": "Bad Request: ..."}.
    content = getattr(error, "content", None)
    if content is None:
        content = getattr(error, "data", None)
    if content is None:
        return {}
    if hasattr(content, "to_dict"):
        content = content.to_dict()
    return content if isinstance(content, dict) else {"message": str(content)}


def _findings(messages: list[dict[str, Any]] | None) -> list[Finding]:
    builders = {"ERROR": error, "WARNING": warning}  # ParallelCluster's INFO, and any level it adds: a note
    return [builders.get(str(m.get("level")).upper(), info)(f"parallelcluster.{m.get('type') or 'config'}",
                                                           str(m.get("message", ""))) for m in messages or []]


def _rejection(refusal: BaseException) -> list[Finding]:
    """ParallelCluster's refusal as findings: its validators' errors, or its one message."""
    content = _content(refusal)
    if not content:
        raise _as_error(refusal, "ParallelCluster's dry run failed")
    findings = _findings(content.get("configuration_validation_errors"))
    if not has_errors(findings):
        findings.append(error("parallelcluster", str(content.get("message") or refusal)))
    return findings


def _as_error(error: BaseException, doing: str) -> ClusterkitError:
    content = _content(error)
    message = content.get("message") or str(error) or type(error).__name__
    # Config errors carry a level; update errors (a change ParallelCluster cannot apply now) do not.
    problems = [m for m in content.get("configuration_validation_errors") or []
                if str(m.get("level")).upper() == "ERROR"] + list(content.get("update_validation_errors") or [])
    errors = "; ".join(str(m.get("message")) for m in problems)
    fix = ("run `aws configure` or set AWS_PROFILE, then retry"
           if "credentials" in str(message).lower() else "")
    return ClusterkitError(f"{doing}: {message}" + (f": {errors}" if errors else ""), fix=fix)
