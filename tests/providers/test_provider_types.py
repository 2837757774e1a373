"""No dict[str, Any] crosses the provider interface: every public method of every provider and cluster class,
and every dataclass they take or return (plans, details, saved state, infos, nodes, resize results), is typed."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from typing import Any, ForwardRef, TypeVar

import pytest

from clusterkit.providers import PROVIDERS
from clusterkit.providers.base import Cluster, Provider
from clusterkit.providers.existing import ExistingCluster

CLUSTERS = ["clusterkit.providers.aws.cluster:AwsCluster", "clusterkit.providers.local.cluster:LocalCluster",
            "clusterkit.providers.hyperpod.cluster:HyperPodCluster",
            "clusterkit.providers.existing:ExistingCluster"]


def _load(where: str) -> type:
    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)


def _hints(target: Any) -> dict[str, Any]:
    module = importlib.import_module(target.__module__)
    namespace = dict(vars(module))
    for name in ("ClusterPlan", "ClusterRequest", "Option", "PlanDetails"):
        namespace.setdefault(name, getattr(importlib.import_module("clusterkit.providers.plan"), name))
    for name in ("ClusterRecord", "SavedState", "JsonObject", "JsonValue"):
        namespace.setdefault(name, getattr(importlib.import_module("clusterkit.registry"), name))
    for name in ("Slurm", "NodeInfo", "Flavor"):
        namespace.setdefault(name, getattr(importlib.import_module("clusterkit.slurm"), name))
    namespace.setdefault("SshTarget", importlib.import_module("clusterkit.transport").SshTarget)
    return typing.get_type_hints(target, globalns=namespace)


def _untyped(hint: Any, where: str, seen: set[Any]) -> list[str]:
    """Where `hint` holds Any (a dict[str, Any] among them), walking into the dataclasses it names."""
    if hint is Any:
        return [where]
    if isinstance(hint, list):  # Callable's argument list
        return [found for inner in hint for found in _untyped(inner, where, seen)]
    if isinstance(hint, (ForwardRef, TypeVar, str)) or hint in seen:
        return []
    seen.add(hint)
    if dataclasses.is_dataclass(hint):
        return [found for name, inner in _hints(hint).items() for found in _untyped(inner, f"{where}.{name}", seen)]
    return [found for inner in typing.get_args(hint) for found in _untyped(inner, where, seen)]


def _surface(cls: type) -> list[tuple[str, Any]]:
    found = []
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or name == "to_dict":
            continue
        if inspect.isfunction(member) or inspect.ismethod(member):
            found += [(f"{cls.__name__}.{name}({arg})", hint) for arg, hint in _hints(member).items()]
        elif isinstance(member, property) and member.fget is not None:
            found += [(f"{cls.__name__}.{name}", hint) for hint in _hints(member.fget).values()]
    return found


@pytest.mark.parametrize("where", [*PROVIDERS.values(), *CLUSTERS])
def test_no_any_crosses_the_provider_interface(where: str) -> None:
    surface = _surface(_load(where))
    assert surface  # the walk sees the methods
    seen: set[Any] = set()
    assert [found for name, hint in surface for found in _untyped(hint, name, seen)] == []


def test_the_protocols_are_typed_too() -> None:
    seen: set[Any] = set()
    assert [found for cls in (Provider, Cluster) for name, hint in _surface(cls)
            for found in _untyped(hint, name, seen)] == []


def test_the_walk_finds_a_dict_of_any() -> None:
    @dataclasses.dataclass
    class Loose:
        details: dict[str, Any]

    assert _untyped(Loose, "Loose", set()) == ["Loose.details"]


def test_a_record_reads_back_into_its_providers_state(tmp_path, monkeypatch) -> None:
    from clusterkit import registry
    from clusterkit.providers import open_cluster
    from clusterkit.providers.aws.cluster import AwsCluster
    from clusterkit.providers.aws.plan import AwsClusterState

    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path))
    registry.save(registry.ClusterRecord("train", "aws", "2026-11-30T00:00:00+00:00",
                                         AwsClusterState(region="us-east-1", config_file="x", stack_id="s")))
    cluster = open_cluster("train")
    assert isinstance(cluster, AwsCluster) and cluster.state == AwsClusterState("us-east-1", "x", "s")
    assert cluster.stack_name == "train"


def test_a_damaged_record_is_one_line_naming_the_fix(tmp_path, monkeypatch) -> None:
    from clusterkit import registry
    from clusterkit.errors import ClusterkitError
    from clusterkit.providers import open_cluster

    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path))
    registry.save(registry.ClusterRecord("far", "ssh", "2026-11-30T00:00:00+00:00", {"python": "python3"}))
    with pytest.raises(ClusterkitError) as raised:
        open_cluster("far")
    assert "the record of ssh cluster 'far' is damaged" in raised.value.message and "remove" in raised.value.fix


def test_this_machines_slurm_and_a_connected_one_are_one_class(monkeypatch) -> None:
    from clusterkit.providers import open_cluster

    monkeypatch.setattr("clusterkit.registry.exists", lambda name: False)
    host = open_cluster("host")
    assert type(host) is ExistingCluster and host.runs_dir() is None and not host.transport.remote
