"""Submitting work to a cluster: job specs (their plan's script) and Python callables (submitit).

A job spec is planned (`jobs.plan.plan_job`) and goes to Slurm as exactly the script of its plan,
which is what a dry run shows. A Python callable goes through submitit, which pickles it, runs it on
the nodes and brings its return value back. Both give a JobHandle that follows requeues.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from clusterkit.jobs import records
from clusterkit.jobs.handle import JobHandle
from clusterkit.jobs.plan import JobPlan, PlanRefused, plan_job, submit
from clusterkit.jobs.spec import JobSpec
from clusterkit.jobs.tracking import tracker_for
from clusterkit.providers import resolve_cluster_name, slurm_for
from clusterkit.slurm import Slurm


def submit_job(spec: JobSpec, cluster: str | None = None, *, workdir: str | Path | None = None,
               preflight: bool = True, spec_file: str | None = None) -> JobHandle:
    """Plan the job (rules, cluster, the script, preflight) and submit exactly that plan."""
    return submit_plan(plan_job(spec, cluster, workdir=workdir, preflight=preflight, spec_file=spec_file))


def submit_plan(plan: JobPlan) -> JobHandle:
    """Submit a plan (see jobs.plan) and follow the job it became."""
    record = submit(plan)
    return handle_from_record(record, slurm=plan.slurm)


def _executor(slurm: Slurm, cluster: str, nodes: int, tasks_per_node: int, gpus_per_node: int, cpus_per_task: int,
              time_minutes: int, name: str, slurm_parameters: dict[str, Any] | None, python: str | None,
              srun_args: tuple[str, ...], preflight: bool) -> Any:
    import submitit

    from clusterkit.jobs.preflight import check_callable_runtime

    # By default the nodes run the callable with this very interpreter: same packages, same paths.
    python = python or sys.executable
    if preflight:
        findings = check_callable_runtime(slurm, python, srun_args)
        if findings:
            raise PlanRefused(findings, f"function {name!r}")
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


def _function_handle(slurm: Slurm, cluster: str, job: Any, name: str) -> JobHandle:
    record = records.JobRecord(job_id=str(job.job_id), cluster=cluster, name=name, kind="function",
                               submitted=records.now(), stdout=str(job.paths.stdout), stderr=str(job.paths.stderr))
    records.save(record)
    return handle_from_record(record, slurm=slurm, submitit_job=job)


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
    executor = _executor(slurm, cluster, nodes, tasks_per_node, gpus_per_node, cpus_per_task, time_minutes, name,
                         slurm_parameters, python, tuple(srun_args), preflight)
    with slurm.environment():
        job = executor.submit(function, *args, **kwargs)
    return _function_handle(slurm, cluster, job, name)


def map_array(function: Callable[[Any], Any], items: Iterable[Any], *, cluster: str | None = None,
              cpus_per_task: int = 1, gpus_per_node: int = 0, time_minutes: int = 60, name: str | None = None,
              slurm_parameters: dict[str, Any] | None = None, python: str | None = None,
              srun_args: tuple[str, ...] = (), preflight: bool = True) -> list[JobHandle]:
    """A sweep as one job array (one sbatch call): one task per item, one handle per task."""
    cluster = resolve_cluster_name(cluster)
    slurm = slurm_for(cluster)
    name = name or getattr(function, "__name__", "sweep")
    executor = _executor(slurm, cluster, 1, 1, gpus_per_node, cpus_per_task, time_minutes, name, slurm_parameters,
                         python, tuple(srun_args), preflight)
    with slurm.environment():
        jobs = executor.map_array(function, list(items))
    return [_function_handle(slurm, cluster, job, name) for job in jobs]


def handle_from_record(record: records.JobRecord, slurm: Slurm | None = None, submitit_job: Any = None) -> JobHandle:
    slurm = slurm or slurm_for(record.cluster)
    return JobHandle(record.job_id, record.cluster, tracker_for(slurm),
                     stdout_path=Path(record.stdout) if record.stdout else None,
                     stderr_path=Path(record.stderr) if record.stderr else None, submitit_job=submitit_job,
                     record=record)


def job_handle(job_id: str, cluster: str | None = None) -> JobHandle:
    """A handle for a job submitted earlier (by clusterkit or not) on a cluster."""
    cluster = resolve_cluster_name(cluster)
    slurm = slurm_for(cluster)
    record = records.find(cluster, job_id)
    if record is None:
        details = slurm.job_details(job_id)
        record = records.JobRecord(job_id=job_id, cluster=cluster, name=details.get("JobName", ""), kind="external",
                                   submitted="", stdout=details.get("StdOut"), stderr=details.get("StdErr"))
    return handle_from_record(record, slurm=slurm)
