"""The `clusterkit` command: argument parsing and printing only.

Each verb group lives in its own module with a `register(subparsers, common)` function. Handlers
import the heavy parts of clusterkit (boto3, submitit, jinja2) lazily, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from clusterkit import __version__
from clusterkit.errors import ClusterkitError

# Verb-group modules, in the order their verbs appear in --help.
COMMAND_MODULES = (
    "clusterkit.cli.clusters",
    "clusterkit.cli.cluster_config",
    "clusterkit.cli.jobs",
    "clusterkit.cli.stack",
    "clusterkit.cli.local",
)


def common_options() -> argparse.ArgumentParser:
    """Options every verb takes, so they may follow the verb: `clusterkit status 12 --output json`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--output", "-o", choices=("table", "json"), default="table",
                        help="table for people (default), json for scripts")
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="clusterkit",
        description="Train large models on AWS with Slurm: clusters, jobs, resilience, the software stack.",
    )
    parser.add_argument("--version", action="version", version=f"clusterkit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
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
    parser = build_parser()
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
