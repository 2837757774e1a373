"""Cluster verbs: create-cluster, describe-cluster, list-clusters, update-cluster, delete-cluster, replace-node,
reboot-node.

One set of verbs for every provider: they call the provider interface (plan, prepare, apply; describe,
resize, deletion, delete) and print what comes back. Nothing here knows which provider it talks to.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from clusterkit.cli.output import JSON_ON_STDOUT, print_findings, print_json, print_table, progress, write_stdout
from clusterkit.errors import ClusterkitError
from clusterkit.files import STDOUT, check_outputs, write_user_files

if TYPE_CHECKING:
    from clusterkit.providers import ClusterInfo, ClusterPlan, DeletionPlan, Progress
    from clusterkit.providers.base import NodeActionPlan
    from clusterkit.registry import JsonObject

# create-cluster arguments beyond the request; which provider takes each is that provider's own declaration.
PLAN_ARGUMENTS = ("output_config", "output_prerequisites", "account_dry_run")


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    create = subparsers.add_parser(
        "create-cluster", parents=[common], help="create a cluster (local Slurm, or AWS through ParallelCluster)",
        description="Create a cluster: a real local Slurm cluster on this machine (--provider local), or, "
                    "from a preset or spec file, an AWS ParallelCluster v3 cluster (--provider aws). --dry-run "
                    "shows the plan (files, config, actions) and changes nothing.")
    create.add_argument("--name", required=True, help="cluster name")
    create.add_argument("--provider", choices=("local", "aws", "hyperpod"), default=None,
                        help="where the cluster runs (default: aws with --preset/--file, else local; hyperpod: "
                             "SageMaker HyperPod from the same presets and spec files, in --subnet-id)")
    create.add_argument("--dry-run", action="store_true", help="show what would be done; change nothing (offline)")
    create.add_argument("--account-dry-run", action="store_true",
                        help="AWS: check credentials, resolve the spec against the account, render the prerequisites "
                             "and run ParallelCluster's own dry run; create nothing")
    local = create.add_argument_group("local provider")
    local.add_argument("--nodes", type=int, default=4, help="number of nodes (default 4)")
    local.add_argument("--cpus-per-node", type=int, default=2, help="CPUs per node (default 2)")
    local.add_argument("--gpus-per-node", type=int, default=0, help="fake GPUs per node, through gres (default 0)")
    local.add_argument("--ssh", action="store_true",
                       help="run an sshd for the head node on a local port, with a key made for the cluster: "
                            "the cluster can then be used as a remote one (`clusterkit connect`)")
    local.add_argument("--timings", default="test", metavar="SET",
                       help="Slurm's failure timers and node replacement: test (seconds, the default) or "
                            "parallelcluster (ParallelCluster 3.16's: SlurmdTimeout=180, cred_expire=70, "
                            "replacement every 60 s)")
    local.add_argument("--replace-nodes", action=argparse.BooleanOptionalAction, default=None,
                       help="replace a DOWN or DRAINED node with a fresh one, as clustermgtd does (default: on "
                            "at parallelcluster timings, off at test timings)")
    local.add_argument("--boot-delay", type=float, default=None, metavar="SECONDS",
                       help="how long a replacement node takes to boot (default: 0 at test timings, 30 at "
                            "parallelcluster timings)")
    local.add_argument("--replacement", choices=("clustermgtd", "hyperpod"), default=None,
                       help="which nodes are replaced (implies --replace-nodes): clustermgtd (the default: every DOWN "
                            "or DRAINED node) or hyperpod (as SageMaker HyperPod's node recovery: only a node marked "
                            "State=FAIL Reason=Action:Replace, or Action:Reboot, once its jobs ended; its nodes carry "
                            "HyperPod's resource config, so clusterkit on them acts as on HyperPod)")
    local.add_argument("--slurm", default=None, metavar="VERSION",
                       help="which Slurm runs the cluster: host (this machine's packages) or 24.11 (Debian 13's, "
                            "from the root `scripts/install-slurm.sh --slurm 24.11` builds); default: "
                            "$CLUSTERKIT_LOCAL_SLURM, else host")
    source = create.add_argument_group("cluster spec (AWS)")
    source.add_argument("--preset", metavar="NAME", help="start from a preset: p4de, p4d, p5, trn1, trn1n, g5")
    source.add_argument("--file", metavar="SPEC.yaml", help="start from a cluster spec file")
    source.add_argument("--region", metavar="R", help="AWS region (overrides the spec)")
    source.add_argument("--subnet-id", metavar="S", help="subnet of the head node and queues (overrides the spec)")
    source.add_argument("--head-subnet-id", metavar="S",
                        help="the head node's own subnet, e.g. a public one while queues stay in a private "
                             "--subnet-id (overrides the spec)")
    source.add_argument("--key-name", metavar="K", help="EC2 key pair for SSH (overrides the spec)")
    source.add_argument("--output-config", metavar="FILE",
                        help="write the ParallelCluster config here (the same bytes with and without --dry-run "
                             "when the spec names its subnet, scripts bucket and AMI id)")
    source.add_argument("--output-prerequisites", metavar="FILE",
                        help="with --dry-run or --account-dry-run: write the CloudFormation template of clusterkit's "
                             "prerequisites stack (network, accounting database) here, to review beside the config")
    source.add_argument("--identity-file", metavar="KEY",
                        help="the SSH key for the head node (default: ~/.ssh/KEY_NAME.pem or ~/.ssh/KEY_NAME, else "
                             "your agent and ssh config)")
    source.add_argument("--custom-ami", metavar="NAME_OR_ID",
                        help="boot nodes from this AMI: an ami- id, or a name looked up at create (overrides "
                             "the spec's image.custom_ami)")
    hyperpod = create.add_argument_group("SageMaker HyperPod (with --preset or --file)")
    hyperpod.add_argument("--execution-role", metavar="ARN",
                          help="the IAM role HyperPod's instance groups run as (arn:aws:iam::ACCOUNT:role/NAME)")
    create.set_defaults(handler=create_cluster)

    connect = subparsers.add_parser(
        "connect", parents=[common], help="use an existing Slurm cluster reached over SSH",
        description="Register an existing Slurm cluster (any Slurm, not only clusterkit's) whose login node "
                    "is reached over SSH with your own ssh setup (~/.ssh/config, agent, ProxyJump); every job "
                    "verb then works with --cluster NAME from this machine.")
    connect.add_argument("name", help="a name for the cluster here")
    connect.add_argument("--ssh", required=True, metavar="[USER@]HOST", help="the login (head) node")
    connect.add_argument("--port", type=int, help="SSH port (default: from ~/.ssh/config, else 22)")
    connect.add_argument("--identity-file", metavar="KEY", help="private key (default: your agent and ssh config)")
    connect.add_argument("--known-hosts", metavar="FILE",
                         help="check the host key against this file (default: your known_hosts)")
    connect.add_argument("--accept-new-host-key", action="store_true",
                         help="trust the host key seen now, and only that one later (kept for this cluster)")
    connect.add_argument("--runs-dir", metavar="PATH",
                         help="where each run's files go on the cluster (default: ~/clusterkit-runs there)")
    connect.add_argument("--python", default="python3", metavar="PYTHON",
                         help="the cluster's Python for functions (default python3 on its PATH)")
    connect.set_defaults(handler=connect_cluster)

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

    delete = subparsers.add_parser("delete-cluster", parents=[common], help="stop and remove a cluster",
                                   description="Delete a cluster. It first says what goes and what stays; AWS "
                                               "clusters ask before deleting (--yes to agree up front), and "
                                               "shared storage is deleted only with --delete-storage.")
    delete.add_argument("name")
    delete.add_argument("--yes", "-y", action="store_true",
                        help="do not ask before deleting an AWS cluster (needed when not interactive)")
    delete.add_argument("--dry-run", action="store_true", help="say what would be deleted and kept; delete nothing")
    delete.add_argument("--delete-storage", action="store_true",
                        help="agree that shared storage with DeletionPolicy Delete is deleted too, files and all")
    delete.set_defaults(handler=delete_cluster)

    for verb, action, what in (("replace-node", "replace", "new hardware in their place; their volumes are lost"),
                               ("reboot-node", "reboot", "the same instances, started again")):
        nodes = subparsers.add_parser(
            verb, parents=[common], help=f"{action} nodes of a HyperPod cluster by name ({what})",
            description=f"Ask the cluster's provider to {action} nodes ({what}), named as Slurm names them "
                        "(ip-10-1-2-3) or by instance id (i-...); SageMaker HyperPod takes at most 25 a call. "
                        "Providers that cannot say so.")
        nodes.add_argument("name", help="the cluster")
        nodes.add_argument("nodes", nargs="+", metavar="NODE", help="Slurm name or instance id")
        nodes.add_argument("--dry-run", action="store_true",
                           help="print the exact requests (the nodes are looked up); send none")
        nodes.set_defaults(handler=node_action, action=action)


def _say(args: argparse.Namespace) -> Progress:
    from clusterkit.providers import quiet

    return progress if args.output == "table" else quiet


def create_cluster(args: argparse.Namespace) -> int:
    from clusterkit.providers import ClusterRequest, provider_named
    from clusterkit.providers.plan import refuse_foreign_options

    request = ClusterRequest(
        name=args.name, provider=args.provider, preset=args.preset, spec_file=args.file, region=args.region,
        subnet_id=args.subnet_id, head_subnet_id=args.head_subnet_id, key_name=args.key_name,
        custom_ami=args.custom_ami, identity_file=args.identity_file, execution_role=args.execution_role,
        nodes=args.nodes,
        cpus_per_node=args.cpus_per_node, gpus_per_node=args.gpus_per_node, ssh=args.ssh,
        timings=args.timings, replace_nodes=args.replace_nodes, boot_delay=args.boot_delay,
        replacement=args.replacement, slurm=args.slurm)
    provider = provider_named(request.provider_name)
    refuse_foreign_options(provider, (*request.given(), *(name for name in PLAN_ARGUMENTS
                                                          if getattr(args, name) not in (None, False))))
    if args.output_prerequisites is not None and not (args.dry_run or args.account_dry_run):
        raise ClusterkitError("--output-prerequisites writes the template of a dry run",
                              fix="add --dry-run (offline) or --account-dry-run")
    if args.dry_run and args.account_dry_run:
        raise ClusterkitError("--dry-run stays offline; --account-dry-run asks the account", fix="choose one")
    _check_outputs(args)
    plan = provider.plan(request)
    if args.dry_run:
        return _print_plan(plan, args)
    if not plan.ok:
        return _refuse(plan, args, "the spec has errors: nothing was created")
    say = _say(args)
    started = time.monotonic()
    plan = provider.prepare(plan, say)
    if args.account_dry_run:
        return _print_plan(plan, args)
    if not plan.ok:
        return _refuse(plan, args, "AWS or ParallelCluster refused the cluster: nothing was created")
    on_stdout = _write_outputs(_outputs(plan, args, with_template=False))
    if args.output == "table":
        print_findings([f for f in plan.findings if f.level.value != "info"], sys.stderr)
        for note in plan.details.notes():
            say(note)
    cluster = provider.apply(plan, say)
    info = cluster.describe()
    seconds = round(time.monotonic() - started, 2)
    if args.output == "json":
        print_json({**info.to_dict(), "seconds": seconds, "plan": plan.to_dict()})
    else:
        print(f"cluster {info.name!r} is {info.status}" + (f" {info.where}" if info.where else "") + f" ({seconds} s)",
              file=sys.stderr if on_stdout else sys.stdout)
    return 0


def _check_outputs(args: argparse.Namespace) -> None:
    """Before any work: the output paths neither overwrite the spec or key this command reads, nor each
    other; `-` is stdout where stdout is free."""
    if args.output == "json":
        busy = JSON_ON_STDOUT
    elif (args.dry_run or args.account_dry_run) and args.output_config is None:
        busy = "stdout carries the dry run's config, unless --output-config names a file"
    else:
        busy = None
    check_outputs([("--output-config", args.output_config), ("--output-prerequisites", args.output_prerequisites)],
                  [("--file", args.file), ("--identity-file", args.identity_file)], stdout_busy=busy)


def _outputs(plan: ClusterPlan, args: argparse.Namespace, *, with_template: bool) -> list[tuple[str, str]]:
    """(path, text) of each output the user named: the config and, from a dry run, the prerequisites template."""
    outputs = []
    if args.output_config is not None and plan.details.document is not None:
        outputs.append((args.output_config, plan.details.document))
    if with_template and args.output_prerequisites is not None:
        template = plan.details.prerequisites_template
        if template is None:
            raise ClusterkitError("this cluster needs no prerequisites stack (its spec names its network and has no "
                                  "accounting database to create)", fix="drop --output-prerequisites")
        outputs.append((args.output_prerequisites, template))
    return outputs


def _write_outputs(outputs: list[tuple[str, str]]) -> bool:
    """Write the named files, all or none, then the output named `-` to stdout; whether one went there."""
    write_user_files([(path, text) for path, text in outputs if path != STDOUT])
    for path, text in outputs:
        if path == STDOUT:
            write_stdout(text)
            return True
    return False


def _print_plan(plan: ClusterPlan, args: argparse.Namespace) -> int:
    """A dry run (offline, or against the account): the plan, and (with --output-config, --output-prerequisites)
    the config and the prerequisites template, written only when the plan is ok."""
    outputs = _outputs(plan, args, with_template=True) if plan.ok else []
    on_stdout = _write_outputs(outputs)
    if args.output == "json":
        print_json({**plan.to_dict(), "config_file": args.output_config if plan.ok else None,
                    "prerequisites_file": args.output_prerequisites if plan.ok else None})
        return 0 if plan.ok else 1
    if not plan.ok:
        print_findings(plan.findings, sys.stderr)
        print("nothing would be created: fix the errors above", file=sys.stderr)
        return 1
    # What a dry run produces goes to stdout (a config can be piped); the rest to stderr, then.
    document = plan.details.document
    if document is not None and args.output_config is None:
        write_stdout(document)
        on_stdout = True
    report = sys.stderr if on_stdout else sys.stdout
    if document is None:
        print(f"# would create {plan.provider} cluster {plan.name!r} {plan.details.where}", file=report)
        for path, text in plan.files.items():
            print(f"\n# --- {path}\n{text}", end="", file=report)
    print_findings(plan.findings, report)
    for line in plan.details.summary_lines():
        print(line, file=report)
    print("\n# what it would do:", file=report)
    for action in plan.actions:
        print(action, file=report)
    for path, _ in outputs:
        if path != STDOUT:
            print(f"wrote {path}", file=report)
    if args.account_dry_run:
        print(f"account dry run: nothing was created {plan.details.where}", file=report)
    return 0


def _refuse(plan: ClusterPlan, args: argparse.Namespace, summary: str) -> int:
    if args.output == "json":
        print_json({"created": False, "findings": [finding.to_dict() for finding in plan.findings]})
    else:
        print_findings(plan.findings, sys.stderr)
        print(summary, file=sys.stderr)
    return 1


def _print_info(info: ClusterInfo) -> None:
    print(f"cluster {info.name} ({info.provider}): {info.status}")
    for key, value in info.details.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        print(f"{key}: {value}")
    rows = info.node_rows()
    if rows:
        headers = list(rows[0])
        print_table(headers, [[row[header] for header in headers] for row in rows])


def connect_cluster(args: argparse.Namespace) -> int:
    from clusterkit.providers.ssh import connect

    cluster = connect(args.name, args.ssh, port=args.port, identity_file=args.identity_file,
                      known_hosts=args.known_hosts, accept_new_host_key=args.accept_new_host_key,
                      runs_dir=args.runs_dir, python=args.python, progress=_say(args))
    info = cluster.describe()
    if args.output == "json":
        print_json(info.to_dict())
    else:
        print(f"cluster {info.name!r} is {info.status} {info.where}: {len(info.nodes)} nodes; "
              f"runs go to {cluster.runs_dir()} there")
    return 0


def describe_cluster(args: argparse.Namespace) -> int:
    from clusterkit.providers import open_cluster

    info = open_cluster(args.name).describe()
    if args.output == "json":
        print_json(info.to_dict())
    else:
        _print_info(info)
    return 0


def list_clusters(args: argparse.Namespace) -> int:
    from clusterkit import registry

    clusters = [_describe_or_say_why(record.name, record.provider, record.created)
                for record in registry.all_records()]
    if args.output == "json":
        print_json(clusters)
    elif not clusters:
        print("no clusters; create one with `clusterkit create-cluster --provider local --name NAME`")
    else:
        print_table(["name", "provider", "status", "nodes", "created"],
                    [[c["name"], c["provider"], c["status"], len(c["nodes"]), c["created"]]  # type: ignore[arg-type]
                     for c in clusters])
    return 0


def _describe_or_say_why(name: str, provider: str, created: str) -> JsonObject:
    """One cluster that cannot be described (no credentials, say) must not hide the others."""
    from clusterkit.providers import open_cluster

    try:
        return open_cluster(name).describe().to_dict()
    except ClusterkitError as error:
        return {"name": name, "provider": provider, "status": "unknown", "created": created, "nodes": [],
                "error": str(error)}


def update_cluster(args: argparse.Namespace) -> int:
    from clusterkit.providers import open_cluster

    started = time.monotonic()
    result = open_cluster(args.name).resize(args.queue, args.max_count, args.min_count, args.compute_resource,
                                            progress=_say(args))
    seconds = round(time.monotonic() - started, 2)
    if args.output == "json":
        print_json({**result.to_dict(), "seconds": seconds})
    else:
        sizes = ", ".join(f"{r.name} {r.min_count}-{r.max_count}" for r in result.compute_resources)
        print(f"cluster {args.name!r}: queue {args.queue!r} is now {sizes} nodes ({seconds} s)")
    return 0


def delete_cluster(args: argparse.Namespace) -> int:
    from clusterkit.providers import open_cluster

    cluster = open_cluster(args.name)
    deletion = cluster.deletion()
    if args.dry_run:
        _print_deletion(deletion, args)
        return 0
    if deletion.storage_deleted and not args.delete_storage:
        raise ClusterkitError(f"deleting cluster {deletion.name!r} would delete shared storage and every file on it: "
                              + "; ".join(deletion.storage_deleted),
                              fix="copy what you need, then pass --delete-storage (or set its deletion_policy: "
                                  "Retain and update the cluster)")
    if deletion.confirm and not args.yes:
        _confirm(deletion)
    elif args.output == "table":
        _say_what_goes(deletion)
    started = time.monotonic()
    cluster.delete(progress=_say(args))
    seconds = round(time.monotonic() - started, 2)
    if args.output == "json":
        print_json({**deletion.to_dict(), "deleted": True, "seconds": seconds})
    else:
        print(f"cluster {args.name!r} deleted ({seconds} s)" +
              (f"; kept: {'; '.join(deletion.keeps)}" if deletion.keeps else ""))
    return 0


def node_action(args: argparse.Namespace) -> int:
    from clusterkit.providers import open_cluster
    from clusterkit.providers.base import NodeAction

    cluster = open_cluster(args.name)
    plan = cluster.plan_node_action(NodeAction(args.action), list(args.nodes))
    if args.dry_run:
        if args.output == "json":
            print_json({**plan.to_dict(), "dry_run": True})
        else:
            _print_node_plan(plan)
        return 0
    started = time.monotonic()
    done = cluster.act_on_nodes(plan, progress=_say(args))
    seconds = round(time.monotonic() - started, 2)
    if args.output == "json":
        print_json({**plan.to_dict(), "dry_run": False, "done": list(done), "seconds": seconds})
    else:
        print(f"cluster {plan.cluster!r}: {len(done)} node(s) being {plan.action.value.rstrip('e')}ed: "
              f"{', '.join(done)} ({seconds} s)")
    return 0


def _print_node_plan(plan: NodeActionPlan) -> None:
    print(f"{plan.action.value} on cluster {plan.cluster!r}: " +
          ", ".join(name if name == node_id else f"{name} ({node_id})" for name, node_id in plan.nodes))
    for request in plan.requests:
        print(f"  would call {request.operation}(ClusterName={request.cluster_name!r}, "
              f"NodeIds={list(request.node_ids)!r})")


def _print_deletion(deletion: DeletionPlan, args: argparse.Namespace) -> None:
    if args.output == "json":
        print_json(deletion.to_dict())
        return
    print(f"deleting cluster {deletion.name!r} would remove:")
    for item in deletion.deletes:
        print(f"  - {item}")
    if deletion.keeps:
        print("and keep:")
        for item in deletion.keeps:
            print(f"  - {item}")


def _say_what_goes(deletion: DeletionPlan) -> None:
    print(f"deleting cluster {deletion.name!r} removes: " + "; ".join(deletion.deletes), file=sys.stderr)
    if deletion.keeps:
        print("it keeps: " + "; ".join(deletion.keeps), file=sys.stderr)


def _confirm(deletion: DeletionPlan) -> None:
    if not sys.stdin.isatty():
        raise ClusterkitError(f"deleting cluster {deletion.name!r} needs confirmation and there is no terminal to ask",
                              fix="see what it deletes with --dry-run, then pass --yes")
    _say_what_goes(deletion)
    answer = input(f"delete cluster {deletion.name!r}? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise ClusterkitError(f"cluster {deletion.name!r} not deleted", fix="answer y, or pass --yes")
