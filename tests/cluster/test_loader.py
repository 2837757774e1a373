"""The spec loader: findings that name the field, never a crash, and examples equal to the presets."""

from __future__ import annotations

import dataclasses

import pytest
from tests.cluster.cluster_spec_helpers import base_data, set_field
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterkit.cluster import load_spec_data, load_spec_file, load_spec_text, preset, preset_names, render, validate
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, Level
from clusterkit.resources import cluster_configs_dir


def test_loads_a_valid_spec_with_defaults() -> None:
    spec, findings = load_spec_data(base_data())
    assert findings == []
    assert spec is not None
    assert spec.queues[0].compute[0].effective_min_count == 0
    assert spec.queues[0].compute[0].efa_enabled  # p4de has EFA, so the default is on
    assert not spec.queues[1].compute[0].efa_enabled


def test_unknown_key_names_the_field_and_suggests() -> None:
    data = set_field(base_data(), "queues[0].compute[0].instanc_type", "p5.48xlarge")
    spec, findings = load_spec_data(data)
    assert spec is None
    (finding,) = findings
    assert finding.path == "queues[0].compute[0].instanc_type"
    assert "unknown key" in finding.message
    assert finding.fix == "did you mean 'instance_type'?"


def test_wrong_types_are_all_reported() -> None:
    data = set_field(base_data(), "queues[0].compute[0].max_count", "four")
    data = set_field(data, "storage.lustre[0].storage_capacity_gib", True)
    data = set_field(data, "tags", ["a"])
    _, findings = load_spec_data(data)
    by_path = {f.path: f for f in findings}
    assert "expected a whole number, got str 'four'" in by_path["queues[0].compute[0].max_count"].message
    assert "expected a whole number, got bool" in by_path["storage.lustre[0].storage_capacity_gib"].message
    assert "expected a mapping" in by_path["tags"].message
    assert all(f.level is Level.ERROR for f in findings)


def test_missing_required_key() -> None:
    data = base_data()
    del data["queues"][0]["compute"][0]["instance_type"]
    _, findings = load_spec_data(data)
    assert [(f.path, f.message) for f in findings] == [
        ("queues[0].compute[0].instance_type", "missing required key 'instance_type'")]


def test_not_a_mapping() -> None:
    spec, findings = load_spec_data(["p4de"])
    assert spec is None and findings[0].path == "<spec>" and "expected a mapping" in findings[0].message


def test_yaml_syntax_error_is_a_clusterkit_error() -> None:
    with pytest.raises(ClusterkitError, match="bad.yaml: line 3, column 3: not valid YAML"):
        load_spec_text("name: x\nqueues: [\n  - :", "bad.yaml")


def test_numbers_in_string_maps_become_text() -> None:
    spec, _ = load_spec_data(set_field(base_data(), "slurm.custom_settings", {"RequeueExit": 42, "X": True}))
    assert spec is not None and spec.slurm.custom_settings == {"RequeueExit": "42", "X": "true"}


@pytest.mark.parametrize("name", preset_names())
def test_example_file_is_the_preset(name: str) -> None:
    spec, findings = load_spec_file(cluster_configs_dir() / f"{name}.yaml")
    assert findings == []
    assert spec == preset(name)


def test_every_preset_has_an_example_and_readme_entry() -> None:
    readme = (cluster_configs_dir() / "README.md").read_text()
    for name in preset_names():
        assert (cluster_configs_dir() / f"{name}.yaml").is_file()
        assert f"`{name}.yaml`" in readme


# --- fuzzing: any input gives findings, never an exception ---------------------------------------

_KEYS = sorted({f.name for f in dataclasses.fields(ClusterSpec)} | {
    "compute", "instance_type", "min_count", "max_count", "efa", "lustre", "efs", "mount_dir", "file_system_id",
    "storage_capacity_gib", "deployment_type", "placement_group", "enabled", "id", "capacity_type",
})
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                     st.text(max_size=30), st.sampled_from(["p4de.24xlarge", "/fsx", "PERSISTENT_2", "SPOT"]))
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(_KEYS), st.text(max_size=10), st.integers()), children,
                        max_size=5),
    ),
    max_leaves=25,
)


def _check(data: object) -> None:
    spec, findings = load_spec_data(data)
    assert all(isinstance(f, Finding) for f in findings)
    if spec is None:
        assert any(f.level is Level.ERROR for f in findings)
        return
    for finding in validate(spec):
        assert isinstance(finding, Finding) and finding.path
    assert isinstance(render(spec), str)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
def test_fuzz_arbitrary_data(data: object) -> None:
    _check(data)


_LEAF_PATHS = [
    "name", "region", "os", "subnet_id", "ssh.allowed_cidr", "queues[0].name", "queues[0].capacity_type",
    "queues[0].subnet_ids", "queues[0].compute[0].instance_type", "queues[0].compute[0].min_count",
    "queues[0].compute[0].max_count", "queues[0].compute[0].efa", "queues[0].placement_group",
    "storage.lustre[0].storage_capacity_gib", "storage.lustre[0].mount_dir", "storage.lustre[0].deployment_type",
    "storage.lustre[0].data_repository_associations", "slurm.custom_settings", "tags", "pyxis.enroot_dir",
    "storage.efs", "monitoring.log_retention_days",
]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_LEAF_PATHS), _values), min_size=1, max_size=3))
def test_fuzz_near_valid_specs(changes: list[tuple[str, object]]) -> None:
    data = base_data()
    for path, value in changes:
        data = set_field(data, path, value)
    _check(data)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=200), st.sampled_from(["name: [", "a: !!python/object:os.system x", "- - -", "{"])))
def test_fuzz_yaml_text(text: str) -> None:
    try:
        spec, findings = load_spec_text(text)
    except ClusterkitError as error:  # refused in one line: bad YAML, or YAML a spec never needs
        assert "\n" not in str(error) and error.message.startswith("<spec>: ")
        return
    assert spec is not None or findings


def test_spec_dataclasses_round_trip_through_the_loader() -> None:
    original = preset("p5")
    spec, findings = load_spec_data(dataclasses.asdict(original))
    assert findings == [] and spec == original
