"""The cluster summary: nodes, accelerators, EFA bandwidth, FSx and the hourly cost estimate."""

from __future__ import annotations

import pytest
from tests.cluster.cluster_spec_helpers import base_data, with_fields

from clusterkit import catalog
from clusterkit.cluster import load_spec_data, preset, summarize


def test_p4de_preset_summary() -> None:
    summary = summarize(preset("p4de"))
    assert (summary.static_nodes, summary.max_nodes) == (0, 8)
    assert summary.accelerators == {"A100 80 GB": 32}
    assert summary.efa_gbps_per_node == {"p4de.24xlarge": 400}
    assert summary.efa_aggregate_gbps == 4 * 400
    assert (summary.fsx_capacity_gib, summary.fsx_throughput_mbps) == (4800, 4800 * 250 // 1024)
    head, p4de, c5 = (catalog.instance_type(t).price_per_hour for t in ("c5.9xlarge", "p4de.24xlarge", "c5.4xlarge"))
    # The prerequisites stack: a NAT gateway with its address, and the accounting database with its storage.
    assert summary.prerequisites_cost_per_hour == {"NAT gateway and its public IPv4 address": 0.05,
                                                   "accounting database (db.t4g.small, 20 GiB)": 0.035}
    assert summary.cost_per_hour_static == pytest.approx(head + 0.085, abs=0.01)
    assert summary.cost_per_hour_max == pytest.approx(head + 4 * p4de + 4 * c5 + 0.085, abs=0.01)
    assert summary.price_table_date == catalog.PRICE_TABLE_DATE
    assert any("$" in line and catalog.PRICE_TABLE_DATE in line for line in summary.lines())


def test_static_nodes_unpriced_types_and_scratch_throughput() -> None:
    spec, _ = load_spec_data(with_fields(base_data(), {
        "queues[0].compute[0].min_count": 2,
        "queues[1].compute[0].instance_type": "p5e.48xlarge",  # in the catalog, without a price
        "storage.lustre[0].deployment_type": "SCRATCH_2",
    }))
    summary = summarize(spec)
    assert summary.static_nodes == 2
    assert summary.unpriced_types == ["p5e.48xlarge"]
    assert summary.fsx_throughput_mbps == 1200 * 200 // 1024
    assert summary.accelerators == {"A100 80 GB": 16, "H200 141 GB": 80}
    assert any("no price known for: p5e.48xlarge" in line for line in summary.lines())


def test_efa_off_adds_no_bandwidth() -> None:
    spec, _ = load_spec_data(with_fields(base_data(), {"queues[0].compute[0].efa": False}))
    assert summarize(spec).efa_aggregate_gbps == 0


def test_a_spec_with_its_own_network_and_no_database_has_no_prerequisites_cost() -> None:
    spec, _ = load_spec_data(base_data())  # names its subnet; no accounting database to create
    summary = summarize(spec)
    assert summary.prerequisites_cost_per_hour == {}
    assert not any("prerequisites" in line for line in summary.lines())
    spec, _ = load_spec_data(with_fields(base_data(), {"slurm.accounting": "create"}))
    assert list(summarize(spec).prerequisites_cost_per_hour) == ["accounting database (db.t4g.small, 20 GiB)"]
