"""Submitting work to a cluster: job specs (our rendered sbatch script) and Python callables (submitit).

A job spec goes to Slurm as exactly the script `render_sbatch` shows in a dry run. A Python callable
goes through submitit, which pickles it, runs it on the nodes and brings its return value back. Both
give a JobHandle that follows requeues.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, Level
from clusterkit.jobs import records
from clusterkit.jobs.handle import JobHandle
from clusterkit.jobs.spec import JobSpec
from clusterkit.jobs.tracking import tracker_for
from clusterkit.providers import resolve_cluster_name, slurm_for


class PreflightFailed(ClusterkitError):
    def __init__(self, findings: list[Finding]) -> None:
        errors = [f for f in findings if f.level is Level.ERROR]
        super().__init__(f"preflight found {len(errors)} problem(s): " + "; ".join(str(f) for f in errors),
                         fix="fix them, or submit with --no-preflight to skip the checks")
        self.findings = findings


def submit_job(spec: JobSpec, cluster: str | None = None, *, workdir: str | Path | None = None,
               preflight: bool = True, spec_file: str | None = None) -> JobHandle:
    """Render `spec`, check the cluster can run it, and submit the script with sbatch."""
    from clusterkit.jobs import preflight as checks
    from clusterkit.jobs.render import render_sbatch

    name = resolve_cluster_name(cluster or spec.cluster)
    slurm = slurm_for(name)
    workdir = Path(workdir or spec.workdir or os.getcwd()).resolve()
    script = render_sbatch(spec)
    if preflight:
        findings = checks.preflight(spec, slurm, workdir)
        if any(f.level is Level.ERROR for f in findings):
            raise PreflightFailed(findings)
    for _, directory in checks.log_directories(spec, workdir):
        directory.mkdir(parents=True, exist_ok=True)
    state_dir = str(workdir / spec.checkpoint_dir / ".clusterkit") if spec.supervise and spec.checkpoint_dir else None
    record = records.JobRecord(job_id="", cluster=name, name=spec.name, kind="spec", submitted="",
                               spec_file=spec_file, workdir=str(workdir), run_state_dir=state_dir)
    return submit_script(record, script)


def submit_script(record: records.JobRecord, script: str, *extra_sbatch_args: str) -> JobHandle:
    """sbatch `script` in `record.workdir`; fill in and save the record (id, logs, the script)."""
    slurm = slurm_for(record.cluster)
    record.job_id = slurm.sbatch(script, f"--chdir={record.workdir}", *extra_sbatch_args)
    record.submitted = records.now()
    details = slurm.job_details(record.job_id)
    record.stdout = details.get("StdOut") or None
    record.stderr = details.get("StdErr") or record.stdout
    script_path = records.jobs_dir(record.cluster) / f"{record.job_id}.sbatch"
    records.jobs_dir(record.cluster).mkdir(parents=True, exist_ok=True)
    script_path.write_text(script)
    record.script = str(script_path)
    records.save(record)
    return handle_from_record(record)


def _executor(cluster: str, nodes: int, tasks_per_node: int, gpus_per_node: int, cpus_per_task: int,
              time_minutes: int, name: str, slurm_parameters: dict[str, Any] | None, python: str | None,
              srun_args: tuple[str, ...], preflight: bool) -> Any:
    import submitit

    from clusterkit.jobs.preflight import check_callable_runtime

    # By default the nodes run the callable with this very interpreter: same packages, same paths.
    python = python or sys.executable
    if preflight:
        findings = check_callable_runtime(slurm_for(cluster), python, srun_args)
        if findings:
            raise PreflightFailed(findings)
    folder = records.jobs_dir(cluster) / "submitit" / "%j"
    executor = submitit.SlurmExecutor(folder=folder, python=python)
    parameters: dict[str, Any] = dict(nodes=nodes, ntasks_per_node=tasks_per_node, cpus_per_task=cpus_per_task,
                                      time=time_minutes, job_name=name)
    if gpus_per_node:
        parameters["gpus_per_node"] = gpus_per_node
    if srun_args:
        parameters["srun_args"] = list(srun_args)  # e.g. pyxis: --container-image=/fsx/img.sqsh
    parameters.update(slurm_parameters or {})
    executor.update_parameters(**parameters)
    return executor


def _function_handle(cluster: str, job: Any, name: str) -> JobHandle:
    record = records.JobRecord(job_id=str(job.job_id), cluster=cluster, name=name, kind="function",
                               submitted=records.now(), stdout=str(job.paths.stdout), stderr=str(job.paths.stderr))
    records.save(record)
    return handle_from_record(record, submitit_job=job)


def submit_function(function: Callable[..., Any], *args: Any, cluster: str | None = None, nodes: int = 1,
                    tasks_per_node: int = 1, gpus_per_node: int = 0, cpus_per_task: int = 1,
                    time_minutes: int = 60, name: str | None = None,
                    slurm_parameters: dict[str, Any] | None = None, python: str | None = None,
                    srun_args: tuple[str, ...] = (), preflight: bool = True, **kwargs: Any) -> JobHandle:
    """Run `function(*args, **kwargs)` as a Slurm job; `handle.result()` returns its value.

    `python` is the interpreter on the nodes (default: this one); `srun_args` go to srun, e.g. pyxis
    flags to run it in a container. The preflight runs that interpreter once on a node, the same way,
    and checks it can import submitit and cloudpickle with this Python's version.
    """
    cluster = resolve_cluster_name(cluster)
    slurm = slurm_for(cluster)
    name = name or getattr(function, "__name__", "function")
    executor = _executor(cluster, nodes, tasks_per_node, gpus_per_node, cpus_per_task, time_minutes, name,
                         slurm_parameters, python, tuple(srun_args), preflight)
    with slurm.environment():
        job = executor.submit(function, *args, **kwargs)
    return _function_handle(cluster, job, name)


def map_array(function: Callable[[Any], Any], items: Iterable[Any], *, cluster: str | None = None,
              cpus_per_task: int = 1, gpus_per_node: int = 0, time_minutes: int = 60, name: str | None = None,
              slurm_parameters: dict[str, Any] | None = None, python: str | None = None,
              srun_args: tuple[str, ...] = (), preflight: bool = True) -> list[JobHandle]:
    """A sweep as one job array (one sbatch call): one task per item, one handle per task."""
    cluster = resolve_cluster_name(cluster)
    slurm = slurm_for(cluster)
    name = name or getattr(function, "__name__", "sweep")
    executor = _executor(cluster, 1, 1, gpus_per_node, cpus_per_task, time_minutes, name, slurm_parameters,
                         python, tuple(srun_args), preflight)
    with slurm.environment():
        jobs = executor.map_array(function, list(items))
    return [_function_handle(cluster, job, name) for job in jobs]


def handle_from_record(record: records.JobRecord, submitit_job: Any = None) -> JobHandle:
    slurm = slurm_for(record.cluster)
    return JobHandle(record.job_id, record.cluster, tracker_for(slurm),
                     stdout_path=Path(record.stdout) if record.stdout else None,
                     stderr_path=Path(record.stderr) if record.stderr else None, submitit_job=submitit_job)


def job_handle(job_id: str, cluster: str | None = None) -> JobHandle:
    """A handle for a job submitted earlier (by clusterkit or not) on a cluster."""
    cluster = resolve_cluster_name(cluster)
    record = records.find(cluster, job_id)
    if record is None:
        details = slurm_for(cluster).job_details(job_id)
        record = records.JobRecord(job_id=job_id, cluster=cluster, name=details.get("JobName", ""), kind="external",
                                   submitted="", stdout=details.get("StdOut"), stderr=details.get("StdErr"))
    return handle_from_record(record)
