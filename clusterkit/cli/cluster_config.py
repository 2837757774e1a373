"""Cluster specs on the command line: `clusterkit validate SPEC.yaml` and `create-cluster --provider aws`.

Argument parsing and printing only; the work is in clusterkit.cluster and clusterkit.providers.aws
(imported inside the handlers so that `clusterkit --help` does not load them, nor boto3).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from clusterkit.cli.output import print_json
from clusterkit.errors import ClusterkitError

if TYPE_CHECKING:
    from clusterkit.cluster.plan import Plan
    from clusterkit.findings import Finding


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    validate = subparsers.add_parser(
        "validate", parents=[common],
        help="check a cluster spec offline against every ParallelCluster rule",
        description="Check a cluster spec offline and print every finding; exit 1 if any is an error.",
    )
    validate.add_argument("spec", metavar="SPEC.yaml", help="cluster spec file")
    validate.set_defaults(handler=run_validate)


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `create-cluster` that describe an AWS cluster (the lead's parser adds --name, --dry-run)."""
    source = parser.add_argument_group("cluster spec (AWS)")
    source.add_argument("--preset", metavar="NAME", help="start from a preset: p4de, p4d, p5, trn1, trn1n, g5")
    source.add_argument("--file", metavar="SPEC.yaml", help="start from a cluster spec file")
    source.add_argument("--region", metavar="R", help="AWS region (overrides the spec)")
    source.add_argument("--subnet-id", metavar="S", help="subnet of the head node and queues (overrides the spec)")
    source.add_argument("--key-name", metavar="K", help="EC2 key pair for SSH (overrides the spec)")
    source.add_argument("--output-config", metavar="FILE",
                        help="write the ParallelCluster config here (default: print it)")
    source.add_argument("--custom-ami", metavar="NAME_OR_ID",
                        help="boot nodes from this AMI (name or ami- id, looked up on AWS; not used by --dry-run)")


def run_validate(args: argparse.Namespace) -> int:
    from clusterkit.cluster.loader import read_spec_file
    from clusterkit.cluster.plan import plan
    from clusterkit.findings import has_errors

    checked = plan(read_spec_file(args.spec))
    if args.output == "json":
        print_json({"valid": not has_errors(checked.findings),
                    "findings": [finding.to_dict() for finding in checked.findings]})
    else:
        _print_findings(checked.findings, sys.stdout)
        if not has_errors(checked.findings):
            print(f"{args.spec}: valid")
    return 1 if has_errors(checked.findings) else 0


def run_aws_create(args: argparse.Namespace) -> int:
    """`create-cluster --provider aws`: with --dry-run, render and check offline; without, create on AWS."""
    from clusterkit.cluster.plan import SpecOverrides, apply_overrides, plan, spec_data
    from clusterkit.files import write_atomically

    if not getattr(args, "name", None):
        raise ClusterkitError("create-cluster needs --name", fix="e.g. --name train-p4de")
    overrides = SpecOverrides(name=args.name, region=getattr(args, "region", None),
                              subnet_id=getattr(args, "subnet_id", None), key_name=getattr(args, "key_name", None))
    data = spec_data(getattr(args, "preset", None), getattr(args, "file", None))
    checked = plan(apply_overrides(data, overrides))
    output_config = getattr(args, "output_config", None)
    as_json = getattr(args, "output", "table") == "json"
    if not getattr(args, "dry_run", False):
        return _create_on_aws(args, checked, output_config, as_json)

    if checked.ok and output_config:
        write_atomically(output_config, checked.config_text)  # type: ignore[arg-type]
    if as_json:
        print_json({
            "config": checked.config,
            "config_file": output_config if checked.ok else None,
            "summary": checked.summary.to_dict() if checked.summary else None,
            "findings": [finding.to_dict() for finding in checked.findings],
        })
        return 0 if checked.ok else 1
    if not checked.ok:
        _print_findings(checked.findings, sys.stderr)
        print("no config written: fix the errors above", file=sys.stderr)
        return 1
    # With the config on stdout, everything else goes to stderr so that the YAML can be piped.
    report = sys.stdout if output_config else sys.stderr
    if not output_config:
        sys.stdout.write(checked.config_text)  # type: ignore[arg-type]
    _print_findings(checked.findings, report)
    for line in checked.summary.lines():  # type: ignore[union-attr]
        print(line, file=report)
    if output_config:
        print(f"wrote {output_config}", file=report)
    return 0


def _create_on_aws(args: argparse.Namespace, checked: Plan, output_config: str | None, as_json: bool) -> int:
    """Resolve on AWS, ParallelCluster dry run, create, follow the stack, save the record."""
    from clusterkit.cli.output import progress
    from clusterkit.findings import Level
    from clusterkit.providers.aws import Aws, AwsCluster, prepare

    if not checked.ok:
        return _refuse(checked.findings, as_json, "the spec has errors: nothing was created")
    say = (lambda _: None) if as_json else progress
    aws = Aws(checked.spec.region)  # type: ignore[union-attr]
    prepared = prepare(checked, aws, custom_ami=getattr(args, "custom_ami", None), progress=say)
    if not prepared.ok:
        return _refuse(prepared.findings, as_json, "AWS or ParallelCluster refused the cluster: nothing was created")
    if output_config:
        import yaml

        from clusterkit.files import write_atomically

        write_atomically(output_config, yaml.safe_dump(prepared.config, sort_keys=False, width=1000))
    if not as_json:
        _print_findings([f for f in prepared.findings if f.level is not Level.INFO], sys.stderr)
        for key, value in (prepared.resolution.chosen if prepared.resolution else {}).items():
            say(f"chose {key}: {value}")
    cluster = AwsCluster.create(prepared, aws, progress=say)
    info = cluster.describe()
    if as_json:
        print_json({**info, "chosen": prepared.resolution.chosen if prepared.resolution else {},
                    "findings": [finding.to_dict() for finding in prepared.findings]})
        return 0
    head = info.get("head_node") or {}
    address = head.get("public_ip") or head.get("private_ip")
    print(f"cluster {cluster.name!r} is {info['status']} in {cluster.region}"
          + (f"; head node {address}" if address else ""))
    return 0


def _refuse(findings: list[Finding], as_json: bool, summary: str) -> int:
    if as_json:
        print_json({"created": False, "findings": [finding.to_dict() for finding in findings]})
    else:
        _print_findings(findings, sys.stderr)
        print(summary, file=sys.stderr)
    return 1


def _print_findings(findings: list[Finding], stream) -> None:  # noqa: ANN001 - a text stream
    for finding in findings:
        print(finding, file=stream)
