"""Port ranges of local clusters: claimed machine-wide, one owner per port even when creates race."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from clusterkit.errors import ClusterkitError
from clusterkit.providers.local import processes


def test_two_creates_claiming_overlapping_ranges_at_once_get_one_owner_each_port(tmp_path, monkeypatch):
    monkeypatch.setattr(processes, "PORT_RESERVATIONS", tmp_path / "ports")
    looked = processes.reserved_ports

    def slow_look() -> set[int]:  # widen the window between looking and claiming, where a race would fall
        seen = looked()
        time.sleep(0.05)
        return seen

    monkeypatch.setattr(processes, "reserved_ports", slow_look)
    owners = [tmp_path / f"cluster-{k}" for k in range(8)]
    for owner in owners:
        owner.mkdir()
    start, results = threading.Barrier(len(owners)), {}

    def claim(owner: Path, count: int) -> None:
        start.wait()
        try:
            processes.reserve_ports(24048, count, owner)
            results[owner] = "held"
        except ClusterkitError as error:
            results[owner] = error.message

    threads = [threading.Thread(target=claim, args=(owner, 6 + k % 2)) for k, owner in enumerate(owners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = [owner for owner, said in results.items() if said == "held"]
    assert len(held) == 1, results
    assert all("were taken by another local cluster" in said for owner, said in results.items() if owner not in held)
    (entry,) = [entry for entry in (tmp_path / "ports").iterdir() if not entry.name.startswith(".")]
    assert entry.read_text().strip() == str(held[0])


def test_a_cluster_may_claim_its_own_range_again(tmp_path, monkeypatch):
    monkeypatch.setattr(processes, "PORT_RESERVATIONS", tmp_path / "ports")
    processes.reserve_ports(24000, 6, tmp_path)
    processes.reserve_ports(24000, 6, tmp_path)
    with pytest.raises(ClusterkitError, match="ports 24000-24005 were taken"):
        processes.reserve_ports(24000, 6, tmp_path / "other")
    assert processes.reserved_ports() == set(range(24000, 24006))
