"""`clusterkit timeline JOB_ID`: the run's timeline as a picture, an HTML page (default), PNG or SVG.

The output path is checked before the cluster is asked anything; the plotting library is loaded only here.
"""

from __future__ import annotations

import argparse

from clusterkit.cli.output import JSON_ON_STDOUT, print_json, progress, write_stdout
from clusterkit.files import STDOUT, check_outputs, write_user_file


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    timeline = subparsers.add_parser(
        "timeline", parents=[common], help="the run's timeline as a picture: nodes, tries, faults, resumes",
        description="Draw a supervised run on one time axis: a row per node with its tries, the goodput ledger's "
                    "categories, each fault, decision and resume with its evidence on hover, the checkpoint a "
                    "resume loaded and the work lost. One self-contained HTML page (nothing fetched when opened), "
                    "or a PNG or SVG for reports.")
    timeline.add_argument("job_id", metavar="JOB_ID")
    timeline.add_argument("--output-file", metavar="FILE",
                          help="where to write it (default: job-JOB_ID-timeline.FORMAT here; - for stdout)")
    timeline.add_argument("--format", metavar="FORMAT",
                          help="html, png or svg (default: the file's suffix, or html)")
    timeline.add_argument("--cluster", metavar="NAME",
                          help="cluster to use (default: $CLUSTERKIT_CLUSTER, or the only one)")
    timeline.set_defaults(handler=run_timeline)


def run_timeline(args: argparse.Namespace) -> int:
    from clusterkit.jobs.submit import job_handle
    from clusterkit.jobs.timeline_picture import format_of
    from clusterkit.slurm import checked_job_id

    job_id = checked_job_id(args.job_id)
    check_outputs([("--output-file", args.output_file)], stdout_busy=JSON_ON_STDOUT if args.output == "json" else None)
    file_format = format_of(args.output_file, args.format)
    path = args.output_file or f"job-{job_id}-timeline.{file_format}"
    if args.output_file is None:
        check_outputs([("--output-file", path)])  # the default name: a directory or FIFO there is refused too
    picture = job_handle(job_id, args.cluster).timeline()
    data = picture.render(file_format)
    if path == STDOUT:
        write_stdout(data)
        return 0
    write_user_file(path, data)
    if args.output == "json":
        print_json({"job_id": job_id, "file": path, "format": file_format, "bytes": len(data),
                    "summary": picture.timeline.summary(), **picture.timeline.to_dict()})
    else:
        progress(f"wrote {path}: {picture.timeline.summary()}")
    return 0
