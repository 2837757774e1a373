"""Job spec loading (field paths, fixes, did-you-mean), validation findings, and a fuzzed loader."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterkit.errors import ClusterkitError
from clusterkit.findings import Level
from clusterkit.jobs.render import render_sbatch
from clusterkit.jobs.spec import JobSpec, Mount, job_from_dict, job_from_yaml, load_job
from clusterkit.jobs.validators import validate_job
from clusterkit.spec_reader import SpecError

from tests.jobs.helpers import REPO_ROOT, make_spec

EXAMPLES = sorted((REPO_ROOT / "examples" / "jobs").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
def test_examples_load_without_errors(path: Path) -> None:
    findings = validate_job(load_job(path))
    assert [f for f in findings if f.level is Level.ERROR] == []


def test_defaults() -> None:
    spec = job_from_dict({"name": "j", "command": ["train.py"]})
    assert spec.requeue is True and spec.exclusive is False and spec.nodes == 1
    assert spec.logs.output == "logs/%x_%j.out" and spec.logs.error is None
    assert spec.launcher.kind == "torchrun" and spec.launcher.port is None  # derived from the job
    assert spec.container.runtime == "none" and spec.instance is None and spec.processes == 1
    assert validate_job(spec) == []


@pytest.mark.parametrize(("instance", "instance_type", "processes"), [
    ("p4de", "p4de.24xlarge", 8), ("p4d", "p4d.24xlarge", 8), ("p5", "p5.48xlarge", 8),
    ("trn1", "trn1.32xlarge", 32), ("trn1n", "trn1n.32xlarge", 32), ("g5", "g5.12xlarge", 4),
    ("g5.48xlarge", "g5.48xlarge", 8), ("local", None, 1),
])
def test_instance_presets(instance: str, instance_type: str | None, processes: int) -> None:
    spec = make_spec(instance=instance)
    assert (spec.instance, spec.processes) == (instance_type, processes)


def test_overrides_of_processes() -> None:
    assert make_spec(instance="p4de", gpus_per_node=4).processes == 4
    assert make_spec(instance="p4de", gpus_per_node=4, processes_per_node=2).processes == 2


def test_yaml_keeps_times_and_versions_as_text(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: j\ncommand: [t.py, 010]\ntime: 04:00:00\nstack: {libfabric: 1.20}\n"
                    "env: {N: 1:30, M: 08}\n")
    spec = load_job(path)
    assert spec.time == "04:00:00"
    assert spec.stack.libfabric == "1.20"  # as written: a version is text, not the number 1.2
    assert spec.command.args == ("010",)
    assert spec.env == {"N": "1:30", "M": "08"}


def test_values_where_text_is_expected_stay_as_written(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: 0010\ncommand: [t.py, 1.10, true, ~x]\nenv: {A: 1.10, B: true, C: 0x1F, D: 1e3}\n"
                    "stack: {aws_ofi_nccl: 1.10}\nnodes: 0010\n")
    spec = load_job(path)
    assert spec.name == "0010" and spec.command.args == ("1.10", "true", "~x")
    assert spec.env == {"A": "1.10", "B": "true", "C": "0x1F", "D": "1e3"}
    assert spec.stack.aws_ofi_nccl == "1.10"
    assert spec.nodes == 10  # a number where a number is expected: decimal, never octal


def test_a_command_may_be_one_line_split_like_a_shell_but_never_run_by_one() -> None:
    spec = make_spec(command="train.py --name 'my run' $(reboot)")
    assert spec.command.script == "train.py"
    assert spec.command.args == ("--name", "my run", "$(reboot)")


def test_command_forms_and_mounts() -> None:
    spec = make_spec(command={"script": "t.py", "args": ["--n", 3]},
                     container={"runtime": "pyxis", "image": "/fsx/i.sqsh",
                                "mounts": ["/fsx", "/a:/b:ro", {"source": "/c", "target": "/d"}]})
    assert spec.command.script == "t.py" and spec.command.args == ("--n", "3")
    assert spec.container.mounts == (Mount("/fsx", "/fsx"), Mount("/a", "/b", True), Mount("/c", "/d"))


@pytest.mark.parametrize(("fields", "path", "fix"), [
    ({"nodse": 2}, "nodse", "did you mean 'nodes'"),
    ({"container": {"runtim": "pyxis"}}, "container.runtim", "did you mean 'runtime'"),
    ({"container": ["pyxis"]}, "container", "key: value"),
    ({"container": {"runtime": "pyxis", "mounts": "/fsx"}}, "container.mounts", "[a, b"),
    ({"container": {"runtime": "pyxis", "mounts": ["/a:/b:rx"]}}, "container.mounts[0]", "/data:/data:ro"),
    ({"env": {"FOO": None}}, "env.FOO", '""'),
    ({"env": {"FOO": ["a"]}}, "env.FOO", "quote"),
    ({"nodes": "4"}, "nodes", "number"),
    ({"nodes": True}, "nodes", "number"),
    ({"instance": "p4e"}, "instance", "did you mean 'p4de'"),
    ({"instance": "quantum"}, "instance", "preset"),
    ({"command": "train.py 'unclosed"}, "command", "as a list"),
    ({"command": []}, "command", "name the script"),
    ({"command": {"script": "t.py", "arg": []}}, "command.arg", "did you mean 'args'"),
    ({"command": ["t.py", {"a": 1}]}, "command.args[0]", "quote"),
    ({"launcher": {"type": "neuron", "compile": "no"}}, "launcher.compile", "true or false"),
    ({"logs": {"outptu": "x"}}, "logs.outptu", "did you mean 'output'"),
    ({"requeue": "yes please"}, "requeue", "true"),
    ({"name": None}, "name", "name: ..."),
    ({"name": "a\x00b"}, "name", "NUL"),
    ({"sbatch": "--account=x"}, "sbatch", "[--account"),
])
def test_loading_errors_name_field_value_and_fix(fields: dict, path: str, fix: str) -> None:
    with pytest.raises(SpecError) as caught:
        make_spec(**fields)
    assert caught.value.path == path
    assert f": {path}: " in str(caught.value) and "\n" not in str(caught.value)
    assert fix in (caught.value.fix or "")


def test_every_loading_error_is_reported_at_once() -> None:
    with pytest.raises(SpecError) as caught:
        make_spec(nodse=2, nodes="four", container={"runtim": "x"}, env={"A": None})
    assert [f.path for f in caught.value.findings] == ["nodse", "nodes", "container.runtim", "env.A"]
    assert all(f.rule.startswith("job.") and f.fix for f in caught.value.findings)


def test_error_shows_the_value() -> None:
    with pytest.raises(ClusterkitError, match="got 'four'"):
        make_spec(nodes="four")


def test_not_a_mapping_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ClusterkitError, match="mapping"):
        job_from_yaml("- a\n- b\n")
    with pytest.raises(ClusterkitError, match="not valid YAML"):
        job_from_yaml("name: [unclosed\n")
    with pytest.raises(ClusterkitError, match="cannot read"):
        load_job(tmp_path / "missing.yaml")


@pytest.mark.parametrize(("fields", "path", "level"), [
    ({"container": {"runtime": "podman", "image": "x:1"}}, "container.runtime", Level.ERROR),
    ({"container": {"runtime": "pyxsi", "image": "x:1"}}, "container.runtime", Level.ERROR),
    ({"env": {"1BAD": "x"}}, "env.1BAD", Level.ERROR),
    ({"nodes": 0}, "nodes", Level.ERROR),
    ({"launcher": "torchrn"}, "launcher.type", Level.ERROR),
    ({"max_restarts": -1}, "max_restarts", Level.ERROR),
    ({"time": 0}, "time", Level.ERROR),
    ({"stack": {"aws_ofi_nccl": "1.7\ntouch pwned\n#"}}, "stack.aws_ofi_nccl", Level.ERROR),
    ({"name": "two\nlines"}, "name", Level.ERROR),
    ({"name": "a/b"}, "name", Level.ERROR),  # with %x in the log path: the log would leave its directory
    ({"time": "4 hours"}, "time", Level.ERROR),
    ({"signal": "USR1 at 120"}, "signal", Level.ERROR),
    ({"partition": "gpu queue"}, "partition", Level.ERROR),
    ({"cluster": "-bad"}, "cluster", Level.ERROR),
    ({"run_id": "run 1"}, "run_id", Level.ERROR),
    ({"instance": "p4de", "gpus_per_node": 16}, "gpus_per_node", Level.ERROR),
    ({"instance": "trn1", "gpus_per_node": 1}, "gpus_per_node", Level.ERROR),
    ({"instance": "p4de", "gpus_per_node": 8}, "gpus_per_node", Level.WARNING),
    ({"instance": "p4de", "processes_per_node": 16}, "processes_per_node", Level.WARNING),
    ({"instance": "p4de", "nodes": 2}, "exclusive", Level.WARNING),
    ({"instance": "p4de", "launcher": "neuron"}, "launcher.type", Level.ERROR),
    ({"instance": "trn1", "launcher": "torchrun"}, "launcher.type", Level.WARNING),
    ({"instance": "trn1", "launcher": {"type": "neuron", "compile_cache": "cache"}}, "launcher.compile_cache",
     Level.ERROR),
    ({"launcher": {"type": "torchrun", "port": 70000}}, "launcher.port", Level.ERROR),
    ({"launcher": "mpi", "container": {"runtime": "docker", "image": "x:1"}}, "launcher.type", Level.WARNING),
    ({"container": {"runtime": "pyxis"}}, "container.image", Level.ERROR),
    ({"container": {"image": "x:1"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "docker", "image": "/fsx/x.sqsh"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "pyxis", "image": "x.sqsh"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "pyxis", "image": "x:1", "mounts": ["rel:/x"]}}, "container.mounts[0]",
     Level.ERROR),
    ({"container": {"runtime": "pyxis", "image": "x:1"}, "workdir": "rel"}, "workdir", Level.ERROR),
    ({"container": {"mounts": ["/fsx"]}}, "container", Level.WARNING),
    ({"logs": {"output": "logs/train.out"}}, "logs.output", Level.WARNING),
    ({"logs": {"output": ""}}, "logs.output", Level.ERROR),
    ({"env": {"RDMAV_FORK_SAFE": "1"}}, "env.RDMAV_FORK_SAFE", Level.WARNING),
    ({"checkpoint_dir": "ckpt"}, "checkpoint_dir", Level.WARNING),
    ({"max_restarts": 3, "requeue": False}, "max_restarts", Level.WARNING),
    ({"stack": {"aws_ofi_nccl": "latest"}}, "stack.aws_ofi_nccl", Level.ERROR),
    ({"sbatch": ["--time=10"]}, "sbatch[0]", Level.ERROR),
    ({"sbatch": ["account=ml"]}, "sbatch[0]", Level.ERROR),
    ({"sbatch": ["--comment=a\nb"]}, "sbatch[0]", Level.ERROR),
    # one-line fields: no line break of any kind
    ({"partition": "gpu\r"}, "partition", Level.ERROR),
    ({"workdir": "/fsx/a\u2028b"}, "workdir", Level.ERROR),
    ({"checkpoint_dir": "/fsx/a\u2029b"}, "checkpoint_dir", Level.ERROR),
    ({"logs": {"output": "logs/%j\x85.out"}}, "logs.output", Level.ERROR),
    ({"command": {"script": "train\n.py"}}, "command.script", Level.ERROR),
    ({"supervise": {"python": "python3\nid"}}, "supervise.python", Level.ERROR),
    ({"supervise": {"max_preemptions": -1}}, "supervise.max_preemptions", Level.ERROR),
    ({"supervise": {"max_time_limit_requeues": -5}}, "supervise.max_time_limit_requeues", Level.ERROR),
    ({"container": {"runtime": "pyxis", "image": "/fsx/i.sqsh", "workdir": "/fsx/\tw"}}, "container.workdir",
     Level.ERROR),
    ({"stack": {"nccl": "2.19\n"}}, "stack.nccl", Level.ERROR),
    ({"stack": {"efa_installer": "1.29.1;id"}}, "stack.efa_installer", Level.ERROR),
    ({"stack": {"neuron": "two"}}, "stack.neuron", Level.ERROR),
    # what Slurm or the kernel would refuse on the node
    ({"name": "n" * 256}, "name", Level.ERROR),
    ({"name": ".."}, "name", Level.ERROR),
    ({"logs": {"output": "logs\\%j.out"}}, "logs.output", Level.ERROR),
    ({"checkpoint_dir": "/fsx/" + "c" * 300}, "checkpoint_dir", Level.ERROR),
    ({"env": {"PATH": ""}}, "env.PATH", Level.ERROR),
    ({"env": {"PATH": "::"}}, "env.PATH", Level.ERROR),
    ({"env": {"IFS": "x"}}, "env.IFS", Level.ERROR),
    ({"env": {"BASH_ENV": "/tmp/x"}}, "env.BASH_ENV", Level.ERROR),
    ({"env": {"BIG": "v" * 131072}}, "env.BIG", Level.ERROR),
    ({"command": {"script": "t.py", "args": ["a" * 70_000, "b" * 70_000]}}, "command.args", Level.ERROR),
    # time-limit warnings the batch shell can act on
    ({"signal": "TERM@60"}, "signal", Level.ERROR),
    ({"signal": "KILL"}, "signal", Level.ERROR),
    ({"signal": "USR2@60", "supervise": True}, "signal", Level.ERROR),
    ({"signal": "USR1@120", "time": "2"}, "signal", Level.ERROR),
    ({"signal": "USR1@60", "requeue": False}, "signal", Level.WARNING),
    # shared storage inside a container needs a mount
    ({"container": {"runtime": "pyxis", "image": "/fsx/i.sqsh"}, "workdir": "/fsx/w"}, "workdir", Level.ERROR),
    ({"container": {"runtime": "docker", "image": "x:1"}, "checkpoint_dir": "/fsx/c"}, "checkpoint_dir", Level.ERROR),
    ({"container": {"runtime": "docker", "image": "x:1"}, "checkpoint_dir": "/data/c"}, "checkpoint_dir",
     Level.ERROR),
    ({"container": {"runtime": "apptainer", "image": "x.sif", "workdir": "/opt/app"}, "checkpoint_dir": "ckpt"},
     "checkpoint_dir", Level.ERROR),
    ({"container": {"runtime": "docker", "image": "x:1"}, "command": ["/fsx/train/run.py"]}, "command.script",
     Level.ERROR),
    ({"instance": "trn1", "launcher": "neuron", "container": {"runtime": "docker", "image": "x:1"}},
     "launcher.compile_cache", Level.ERROR),
    # versions the EFA cheat-sheet and aws-ofi-nccl's sources rule on
    ({"instance": "p5", "stack": {"aws_ofi_nccl": "1.7.1"}}, "stack.aws_ofi_nccl", Level.ERROR),
    ({"instance": "p5", "stack": {"aws_ofi_nccl": "1.7.2-aws"}}, "stack.aws_ofi_nccl", Level.WARNING),
    ({"instance": "p5", "stack": {"nccl": "2.17.1"}}, "stack.nccl", Level.ERROR),
    ({"instance": "p5", "stack": {"nccl": "2.18.3"}}, "stack.nccl", Level.WARNING),
    ({"instance": "p5", "stack": {"aws_ofi_nccl": "1.16.2", "nccl": "2.20.5"}, "env": {"NCCL_PROTO": "simple"}},
     "env.NCCL_PROTO", Level.ERROR),
    ({"instance": "p4de", "stack": {"aws_ofi_nccl": "1.13.2"}, "env": {"NCCL_ALGO": "ring"}}, "env.NCCL_ALGO",
     Level.WARNING),
    ({"instance": "p4de", "env": {"NCCL_PROTO": "simple"}}, "env.NCCL_PROTO", Level.WARNING),
    ({"instance": "trn1", "env": {"XLA_DOWNCAST_BF16": "1"}}, "env.XLA_DOWNCAST_BF16", Level.WARNING),
    ({"instance": "trn1", "stack": {"neuron": "2.23"}, "env": {"XLA_USE_BF16": "1"}}, "env.XLA_USE_BF16",
     Level.WARNING),
    ({"launcher": {"type": "mpi", "cpu_bind": "none; id"}}, "launcher.cpu_bind", Level.ERROR),
    ({"launcher": {"type": "torchrun", "port": 80}}, "launcher.port", Level.ERROR),
    # an image the runtime would read as an option, or that is no reference it takes
    ({"container": {"runtime": "docker", "image": "--privileged"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "apptainer", "image": "--fakeroot"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "pyxis", "image": "-x.sqsh"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "docker", "image": "Team/Train:1"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "docker", "image": "x:1;id"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "docker", "image": "$(id)"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "pyxis", "image": "nvcr.io#-x"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "apptainer", "image": "docker://-x"}}, "container.image", Level.ERROR),
    ({"container": {"runtime": "apptainer", "image": "ubuntu:22.04"}}, "container.image", Level.ERROR),
])
def test_validation_findings(fields: dict, path: str, level: Level) -> None:
    findings = validate_job(make_spec(**fields))
    matching = [f for f in findings if f.path == path and f.level is level]
    assert matching, [str(f) for f in findings]
    assert all(f.fix and f.rule.startswith("job.") for f in findings)


@pytest.mark.parametrize("fields", [
    {"signal": "USR1@120"}, {"signal": "B:USR1"}, {"signal": "R:SIGUSR2@30"}, {"signal": "10@90"},
    {"instance": "p5", "stack": {"aws_ofi_nccl": "1.7.3", "nccl": "2.18.5"}},
    {"instance": "trn1", "launcher": "neuron", "stack": {"neuron": "2.22"}, "env": {"XLA_USE_BF16": "1"}},
    {"instance": "p4de", "stack": {"aws_ofi_nccl": "1.6.0"}, "env": {"NCCL_PROTO": "simple"}},
    {"container": {"runtime": "pyxis", "image": "/fsx/i.sqsh", "mounts": ["/fsx"]}, "workdir": "/fsx/w",
     "checkpoint_dir": "ckpt"},
    {"container": {"runtime": "apptainer", "image": "/fsx/i.sif"}, "workdir": "/home/me/w"},  # apptainer binds home
    {"container": {"runtime": "docker", "image": "x:1"}, "workdir": "/workspace", "command": ["/opt/app/run"]},
    {"env": {"PATH": "/opt/venv/bin:/usr/bin"}},
    *({"container": {"runtime": runtime, "image": image}} for runtime, image in [
        ("docker", "localhost:5000/team/train_v2__x:1.0-rc"), ("docker", "ubuntu@sha256:" + "a" * 64),
        ("docker", "nvcr.io/nvidia/pytorch:24.01-py3"), ("pyxis", "nvcr.io#nvidia/pytorch:24.01-py3"),
        ("pyxis", "$oauthtoken@nvcr.io#nvidia/pytorch:24.01-py3"), ("pyxis", "docker://ubuntu:22.04"),
        ("apptainer", "library://alpine:3"), ("apptainer", "oras://ghcr.io/team/train:1"),
        ("apptainer", "docker-archive:train.tar"), ("apptainer", "images/train.sif")]),
])
def test_what_is_fine_stays_fine(fields: dict) -> None:
    assert [str(f) for f in validate_job(make_spec(**fields)) if f.level is not Level.INFO
            and f.path not in ("exclusive", "checkpoint_dir")] == []


@pytest.mark.parametrize(("value", "directive"), [
    ("USR1@120", "B:USR1@120"), ("B:USR1@120", "B:USR1@120"), ("SIGUSR2@30", "B:USR2@30"),
    ("R:USR1@300", "RB:USR1@300"), ("USR1", "B:USR1@60"), ("12@90", "B:USR2@90"),
])
def test_the_warning_always_goes_to_the_batch_shell(value: str, directive: str) -> None:
    from clusterkit.jobs.spec import parse_warning

    assert parse_warning(value).directive == directive
    assert f"#SBATCH --signal={directive}" in render_sbatch(make_spec(signal=value, time="60"))


def test_a_misspelled_choice_gets_a_suggestion() -> None:
    (finding,) = [f for f in validate_job(make_spec(container={"runtime": "pyxsi", "image": "x:1"}))
                  if f.path == "container.runtime"]
    assert finding.fix == "did you mean 'pyxis'?" and finding.value == "pyxsi"


def test_sbatch_managed_option_names_the_field() -> None:
    (finding,) = validate_job(make_spec(sbatch={"output": "x.out"}))
    assert "logs.output" in finding.fix


def test_specs_built_in_python_are_validated_too() -> None:
    spec = JobSpec(name="x\n#SBATCH --uid=0", command=make_spec().command)
    assert validate_job(spec)[0].path == "name"


# --- fuzzing: the loader answers bad input with ClusterkitError, never a traceback ------------

FIELD_NAMES = ["name", "command", "nodes", "cluster", "partition", "instance", "gpus_per_node",
               "processes_per_node", "container", "workdir", "launcher", "env", "time", "exclusive", "requeue",
               "signal", "logs", "checkpoint_dir", "run_id", "max_restarts", "stack", "sbatch", "runtime", "image",
               "mounts", "script", "args", "type", "port", "compile", "output", "error", "aws_ofi_nccl"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2**70), st.floats(allow_nan=True), st.text(max_size=12),
                    st.sampled_from(["p4de", "trn1", "local", "pyxis", "docker", "neuron", "mpi", "srun", "train.py",
                                     "/fsx", "/fsx/i.sqsh", "USR1@120", "01:00:00", "--account=x", "1.7"]))
values = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=6), st.integers()), children,
                    max_size=5)), max_leaves=20)
spec_dicts = st.fixed_dictionaries(
    {"name": st.one_of(st.text(max_size=10), scalars), "command": values},
    optional={key: values for key in FIELD_NAMES if key not in ("name", "command")})


def load_and_render(load) -> None:
    try:
        spec = load()
    except ClusterkitError:
        return
    findings = validate_job(spec)
    try:
        script = render_sbatch(spec)
    except ClusterkitError:
        assert any(f.level is Level.ERROR for f in findings)
        return
    assert script.startswith("#!/bin/bash\n")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_dicts)
def test_fuzz_dicts(data: dict) -> None:
    load_and_render(lambda: job_from_dict(data))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=200), st.builds(
    lambda prefix, body: prefix + body,
    st.sampled_from(["name: j\ncommand: [t.py]\n", "name: j\ncommand:\n  script: t.py\n", ""]),
    st.lists(st.sampled_from(list("abcdefnmo:-[]{}&*!|>'\"\n #%@,?01.") + FIELD_NAMES), max_size=40).map("".join))))
def test_fuzz_yaml_text(text: str) -> None:
    load_and_render(lambda: job_from_yaml(text))
