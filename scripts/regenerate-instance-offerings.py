#!/usr/bin/env python3
"""Regenerate clusterkit/data/instance-offerings.tsv: every EC2 instance type and the regions that offer it.

    python scripts/regenerate-instance-offerings.py                # asks AWS with your credentials
    python scripts/regenerate-instance-offerings.py --from-moto    # offline: the copy of EC2's data moto carries

It calls DescribeRegions, then DescribeInstanceTypeOfferings (LocationType region) in every region the
account has enabled, then DescribeInstanceTypes for every type found. Regions that refuse (not opted in)
or offer nothing are left out of the table, and clusterkit then says it cannot check them offline.
Needs ec2:DescribeRegions, ec2:DescribeInstanceTypeOfferings and ec2:DescribeInstanceTypes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clusterkit.offerings import NO_ACCELERATOR, TABLE_FILE, InstanceType, format_table  # noqa: E402

AWS_SOURCE = "AWS EC2 DescribeInstanceTypes and DescribeInstanceTypeOfferings (LocationType region)"
DESCRIBE_BATCH = 100  # DescribeInstanceTypes takes at most 100 names per call


def offered_types(ec2: Any) -> set[str]:
    names: set[str] = set()
    for page in ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="region"):
        names |= {offer["InstanceType"] for offer in page["InstanceTypeOfferings"]}
    return names


def facts_of(described: dict[str, Any], regions: frozenset[str]) -> InstanceType:
    network = described.get("NetworkInfo", {})
    efa = network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0) if network.get("EfaSupported") else 0
    accelerator, count, model = NO_ACCELERATOR, 0, ""
    gpus = described.get("GpuInfo", {}).get("Gpus", [])
    neuron = described.get("NeuronInfo", {}).get("NeuronDevices", [])
    if gpus:
        accelerator, count, model = "gpu", sum(g.get("Count", 0) for g in gpus), gpus[0].get("Name", "")
    elif neuron:
        accelerator, count, model = "neuron", sum(d.get("Count", 0) for d in neuron), neuron[0].get("Name", "")
    return InstanceType(
        name=described["InstanceType"],
        architectures=tuple(described.get("ProcessorInfo", {}).get("SupportedArchitectures", [])),
        efa_interfaces=int(efa), network_cards=int(network.get("MaximumNetworkCards", 1)),
        instance_storage_gb=int(described.get("InstanceStorageInfo", {}).get("TotalSizeInGB", 0)),
        accelerator=accelerator, accelerator_count=int(count), accelerator_model=model.replace(":", " "),
        regions=regions)


def collect(session: Any, log=lambda message: print(message, file=sys.stderr)) -> tuple[list[str], list[InstanceType]]:
    """(regions covered, facts of every type offered in one of them), asked of EC2 through `session`."""
    from botocore.exceptions import ClientError

    regions = sorted(r["RegionName"] for r in session.client("ec2", region_name="us-east-1").describe_regions()["Regions"])
    offered: dict[str, set[str]] = {}
    for region in regions:
        try:
            names = offered_types(session.client("ec2", region_name=region))
        except ClientError as error:
            log(f"skipping {region}: {error.response.get('Error', {}).get('Code')}")
            continue
        if not names:
            log(f"skipping {region}: it offers no instance types to this account")
            continue
        offered[region] = names
    regions_of: dict[str, set[str]] = {}
    for region, names in offered.items():
        for name in names:
            regions_of.setdefault(name, set()).add(region)
    described: dict[str, dict[str, Any]] = {}
    for region, names in offered.items():  # a type is described in a region that offers it
        missing = sorted(names - described.keys())
        ec2 = session.client("ec2", region_name=region)
        for start in range(0, len(missing), DESCRIBE_BATCH):
            for item in ec2.describe_instance_types(InstanceTypes=missing[start:start + DESCRIBE_BATCH])["InstanceTypes"]:
                described[item["InstanceType"]] = item
    return sorted(offered), [facts_of(described[name], frozenset(regions_of[name])) for name in sorted(described)]


def moto_source() -> str:
    from importlib.metadata import version

    return f"moto {version('moto')}'s copy of {AWS_SOURCE}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=TABLE_FILE, help=f"where to write (default {TABLE_FILE})")
    parser.add_argument("--from-moto", action="store_true",
                        help="read the EC2 data moto carries (offline, fake credentials) instead of asking AWS")
    args = parser.parse_args(argv)
    import boto3

    if args.from_moto:
        from moto import mock_aws

        with mock_aws():
            session = boto3.Session(aws_access_key_id="offline", aws_secret_access_key="offline",
                                    region_name="us-east-1")
            regions, types = collect(session)
        source = moto_source()
    else:
        regions, types = collect(boto3.Session())
        source = AWS_SOURCE
    text = format_table(dt.date.today().isoformat(), source, regions, types)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}: {len(types)} instance types in {len(regions)} regions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
