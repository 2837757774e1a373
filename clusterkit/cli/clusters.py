"""Cluster verbs: create-cluster, describe-cluster, list-clusters, delete-cluster."""

from __future__ import annotations

import argparse
import time

from clusterkit.cli import cluster_config
from clusterkit.cli.output import print_json, print_table, progress
from clusterkit.errors import ClusterkitError
from clusterkit.providers import open_cluster


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    create = subparsers.add_parser(
        "create-cluster", parents=[common], help="create a cluster (local Slurm, or an AWS ParallelCluster config)",
        description="Create a cluster: a real local Slurm cluster on this machine (--provider local), or, "
                    "from a preset or spec file, an AWS ParallelCluster v3 config (--provider aws).")
    create.add_argument("--name", required=True, help="cluster name")
    create.add_argument("--provider", choices=("local", "aws"), default=None,
                        help="where the cluster runs (default: aws with --preset/--file, else local)")
    create.add_argument("--dry-run", action="store_true", help="show what would be done; change nothing")
    local = create.add_argument_group("local provider")
    local.add_argument("--nodes", type=int, default=4, help="number of nodes (default 4)")
    local.add_argument("--cpus-per-node", type=int, default=2, help="CPUs per node (default 2)")
    local.add_argument("--gpus-per-node", type=int, default=0, help="fake GPUs per node, through gres (default 0)")
    cluster_config.add_spec_arguments(create)
    create.set_defaults(handler=create_cluster)

    describe = subparsers.add_parser("describe-cluster", parents=[common], help="show a cluster and its nodes")
    describe.add_argument("name")
    describe.set_defaults(handler=describe_cluster)

    listing = subparsers.add_parser("list-clusters", parents=[common], help="list known clusters")
    listing.set_defaults(handler=list_clusters)

    delete = subparsers.add_parser("delete-cluster", parents=[common], help="stop and remove a cluster")
    delete.add_argument("name")
    delete.set_defaults(handler=delete_cluster)


def create_cluster(args: argparse.Namespace) -> int:
    provider = args.provider or ("aws" if args.preset or args.file else "local")
    if provider == "aws":
        return cluster_config.run_aws_create(args)
    if args.preset or args.file:
        raise ClusterkitError("--preset and --file describe AWS clusters",
                              fix="drop them for a local cluster, or use --provider aws")
    from clusterkit.providers.local.cluster import LocalCluster

    if args.dry_run:
        plan = LocalCluster.plan(args.name, nodes=args.nodes, cpus_per_node=args.cpus_per_node,
                                 gpus_per_node=args.gpus_per_node)
        if args.output == "json":
            print_json(plan)
        else:
            print(f"# would create local cluster {args.name!r} in {plan['directory']}")
            for path, text in plan["files"].items():
                print(f"\n# --- {path}\n{text}", end="")
            print("\n# daemons it would start:")
            for command in plan["commands"]:
                print(command)
        return 0
    started = time.monotonic()
    cluster = LocalCluster.create(args.name, nodes=args.nodes, cpus_per_node=args.cpus_per_node,
                                  gpus_per_node=args.gpus_per_node,
                                  progress=progress if args.output == "table" else lambda _: None)
    info = cluster.describe()
    info["seconds"] = round(time.monotonic() - started, 2)
    if args.output == "json":
        print_json(info)
    else:
        print(f"cluster {args.name!r} is {info['status']} with {len(info['nodes'])} nodes "
              f"({info['seconds']} s)")
        print(f"use Slurm directly: export SLURM_CONF={info['slurm_conf']}")
    return 0


def describe_cluster(args: argparse.Namespace) -> int:
    info = open_cluster(args.name).describe()
    if args.output == "json":
        print_json(info)
        return 0
    print(f"cluster {info['name']} ({info['provider']}): {info['status']}")
    if "slurm_conf" in info:
        print(f"slurm.conf: {info['slurm_conf']}")
    print_table(["node", "state", "cpus", "gres", "reason"],
                [[n["name"], n["state"], n["cpus"], n["gres"], n["reason"]] for n in info["nodes"]])
    return 0


def list_clusters(args: argparse.Namespace) -> int:
    from clusterkit import registry

    clusters = [open_cluster(record.name).describe() for record in registry.all_records()]
    if args.output == "json":
        print_json(clusters)
    elif not clusters:
        print("no clusters; create one with `clusterkit create-cluster --provider local --name NAME`")
    else:
        print_table(["name", "provider", "status", "nodes", "created"],
                    [[c["name"], c["provider"], c["status"], len(c["nodes"]), c["created"]] for c in clusters])
    return 0


def delete_cluster(args: argparse.Namespace) -> int:
    started = time.monotonic()
    open_cluster(args.name).delete()
    seconds = round(time.monotonic() - started, 2)
    if args.output == "json":
        print_json({"name": args.name, "deleted": True, "seconds": seconds})
    else:
        print(f"cluster {args.name!r} deleted ({seconds} s)")
    return 0
