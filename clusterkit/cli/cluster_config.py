"""`clusterkit validate SPEC.yaml`: every finding of a cluster spec, offline.

Argument parsing and printing only; the work is in clusterkit.cluster (imported inside the handler so
that `clusterkit --help` does not load it).
"""

from __future__ import annotations

import argparse
import sys

from clusterkit.cli.output import print_findings, print_json


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    validate = subparsers.add_parser(
        "validate", parents=[common],
        help="check a cluster spec offline against every ParallelCluster rule",
        description="Check a cluster spec offline and print every finding; exit 1 if any is an error.",
    )
    validate.add_argument("spec", metavar="SPEC.yaml", help="cluster spec file")
    validate.set_defaults(handler=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    from clusterkit.cluster.plan import check_spec_file
    from clusterkit.findings import has_errors

    checked = check_spec_file(args.spec)
    valid = not has_errors(checked.findings)
    if args.output == "json":
        print_json({"valid": valid, "findings": [finding.to_dict() for finding in checked.findings]})
    else:
        print_findings(checked.findings, sys.stdout)
        if valid:
            print(f"{args.spec}: valid")
    return 0 if valid else 1
