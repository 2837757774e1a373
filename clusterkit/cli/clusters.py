"""Cluster verbs: create-cluster, describe-cluster, list-clusters, update-cluster, delete-cluster.

One set of verbs for every provider; the cluster's registry record chooses the provider object.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from clusterkit.cli import cluster_config
from clusterkit.cli.output import print_json, print_table, progress
from clusterkit.errors import ClusterkitError
from clusterkit.providers import open_cluster

if TYPE_CHECKING:
    from clusterkit.registry import ClusterRecord


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    create = subparsers.add_parser(
        "create-cluster", parents=[common], help="create a cluster (local Slurm, or AWS through ParallelCluster)",
        description="Create a cluster: a real local Slurm cluster on this machine (--provider local), or, "
                    "from a preset or spec file, an AWS ParallelCluster v3 cluster (--provider aws; with "
                    "--dry-run only its config, offline).")
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

    update = subparsers.add_parser("update-cluster", parents=[common], help="resize a queue of an AWS cluster")
    update.add_argument("name")
    update.add_argument("--queue", required=True, help="queue (Slurm partition) to resize")
    update.add_argument("--max-count", type=int, required=True, help="most nodes of the queue")
    update.add_argument("--min-count", type=int, help="static nodes, always on (default: unchanged)")
    update.add_argument("--compute-resource", metavar="NAME",
                        help="which compute resource, when the queue has several")
    update.set_defaults(handler=update_cluster)

    delete = subparsers.add_parser("delete-cluster", parents=[common], help="stop and remove a cluster")
    delete.add_argument("name")
    delete.add_argument("--yes", "-y", action="store_true",
                        help="do not ask before deleting an AWS cluster (needed when not interactive)")
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
    if info["provider"] == "aws":
        print(f"region {info['region']}, stack {info['stack_name']} ({info['stack_status']})")
        print(f"config: {info['config_file']}")
        print_table(["node", "type", "queue", "instance type", "state", "private ip"],
                    [[n["name"], n["node_type"], n["queue"], n["instance_type"], n["state"], n["private_ip"]]
                     for n in info["nodes"]])
        return 0
    if "slurm_conf" in info:
        print(f"slurm.conf: {info['slurm_conf']}")
    print_table(["node", "state", "cpus", "gres", "reason"],
                [[n["name"], n["state"], n["cpus"], n["gres"], n["reason"]] for n in info["nodes"]])
    return 0


def list_clusters(args: argparse.Namespace) -> int:
    from clusterkit import registry

    clusters = [_describe_or_say_why(record) for record in registry.all_records()]
    if args.output == "json":
        print_json(clusters)
    elif not clusters:
        print("no clusters; create one with `clusterkit create-cluster --provider local --name NAME`")
    else:
        print_table(["name", "provider", "status", "nodes", "created"],
                    [[c["name"], c["provider"], c["status"], len(c["nodes"]), c["created"]] for c in clusters])
    return 0


def _describe_or_say_why(record: ClusterRecord) -> dict[str, Any]:
    """One cluster that cannot be described (no credentials, say) must not hide the others."""
    try:
        return open_cluster(record.name).describe()
    except ClusterkitError as error:
        return {"name": record.name, "provider": record.provider, "status": "unknown", "created": record.created,
                "nodes": [], "error": str(error)}


def update_cluster(args: argparse.Namespace) -> int:
    from clusterkit import registry

    provider = registry.load(args.name).provider
    if provider != "aws":
        raise ClusterkitError(f"cluster {args.name!r} is a {provider} cluster, whose size is fixed",
                              fix="delete it and create it again with the size you need (--nodes N)")
    cluster = open_cluster(args.name)
    started = time.monotonic()
    result = cluster.update_queue(args.queue, args.max_count, args.min_count, args.compute_resource,
                                  progress=progress if args.output == "table" else lambda _: None)
    result["seconds"] = round(time.monotonic() - started, 2)
    if args.output == "json":
        print_json(result)
    else:
        sizes = ", ".join(f"{r['name']} {r['min_count']}-{r['max_count']}" for r in result["compute_resources"])
        print(f"cluster {args.name!r}: queue {args.queue!r} is now {sizes} nodes ({result['seconds']} s)")
    return 0


def delete_cluster(args: argparse.Namespace) -> int:
    cluster = open_cluster(args.name)
    started = time.monotonic()
    if cluster.record.provider == "aws":
        # An AWS cluster takes its stack, and storage it created with DeletionPolicy Delete, along.
        _confirm_delete(args.name, cluster.region, args.yes)
        cluster.delete(progress=progress if args.output == "table" else lambda _: None)
    else:
        cluster.delete()
    seconds = round(time.monotonic() - started, 2)
    if args.output == "json":
        print_json({"name": args.name, "deleted": True, "seconds": seconds})
    else:
        print(f"cluster {args.name!r} deleted ({seconds} s)")
    return 0


def _confirm_delete(name: str, region: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise ClusterkitError(f"deleting AWS cluster {name!r} needs confirmation and there is no terminal to ask",
                              fix="pass --yes")
    answer = input(f"delete AWS cluster {name!r} in {region}, with its head node, compute nodes and the "
                   f"storage it created? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise ClusterkitError(f"cluster {name!r} not deleted", fix="answer y, or pass --yes")
