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


@pytest.mark.parametrize("name", sorted(catalog.INSTANCE_TYPES))
def test_the_catalog_agrees_with_the_table(name: str) -> None:
    """One set of facts: the curated catalog (accelerators, prices) says what EC2 says."""
    curated, facts = catalog.INSTANCE_TYPES[name], offerings.table().facts(name)
    assert facts is not None
    assert curated.efa_interfaces == facts.efa_interfaces
    assert curated.nvme_gb == facts.instance_storage_gb
    assert curated.accelerator_count == facts.accelerator_count
    assert (curated.accelerator if curated.accelerator != "none" else "") == facts.accelerator


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

