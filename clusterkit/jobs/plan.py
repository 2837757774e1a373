"""A job's plan: everything a submission needs, decided once, as a value.

    plan = plan_job(spec, cluster="dev")     # rules, the cluster, the script (rendered once), preflight
    print(plan.script)                       # a dry run shows exactly this
    handle = submit(plan)                    # sbatch receives exactly plan.script

`plan_job` reads the cluster (its partitions' instance types, and the preflight's checks) but
changes nothing; `submit` is the one step with effects. The watcher resubmits a changed copy of a
plan (`with_exclusions`), rebuilt from the job's record.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

from clusterkit import runtime
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, Level, errors, has_errors
from clusterkit.jobs import records
from clusterkit.jobs.spec import JobSpec
from clusterkit.jobs.validators import validate_job
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers import Cluster, open_cluster, resolve_cluster_name
from clusterkit.slurm import Slurm
from clusterkit.transport import make_dirs, upload


class PlanRefused(ClusterkitError):
    """The plan has errors (spec rules or preflight); `findings` are all of them."""

    def __init__(self, findings: list[Finding] | tuple[Finding, ...], what: str = "the job") -> None:
        problems = errors(findings)
        super().__init__(f"{what} was not submitted: {len(problems)} problem(s): "
                         + "; ".join(str(f) for f in problems),
                         fix="fix them, or submit with --no-preflight to skip the checks against the cluster"
                         if any(f.rule.startswith("preflight.") for f in problems) else "fix the fields named")
        self.findings = list(findings)


@lean_dataclass(frozen=True)
class JobPlan:
    """A job ready to submit. `script` is None when the spec has errors."""

    name: str
    spec: JobSpec | None  # as resolved against the cluster; None for a plan rebuilt from a record
    script: str | None
    cluster: str | None  # None: no cluster was reachable (a dry run can still show the script)
    workdir: str
    findings: tuple[Finding, ...] = ()
    run_state_dir: str | None = None  # the supervisor's budget and decisions (supervised jobs)
    log_dirs: tuple[str, ...] = ()  # created before sbatch: Slurm cannot open a log in a missing directory
    sbatch_args: tuple[str, ...] = ()  # besides the script, e.g. --exclude on a resubmission
    spec_file: str | None = None
    resubmitted_from: str | None = None
    # A cluster reached over SSH: the files copied from `upload_from` (here) into `workdir` (there).
    upload_from: str | None = None
    uploads: tuple[str, ...] = ()
    slurm: Slurm | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.script is not None and not has_errors(self.findings)

    def with_exclusions(self, nodes: list[str], resubmitted_from: str) -> JobPlan:
        """The same script again, kept off `nodes`, into the same run."""
        extra = (f"--exclude={','.join(nodes)}",) if nodes else ()
        return dataclasses.replace(self, sbatch_args=extra, resubmitted_from=resubmitted_from)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "cluster": self.cluster, "ok": self.ok, "workdir": self.workdir,
                "instance": self.spec.instance if self.spec else None, "script": self.script,
                "findings": [finding.to_dict() for finding in self.findings], "run_state_dir": self.run_state_dir,
                "log_dirs": list(self.log_dirs), "sbatch_args": list(self.sbatch_args),
                "upload_from": self.upload_from, "uploads": list(self.uploads)}


def plan_job(spec: JobSpec, cluster: str | None = None, *, workdir: str | Path | None = None,
             preflight: bool = True, spec_file: str | None = None, need_cluster: bool = True,
             sync: list[str] | None = None, source: str | Path | None = None) -> JobPlan:
    """Check the spec, resolve its cluster, render the script once and run the preflight; change nothing.

    With `need_cluster=False` (a dry run) a cluster that cannot be found is no error: the plan then
    has no cluster, and the script is rendered from the spec alone. On a cluster reached over SSH the
    job runs in a new directory under the cluster's runs directory, and the plan lists the files it
    copies there from `source` (default: here): `sync` names them, else the git-tracked files.
    """
    from clusterkit.jobs import preflight as checks
    from clusterkit.jobs.render import render_sbatch

    findings = list(validate_job(spec))
    name, target = _resolve_cluster(cluster or spec.cluster, need_cluster, findings)
    slurm = None
    if target is not None:
        spec = _with_cluster_instance(spec, name, target, findings)
        spec = _with_cluster_python(spec, target)
        slurm = _slurm_of(target, need_cluster, findings)
    upload_from, uploads = None, ()
    if slurm is not None and slurm.transport.remote:
        remote_base = workdir or spec.workdir or f"{target.runs_dir()}/{_run_directory_name(spec.name)}"
        workdir_path = Path(remote_base)
        upload_from = str(Path(source or os.getcwd()).resolve())
        uploads = tuple(files_to_sync(Path(upload_from), sync, findings))
    else:
        workdir_path = Path(workdir or spec.workdir or os.getcwd()).resolve()
    base = JobPlan(name=spec.name, spec=spec, script=None, cluster=name, workdir=str(workdir_path),
                   spec_file=spec_file, upload_from=upload_from, uploads=uploads, slurm=slurm)
    if has_errors(findings):
        return dataclasses.replace(base, findings=tuple(findings))
    script = render_sbatch(spec)
    if preflight and slurm is not None:
        findings += checks.preflight(spec, slurm, workdir_path)
    state_dir = (runtime.run_state_dir(spec.checkpoint_dir, base=workdir_path)
                 if spec.supervise is not None and spec.checkpoint_dir else None)
    return dataclasses.replace(base, script=script, findings=tuple(findings),
                               run_state_dir=str(state_dir) if state_dir else None,
                               log_dirs=tuple(str(d) for _, d in checks.log_directories(spec, workdir_path)))


def _resolve_cluster(name: str | None, need_cluster: bool,
                     findings: list[Finding]) -> tuple[str | None, Cluster | None]:
    try:
        resolved = resolve_cluster_name(name)
        return resolved, open_cluster(resolved)
    except ClusterkitError as error:
        if need_cluster:
            raise
        _note_no_cluster(findings, error, name)
        return None, None


def _slurm_of(cluster: Cluster, need_cluster: bool, findings: list[Finding]) -> Slurm | None:
    try:
        return cluster.slurm()
    except ClusterkitError as error:  # e.g. an AWS cluster whose jobs go through its head node
        if need_cluster:
            raise
        _note_no_cluster(findings, error, cluster.name)
        return None


def _note_no_cluster(findings: list[Finding], error: ClusterkitError, name: str | None) -> None:
    findings.append(Finding(Level.INFO, "cluster", f"not submitted from here, so no preflight: {error.message}",
                            fix=error.fix or "", value=name, rule="job.cluster"))


def _with_cluster_python(spec: JobSpec, cluster: Cluster) -> JobSpec:
    """A supervised job that names no interpreter runs the supervisor with the cluster's clusterkit."""
    if spec.supervise is None or spec.supervise.python is not None:
        return spec
    return dataclasses.replace(spec, supervise=dataclasses.replace(spec.supervise, python=cluster.python()))


def _with_cluster_instance(spec: JobSpec, cluster_name: str, cluster: Cluster, findings: list[Finding]) -> JobSpec:
    """A job on a cluster gets the machine of the partition it runs in: the spec's instance when it
    names one (checked against the partition), else the partition's."""
    queues = cluster.queues()
    if not queues:
        return spec
    partition = spec.partition or next(iter(queues))
    types = queues.get(partition)
    if types is None:
        return spec  # the preflight names the partitions there are
    if spec.instance is None:
        if len(set(types)) != 1:
            return spec
        findings.append(Finding(Level.INFO, "instance", f"{types[0]}, the instance type of partition {partition!r} "
                                f"of cluster {cluster_name!r}", value=types[0], rule="job.cluster-instance"))
        return dataclasses.replace(spec, instance=types[0])
    if spec.instance not in types:
        findings.append(Finding(Level.ERROR, "instance", f"partition {partition!r} of cluster {cluster_name!r} runs "
                                f"{', '.join(sorted(set(types)))}, not {spec.instance}",
                                fix="leave instance out to use the partition's, or choose the partition that runs it",
                                value=spec.instance, rule="job.cluster-instance"))
    return spec


def submit(plan: JobPlan) -> records.JobRecord:
    """sbatch exactly `plan.script`; save and return the job's record. Refuses a plan with errors."""
    if not plan.ok or plan.script is None:
        raise PlanRefused(plan.findings, f"job {plan.name!r}" if plan.name else "the job")
    if plan.cluster is None or plan.slurm is None:
        raise ClusterkitError("the plan has no cluster to submit to", fix="plan it with a reachable cluster")
    transport = plan.slurm.transport
    if plan.uploads and plan.upload_from:
        upload(transport, Path(plan.upload_from), list(plan.uploads), plan.workdir, also_make=plan.log_dirs)
    try:
        for directory in () if plan.uploads else plan.log_dirs:
            make_dirs(transport, directory)
        job_id = plan.slurm.sbatch(plan.script, f"--chdir={plan.workdir}", *plan.sbatch_args)
    except BaseException:
        if plan.uploads:  # nothing half-submitted: the run's new directory goes with the failed submit
            transport.run(["rm", "-rf", "--", plan.workdir])
        raise
    details = plan.slurm.job_details(job_id)
    stdout = details.get("StdOut") or None  # job specs refuse the patterns Slurm takes literally (a backslash)
    stderr = details.get("StdErr") or stdout
    record = records.JobRecord(job_id=job_id, cluster=plan.cluster, name=plan.name, kind="spec",
                               submitted=records.now(), stdout=stdout, stderr=stderr, spec_file=plan.spec_file,
                               workdir=plan.workdir, run_state_dir=plan.run_state_dir,
                               resubmitted_from=plan.resubmitted_from)
    records.save(record, script=plan.script)
    return record


def plan_from_record(record: records.JobRecord) -> JobPlan:
    """The plan a job was submitted with, from what clusterkit kept: for resubmitting the same script."""
    if not record.script:
        raise ClusterkitError(f"job {record.job_id} was not submitted from a job spec by clusterkit, so there is "
                              "no script to submit again", fix="resubmit it the way it was submitted")
    return JobPlan(name=record.name, spec=None, script=Path(record.script).read_text(), cluster=record.cluster,
                   workdir=record.workdir or os.getcwd(), run_state_dir=record.run_state_dir,
                   spec_file=record.spec_file, slurm=open_cluster(record.cluster).slurm())


def _run_directory_name(job_name: str) -> str:
    """A new directory per run: the job's name (made safe for a path), the time, and a random tail."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", job_name).strip("-.")[:64] or "job"
    return f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def files_to_sync(source: Path, paths: list[str] | None, findings: list[Finding]) -> list[str]:
    """The files (relative to `source`) a run on a remote cluster needs: `paths` (files, or directories
    taken whole), else what git tracks under `source`."""
    if paths:
        found: list[str] = []
        for name in paths:
            path = source / name
            if path.is_dir():
                found += sorted(str(f.relative_to(source)) for f in _walk(path))
            elif path.is_file():
                found.append(str(path.relative_to(source)))
            else:
                findings.append(Finding(Level.ERROR, "sync", f"{name!r} is not a file or directory under {source}",
                                        fix="name files or directories of the job's code", value=name,
                                        rule="job.sync"))
        return found
    listed = subprocess.run(["git", "-C", str(source), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True)
    if listed.returncode != 0:
        findings.append(Finding(Level.WARNING, "sync", f"{source} is not in a git repository, so no file is copied "
                                "to the cluster", fix="name the job's code with --sync PATH", value=str(source),
                                rule="job.sync"))
        return []
    names = [name for name in listed.stdout.decode().split("\0") if name]
    return [name for name in names if (source / name).is_file()]


def _walk(directory: Path) -> list[Path]:
    files = []
    for root, dirs, names in os.walk(directory, followlinks=True):
        dirs[:] = [d for d in dirs if d not in (".git", "__pycache__")]
        files += [Path(root) / name for name in names]
    return files
