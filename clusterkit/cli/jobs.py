"""Job verbs: submit, status, logs, cancel, jobs."""

from __future__ import annotations

import argparse
import sys

from clusterkit.cli.output import print_findings, print_json, print_table, progress


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    cluster_option = argparse.ArgumentParser(add_help=False)
    cluster_option.add_argument("--cluster", metavar="NAME",
                                help="cluster to use (default: $CLUSTERKIT_CLUSTER, or the only one)")

    submit = subparsers.add_parser("submit", parents=[common, cluster_option], help="submit a job spec",
                                   description="Render a job spec into an sbatch script and submit it.")
    submit.add_argument("spec", metavar="JOB.yaml", help="job spec file")
    submit.add_argument("--dry-run", action="store_true", help="print the exact script; submit nothing")
    submit.add_argument("--no-preflight", action="store_true", help="skip the checks against the cluster")
    submit.add_argument("--wait", action="store_true", help="follow the job until it ends; exit 1 unless COMPLETED")
    submit.add_argument("--sync", action="append", metavar="PATH",
                        help="on a cluster reached over SSH: copy these files or directories (relative to here) "
                             "into the run's directory there (default: the git-tracked files here)")
    submit.set_defaults(handler=submit_spec)

    status = subparsers.add_parser("status", parents=[common, cluster_option],
                                   help="a job's state and every attempt (requeues included)")
    status.add_argument("job_id", metavar="JOB_ID")
    status.set_defaults(handler=job_status)

    logs = subparsers.add_parser("logs", parents=[common, cluster_option], help="print a job's output")
    logs.add_argument("job_id", metavar="JOB_ID")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    logs.set_defaults(handler=job_logs)

    cancel = subparsers.add_parser("cancel", parents=[common, cluster_option], help="cancel a job")
    cancel.add_argument("job_id", metavar="JOB_ID")
    cancel.set_defaults(handler=cancel_job)

    watch = subparsers.add_parser("watch", parents=[common, cluster_option],
                                  help="follow a job across requeues; resubmit it where Slurm did not requeue",
                                  description="Follow a job until it ends, across requeues. With --resubmit, a job "
                                              "that ended NODE_FAIL, BOOT_FAIL, TIMEOUT or PREEMPTED (or whose "
                                              "supervisor found a bad node) is resubmitted without the bad nodes, "
                                              "into the same run: it resumes from its last valid checkpoint.")
    watch.add_argument("job_id", metavar="JOB_ID")
    watch.add_argument("--resubmit", action="store_true", help="resubmit where Slurm did not requeue")
    watch.add_argument("--max-resubmits", type=int, default=3, help="resubmission budget (default 3)")
    watch.set_defaults(handler=watch_job)

    jobs = subparsers.add_parser("jobs", parents=[common, cluster_option], help="list jobs submitted by clusterkit")
    jobs.set_defaults(handler=list_jobs)


def print_plan(plan, output: str) -> int:  # noqa: ANN001 - a JobPlan
    """A job's dry run: the exact sbatch script that would be submitted (and what was found on the way)."""
    from clusterkit.findings import Level

    if output == "json":
        print_json(plan.to_dict())
        return 0 if plan.ok else 1
    print_findings([f for f in plan.findings if f.level is not Level.INFO], sys.stderr)
    if plan.script is None:
        print("no script: fix the errors above", file=sys.stderr)
        return 1
    sys.stdout.write(plan.script)
    return 0 if plan.ok else 1


def submit_spec(args: argparse.Namespace) -> int:
    from clusterkit.findings import Level
    from clusterkit.jobs.plan import plan_job
    from clusterkit.jobs.spec import load_job
    from clusterkit.jobs.submit import submit

    spec = load_job(args.spec)
    plan = plan_job(spec, args.cluster, preflight=not args.no_preflight, spec_file=args.spec,
                    need_cluster=not args.dry_run, sync=args.sync)
    if args.dry_run:
        return print_plan(plan, args.output)
    if args.output == "table":
        print_findings([f for f in plan.findings if f.level is Level.WARNING], sys.stderr)
    handle = submit(plan)
    if plan.upload_from is not None and args.output == "table":
        progress(plan.uploads.summary(f"{handle.transport.label}:{plan.workdir}"))
    copied = plan.uploads.to_dict() if plan.upload_from is not None else {}
    warnings = [f.to_dict() for f in plan.findings if f.level is Level.WARNING]
    if not args.wait:
        if args.output == "json":
            print_json({"job_id": handle.job_id, "cluster": handle.cluster, "stdout": str(handle.stdout_path),
                        "workdir": plan.workdir, **copied, "warnings": warnings})
        else:
            print(f"submitted job {handle.job_id} to cluster {handle.cluster!r}; log: {handle.stdout_path}")
        return 0
    state = handle.wait(progress=progress if args.output == "table" else None)
    if args.output == "json":
        print_json({"job_id": handle.job_id, "cluster": handle.cluster, "state": state,
                    "stdout": str(handle.stdout_path), **copied, "warnings": warnings})
    return 0 if state == "COMPLETED" else 1


def _handle(args: argparse.Namespace):
    from clusterkit.jobs.submit import job_handle
    from clusterkit.slurm import checked_job_id

    return job_handle(checked_job_id(args.job_id), args.cluster)


def job_status(args: argparse.Namespace) -> int:
    handle = _handle(args)
    status = handle.status()
    if status.state == "UNKNOWN" and not status.attempts:
        raise handle.not_found()
    if args.output == "json":
        print_json(status.to_dict())
        return 0
    print(f"job {status.job_id} on {status.cluster}: {status.state}")
    if status.attempts:
        rows = [{key: value for key, value in attempt.to_dict().items() if key != "recoveries"}
                for attempt in status.attempts]
        print_table(list(rows[0]), [list(row.values()) for row in rows])
    recoveries = [(attempt.attempt, recovery) for attempt in status.attempts for recovery in attempt.recoveries]
    if recoveries:
        print("recoveries:")
        for attempt, recovery in recoveries:
            print(f"  attempt {attempt}, {recovery.describe()}")
    return 0


def job_logs(args: argparse.Namespace) -> int:
    handle = _handle(args)
    if handle.stdout_path is None:
        print(f"job {handle.job_id} has no known log file", file=sys.stderr)
        return 1
    if args.output == "json":
        if args.follow:
            handle.wait()
        print_json({"job_id": handle.job_id, "state": handle.state, "stdout_path": str(handle.stdout_path),
                    "stdout": handle.stdout(), "stderr": handle.stderr()})
        return 0
    if not args.follow and not handle.log_exists():
        ended = handle.done()
        # scontrol expands %j... even in a pattern Slurm took literally (one with a backslash).
        literal = (" (its --output held a backslash: Slurm wrote the pattern as written, without the backslashes "
                   "and with %j, %x... unexpanded)") if "\\" in str(handle.stdout_path) else ""
        print(f"job {handle.job_id}: no log at {handle.stdout_path}" + ("" if ended else " yet (the job has not "
              "written it)") + literal, file=sys.stderr)
        return 1 if ended else 0
    for chunk in handle.follow_log(follow=args.follow):
        sys.stdout.write(chunk)
        sys.stdout.flush()
    stderr = handle.stderr()
    if stderr:
        sys.stderr.write(stderr)
    return 0


def cancel_job(args: argparse.Namespace) -> int:
    handle = _handle(args)
    cancelled = handle.cancel()
    if args.output == "json":
        print_json({"job_id": handle.job_id, "cancelled": cancelled, "state": handle.state})
    elif cancelled:
        print(f"cancelled job {handle.job_id}")
    else:
        print(f"job {handle.job_id} had already ended ({handle.state}): nothing to cancel")
    return 0


def watch_job(args: argparse.Namespace) -> int:
    from clusterkit.jobs.watcher import watch
    from clusterkit.slurm import checked_job_id

    result = watch(checked_job_id(args.job_id), args.cluster, resubmit=args.resubmit, max_resubmits=args.max_resubmits,
                   progress=progress if args.output == "table" else lambda _: None)
    if args.output == "json":
        print_json({"job_ids": result.job_ids, "state": result.state, "classification": result.classification,
                    "resubmissions": result.resubmissions, "events": result.events})
    else:
        print(f"job {result.job_ids[-1]}: {result.state} ({result.classification}) after "
              f"{result.resubmissions} resubmission(s)")
    return 0 if result.state == "COMPLETED" else 1


def list_jobs(args: argparse.Namespace) -> int:
    from clusterkit.jobs import records
    from clusterkit.jobs.submit import handle_from_record
    from clusterkit.providers import resolve_cluster_name

    cluster = resolve_cluster_name(args.cluster)
    jobs = [(r, handle_from_record(r)) for r in records.all_records(cluster)]  # then one poll serves all
    rows = [{"job_id": r.job_id, "name": r.name, "kind": r.kind, "state": handle.state,
             "submitted": r.submitted, "stdout": r.stdout} for r, handle in jobs]
    if args.output == "json":
        print_json(rows)
    else:
        print_table(["job_id", "name", "kind", "state", "submitted", "stdout"], [list(r.values()) for r in rows])
    return 0
