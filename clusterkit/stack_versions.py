"""The EFA/NCCL stack's version rules, read from the sources: one table, each row naming where it comes from.

Two kinds of rule. `FLOORS`: per instance family, the version of a component below which the stack does not
work there (an error) or works below what the source recommends (a warning); a row may hold only while
another component is in a range (aws-ofi-nccl's libfabric floor moved with its own version). `CUDA_FLOORS`:
the same for the CUDA a container recipe builds with (a job spec names no CUDA). `tuner_outcome`:
what NCCL_ALGO or NCCL_PROTO do beside AWS's NCCL tuner, from which tuner interface each NCCL asks for and
what each aws-ofi-nccl answers there. A version the job spec leaves out (None) is a current one.
The job rules (`jobs/validators.py`) and the container recipes (`stack/recipes.py`) turn both into findings,
the EFA presets (`jobs/environment.py`) name the tuner where NCCL would not find it; docs/reference-parity.md
lists the same rows.
"""

from __future__ import annotations

import enum

from clusterkit.findings import Level
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.versions import version_tuple

Version = tuple[int, ...]

OFI_NCCL = "aws/aws-ofi-nccl"
NCCL = "NVIDIA/nccl"
CHEAT_SHEET = "awslabs/awsome-distributed-ai 1.architectures/efa-cheatsheet.md §2"
# How the job spec names each component (its `stack` fields), for findings.
COMPONENT_NAMES = {"aws_ofi_nccl": "aws-ofi-nccl", "nccl": "NCCL", "libfabric": "libfabric"}


@lean_dataclass(frozen=True)
class VersionRange:
    """Versions of `component` from `at_least` (None: any) up to, not including, `below` (None: no end)."""

    component: str
    at_least: str | None = None
    below: str | None = None

    def holds(self, version: str | None) -> bool:
        """Whether `version` is in the range; None (a current version) is past every bound."""
        have = version_tuple(version)
        if have is None:
            return self.below is None
        low, high = version_tuple(self.at_least), version_tuple(self.below)
        return (low is None or have >= low) and (high is None or have < high)


@lean_dataclass(frozen=True)
class VersionFloor:
    """`component` at `minimum` or later on the `families` (the EC2 name before the dot; () for every EFA GPU
    type), where `only_with` holds."""

    families: tuple[str, ...]
    component: str  # a job spec `stack` field: aws_ofi_nccl, nccl or libfabric
    minimum: str
    level: Level  # ERROR: the stack does not work below it; WARNING: it works, below the source's advice
    problem: str  # what happens below it
    source: str
    only_with: VersionRange | None = None

    def applies(self, family: str, versions: dict[str, str | None]) -> bool:
        return ((not self.families or family in self.families)
                and (self.only_with is None or self.only_with.holds(versions.get(self.only_with.component))))


_HOPPER = ("p5", "p5e", "p5en")
FLOORS: tuple[VersionFloor, ...] = (
    VersionFloor(("p5",), "aws_ofi_nccl", "1.7.2", Level.ERROR, "the EFA cheat-sheet's minimum for p5",
                 CHEAT_SHEET),
    VersionFloor(("p5",), "aws_ofi_nccl", "1.7.3", Level.WARNING, "the EFA cheat-sheet recommends 1.7.3 or later "
                 "on p5", CHEAT_SHEET),
    VersionFloor(("p5e",), "aws_ofi_nccl", "1.11.0", Level.ERROR, "older plugins do not know p5e.48xlarge and give "
                 "it no platform settings (SENDRECV instead of the RDMA protocol, GPUDirect not required)",
                 f"{OFI_NCCL} src/platform-aws.c: p5e.48xlarge first in v1.11.0-aws"),
    VersionFloor(("p5en",), "aws_ofi_nccl", "1.13.0", Level.ERROR, "older plugins do not know p5en.48xlarge and give "
                 "it no platform settings (SENDRECV instead of the RDMA protocol, GPUDirect not required)",
                 f"{OFI_NCCL} src/platform-aws.c: p5en.48xlarge first in v1.13.0-aws"),
    VersionFloor(("p6-b200",), "aws_ofi_nccl", "1.14.0", Level.ERROR, "older plugins do not know p6-b200 and give it "
                 "no platform settings (SENDRECV instead of the RDMA protocol, GPUDirect not required)",
                 f"{OFI_NCCL} src/platform-aws.c: the p-series entry (p5 and later) from v1.14.0"),
    VersionFloor(("p6-b200",), "aws_ofi_nccl", "1.15.0", Level.WARNING, "AWS's NCCL tuner has no p6-b200 regions "
                 "before 1.15.0 (NCCL's own tuning is used)",
                 f"{OFI_NCCL} src/tuner/nccl_ofi_tuner.cpp: p6-b200.48xlarge first in v1.15.0"),
    VersionFloor(_HOPPER, "nccl", "2.18", Level.ERROR, "the EFA cheat-sheet's minimum for p5's H100 (p5e and p5en "
                 "have the same Hopper GPUs)", CHEAT_SHEET),
    VersionFloor(_HOPPER, "nccl", "2.18.5", Level.WARNING, "the EFA cheat-sheet recommends 2.18.5 or later on "
                 "Hopper GPUs", CHEAT_SHEET),
    VersionFloor(("p6-b200",), "nccl", "2.25.1", Level.ERROR, "older NCCL has no Blackwell (sm_100) kernels",
                 f"{NCCL} makefiles/common.mk: compute_100 first in v2.25.1-1"),
    VersionFloor(("p6-b200",), "nccl", "2.29", Level.WARNING, "AWS's B200 scripts need NCCL 2.29 or later over EFA "
                 "(2.25 images fail there)",
                 "awslabs/awsome-distributed-ai 3.test_cases/pytorch/vjepa2/README.md, §7 B200 GPU Setup"),
    VersionFloor((), "libfabric", "1.18", Level.ERROR, "aws-ofi-nccl 1.8-1.12 refuse the EFA provider below "
                 "libfabric 1.18 and NCCL falls back to TCP sockets", f"{OFI_NCCL} src/nccl_ofi_net.c "
                 "nccl_net_ofi_query_provider_capabilities, v1.8.0-aws to v1.12.1-aws",
                 VersionRange("aws_ofi_nccl", "1.8", "1.13")),
    VersionFloor((), "libfabric", "1.22", Level.ERROR, "aws-ofi-nccl 1.13 and later refuse the EFA provider below "
                 "libfabric 1.22 and NCCL falls back to TCP sockets", f"{OFI_NCCL} src/nccl_ofi_net.c(pp) "
                 "nccl_net_ofi_query_provider_capabilities, v1.13.0-aws and later",
                 VersionRange("aws_ofi_nccl", "1.13")),
)


# CUDA's first release with each GPU architecture's kernels, and the cheat-sheet's CUDA for p5's H100.
CUDA_FLOORS: tuple[VersionFloor, ...] = (
    VersionFloor(("p4d", "p4de"), "cuda", "11.0", Level.ERROR, "older CUDA has no Ampere (sm_80) kernels for the "
                 "A100", "NVIDIA CUDA 11.0 release notes: compute capability 8.0 first in CUDA 11.0"),
    VersionFloor(_HOPPER, "cuda", "12.0", Level.ERROR, "the EFA cheat-sheet's minimum for p5's H100 (p5e and p5en "
                 "have the same Hopper GPUs)", CHEAT_SHEET),
    VersionFloor(("p6-b200",), "cuda", "12.8", Level.ERROR, "older CUDA has no Blackwell (sm_100) kernels for the "
                 "B200", "NVIDIA CUDA 12.8 release notes: compute capability 10.0 first in CUDA 12.8"),
)


def unmet_floors(family: str, versions: dict[str, str | None]) -> list[VersionFloor]:
    """The floors of `FLOORS` and `CUDA_FLOORS` that `versions` (a job spec's stack or a recipe's options, by
    field) miss on `family`: per component the first missed row, errors before warnings. A component left out
    (None, or not a key) is current and misses none."""
    missed: dict[str, VersionFloor] = {}
    for floor in sorted(FLOORS + CUDA_FLOORS, key=lambda row: row.level is not Level.ERROR):
        have = version_tuple(versions.get(floor.component))
        if (floor.component not in missed and have is not None and floor.applies(family, versions)
                and have < version_tuple(floor.minimum)):
            missed[floor.component] = floor
    return list(missed.values())


# ----- AWS's NCCL tuner beside NCCL_ALGO / NCCL_PROTO ------------------------------------------------------

# Where the tuner rules come from: which interface each NCCL asks for, and what each plugin answers there.
TUNER_SOURCE = f"{NCCL} src/misc/tuner.cc; {OFI_NCCL} src/tuner/nccl_ofi_tuner.c(pp)"
_CURRENT: Version = (1 << 30,)  # a version left out: newer than every bound


def nccl_tuner_interfaces(nccl: str | None) -> tuple[int, ...]:
    """The tuner interfaces NCCL asks a plugin for, in its order: none before 2.19; v1 in 2.19-2.20 (only from
    the library NCCL_TUNER_PLUGIN names); v2 in 2.21; v3, then v2, in 2.22-2.23; v4 first in 2.24-2.27 and
    v5 first from 2.28 (NVIDIA/nccl src/misc/tuner.cc, src/plugin/tuner/)."""
    have = version_tuple(nccl) or _CURRENT
    if have < (2, 19):
        return ()
    if have < (2, 21):
        return (1,)
    if have < (2, 22):
        return (2,)
    if have < (2, 24):
        return (3, 2)
    return (4, 3, 2) if have < (2, 28) else (5, 4, 3, 2)


def plugin_tuner_interfaces(aws_ofi_nccl: str | None) -> tuple[int, ...]:
    """The tuner interfaces an aws-ofi-nccl exports: none before 1.8; v1 in 1.8; v2 from 1.9; v3 from 1.12;
    v1 dropped and v6 added in 1.20 (aws/aws-ofi-nccl src/tuner/nccl_ofi_tuner.c(pp))."""
    have = version_tuple(aws_ofi_nccl) or _CURRENT
    if have < (1, 8):
        return ()
    if have < (1, 9):
        return (1,)
    if have < (1, 12):
        return (1, 2)
    return (1, 2, 3) if have < (1, 20) else (2, 3, 6)


def tuner_interface(aws_ofi_nccl: str | None, nccl: str | None) -> int | None:
    """The interface through which NCCL would run AWS's tuner, or None when the two share none."""
    offered = plugin_tuner_interfaces(aws_ofi_nccl)
    return next((version for version in nccl_tuner_interfaces(nccl) if version in offered), None)


def nccl_finds_tuner(aws_ofi_nccl: str | None, nccl: str | None) -> bool:
    """Whether NCCL loads AWS's tuner without NCCL_TUNER_PLUGIN: NCCL >= 2.21 looks in the net plugin, where
    aws-ofi-nccl >= 1.16 keeps it (1.8-1.15 build it as a library of its own)."""
    return (version_tuple(nccl) or _CURRENT) >= (2, 21) and (version_tuple(aws_ofi_nccl) or _CURRENT) >= (1, 16)


class TunerOutcome(enum.Enum):
    """What NCCL_ALGO or NCCL_PROTO set by the user do where AWS's tuner would run (clusterkit then leaves
    NCCL_TUNER_PLUGIN out)."""

    FAILS = "fails"  # the v1 interface of aws-ofi-nccl < 1.17 returns an error: NCCL's init fails
    OVERRIDDEN = "overridden"  # the v2 interface of aws-ofi-nccl < 1.17 picks algorithm and protocol itself
    TUNER_OFF = "tuner-off"  # the tuner stands aside (1.17+ on v1/v2) or is not loaded: NCCL's own tuning
    RESTRICTS = "restricts"  # v3 and later: NCCL takes the user's choice out of the tuner's cost table


def tuner_outcome(aws_ofi_nccl: str | None, nccl: str | None) -> TunerOutcome | None:
    """What NCCL_ALGO / NCCL_PROTO do with these versions (None: no AWS tuner can run with them)."""
    interface = tuner_interface(aws_ofi_nccl, nccl)
    if interface is None:
        return None
    refuses = (version_tuple(aws_ofi_nccl) or _CURRENT) < (1, 17)  # 1.17 made v1 and v2 stand aside
    if interface == 1:
        # Loaded only where NCCL_TUNER_PLUGIN names it: an image, a spec or the submitting shell may.
        return TunerOutcome.FAILS if refuses else TunerOutcome.TUNER_OFF
    if not nccl_finds_tuner(aws_ofi_nccl, nccl):
        return TunerOutcome.TUNER_OFF  # its own library, which clusterkit then does not name
    if interface == 2:
        return TunerOutcome.OVERRIDDEN if refuses else TunerOutcome.TUNER_OFF
    return TunerOutcome.RESTRICTS
