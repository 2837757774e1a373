"""Queue resizing of a ParallelCluster config, and the confirmation before deleting an AWS cluster."""

from __future__ import annotations

from typing import Any

import pytest

from clusterkit.cli import clusters
from clusterkit.errors import ClusterkitError
from clusterkit.providers import DeletionPlan
from clusterkit.providers.aws import resize_queue


def _config() -> dict[str, Any]:
    return {"Scheduling": {"SlurmQueues": [
        {"Name": "train", "ComputeResources": [{"Name": "p4de", "MinCount": 0, "MaxCount": 4}]},
        {"Name": "mixed", "ComputeResources": [{"Name": "a", "MinCount": 0, "MaxCount": 2},
                                               {"Name": "b", "MinCount": 0, "MaxCount": 2}]},
        {"Name": "block", "CapacityType": "CAPACITY_BLOCK",
         "ComputeResources": [{"Name": "p5", "MinCount": 2, "MaxCount": 2}]},
    ]}}


def test_resize_changes_only_the_named_queue_and_keeps_the_input() -> None:
    config = _config()
    resized = resize_queue(config, "train", max_count=16, min_count=2)
    assert resized["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0] == {"Name": "p4de", "MinCount": 2,
                                                                             "MaxCount": 16}
    assert resized["Scheduling"]["SlurmQueues"][1:] == config["Scheduling"]["SlurmQueues"][1:]
    assert config == _config()


@pytest.mark.parametrize(("arguments", "message"), [
    ({"queue": "mixed", "max_count": 4}, "queue 'mixed' has several compute resources (name one with "
                                          "--compute-resource: a, b)"),
    ({"queue": "mixed", "max_count": 4, "compute_resource": "c"}, "queue 'mixed' has no compute resource 'c'"),
    ({"queue": "block", "max_count": 4}, "a Capacity Block queue needs min-count equal to max-count"),
    ({"queue": "train", "max_count": 0}, "invalid size"),
    ({"queue": "train", "max_count": 2, "min_count": 3}, "invalid size"),
])
def test_resize_refusals(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ClusterkitError) as raised:
        resize_queue(_config(), **arguments)
    assert str(raised.value).startswith(message)


def test_resize_one_of_several_compute_resources() -> None:
    resized = resize_queue(_config(), "mixed", max_count=8, compute_resource="b")
    assert [r["MaxCount"] for r in resized["Scheduling"]["SlurmQueues"][1]["ComputeResources"]] == [2, 8]


def test_interactive_delete_asks_and_a_no_keeps_the_cluster(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    deletion = DeletionPlan("train", ("CloudFormation stack train",), ("FsxLustre 'fsx' (Retain)",), confirm=True)
    monkeypatch.setattr(clusters.sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    with pytest.raises(ClusterkitError, match="cluster 'train' not deleted"):
        clusters._confirm(deletion)
    told = capsys.readouterr().err
    assert "removes: CloudFormation stack train" in told and "keeps: FsxLustre 'fsx' (Retain)" in told
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    clusters._confirm(deletion)
