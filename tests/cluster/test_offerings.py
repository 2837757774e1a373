"""The instance offerings table: what the offline checks read, and the script that regenerates it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from clusterkit import catalog, offerings

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "regenerate-instance-offerings.py"


def test_the_table_is_dated_and_covers_the_training_types() -> None:
    table = offerings.table()
    assert table.generated[:2] == "20" and len(table.generated) == 10
    assert len(table.types) > 1000 and len(table.regions) >= 20
    p4de = table.facts("p4de.24xlarge")
    assert p4de is not None and (p4de.efa_interfaces, p4de.network_cards, p4de.instance_storage_gb) == (4, 4, 8000)
    assert (p4de.accelerator, p4de.accelerator_count, p4de.accelerator_model) == ("gpu", 8, "A100")
    assert table.offered("p4de.24xlarge", "us-east-1") and not table.offered("p4de.24xlarge", "eu-west-1")
    assert table.facts("m7g.large").architecture == "arm64"
    assert table.facts("trn1.32xlarge").accelerator == "neuron"
    assert table.facts("c9.huge") is None and table.similar("p4de.24xlrge")[0] == "p4de.24xlarge"


def test_the_table_round_trips_through_its_own_format() -> None:
    table = offerings.table()
    text = offerings.format_table(table.generated, table.source, list(table.regions), list(table.types.values()))
    assert text == offerings.TABLE_FILE.read_text(encoding="utf-8")


def test_every_curated_type_is_one_value_of_the_table() -> None:
    """One set of facts: a curated type is EC2's row with the curated figures, wherever it is looked up."""
    assert set(catalog.INSTANCE_TYPES) == set(offerings.CURATED) <= set(offerings.table().names)
    for name, facts in catalog.INSTANCE_TYPES.items():
        assert facts is offerings.table().facts(name) and facts.vcpus and facts.memory_gib and facts.regions
    assert catalog.resolve_instance_type("p4de") is offerings.table().facts("p4de.24xlarge")
    trn2 = catalog.instance_type("trn2.48xlarge")
    assert (trn2.accelerator_model, trn2.neuron_cores, trn2.logical_nc_configs, trn2.processes()) == \
        ("Trainium2", 128, (2, 1), 64)


def test_a_type_outside_the_catalog_has_ec2s_facts_only() -> None:
    c7i = offerings.table().facts("c7i.large")
    assert c7i is not None and catalog.find_instance_type("c7i.large") is None
    assert (c7i.accelerator, c7i.vcpus, c7i.price_per_hour, c7i.processes()) == ("none", None, None, 1)
    assert offerings.table().facts("c5.large").accelerator == catalog.instance_type("c5.large").accelerator == "none"


@pytest.mark.slow
def test_the_script_regenerates_the_shipped_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped table is the script's output for the EC2 data moto carries (its source line says so);
    against AWS the same script asks the account's enabled regions."""
    from moto import mock_aws

    spec = importlib.util.spec_from_file_location("regenerate", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # type: ignore[union-attr]
    for variable in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(variable, raising=False)
    with mock_aws():
        import boto3

        session = boto3.Session(aws_access_key_id="offline", aws_secret_access_key="offline", region_name="us-east-1")
        skipped: list[str] = []
        regions, types = script.collect(session, log=skipped.append)
    shipped = offerings.table()
    assert shipped.source == script.moto_source()
    assert offerings.format_table(shipped.generated, shipped.source, regions, types) == \
        offerings.TABLE_FILE.read_text(encoding="utf-8")
    assert all(message.startswith("skipping ") for message in skipped)

