"""Job records: what clusterkit keeps about a submitted job, read back by status, logs and watch."""

from __future__ import annotations

import json

from clusterkit.jobs import records


def test_a_record_from_another_version_still_loads(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path))
    record = records.JobRecord(job_id="41", cluster="old", name="train", kind="spec", submitted=records.now(),
                               stdout="/fsx/logs/train_41.out")
    path = records.save(record)
    data = json.loads(path.read_text())
    data["output_pattern"] = "logs/%x_%j.out"  # a field an earlier clusterkit kept
    path.write_text(json.dumps(data))
    assert records.load("old", "41") == record
    assert records.all_records("old") == [record]
