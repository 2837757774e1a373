"""The `clusterkit` command: argument parsing and printing only.

Each verb group lives in its own module with a `register(subparsers, common)` function. Handlers
import the heavy parts of clusterkit (providers, YAML, boto3, submitit, jinja2) lazily, and a
command line that names a verb builds the parser of that verb's group only, so start-up costs
what the verb needs (`bench/bench_cli.py`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from clusterkit import __version__
from clusterkit.errors import ClusterkitError

# Verb-group modules and the verbs each registers, in the order they appear in --help.
COMMAND_MODULES = {
    "clusterkit.cli.clusters": ("create-cluster", "connect", "describe-cluster", "list-clusters",
                                "update-cluster", "delete-cluster", "replace-node", "reboot-node"),
    "clusterkit.cli.cluster_config": ("validate",),
    "clusterkit.cli.jobs": ("submit", "status", "logs", "cancel", "watch", "jobs"),
    "clusterkit.cli.stack": ("container", "doctor", "nccl-test"),
    "clusterkit.cli.local": ("local",),
    "clusterkit.cli.goodput": ("goodput",),
    "clusterkit.cli.timeline": ("timeline",),
}


def common_options() -> argparse.ArgumentParser:
    """Options every verb takes, so they may follow the verb: `clusterkit status 12 --output json`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--output", "-o", choices=("table", "json"), default="table",
                        help="table for people (default), json for scripts")
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    return common


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: of every verb for --help and anything unknown, else of the named
    verb's group only (the top level takes no option before the verb but --help and --version)."""
    verb = next((arg for arg in argv or () if not arg.startswith("-")), None)
    modules = [name for name, verbs in COMMAND_MODULES.items() if verb in verbs] or list(COMMAND_MODULES)
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="clusterkit",
        description="Train large models on AWS with Slurm: clusters, jobs, resilience, the software stack.",
    )
    parser.add_argument("--version", action="version", version=f"clusterkit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in modules:
        importlib.import_module(module_name).register(subparsers, common)
    return parser


MAX_ERROR_CHARS = 600


def one_line(text: str) -> str:
    """An error as one line of reasonable length: whatever a daemon or a user's value put into it."""
    text = " ".join(text.split())
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return f"{text[:MAX_ERROR_CHARS]}... ({len(text):,} characters; --debug shows all)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["goodput"] and argv[1:2] and argv[1][:1].isdigit():
        argv = ["goodput", "job", *argv[1:]]  # `goodput JOB_ID`: the group's verbs are words, a job id is digits
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:
        # `clusterkit ... | head` closed our stdout: not an error worth a line. Point stdout at
        # /dev/null so that the interpreter's last flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ClusterkitError, OSError) as error:
        # OSError: a file or directory the user named cannot be read or written.
        if args.debug:
            raise
        print(f"error: {one_line(str(error))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
