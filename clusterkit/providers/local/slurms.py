"""Which Slurm a local cluster runs: the host's packages, or a Debian root that scripts/install-slurm.sh builds.

A cluster on a root runs everything of Slurm from that root: its daemons (slurmd execs slurmstepd from its
compiled-in /usr/sbin), the client commands clusterkit and its users run (clients speak only to controllers a
couple of releases apart) and its job steps. Each runs in a mount namespace of its own in which the root's /usr
is bind-mounted over /usr (the host is merged-/usr; everything else, /tmp, homes, the cluster's files, stays
shared). One launcher script per cluster (config.render_launcher) enters such a namespace; the cluster's bin
directory holds a link to it per client command, first on the PATH of everything that drives the cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

from clusterkit.errors import ClusterkitError, MissingDependency

HOST = "host"
ENV = "CLUSTERKIT_LOCAL_SLURM"
ROOTS_DIR = Path("/opt/clusterkit/slurm")
# Debian 13's Slurm (24.11.5), as install-slurm.sh builds it.
ROOT_SLURMS = ("24.11",)
CHOICES = (HOST, *ROOT_SLURMS)
# Slurm's client commands (slurm-client, slurm-wlm's /usr/bin): what a cluster's bin directory links to its launcher.
CLIENT_COMMANDS = ("sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol", "scrontab",
                   "sdiag", "sinfo", "sprio", "squeue", "sreport", "srun", "sshare", "sstat", "strigger")
ROOT_MARKER = ".clusterkit-root"  # written last by install-slurm.sh: the root is complete


def chosen(slurm: str | None) -> str:
    """The Slurm a create asked for: `slurm`, else $CLUSTERKIT_LOCAL_SLURM (a test session, or a machine whose local
    clusters should all run one Slurm), else the host's; checked."""
    if slurm:
        return checked(slurm)
    return checked(os.environ.get(ENV, "") or HOST, given_as=f"${ENV}")


def checked(slurm: str, given_as: str = "--slurm") -> str:
    """`slurm` if it names a Slurm the local provider runs; else a one-line error with the choices."""
    if slurm not in CHOICES:
        raise ClusterkitError(f"{given_as} {slurm!r} is not a Slurm the local provider runs",
                              fix=f"use one of: {', '.join(CHOICES)} (host: this machine's own packages)")
    return slurm


def root_of(slurm: str) -> Path | None:
    """Where the Slurm `slurm` lives; None for the host's own."""
    return None if checked(slurm) == HOST else ROOTS_DIR / slurm


def check_installed(slurm: str) -> None:
    """Fail before anything is written when the root of `slurm` is not built."""
    root = root_of(slurm)
    if root is not None and not (root / ROOT_MARKER).is_file():
        raise MissingDependency(
            f"Slurm {slurm} is not installed in {root}",
            fix=f"build it once with `scripts/install-slurm.sh --slurm {slurm}` (it is then reused)")
