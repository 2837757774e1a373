"""`clusterkit validate SPEC.yaml`: every finding of a cluster spec or a job spec, offline.

Argument parsing and printing only; the work is in clusterkit.cluster and clusterkit.jobs (imported
inside the handler so that `clusterkit --help` does not load them). A job spec is told from a cluster
spec by its keys (it names a `command`), or by `--kind`.
"""

from __future__ import annotations

import argparse
import sys

from clusterkit.cli.output import print_findings, print_json

KINDS = ("auto", "cluster", "job")


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    validate = subparsers.add_parser(
        "validate", parents=[common],
        help="check a cluster spec (every ParallelCluster rule) or a job spec offline",
        description="Check a cluster spec or a job spec offline and print every finding; exit 1 if any is an "
                    "error. A spec with a `command` is a job spec.",
    )
    validate.add_argument("spec", metavar="SPEC.yaml", help="cluster spec or job spec file")
    validate.add_argument("--kind", choices=KINDS, default="auto",
                          help="what the file is (default: auto, a job spec names a command)")
    validate.set_defaults(handler=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    from clusterkit import spec_reader
    from clusterkit.findings import has_errors

    tree = spec_reader.read_file(args.spec, "spec (YAML)")
    kind = args.kind if args.kind != "auto" else ("job" if names_a_command(tree) else "cluster")
    if kind == "job":
        from clusterkit.jobs.validators import check_job_data

        findings = check_job_data(tree)
    else:
        from clusterkit.cluster.plan import plan_spec

        findings = list(plan_spec(tree).findings)
    valid = not has_errors(findings)
    if args.output == "json":
        print_json({"kind": kind, "valid": valid, "findings": [finding.to_dict() for finding in findings]})
    else:
        print_findings(findings, sys.stdout)
        if valid:
            print(f"{args.spec}: valid {kind} spec")
    return 0 if valid else 1


def names_a_command(tree: object) -> bool:
    """A job spec names a command; a cluster spec does not (it has queues or a preset). Told here, so
    that checking a cluster spec does not load the job modules."""
    from clusterkit.spec_reader import Mapping

    keys = {key.text for key, _ in tree.items} if isinstance(tree, Mapping) else set(tree or {})
    return "command" in keys
