"""What clusterkit remembers of the jobs it submitted: `clusters/NAME/jobs/JOBID.json` (+ the script).

Slurm forgets a job's log paths once it leaves the queue; these records keep them for
`clusterkit logs` and `clusterkit jobs`, across requeues and after the job ended.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, fields
from pathlib import Path

from clusterkit import registry
from clusterkit.errors import NotFound
from clusterkit.files import write_atomically
from clusterkit.lean_dataclass import lean_dataclass


@lean_dataclass
class JobRecord:
    job_id: str
    cluster: str
    name: str
    kind: str  # "spec" or "function"
    submitted: str
    stdout: str | None = None
    stderr: str | None = None
    script: str | None = None  # the exact sbatch script submitted (spec jobs)
    spec_file: str | None = None
    workdir: str | None = None
    run_state_dir: str | None = None  # the supervisor's decisions and budget (supervised jobs)
    resubmitted_from: str | None = None  # the job this one replaces (clusterkit watch --resubmit)


def jobs_dir(cluster: str) -> Path:
    return registry.cluster_dir(cluster) / "jobs"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def save(record: JobRecord, script: str | None = None) -> Path:
    """Write the record (and, given, the exact script submitted, beside it as JOBID.sbatch)."""
    directory = jobs_dir(record.cluster)
    directory.mkdir(parents=True, exist_ok=True)
    if script is not None:
        script_path = directory / f"{record.job_id}.sbatch"
        write_atomically(script_path, script)
        record.script = str(script_path)
    path = directory / f"{record.job_id}.json"
    write_atomically(path, json.dumps(asdict(record), indent=2) + "\n")
    return path


def load(cluster: str, job_id: str) -> JobRecord:
    try:
        return _record(jobs_dir(cluster) / f"{job_id}.json")
    except FileNotFoundError:
        raise NotFound(f"no job {job_id} submitted by clusterkit on cluster {cluster!r}",
                       fix="see `clusterkit jobs`") from None


def find(cluster: str, job_id: str) -> JobRecord | None:
    try:
        return load(cluster, job_id)
    except NotFound:
        return None


def all_records(cluster: str) -> list[JobRecord]:
    directory = jobs_dir(cluster)
    if not directory.is_dir():
        return []
    records = [_record(path) for path in directory.glob("*.json")]
    return sorted(records, key=lambda r: _sort_key(r.job_id))


def _sort_key(job_id: str) -> tuple[int, int]:
    base, _, task = job_id.partition("_")
    return (int(base) if base.isdigit() else 0, int(task) if task.isdigit() else -1)


def _record(path: Path) -> JobRecord:
    # Fields a record of another clusterkit version kept but this one does not know are left out.
    data = json.loads(path.read_text())
    known = {field.name for field in fields(JobRecord)}
    return JobRecord(**{key: value for key, value in data.items() if key in known})
