"""A run id that survives Slurm requeues and manual resubmission into the same run directory."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.runtime import ATTEMPT_ID_ENV, RUN_ID_ENV

RUN_ID_FILE = ".clusterkit-run-id"


@lean_dataclass(frozen=True)
class RunIdentity:
    """Who this run is: the id loggers should reuse, where its files live, how often it restarted."""

    run_id: str
    run_dir: Path
    restart_count: int


def run_identity(run_dir: str | os.PathLike[str]) -> RunIdentity:
    """Return the run's identity, creating `run_dir` and persisting the id on first use.

    The id comes from `CLUSTERKIT_RUN_ID`, else from the id already stored in `run_dir`, else from
    `SLURM_JOB_ID` (which a requeue keeps), else a fresh random one. Storing it means a job that is
    resubmitted by hand into the same directory continues the same logger run.
    """
    directory = Path(run_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stored = directory / RUN_ID_FILE
    explicit = os.environ.get(RUN_ID_ENV)
    if explicit:
        run_id = explicit
        _store_once(stored, run_id)
    elif stored.exists():
        run_id = stored.read_text().strip()
    else:
        job_id = os.environ.get("SLURM_JOB_ID")
        candidate = f"slurm-{job_id}" if job_id else f"run-{uuid.uuid4().hex[:12]}"
        run_id = _store_once(stored, candidate)
    return RunIdentity(run_id=run_id, run_dir=directory, restart_count=restart_count())


def restart_count() -> int:
    """How often Slurm requeued this job (0 on the first run)."""
    return int(os.environ.get("SLURM_RESTART_COUNT") or 0)


def attempt_id() -> str:
    """A name shared by all ranks of one attempt of a job, different after a requeue or an
    elastic restart. `CLUSTERKIT_ATTEMPT_ID` overrides it."""
    explicit = os.environ.get(ATTEMPT_ID_ENV)
    if explicit:
        return explicit
    job_id = os.environ.get("SLURM_JOB_ID", "local")
    elastic_restarts = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"{job_id}.{restart_count()}.{elastic_restarts}"


def _store_once(path: Path, run_id: str) -> str:
    """Write `run_id` to `path` unless some rank already did; return the id that is stored.

    A hard link publishes the complete file atomically and fails if the name exists, so ranks
    racing on first use all end up with the winner's id.
    """
    temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex}")
    temporary.write_text(run_id + "\n")
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass
    finally:
        temporary.unlink()
    return path.read_text().strip()
