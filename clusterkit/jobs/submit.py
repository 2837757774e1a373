"""Submitting work to a cluster: job specs (their plan's script) and Python callables (submitit).

A job spec is planned (`jobs.plan.plan_job`) and goes to Slurm as exactly the script of its plan,
which is what a dry run shows. A Python callable goes through submitit, which pickles it, runs it on
the nodes and brings its return value back. Both give a JobHandle that follows requeues.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from clusterkit.errors import ClusterkitError
from clusterkit.findings import has_errors
from clusterkit.jobs import records, remote_functions
from clusterkit.jobs.handle import JobHandle
from clusterkit.jobs import plan as plans
from clusterkit.jobs.plan import JobPlan, PlanRefused, plan_job
from clusterkit.jobs.spec import JobSpec
from clusterkit.jobs.tracking import tracker_for
from clusterkit.providers import open_cluster, resolve_cluster_name, slurm_for
from clusterkit.slurm import Slurm


def submit(job: JobSpec | JobPlan | dict[str, object] | str | Path, cluster: str | None = None, *,
           workdir: str | Path | None = None, preflight: bool = True, sync: list[str] | None = None,
           source: str | Path | None = None) -> JobHandle:
    """The one way to submit a job spec: a JobSpec, plain data or the path of a YAML file is planned (rules,
    cluster, the script, preflight) and exactly that plan goes to Slurm; a JobPlan (a dry run's, or a
    resubmission's) goes as it is. On a cluster reached over SSH, `sync` (relative to `source`, default here)
    names the files its run needs. Returns a handle that follows the job."""
    if isinstance(job, JobPlan):
        given = {"cluster": cluster, "workdir": workdir, "sync": sync, "source": source}
        extra = [name for name, value in given.items() if value is not None] + ([] if preflight else ["preflight"])
        if extra:
            raise ClusterkitError(f"a plan already holds its {', '.join(extra)}",
                                  fix="pass them to plan_job, or submit the spec instead of its plan")
        plan = job
    else:
        from clusterkit.jobs.spec import job_from_dict, load_job

        spec_file = str(job) if isinstance(job, (str, Path)) else None
        spec = load_job(job) if isinstance(job, (str, Path)) else job_from_dict(job) if isinstance(job, dict) else job
        plan = plan_job(spec, cluster, workdir=workdir, preflight=preflight, spec_file=spec_file, sync=sync,
                        source=source)
    return handle_from_record(plans.apply(plan), slurm=plan.slurm)


def _parameters(nodes: int, tasks_per_node: int, gpus_per_node: int, cpus_per_task: int, time_minutes: int,
                name: str, srun_args: tuple[str, ...], slurm_parameters: dict[str, Any] | None) -> dict[str, Any]:
    """submitit's SlurmExecutor parameters of a function job."""
    parameters: dict[str, Any] = dict(nodes=nodes, ntasks_per_node=tasks_per_node, cpus_per_task=cpus_per_task,
                                      time=time_minutes, job_name=name)
    if gpus_per_node:
        parameters["gpus_per_node"] = gpus_per_node
    if srun_args:
        parameters["srun_args"] = list(srun_args)  # e.g. pyxis: --container-image=/fsx/img.sqsh
    parameters.update(slurm_parameters or {})
    return parameters


def _function_jobs(cluster: str | None, name: str, parameters: dict[str, Any], python: str | None,
                   srun_args: tuple[str, ...], preflight: bool, *, calls: list[tuple[Any, tuple, dict]] | None = None,
                   function: Any = None, items: list[Any] | None = None) -> list[JobHandle]:
    """Submit functions through submitit: here, or on the login node of a cluster reached over SSH."""
    from clusterkit.jobs.preflight import check_callable_runtime

    cluster = resolve_cluster_name(cluster)
    target = open_cluster(cluster)
    slurm = target.slurm()
    # By default the nodes run the callable with the cluster's interpreter (on a local cluster: this
    # very one, with the same packages and paths).
    python = python or target.python()
    if preflight:
        findings = check_callable_runtime(slurm, python, srun_args)
        if has_errors(findings):
            raise PlanRefused(findings, f"function {name!r}")
        for finding in findings:
            warnings.warn(str(finding), stacklevel=3)
    if slurm.transport.remote:
        folder = f"{target.runs_dir()}/functions/%j"
        submitted = remote_functions.submit_calls(slurm, folder, python, parameters, calls=calls, function=function,
                                            items=items)
        return [_function_handle(slurm, cluster, job["job_id"], name, job["stdout"], job["stderr"],
                                 remote_functions.RemoteResult(slurm, python, folder, job["job_id"]))
                for job in submitted]
    import submitit

    executor = submitit.SlurmExecutor(folder=records.jobs_dir(cluster) / "submitit" / "%j", python=python)
    executor.update_parameters(**parameters)
    with slurm.environment():
        jobs = (executor.map_array(function, items) if items is not None
                else [executor.submit(f, *a, **k) for f, a, k in calls or []])
    return [_function_handle(slurm, cluster, str(job.job_id), name, str(job.paths.stdout), str(job.paths.stderr), job)
            for job in jobs]


def _function_handle(slurm: Slurm, cluster: str, job_id: str, name: str, stdout: str, stderr: str,
                     job: Any) -> JobHandle:
    record = records.JobRecord(job_id=job_id, cluster=cluster, name=name, kind="function", submitted=records.now(),
                               stdout=stdout, stderr=stderr)
    records.save(record)
    return handle_from_record(record, slurm=slurm, submitit_job=job)


def submit_function(function: Callable[..., Any], *args: Any, cluster: str | None = None, nodes: int = 1,
                    tasks_per_node: int = 1, gpus_per_node: int = 0, cpus_per_task: int = 1,
                    time_minutes: int = 60, name: str | None = None,
                    slurm_parameters: dict[str, Any] | None = None, python: str | None = None,
                    srun_args: tuple[str, ...] = (), preflight: bool = True, **kwargs: Any) -> JobHandle:
    """Run `function(*args, **kwargs)` as a Slurm job; `handle.result()` returns its value.

    `python` is the interpreter on the nodes (default: the cluster's; this one on a local cluster);
    `srun_args` go to srun, e.g. pyxis flags to run it in a container. The preflight runs that
    interpreter once on a node, the same way, and compares its Python and packages with this one's.
    On a cluster reached over SSH, submitit runs on its login node and the result comes back here.
    """
    name = name or getattr(function, "__name__", "function")
    parameters = _parameters(nodes, tasks_per_node, gpus_per_node, cpus_per_task, time_minutes, name,
                             tuple(srun_args), slurm_parameters)
    (handle,) = _function_jobs(cluster, name, parameters, python, tuple(srun_args), preflight,
                               calls=[(function, args, kwargs)])
    return handle


def map_array(function: Callable[[Any], Any], items: Iterable[Any], *, cluster: str | None = None,
              cpus_per_task: int = 1, gpus_per_node: int = 0, time_minutes: int = 60, name: str | None = None,
              slurm_parameters: dict[str, Any] | None = None, python: str | None = None,
              srun_args: tuple[str, ...] = (), preflight: bool = True) -> list[JobHandle]:
    """A sweep as one job array (one sbatch call): one task per item, one handle per task."""
    name = name or getattr(function, "__name__", "sweep")
    parameters = _parameters(1, 1, gpus_per_node, cpus_per_task, time_minutes, name, tuple(srun_args),
                             slurm_parameters)
    return _function_jobs(cluster, name, parameters, python, tuple(srun_args), preflight, function=function,
                          items=list(items))


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
