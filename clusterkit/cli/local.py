"""`clusterkit local ...`: fault injection and helpers for local clusters."""

from __future__ import annotations

import argparse
import shlex

from clusterkit.cli.output import print_json


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    local = subparsers.add_parser("local", help="fault injection and helpers for local clusters")
    verbs = local.add_subparsers(dest="local_command", metavar="VERB", required=True)

    crash = verbs.add_parser("crash-node", parents=[common],
                             help="SIGKILL a node's slurmd and everything it started, as a hardware fault would")
    crash.add_argument("name", help="cluster name")
    crash.add_argument("node", help="node name, e.g. n2")
    crash.set_defaults(handler=crash_node)

    freeze = verbs.add_parser("freeze-node", parents=[common],
                              help="SIGSTOP a node's slurmd and everything it started: the node goes silent, no "
                                   "connection is closed (a wedged GPU, a hung mount)")
    freeze.add_argument("name", help="cluster name")
    freeze.add_argument("node", help="node name, e.g. n2")
    freeze.set_defaults(handler=freeze_node)

    thaw = verbs.add_parser("thaw-node", parents=[common], help="SIGCONT a frozen node: it answers again")
    thaw.add_argument("name", help="cluster name")
    thaw.add_argument("node", help="node name, e.g. n2")
    thaw.set_defaults(handler=thaw_node)

    device = verbs.add_parser("fail-device", parents=[common],
                              help="make a GPU of the node report an Xid or uncorrected ECC errors, where the "
                                   "health check reads them")
    device.add_argument("name", help="cluster name")
    device.add_argument("node", help="node name, e.g. n2")
    which = device.add_mutually_exclusive_group(required=True)
    which.add_argument("--xid", type=int, metavar="N", help="an Xid in the node's kernel log, e.g. 79 (fallen off "
                                                          "the bus) or 48 (double-bit ECC)")
    which.add_argument("--ecc", type=int, metavar="COUNT", help="uncorrected ECC errors on a GPU")
    device.set_defaults(handler=fail_device)

    start = verbs.add_parser("start-node", parents=[common], help="start a crashed node's slurmd again")
    start.add_argument("name", help="cluster name")
    start.add_argument("node", help="node name, e.g. n2")
    start.set_defaults(handler=start_node)

    fail = verbs.add_parser("fail-health", parents=[common],
                            help="make a node's health check fail (the node stays up): a sick node")
    fail.add_argument("name", help="cluster name")
    fail.add_argument("node", help="node name, e.g. n2")
    fail.add_argument("--reason", default="injected by clusterkit local fail-health")
    fail.set_defaults(handler=fail_health)

    heal = verbs.add_parser("heal", parents=[common],
                            help="remove an injected fault and return a drained node to service")
    heal.add_argument("name", help="cluster name")
    heal.add_argument("node", help="node name, e.g. n2")
    heal.set_defaults(handler=heal_node)

    restart = verbs.add_parser("restart-controller", parents=[common],
                               help="restart slurmctld (or another daemon of the cluster); jobs keep running")
    restart.add_argument("name", help="cluster name")
    restart.add_argument("--daemon", default="slurmctld",
                         choices=("slurmctld", "slurmdbd", "munged", "mariadb", "sshd", "replacer", "agent"),
                         help="which daemon (default slurmctld)")
    restart.set_defaults(handler=restart_controller)

    env = verbs.add_parser("env", parents=[common], help="print the shell exports for plain Slurm commands: "
                                                         "eval \"$(clusterkit local env NAME)\"")
    env.add_argument("name", help="cluster name")
    env.set_defaults(handler=print_env)


def _cluster(name: str):
    from clusterkit.providers.local import LocalCluster

    return LocalCluster.get(name)


def _report(args: argparse.Namespace, data: dict, text: str) -> int:
    """What a fault-injection verb did: JSON for scripts, one line for people."""
    if args.output == "json":
        print_json({"cluster": args.name, "node": args.node, **data})
    else:
        print(text)
    return 0


def crash_node(args: argparse.Namespace) -> int:
    killed = _cluster(args.name).crash_node(args.node)
    return _report(args, {"killed_pids": killed}, f"node {args.node} crashed: killed {len(killed)} processes; "
                   "Slurm marks it DOWN once SlurmdTimeout passes")


def freeze_node(args: argparse.Namespace) -> int:
    stopped = _cluster(args.name).freeze_node(args.node)
    return _report(args, {"stopped_pids": stopped}, f"node {args.node} frozen: stopped {len(stopped)} processes; "
                   "Slurm marks it DOWN once SlurmdTimeout passes (`clusterkit local thaw-node` undoes it)")


def thaw_node(args: argparse.Namespace) -> int:
    resumed = _cluster(args.name).thaw_node(args.node)
    return _report(args, {"resumed_pids": resumed}, f"node {args.node} thawed: {len(resumed)} processes run again")


def fail_device(args: argparse.Namespace) -> int:
    written = _cluster(args.name).fail_device(args.node, xid=args.xid, ecc=args.ecc)
    return _report(args, {"fault": written}, f"node {args.node}'s GPU now reports: {written}")


def start_node(args: argparse.Namespace) -> int:
    _cluster(args.name).start_node(args.node)
    return _report(args, {"started": True}, f"node {args.node} is back")


def fail_health(args: argparse.Namespace) -> int:
    _cluster(args.name).fail_health(args.node, args.reason)
    return _report(args, {"fault": args.reason}, f"node {args.node}'s health check now fails: {args.reason}")


def heal_node(args: argparse.Namespace) -> int:
    _cluster(args.name).heal(args.node)
    return _report(args, {"healed": True}, f"node {args.node} is healthy and in service")


def restart_controller(args: argparse.Namespace) -> int:
    from clusterkit.cli.output import progress

    pid = _cluster(args.name).restart_daemon(args.daemon, progress if args.output == "table" else lambda _: None)
    if args.output == "json":
        print_json({"cluster": args.name, "daemon": args.daemon, "pid": pid})
    else:
        print(f"{args.daemon} of cluster {args.name!r} restarted (pid {pid})")
    return 0


def print_env(args: argparse.Namespace) -> int:
    env = _cluster(args.name).env
    if args.output == "json":
        print_json(env)
    else:
        for key, value in env.items():
            print(f"export {key}={shlex.quote(value)}")
    return 0
