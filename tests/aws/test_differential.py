"""clusterkit against ParallelCluster 3.16's own full validation: the same verdict on every variant.

For each variant of `spec_variants.VARIANTS` (at least 200, over every spec field and every rule),
clusterkit's verdict is what `create-cluster` decides before it hands the config to ParallelCluster:
the offline rules (`validate`) and, for the variants whose scope is "account", `resolve` against the
same (moto) account. ParallelCluster's verdict is its dry run of the config clusterkit renders (the
resolved one, as a real create passes it). A spec is refused when either side reports an error.
Offline variants must be decided offline: resolve then finds nothing more.

`STRICTER` lists the few specs ParallelCluster accepts and clusterkit refuses, each with the reason the
cluster would fail anyway; both halves are checked. Hostile values are tests/cluster/test_hostile_values.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from clusterkit.cluster import load_spec_data, render_config, validate
from clusterkit.cluster.validators import CLUSTER_RULES
from clusterkit.findings import Finding, Level
from clusterkit.providers.aws.resolve import resolve

from .parallelcluster_world import ACCOUNT, RegionWorld
from .spec_variants import ACCOUNT as ACCOUNT_SCOPE
from .spec_variants import CR, OFFLINE, V, Variant, private
from .spec_variants import STRICTER as SHARED_STRICTER
from .spec_variants import VARIANTS as SHARED_VARIANTS
from .spec_variants import Stricter

pytestmark = pytest.mark.slow
MINIMUM_VARIANTS = 200

# The room clusterkit gives ParallelCluster's GPU health check (BatchStartTimeout), and the instance types of the
# 2026 training presets, through ParallelCluster's validation too.
VARIANTS: list[Variant] = [
    *SHARED_VARIANTS,
    V("batch-start-timeout-short-beside-gpu-health-check", {"slurm.custom_settings": {"BatchStartTimeout": "180"}}),
    V("batch-start-timeout-room", {"slurm.custom_settings": {"BatchStartTimeout": "720"}}),
    V("p6-b200-us-east-1", {f"{CR}.instance_type": "p6-b200.48xlarge", "subnet_id": private(2)}),  # zone c has it
    V("p5e-us-west-2", {f"{CR}.instance_type": "p5e.48xlarge", "subnet_id": private(2)}, region="us-west-2"),
    V("p6e-gb200", {f"{CR}.instance_type": "p6e-gb200.36xlarge"}),
    V("trn2u-ultraserver", {f"{CR}.instance_type": "trn2u.48xlarge"}),  # no region of ParallelCluster's offers it
]
STRICTER: list[Stricter] = [
    *SHARED_STRICTER,
    Stricter(V("batch-start-timeout-not-a-number", {"slurm.custom_settings": {"BatchStartTimeout": "ten"}}),
             "slurm.conf takes a number of seconds there: slurmctld does not start and the head node's setup fails "
             "(ParallelCluster checks only the key against its deny list)"),
]


@dataclass
class Verdicts:
    offline: list[Finding]  # clusterkit's errors before AWS is asked
    account: list[Finding]  # clusterkit's errors from resolve
    parallelcluster: list[Finding]  # ParallelCluster's errors

    @property
    def clusterkit_refuses(self) -> bool:
        return bool(self.offline or self.account)

    def __str__(self) -> str:
        def shown(findings: list[Finding]) -> list[str]:
            return [f"{f.path}: {f.message}"[:300] for f in findings]

        return (f"clusterkit offline {shown(self.offline)}, account {shown(self.account)}; "
                f"ParallelCluster {shown(self.parallelcluster)}")


def _errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.level is Level.ERROR]


def verdicts(world: Any, variant: Variant) -> Verdicts:
    spec, findings = load_spec_data(variant.data(world.region(variant.region)))
    assert spec is not None, findings  # every variant is a well-formed spec
    offline = _errors(validate(spec))
    account: list[Finding] = []
    if not offline:  # as create-cluster: resolve only what passed offline, and hand on the resolved spec
        resolution = resolve(spec, world.aws(variant.region), ACCOUNT)
        account = _errors(resolution.findings)
        if not account:  # as apply: the prerequisites stack (network, database) when the spec needs a new one
            with world.with_prerequisites(resolution, spec.name, variant.region) as placed:
                parallelcluster = _errors(world.validate(placed.name, render_config(placed), variant.region))
            return Verdicts(offline, account, parallelcluster)
        spec = resolution.spec
    parallelcluster = _errors(world.validate(spec.name, render_config(spec), variant.region))
    return Verdicts(offline, account, parallelcluster)


def _by_region(variants: list[Variant]) -> list[Variant]:
    return sorted(variants, key=lambda variant: variant.region)  # one region switch each


def test_the_matrix_is_large() -> None:
    assert len(VARIANTS) >= MINIMUM_VARIANTS
    assert len({variant.id for variant in VARIANTS + [s.variant for s in STRICTER]}) == len(VARIANTS) + len(STRICTER)


@pytest.mark.parametrize("variant", _by_region(VARIANTS), ids=lambda variant: variant.id)
def test_clusterkit_and_parallelcluster_agree(pcluster_world: Any, variant: Variant) -> None:
    result = verdicts(pcluster_world, variant)
    assert result.clusterkit_refuses == bool(result.parallelcluster), str(result)
    if variant.scope == OFFLINE:
        assert not result.account, f"decided only with the account: mark it scope=ACCOUNT. {result}"
    else:
        assert not result.offline, f"decided offline: it is not an account variant. {result}"


@pytest.mark.parametrize("stricter", sorted(STRICTER, key=lambda s: s.variant.region),
                         ids=lambda stricter: stricter.variant.id)
def test_where_clusterkit_is_stricter_the_cluster_would_fail(pcluster_world: Any, stricter: Any) -> None:
    result = verdicts(pcluster_world, stricter.variant)
    assert result.clusterkit_refuses, f"clusterkit no longer refuses ({stricter.why}): {result}"
    assert not result.parallelcluster, f"ParallelCluster refuses too now: move it to VARIANTS. {result}"


# ----- coverage of the matrix: every field, every rule (offline, without ParallelCluster) -------------


def _placeholder_world() -> RegionWorld:
    zones = [f"us-east-1{letter}" for letter in "abcdef"]
    world = RegionWorld(region="us-east-1", zones=zones, vpc="vpc-00000000",
                        public_subnets={z: f"subnet-{i:017d}" for i, z in enumerate(zones)},
                        private_subnets={z: f"subnet-{i + 10:017d}" for i, z in enumerate(zones)},
                        efs_id="fs-00000001", ebs_volume_id="vol-00000000000000001", custom_ami="ami-00000000000000001",
                        secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbCdEf",
                        resource_group_arn="arn:aws:resource-groups:us-east-1:123456789012:group/odcr")
    return world


MAP_FIELDS = ("custom_settings", "slurm_settings", "tags")  # their keys are the user's, not the spec's


def _paths(data: Any, prefix: str = "") -> set[str]:
    """Every field path in spec data, list items as `[]` (e.g. `queues[].compute[].name`)."""
    if isinstance(data, dict) and not prefix.endswith(MAP_FIELDS):
        return set().union(*(({f"{prefix}.{key}" if prefix else key}
                              | _paths(value, f"{prefix}.{key}" if prefix else key)) for key, value in data.items()))
    if isinstance(data, list):
        return set().union(*(_paths(item, f"{prefix}[]") or {f"{prefix}[]"} for item in data))
    return set()


def test_the_matrix_sets_every_field_of_the_spec() -> None:
    from tests.cluster.cluster_spec_helpers import spec_fields

    world = _placeholder_world()
    touched = set().union(*(_paths(variant.data(world)) for variant in VARIANTS))
    missing = [path for path in spec_fields() if path not in touched]
    assert missing == []


def test_the_matrix_reaches_every_rule() -> None:
    world = _placeholder_world()
    reached = set()
    for variant in VARIANTS:
        spec, _ = load_spec_data(variant.data(world))
        reached |= {finding.rule for finding in validate(spec)} if spec else set()
    assert sorted(set(CLUSTER_RULES.ids) - reached) == []


def test_account_variants_name_what_only_aws_knows() -> None:
    assert sum(variant.scope == ACCOUNT_SCOPE for variant in VARIANTS) >= 10
