"""The stack's version rules (clusterkit/stack_versions.py) as a job spec meets them: both sides of every
boundary, each finding citing its source; the ranks per node on Trainium2 and its logical NeuronCore size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit.catalog import resolve_instance_type
from clusterkit.findings import Finding, Level
from clusterkit.jobs.render import render_sbatch
from clusterkit.jobs.validators import validate_job
from clusterkit.stack_versions import COMPONENT_NAMES, FLOORS, TunerOutcome, VersionFloor, tuner_outcome

from tests.golden import assert_matches_golden
from tests.jobs.helpers import make_spec
from tests.jobs.test_job_cli import clusterkit, write

GOLDEN = Path(__file__).resolve().parent / "golden" / "stack-versions.txt"

# (case, instance, stack, env, the findings of the version rules: (path, level)); each floor's minimum is met
# in one case and missed just below it in another.
CASES: list[tuple[str, str, dict[str, str], dict[str, str], list[tuple[str, Level]]]] = [
    ("p5 plugin below the minimum", "p5", {"aws_ofi_nccl": "1.7.1"}, {}, [("stack.aws_ofi_nccl", Level.ERROR)]),
    ("p5 plugin at the minimum", "p5", {"aws_ofi_nccl": "1.7.2"}, {}, [("stack.aws_ofi_nccl", Level.WARNING)]),
    ("p5 plugin as recommended", "p5", {"aws_ofi_nccl": "1.7.3"}, {}, []),
    ("p5e plugin before it knew p5e", "p5e.48xlarge", {"aws_ofi_nccl": "1.10.0"}, {},
     [("stack.aws_ofi_nccl", Level.ERROR)]),
    ("p5e plugin that knows p5e", "p5e.48xlarge", {"aws_ofi_nccl": "1.11.0"}, {}, []),
    ("p5en plugin p5's floor allowed", "p5en.48xlarge", {"aws_ofi_nccl": "1.12.1"}, {},
     [("stack.aws_ofi_nccl", Level.ERROR)]),
    ("p5en plugin that knows p5en", "p5en.48xlarge", {"aws_ofi_nccl": "1.13.0"}, {}, []),
    ("p6-b200 plugin before the p-series entry", "p6-b200.48xlarge", {"aws_ofi_nccl": "1.13.2"}, {},
     [("stack.aws_ofi_nccl", Level.ERROR)]),
    ("p6-b200 plugin without p6 tuning", "p6-b200.48xlarge", {"aws_ofi_nccl": "1.14.0"}, {},
     [("stack.aws_ofi_nccl", Level.WARNING)]),
    ("p6-b200 plugin with p6 tuning", "p6-b200.48xlarge", {"aws_ofi_nccl": "1.15.0"}, {}, []),
    ("p5 NCCL below the minimum", "p5", {"nccl": "2.17.1"}, {}, [("stack.nccl", Level.ERROR)]),
    ("p5 NCCL at the minimum", "p5", {"nccl": "2.18"}, {}, [("stack.nccl", Level.WARNING)]),
    ("p5en NCCL below the advice", "p5en.48xlarge", {"nccl": "2.18.3"}, {}, [("stack.nccl", Level.WARNING)]),
    ("p5e NCCL as advised", "p5e.48xlarge", {"nccl": "2.18.5"}, {}, []),
    ("p6-b200 NCCL p5's floor allowed", "p6-b200.48xlarge", {"nccl": "2.24.3"}, {}, [("stack.nccl", Level.ERROR)]),
    ("p6-b200 NCCL with Blackwell kernels", "p6-b200.48xlarge", {"nccl": "2.25.1"}, {},
     [("stack.nccl", Level.WARNING)]),
    ("p6-b200 NCCL as AWS's B200 scripts", "p6-b200.48xlarge", {"nccl": "2.29"}, {}, []),
    ("libfabric too old for aws-ofi-nccl 1.8", "p4de", {"aws_ofi_nccl": "1.8.0", "libfabric": "1.17.1"}, {},
     [("stack.libfabric", Level.ERROR)]),
    ("libfabric enough for aws-ofi-nccl 1.12", "p4de", {"aws_ofi_nccl": "1.12.1", "libfabric": "1.18"}, {}, []),
    ("libfabric too old for aws-ofi-nccl 1.13", "p5", {"aws_ofi_nccl": "1.13.0", "libfabric": "1.21.0"}, {},
     [("stack.libfabric", Level.ERROR)]),
    ("libfabric enough for aws-ofi-nccl 1.13", "p5", {"aws_ofi_nccl": "1.13.0", "libfabric": "1.22"}, {}, []),
    ("libfabric too old for a current plugin", "p4de", {"libfabric": "1.20.0"}, {},
     [("stack.libfabric", Level.ERROR)]),
    ("libfabric before aws-ofi-nccl had a floor", "g5.48xlarge", {"aws_ofi_nccl": "1.7.4", "libfabric": "1.16.0"},
     {}, []),
    ("AWS's libfabric 2", "p5", {"aws_ofi_nccl": "1.17.2", "libfabric": "2.1.0amzn3.0"}, {}, []),
    # NCCL_ALGO / NCCL_PROTO beside AWS's tuner, by the interface NCCL and the plugin share
    ("v1 tuner of 1.16 refuses", "p5", {"aws_ofi_nccl": "1.16.3", "nccl": "2.20.5"}, {"NCCL_ALGO": "ring"},
     [("env.NCCL_ALGO", Level.ERROR)]),
    ("v1 tuner of 1.8 refuses", "p4de", {"aws_ofi_nccl": "1.8.0", "nccl": "2.19.3"}, {"NCCL_PROTO": "simple"},
     [("env.NCCL_PROTO", Level.ERROR)]),
    ("v1 tuner of 1.17 stands aside", "p5", {"aws_ofi_nccl": "1.17.0", "nccl": "2.20.5"}, {"NCCL_ALGO": "ring"},
     [("env.NCCL_ALGO", Level.WARNING)]),
    ("v2 tuner of 1.16 overrides", "p5", {"aws_ofi_nccl": "1.16.3", "nccl": "2.21.5"}, {"NCCL_PROTO": "simple"},
     [("env.NCCL_PROTO", Level.WARNING)]),
    ("v3 tuner of 1.16 keeps within them", "p5", {"aws_ofi_nccl": "1.16.2", "nccl": "2.22.3"},
     {"NCCL_ALGO": "ring"}, [("env.NCCL_ALGO", Level.WARNING)]),
    ("1.16 with a current NCCL", "p5", {"aws_ofi_nccl": "1.16.2"}, {"NCCL_PROTO": "simple"},
     [("env.NCCL_PROTO", Level.WARNING)]),
    ("no tuner before NCCL 2.19", "p5", {"aws_ofi_nccl": "1.13.2", "nccl": "2.18.6"}, {"NCCL_ALGO": "ring"}, []),
    ("no tuner before aws-ofi-nccl 1.8", "p4de", {"aws_ofi_nccl": "1.7.4", "nccl": "2.20.5"},
     {"NCCL_ALGO": "ring"}, []),
    ("no interface 1.8 shares with NCCL 2.21", "p4de", {"aws_ofi_nccl": "1.8.1", "nccl": "2.21.5"},
     {"NCCL_ALGO": "ring"}, []),
]


def instance_family(instance: str) -> str:
    return resolve_instance_type(instance).name.split(".")[0]


def _findings(instance: str, stack: dict[str, str], env: dict[str, str]) -> list[Finding]:
    rules = {"job.stack-floors", "job.nccl-tuner"}
    return [f for f in validate_job(make_spec(instance=instance, stack=stack, env=env)) if f.rule in rules]


@pytest.mark.parametrize(("case", "instance", "stack", "env", "expected"), CASES, ids=[case[0] for case in CASES])
def test_version_rules(case: str, instance: str, stack: dict[str, str], env: dict[str, str],
                       expected: list[tuple[str, Level]]) -> None:
    findings = _findings(instance, stack, env)
    assert [(f.path, f.level) for f in findings] == expected, [str(f) for f in findings]
    for finding in findings:  # every finding names its source and a fix
        assert finding.fix and ("aws-ofi-nccl" in finding.message or "awsome-distributed-ai" in finding.message
                                or "NVIDIA/nccl" in finding.message)


def test_the_findings_as_printed() -> None:
    """Every case's findings in one file, as `clusterkit validate` prints them."""
    lines = []
    for case, instance, stack, env, _ in CASES:
        lines.append(f"# {case}: {instance} {json.dumps(stack, sort_keys=True)} {json.dumps(env, sort_keys=True)}")
        lines.extend(f"{finding} [{finding.rule}]" for finding in _findings(instance, stack, env))
    assert_matches_golden("\n".join(lines) + "\n", GOLDEN)


@pytest.mark.parametrize("floor", FLOORS, ids=lambda floor: f"{'-'.join(floor.families) or 'efa'}-"
                         f"{floor.component}-{floor.minimum}")
def test_every_floor_is_tried_on_both_sides(floor: VersionFloor) -> None:
    """Each row of the table has a case below its minimum (the row's finding, with its source) and one at it
    (none of the row's)."""
    def cites(finding: Finding) -> bool:
        return floor.source in finding.message and f"{COMPONENT_NAMES[floor.component]} {floor.minimum} or later" \
            in finding.message

    tried = [(stack[floor.component], _findings(instance, stack, env)) for _, instance, stack, env, _ in CASES
             if floor.component in stack and (not floor.families or instance_family(instance) in floor.families)]
    assert any(have != floor.minimum and any(cites(f) for f in found) for have, found in tried)
    at = [found for have, found in tried if have == floor.minimum]
    assert at and not any(cites(f) for found in at for f in found)


@pytest.mark.parametrize(("ofi", "nccl", "outcome"), [
    ("1.16.3", "2.20.5", TunerOutcome.FAILS), ("1.17.0", "2.20.5", TunerOutcome.TUNER_OFF),
    ("1.16.3", "2.21.5", TunerOutcome.OVERRIDDEN), ("1.17.0", "2.21.5", TunerOutcome.TUNER_OFF),
    ("1.16.3", "2.22.3", TunerOutcome.RESTRICTS), ("1.15.0", "2.22.3", TunerOutcome.TUNER_OFF),
    ("1.11.1", "2.27.7", TunerOutcome.TUNER_OFF), ("1.19.0", "2.19.3", TunerOutcome.TUNER_OFF),
    ("1.20.0", "2.19.3", None), ("1.8.0", "2.18.6", None), ("1.7.4", "2.19.3", None),
    (None, None, TunerOutcome.RESTRICTS),
])
def test_what_nccl_algo_does_beside_the_tuner(ofi: str | None, nccl: str | None, outcome: TunerOutcome | None) -> None:
    assert tuner_outcome(ofi, nccl) is outcome


def test_a_version_floor_through_the_cli(tmp_path: Path) -> None:
    spec = write(tmp_path, 'name: j\ncommand: [train.py]\ninstance: p5en.48xlarge\nstack: {aws_ofi_nccl: "1.12.1"}\n')
    result = clusterkit("validate", str(spec))
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("error: stack.aws_ofi_nccl: ")]
    assert "1.12.1" in line and "1.13.0" in line and "aws/aws-ofi-nccl src/platform-aws.c" in line
    assert "(fix: use aws-ofi-nccl 1.13.0 or later)" in line and "Traceback" not in result.stderr


# ----- Trainium2's logical NeuronCores ---------------------------------------------------------------------


@pytest.mark.parametrize(("launcher", "size", "ranks"), [
    ("neuron", None, 64), ("neuron", 2, 64), ("neuron", 1, 128), ("torchrun", None, 64), ("torchrun", 1, 128),
])
def test_trn2_starts_one_rank_per_logical_neuron_core(fake_slurm, launcher: str, size: int | None,
                                                       ranks: int) -> None:
    launcher_spec: dict[str, object] = {"type": launcher}
    if size is not None:
        launcher_spec["logical_nc_config"] = size
    spec = make_spec(instance="trn2.48xlarge", nodes=2, exclusive=True, launcher=launcher_spec)
    assert not [f for f in validate_job(spec) if f.level is Level.ERROR]
    # torchrun records the ranks it was asked for and the logical core size the runtime will read
    (fake_slurm.bin / "torchrun").write_text('#!/bin/bash\nprintf "%s\\n" "$NEURON_LOGICAL_NC_CONFIG" "$@" '
                                             '>> "$CK_SHIM_LOG/torchrun.record"\n')
    result = fake_slurm.run(render_sbatch(spec), extra_env={"SLURM_RESTART_COUNT": "1"})
    assert result.returncode == 0, result.stderr
    size_seen, *argv = (fake_slurm.log / "torchrun.record").read_text().splitlines()
    assert size_seen == str(size or 2) and f"--nproc_per_node={ranks}" in argv


def test_trn1_renders_no_logical_core_size() -> None:
    script = render_sbatch(make_spec(instance="trn1", launcher="neuron"))
    assert "NEURON_LOGICAL_NC_CONFIG" not in script and "--nproc_per_node=32" in script


@pytest.mark.parametrize(("fields", "path"), [
    ({"instance": "trn2.48xlarge", "launcher": {"type": "neuron", "logical_nc_config": 4}},
     "launcher.logical_nc_config"),
    ({"instance": "trn2.48xlarge", "launcher": {"type": "neuron", "logical_nc_config": 0}},
     "launcher.logical_nc_config"),
    ({"instance": "trn1", "launcher": {"type": "neuron", "logical_nc_config": 2}}, "launcher.logical_nc_config"),
    ({"instance": "p5", "launcher": {"type": "torchrun", "logical_nc_config": 2}}, "launcher.logical_nc_config"),
    ({"instance": "trn2.48xlarge", "launcher": "neuron", "env": {"NEURON_LOGICAL_NC_CONFIG": "1"}},
     "env.NEURON_LOGICAL_NC_CONFIG"),
])
def test_a_logical_core_size_the_instance_does_not_take_is_refused(fields: dict, path: str) -> None:
    findings = [f for f in validate_job(make_spec(**fields)) if f.level is Level.ERROR]
    assert [f.path for f in findings] == [path], [str(f) for f in findings]
    assert findings[0].fix and findings[0].rule == "job.logical-neuron-cores"


def test_a_bad_logical_core_size_through_the_cli(tmp_path: Path) -> None:
    spec = write(tmp_path, "name: j\ncommand: [train.py]\ninstance: trn2.48xlarge\n"
                           "launcher: {type: neuron, logical_nc_config: 3}\n")
    result = clusterkit("validate", str(spec))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert ("error: launcher.logical_nc_config: trn2.48xlarge's Neuron runtime takes a logical NeuronCore size of "
            "1 or 2 (fix: write 1 or 2, or leave it out for 2)") in result.stdout.splitlines()
    typed = write(tmp_path, "name: j\ncommand: [train.py]\ninstance: trn2.48xlarge\n"
                            "launcher: {type: neuron, logical_nc_config: two}\n")
    result = clusterkit("validate", str(typed))
    assert result.returncode == 1 and "launcher.logical_nc_config" in result.stdout and "Traceback" not in result.stderr
