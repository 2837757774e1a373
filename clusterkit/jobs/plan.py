"""A job's plan: everything a submission needs, decided once, as a value.

    plan = plan_job(spec, cluster="dev")     # rules, the cluster, the script (rendered once), preflight
    print(plan.script)                       # a dry run shows exactly this
    record = apply(plan)                     # sbatch receives exactly plan.script

`plan_job` reads the cluster (its partitions' instance types, and the preflight's checks) but
changes nothing; `apply` is the one step with effects (`clusterkit.submit` calls it). The watcher resubmits a changed copy of a
plan (`with_exclusions`), rebuilt from the job's record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import secrets
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

from clusterkit import runtime
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, error, errors, has_errors, info, warning
from clusterkit.jobs import records
from clusterkit.jobs.spec import JobSpec
from clusterkit.jobs.validators import validate_job
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers import Cluster, open_cluster, resolve_cluster_name
from clusterkit.slurm import Flavor, Slurm
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


MAX_UPLOAD_BYTES = 256 << 20  # one submission's copy; more is data, which belongs on the cluster's storage
SHOWN_NAMES = 5  # names shown in a summary or a finding before "and N more"


@lean_dataclass(frozen=True)
class SyncSet:
    """What a submission to a cluster reached over SSH copies, decided when it is planned. `names` are
    relative to the source directory: regular files, and links kept as links (each one relative, into
    the directory). `skipped` and `refused` are (name, why) of what stays here: skipped by design
    (untracked files, submodules), refused because copying it would send what the user did not mean
    (a link that leaves the directory, a link loop, a FIFO)."""

    names: tuple[str, ...] = ()
    size: int = 0  # bytes of the regular files among `names`
    links: int = 0  # how many of `names` are links
    skipped: tuple[tuple[str, str], ...] = ()
    refused: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def listed(left: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
        return [{"path": name, "why": why} for name, why in left]

    def to_dict(self) -> dict[str, object]:
        """What a submission's JSON output says it copied and left here."""
        return {"copied": list(self.names), "copied_bytes": self.size, "skipped": self.listed(self.skipped),
                "refused": self.listed(self.refused)}

    def summary(self, destination: str) -> str:
        """One line for after the copy: "copied 9 files, 12.3 KiB to HOST:DIR; skipped 1: big.bin"."""
        files = len(self.names) - self.links
        counted = f"{files} file{'s' if files != 1 else ''}"
        if self.links:
            counted += f" and {self.links} link{'s' if self.links != 1 else ''}"
        line = f"copied {counted}, {_size_text(self.size)} to {destination}"
        for verb, left in (("skipped", self.skipped), ("refused", self.refused)):
            if left:
                line += f"; {verb} {len(left)}: {_first_names([name for name, _ in left])}"
        return line


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
    # A cluster reached over SSH: what is copied from `upload_from` (here) into `workdir` (there).
    upload_from: str | None = None
    uploads: SyncSet = SyncSet()
    new_workdir: bool = False  # the run's own new directory there: removed again if the submission fails
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
                "upload_from": self.upload_from, "uploads": list(self.uploads.names),
                "upload_bytes": self.uploads.size, "upload_skipped": self.uploads.listed(self.uploads.skipped),
                "upload_refused": self.uploads.listed(self.uploads.refused)}


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

    findings: list[Finding] = []
    name, target = _resolve_cluster(cluster or spec.cluster, need_cluster, findings)
    slurm, flavor = None, Flavor.STOCK
    if target is not None:
        spec = _with_cluster_instance(spec, name, target, findings)
        spec = _with_cluster_python(spec, target)
        slurm = _slurm_of(target, need_cluster, findings)
        if slurm is not None and name is not None:
            spec = _with_failure_rate(spec, name, slurm, findings)
        flavor = _flavor_of(target, need_cluster, findings, noted=slurm is None)
    # The rules check the spec as it runs: the instance-bound ones (version floors, processes per node) see the
    # machine a partition gives a spec that names none.
    findings = validate_job(spec) + findings
    upload_from, uploads, new_workdir = None, SyncSet(), False
    if slurm is not None and slurm.transport.remote:
        new_workdir = not (workdir or spec.workdir)
        remote_base = workdir or spec.workdir or f"{target.runs_dir()}/{_run_directory_name(spec.name)}"
        workdir_path = Path(remote_base)
        upload_from = str(Path(source or os.getcwd()).resolve())
        uploads = files_to_sync(Path(upload_from), sync, findings)
    else:
        workdir_path = Path(workdir or spec.workdir or os.getcwd()).resolve()
    base = JobPlan(name=spec.name, spec=spec, script=None, cluster=name, workdir=str(workdir_path),
                   spec_file=spec_file, upload_from=upload_from, uploads=uploads, new_workdir=new_workdir,
                   slurm=slurm)
    if has_errors(findings):
        return dataclasses.replace(base, findings=tuple(findings))
    script = render_sbatch(spec, flavor)
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


def _flavor_of(cluster: Cluster, need_cluster: bool, findings: list[Finding], noted: bool) -> Flavor:
    """Whose Slurm the cluster runs (the script is rendered for it); stock Slurm where a dry run cannot ask."""
    try:
        return cluster.flavor()
    except ClusterkitError as error:
        if need_cluster:
            raise
        if not noted:
            _note_no_cluster(findings, error, cluster.name)
        return Flavor.STOCK


def _note_no_cluster(findings: list[Finding], error: ClusterkitError, name: str | None) -> None:
    findings.append(info("cluster", f"not submitted from here, so no preflight: {error.message}",
                         fix=error.fix or "", value=name, rule="job.cluster"))


def _with_failure_rate(spec: JobSpec, cluster_name: str, slurm: Slurm, findings: list[Finding]) -> JobSpec:
    """`checkpoint_every: auto` with no failure rate given plans for the cluster's own, where its history tells."""
    from clusterkit.goodput.model import LIMITS, LLAMA3_FAILURES_PER_GPU_HOUR
    from clusterkit.jobs.failure_history import MIN_NODE_HOURS, cluster_history

    if spec.checkpoint_every != "auto" or spec.failures_per_gpu_hour is not None:
        return spec
    history = cluster_history(cluster_name, slurm.transport)
    rate = history.per_gpu_hour(spec.processes)
    if rate is None:
        findings.append(info("checkpoint_every", f"auto plans for Llama 3's failure rate "
                             f"({LLAMA3_FAILURES_PER_GPU_HOUR:.3g} per GPU-hour): cluster {cluster_name!r} has "
                             f"{history.describe()}, less than the {MIN_NODE_HOURS:g} node-hours that tell its own",
                             fix="set failures_per_gpu_hour to plan for another rate", rule="job.failure-history"))
        return spec
    rate = min(rate, LIMITS["failures_per_gpu_hour"].high)
    findings.append(info("checkpoint_every", f"auto plans for cluster {cluster_name!r}'s failure rate, {rate:.3g} "
                         f"per GPU-hour ({history.describe()}, {spec.processes} per node)", value=rate,
                         fix="set failures_per_gpu_hour to plan for another rate", rule="job.failure-history"))
    return dataclasses.replace(spec, failures_per_gpu_hour=rate)


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
        findings.append(info("instance", f"{types[0]}, the instance type of partition {partition!r} of cluster "
                             f"{cluster_name!r}", value=types[0], rule="job.cluster-instance"))
        return dataclasses.replace(spec, instance=types[0])
    if spec.instance not in types:
        findings.append(error("instance", f"partition {partition!r} of cluster {cluster_name!r} runs "
                              f"{', '.join(sorted(set(types)))}, not {spec.instance}",
                              fix="leave instance out to use the partition's, or choose the partition that runs it",
                              value=spec.instance, rule="job.cluster-instance"))
    return spec


def apply(plan: JobPlan) -> records.JobRecord:
    """sbatch exactly `plan.script`; save and return the job's record. Refuses a plan with errors."""
    if not plan.ok or plan.script is None:
        raise PlanRefused(plan.findings, f"job {plan.name!r}" if plan.name else "the job")
    if plan.cluster is None or plan.slurm is None:
        raise ClusterkitError("the plan has no cluster to submit to", fix="plan it with a reachable cluster")
    transport = plan.slurm.transport
    try:
        if plan.upload_from is not None:  # the copy also makes the run's directory and its log directories
            upload(transport, Path(plan.upload_from), list(plan.uploads.names), plan.workdir,
                   also_make=plan.log_dirs)
        else:
            for directory in plan.log_dirs:
                make_dirs(transport, directory)
        job_id = plan.slurm.sbatch(plan.script, f"--chdir={plan.workdir}", *plan.sbatch_args)
    except BaseException:
        if plan.new_workdir:  # nothing half-submitted: the run's new directory goes with the failed submit
            with contextlib.suppress(ClusterkitError, OSError, subprocess.SubprocessError):  # the first error counts
                transport.run(["rm", "-rf", "--", plan.workdir], timeout=60)
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


def _size_text(size: int) -> str:
    """A byte count for people: 812 B, 12.3 KiB, 256.0 MiB."""
    if size < 1024:
        return f"{size} B"
    scaled = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        scaled /= 1024
        if scaled < 1024 or unit == "GiB":
            break
    return f"{scaled:.1f} {unit}"


def _first_names(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_NAMES])
    return f"{shown} and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else shown


# Why an entry stays here, and what to do about it: the refusals' findings group entries by these.
_REFUSALS = {
    "a link that leaves the directory": "copy what it points to into the directory, or keep it on the cluster's "
                                        "storage and name that path in the job",
    "a link with an absolute target": "make it relative (ln -sfr TARGET LINK), so that it holds on the cluster too",
    "a link loop": "remove the loop",
    "a link to nothing": "remove the link, or create what it points to",
    "under a link": "replace the link by a directory, or name the files where the link points",
    "not a regular file": "leave FIFOs, sockets and devices out of the job's code",
    "unreadable": "make it readable, or leave it out",
}


class _Collected:
    """Entries found so far: what goes (in order found), what stays here and why, and the bytes."""

    def __init__(self, source: Path, max_bytes: int) -> None:
        self.source, self.max_bytes = source, max_bytes
        self.names: dict[str, bool] = {}  # name -> whether it is a link
        self.sizes: dict[str, int] = {}
        self.size = 0
        self.skipped: list[tuple[str, str]] = []
        self.refused: list[tuple[str, str]] = []
        self._real_parents: dict[str, bool] = {"": True}

    @property
    def full(self) -> bool:
        return self.size > self.max_bytes

    def entry(self, name: str) -> str | None:
        """Take `name` (relative to the source) if it can go: a regular file or a link kept as a link; a
        directory is the caller's to walk. Returns what it is ("file", "link", "dir") or None (refused)."""
        if not self._parents_are_directories(name):
            self.refused.append((name, "under a link"))
            return None
        path = self.source / name
        try:
            info = os.lstat(path)
        except PermissionError:
            self.refused.append((name, "unreadable"))
            return None
        if stat.S_ISDIR(info.st_mode):
            return "dir"
        if stat.S_ISREG(info.st_mode):
            if name not in self.names:
                self.names[name] = False
                self.sizes[name] = info.st_size
                self.size += info.st_size
            return "file"
        why = _link_problem(self.source, name) if stat.S_ISLNK(info.st_mode) else "not a regular file"
        if why is not None:
            self.refused.append((name, why))
            return None
        self.names[name] = True
        return "link"

    def _parents_are_directories(self, name: str) -> bool:
        """Whether every directory above `name` is a real directory of the source, not a link."""
        parent = os.path.dirname(name)
        if parent not in self._real_parents:
            self._real_parents[parent] = (self._parents_are_directories(parent)
                                          and not os.path.islink(self.source / parent))
        return self._real_parents[parent]

    def walk(self, top: str) -> None:
        """Every entry under the directory `top`, never following a link (a link is an entry itself)."""
        def unreadable(error: OSError) -> None:
            self.refused.append((os.path.relpath(error.filename, self.source), "unreadable"))

        for root, dirs, files in os.walk(self.source / top, onerror=unreadable):
            relative = os.path.relpath(root, self.source)
            kept = []
            for name in sorted(dirs) + sorted(files):
                if self.full:  # over the cap: the submission is refused, so there is no need to look further
                    return
                if name in (".git", "__pycache__"):
                    continue
                entry = os.path.normpath(os.path.join(relative, name))
                if self.entry(entry) == "dir":
                    kept.append(name)
            dirs[:] = kept  # links to directories were taken (or refused) as entries; os.walk never enters them

    def sync_set(self, findings: list[Finding]) -> SyncSet:
        self.refused.sort()
        for why, fix in _REFUSALS.items():
            names = [name for name, reason in self.refused if reason == why]
            if names:
                findings.append(warning("sync", f"not copied to the cluster, {why}: {_first_names(names)}",
                                        fix=fix, value=names[0], rule="job.sync-refused"))
        if self.full:
            largest = sorted(self.sizes, key=self.sizes.__getitem__, reverse=True)[:3]
            findings.append(error(
                "sync", f"the files to copy come to more than {_size_text(self.max_bytes)}, the most one "
                f"submission copies (largest: {', '.join(f'{n} ({_size_text(self.sizes[n])})' for n in largest)})",
                fix="name only the job's code with --sync PATH, and keep data on the cluster's storage",
                value=str(self.source), rule="job.sync-size"))
        names = sorted(self.names)
        return SyncSet(names=tuple(names), size=self.size, links=sum(self.names.values()),
                       skipped=tuple(sorted(self.skipped)), refused=tuple(self.refused))


def _link_problem(source: Path, name: str) -> str | None:
    """None when the link `name` can go as a link: a relative target that stays inside `source`, both as
    written (so it holds wherever the directory is copied) and as resolved here; else why not."""
    path = source / name
    target = os.readlink(path)
    try:
        resolved = path.resolve(strict=True)
    except RuntimeError:  # Python before 3.13: a loop
        return "a link loop"
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "a link loop"
        return "a link to nothing"
    if not resolved.is_relative_to(source):
        return "a link that leaves the directory"
    if os.path.isabs(target):
        return "a link with an absolute target"
    if os.path.normpath(os.path.join(os.path.dirname(name), target)).split(os.sep)[0] == "..":
        return "a link that leaves the directory"  # back in through the directory's own name, which differs there
    return None


def files_to_sync(source: Path, paths: list[str] | None, findings: list[Finding], *,
                  max_bytes: int = MAX_UPLOAD_BYTES) -> SyncSet:
    """What a run on a remote cluster gets from `source` (a resolved directory): `paths` (files, links, or
    directories walked without following links), else the files git tracks under `source`. Nothing is read
    but names and sizes; a link never brings what it points to; more than `max_bytes` is an error."""
    found = _Collected(source.resolve(), max_bytes)
    if paths:
        for name in paths:
            _take_named(found, name, findings)
    else:
        _take_tracked(found, findings)
    return found.sync_set(findings)


def _take_named(found: _Collected, name: str, findings: list[Finding]) -> None:
    """One --sync PATH: an ERROR when it cannot go, since the user asked for it by name."""
    source = found.source

    def refuse(message: str, fix: str) -> None:
        findings.append(error("sync", message, fix=fix, value=name, rule="job.sync"))

    if not name:
        refuse("an empty path names nothing to copy", f"name a file or directory under {source}, or . for all of it")
        return
    relative = os.path.normpath(os.path.relpath(os.path.join(source, name), source))
    if relative == ".." or relative.startswith(".." + os.sep):
        refuse(f"{name!r} is outside {source}, the directory whose files go to the cluster",
               "submit from a directory that holds the job's code, and name paths under it")
        return
    if relative == ".":
        found.walk(".")
        return
    if not os.path.lexists(source / relative):
        refuse(f"{name!r} is not a file or directory under {source}", "name files or directories of the job's code")
        return
    refused_before = len(found.refused)
    kind = found.entry(relative)
    if kind == "dir":
        found.walk(relative)
    elif kind is None:
        _, why = found.refused.pop(refused_before)  # named: an error of its own, not one of the warnings
        refuse(f"{name!r} is not copied to the cluster: {why}", _REFUSALS[why])


def _take_tracked(found: _Collected, findings: list[Finding]) -> None:
    """The files git tracks under the source (what the README promises); untracked ones are named, not sent."""
    source = found.source
    listed = subprocess.run(["git", "-C", str(source), "ls-files", "-z", "--cached"], capture_output=True)
    if listed.returncode != 0:
        findings.append(warning("sync", f"{source} is not in a git repository, so no file is copied to the cluster",
                                fix="name the job's code with --sync PATH", value=str(source), rule="job.sync"))
        return
    for name in dict.fromkeys(listed.stdout.decode(errors="surrogateescape").split("\0")):
        if not name or found.full:
            continue
        if not os.path.lexists(source / name):
            found.skipped.append((name, "tracked but not here"))
        elif found.entry(name) == "dir":
            found.skipped.append((name, "a directory (a submodule)"))
    untracked = subprocess.run(["git", "-C", str(source), "ls-files", "-z", "--others", "--exclude-standard",
                                "--directory", "--no-empty-directory"], capture_output=True)
    names = [name for name in untracked.stdout.decode(errors="surrogateescape").split("\0") if name]
    found.skipped += [(name, "untracked") for name in names]
    if names:
        findings.append(warning("sync", f"{len(names)} untracked path(s) here are not copied to the cluster: "
                                f"{_first_names(names)}", fix="git add what the job needs, or name it with "
                                "--sync PATH", value=names[0], rule="job.sync-untracked"))
