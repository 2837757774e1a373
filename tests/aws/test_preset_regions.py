"""Every preset in every region ParallelCluster supports (and clusterkit's instance table covers).

Where the region offers the preset's instance types, the preset goes through what `create-cluster` does
(offline rules, then `resolve` choosing a private subnet in a zone that offers them) and ParallelCluster's
own validation passes. Elsewhere clusterkit refuses it offline, naming the regions that offer the type,
and ParallelCluster refuses it too.
"""

from __future__ import annotations

from typing import Any

import pytest

from clusterkit import offerings
from clusterkit.catalog import PRESET_INSTANCE_TYPES
from clusterkit.cluster import plan_spec, preset, preset_names, render_config, spec_data
from clusterkit.cluster.validators import PARALLELCLUSTER_REGIONS
from clusterkit.findings import Level
from clusterkit.providers.aws.resolve import resolve

from .parallelcluster_world import ACCOUNT

pytestmark = pytest.mark.slow
REGIONS = sorted(set(PARALLELCLUSTER_REGIONS) & set(offerings.table().regions))
CASES = [(name, region) for name in preset_names() for region in REGIONS]


def _node_types(name: str) -> list[str]:
    spec = preset(name)
    return [spec.head_node.instance_type] + [c.instance_type for q in spec.queues for c in q.compute]


def test_the_regions_are_parallelclusters_and_every_preset_has_some() -> None:
    assert len(REGIONS) >= 20 and "us-east-1" in REGIONS
    for name in preset_names():
        assert any(offerings.table().offered(PRESET_INSTANCE_TYPES[name], region) for region in REGIONS), name


@pytest.mark.parametrize(("name", "region"), CASES, ids=[f"{name}-{region}" for name, region in CASES])
def test_preset_in_region(pcluster_world: Any, name: str, region: str) -> None:
    table = offerings.table()
    plan = plan_spec(spec_data(name, None, {"name": name, "region": region}))
    missing = [t for t in _node_types(name) if not table.offered(t, region)]
    errors = [f for f in plan.findings if f.level is Level.ERROR]
    world = pcluster_world.region(region)
    if not missing:
        assert errors == []
        resolution = resolve(plan.spec, pcluster_world.aws(region), ACCOUNT)
        assert resolution.ok, resolution.findings
        with pcluster_world.with_prerequisites(resolution, name, region) as spec:  # the accounting database's stack
            assert spec.slurm.accounting.uri and spec.head_node.additional_security_groups
            findings = pcluster_world.validate(name, render_config(spec), region)
        assert [f for f in findings if f.level is Level.ERROR] == []
        return
    for instance_type in missing:
        (error,) = [f for f in errors if f.value == instance_type]
        offered = table.regions_offering(instance_type)
        assert error.message.startswith(f"{instance_type} is not offered in {region} (it is offered in "
                                        f"{', '.join(offered)}; instance table of {table.generated})")
        assert error.rule == "cluster.instance-regions" and "--region" in error.fix
    spec = plan.spec
    spec.subnet_id = world.private(0)
    findings = pcluster_world.validate(name, render_config(spec), region)
    assert any("is not supported" in f.message for f in findings if f.level is Level.ERROR), findings
