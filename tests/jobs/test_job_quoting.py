"""Rendered scripts pass values through literally: run them with a fake srun/scontrol and compare argv."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clusterkit.errors import ClusterkitError
from clusterkit.jobs.render import render_sbatch, rendezvous_port
from clusterkit.jobs.spec import LAUNCHERS, RUNTIMES
from clusterkit.slurm import Flavor

from tests.fakes import FakeSlurm
from tests.jobs.helpers import make_spec

LAUNCHER_PROGRAM = {"torchrun": "torchrun", "neuron": "torchrun", "mpi": "python", "srun": "python"}
CONTAINER_PROGRAM = {"docker": "docker", "apptainer": "apptainer"}


def nasty_values(marker: Path) -> list[str]:
    return [
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"; touch {marker}",
        f"| touch {marker} &",
        "it's \"quoted\"",
        "two\nlines",
        "$HOME ${HOME} * ?",
        "#not-a-comment",
        "back\\slash",
        "",
        "--flag=with space",
    ]


def nasty_spec(marker: Path, runtime: str, launcher: str, **fields: object):
    values = nasty_values(marker)
    container = {"runtime": runtime}
    if runtime != "none":
        container.update(image="registry.example.com/train:1", mounts=["/fsx"])
    return make_spec(
        name=f"job $(touch {marker.name}) `touch {marker.name}`; 'q' \"d\" #x",  # the script runs beside the marker
        instance="trn1" if launcher == "neuron" else "local",
        launcher=launcher,
        container=container,
        command={"script": "train.py", "args": values},
        env={"CK_NASTY": "\n".join(values)},
        **fields,
    )


def sbatch_directives(script: str) -> list[str]:
    """The arguments sbatch reads from #SBATCH lines, split the way Slurm's parser splits them."""
    arguments = []
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            arguments += split_sbatch_line(line[len("#SBATCH"):])
    return arguments


def split_sbatch_line(text: str) -> list[str]:
    # Slurm's _get_argument: '\' takes the next character (but does not extend a word over
    # whitespace), "..." and '...' quote, an unquoted '#' ends the line.
    words, position = [], 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text) or text[position] == "#":
            return words
        word, quote, escaped = [], "", False
        while position < len(text) and (quote or not text[position].isspace()):
            char = text[position]
            position += 1
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
                continue
            elif quote:
                if char == quote:
                    quote = ""
                    continue
            elif char in "\"'":
                quote = char
                continue
            elif char == "#":
                position -= 1
                break
            word.append(char)
        assert not quote, f"unmatched quote in #SBATCH line: {text!r}"
        words.append("".join(word))


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_values_reach_the_program_byte_for_byte(fake_slurm: FakeSlurm, runtime: str, launcher: str) -> None:
    marker = fake_slurm.root / "pwned"
    fake_slurm.link("touch", shutil.which("touch") or "/usr/bin/touch")  # what a value would run
    spec = nasty_spec(marker, runtime, launcher)
    result = fake_slurm.run(render_sbatch(spec), extra_env={"SLURM_RESTART_COUNT": "0"})  # a first start
    assert result.returncode == 0, result.stderr
    assert not marker.exists(), "a value was executed by the shell"

    if runtime in CONTAINER_PROGRAM:
        calls = [call for call in fake_slurm.calls(CONTAINER_PROGRAM[runtime]) if call.argv[0] in ("run", "exec")]
    else:
        calls = fake_slurm.calls(LAUNCHER_PROGRAM[launcher]) + fake_slurm.calls("neuron_parallel_compile")
    assert len(calls) == (2 if launcher == "neuron" else 1)  # neuron: compile pass, then training
    values = nasty_values(marker)
    for call in calls:
        assert call.argv[-len(values) - 1:] == ["train.py", *values]
        assert call.env == "\n".join(values)


@pytest.mark.parametrize("runtime", ["docker", "apptainer"])
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_the_image_follows_the_end_of_options(fake_slurm: FakeSlurm, runtime: str, launcher: str) -> None:
    # Defence in depth behind the image rule: whatever the image is, the runtime cannot read it as an option.
    script = render_sbatch(nasty_spec(fake_slurm.root / "pwned", runtime, launcher))
    assert fake_slurm.run(script, extra_env={"SLURM_RESTART_COUNT": "0"}).returncode == 0
    calls = [call for call in fake_slurm.calls(runtime) if call.argv[0] in ("run", "exec")]
    assert calls
    for call in calls:
        image_at = call.argv.index("registry.example.com/train:1")
        assert call.argv[image_at - 1] == "--", call.argv


def test_job_name_survives_sbatch_parsing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    spec = nasty_spec(marker, "none", "torchrun")
    directives = sbatch_directives(render_sbatch(spec))
    assert f"--job-name={spec.name}" in directives
    assert "--output=logs/%x_%j.out" in directives


@pytest.mark.parametrize("value", ["a b", "x#y", "q'uote", 'd"q', "back\\slash", "  lead", "%x_%j"])
def test_sbatch_escape_round_trips(value: str) -> None:
    from clusterkit.jobs.render import sbatch_escape

    assert split_sbatch_line(f" --comment={sbatch_escape(value)}") == [f"--comment={value}"]


@pytest.mark.parametrize("field", ["name", "partition", "time", "signal"])
def test_a_line_break_never_reaches_an_sbatch_line(field: str) -> None:
    spec = make_spec(**{field: "x\n#SBATCH --uid=0\ntouch /tmp/pwned"})
    with pytest.raises(ClusterkitError, match=field):
        render_sbatch(spec)


def test_rendezvous_host_comes_from_the_steps_node_list(fake_slurm: FakeSlurm) -> None:
    spec = make_spec(nodes=2, launcher="torchrun")
    # The batch script saw node-[3-4]; the (retried) step runs on node-[7-8].
    result = fake_slurm.run(render_sbatch(spec), nodelist="node-[3-4]", step_nodelist="node-[7-8]")
    assert result.returncode == 0, result.stderr
    (torchrun,) = fake_slurm.calls("torchrun")
    port = rendezvous_port(42, attempt=1)  # job 42 of a cluster without a name, once requeued (the fake's count)
    assert torchrun.argv[:5] == ["--nnodes=2", "--nproc_per_node=1", "--rdzv_id=slurm-42", "--rdzv_backend=c10d",
                                 f"--rdzv_endpoint=node-7:{port}"]
    (scontrol,) = [call for call in fake_slurm.calls("scontrol") if call.argv[:2] == ["show", "hostnames"]]
    assert scontrol.argv == ["show", "hostnames", "node-[7-8]"]
    (srun,) = fake_slurm.calls("srun")
    assert "--ntasks-per-node=1" in srun.argv


def test_jobs_of_two_clusters_whose_ports_meet_never_share_a_rendezvous(fake_slurm: FakeSlurm) -> None:
    # Job 42 of dev-aaa and job 42 of dev-mpd get the same port: their rendezvous ids must differ.
    assert rendezvous_port(42, "dev-aaa") == rendezvous_port(42, "dev-mpd")
    script = render_sbatch(make_spec(nodes=2, launcher="torchrun"))
    seen = {}
    for cluster in ("dev-aaa", "dev-mpd", "odd name/x$(y)"):
        for old in fake_slurm.log.iterdir():
            old.unlink()
        assert fake_slurm.run(script, extra_env={"SLURM_CLUSTER_NAME": cluster}).returncode == 0
        (torchrun,) = fake_slurm.calls("torchrun")
        seen[cluster] = next(word for word in torchrun.argv if word.startswith("--rdzv_id="))
    assert seen == {"dev-aaa": "--rdzv_id=dev-aaa-42", "dev-mpd": "--rdzv_id=dev-mpd-42",
                    "odd name/x$(y)": "--rdzv_id=odd_name_x__y_-42"}


@pytest.mark.parametrize(("nodelist", "first"), [
    ("node-[3-4]", "node-3"),
    ("ip-10-0-1-[17,23]", "ip-10-0-1-17"),
    ("gpu[001-004]", "gpu001"),
    ("x[7]", "x7"),
    ("a1,b[2-3]", "a1"),
    ("queue-st-p4de-[1-4],queue-dy-p4de-2", "queue-st-p4de-1"),
    ("rack[2-3]-node", "rack2-node"),
    ("single", "single"),
])
def test_rendezvous_host_without_scontrol(fake_slurm: FakeSlurm, nodelist: str, first: str) -> None:
    # Inside a pyxis container Slurm's tools are usually missing: the script expands the list itself.
    fake_slurm.remove("scontrol")
    spec = make_spec(nodes=2, container={"runtime": "pyxis", "image": "/fsx/images/train.sqsh"})
    result = fake_slurm.run(render_sbatch(spec), nodelist=nodelist)
    assert result.returncode == 0, result.stderr
    (torchrun,) = fake_slurm.calls("torchrun")
    assert f"--rdzv_endpoint={first}:{rendezvous_port(42, attempt=1)}" in torchrun.argv


def test_a_job_for_a_hyperpod_cluster_runs_its_step_with_auto_resume(fake_slurm: FakeSlurm) -> None:
    assert fake_slurm.run(render_sbatch(make_spec(nodes=2))).returncode == 0
    (srun,) = fake_slurm.calls("srun")
    assert "--auto-resume=1" not in srun.argv

    for old in fake_slurm.log.iterdir():
        old.unlink()
    script = render_sbatch(make_spec(nodes=2), Flavor.HYPERPOD)
    assert fake_slurm.run(script).returncode == 0
    (srun,) = fake_slurm.calls("srun")
    assert srun.argv[0] == "--auto-resume=1" and "--auto-resume=1" not in srun.argv[1:]
    assert "/opt/sagemaker_cluster" not in script  # decided when planned, for the cluster the job goes to


def test_a_failing_step_fails_the_job(fake_slurm: FakeSlurm) -> None:
    fake_slurm.remove("torchrun")
    result = fake_slurm.run(render_sbatch(make_spec()))
    assert result.returncode != 0


def test_neuron_compile_pass_runs_first_and_can_be_skipped(fake_slurm: FakeSlurm) -> None:
    spec = make_spec(instance="trn1", launcher={"type": "neuron", "compile_args": ["--max_steps", "10"]})
    script = render_sbatch(spec)
    assert fake_slurm.run(script, extra_env={"SLURM_RESTART_COUNT": "0"}).returncode == 0
    (compile_call,), (training,) = fake_slurm.calls("neuron_parallel_compile"), fake_slurm.calls("torchrun")
    assert compile_call.argv[0] == "torchrun"
    assert "--nproc_per_node=32" in compile_call.argv and "--nproc_per_node=32" in training.argv
    assert compile_call.argv[-3:] == ["train.py", "--max_steps", "10"]
    assert training.argv[-1] == "train.py"
    assert script.index("; clusterkit_compile_step") < script.index("; clusterkit_step")

    skipped = make_spec(instance="trn1", launcher={"type": "neuron", "compile": False})
    assert "neuron_parallel_compile" not in render_sbatch(skipped)


@pytest.mark.parametrize("cluster", ["", "other", "third", "pytest", "ml_p5_prod"])
def test_the_rendezvous_port_comes_from_the_job_and_its_cluster(fake_slurm: FakeSlurm, cluster: str) -> None:
    # Jobs of two local clusters can both be job 3 on 127.0.0.1: the cluster's name tells their ports apart.
    result = fake_slurm.run(render_sbatch(make_spec(nodes=2)), nodelist="localhost",
                            extra_env={"SLURM_JOB_ID": "3", "SLURM_CLUSTER_NAME": cluster})
    assert result.returncode == 0, result.stderr
    (torchrun,) = fake_slurm.calls("torchrun")
    assert f"--rdzv_endpoint=localhost:{rendezvous_port(3, cluster, attempt=1)}" in torchrun.argv
    assert 20000 <= rendezvous_port(3, cluster) < 32000


@pytest.mark.parametrize(("restart", "attempt_id", "moved"), [("0", "", 0), ("2", "", 2), ("0", "3.0.4", 4),
                                                              ("1", "3.1.2", 3), ("x", "3.0.$(id)", 0)])
def test_each_requeue_and_each_try_of_the_step_moves_the_port_on(fake_slurm: FakeSlurm, restart: str,
                                                                 attempt_id: str, moved: int) -> None:
    # A relaunched step must not meet the store of a try whose agent still holds the old port (a silent node's).
    env = {"SLURM_JOB_ID": "3", "SLURM_RESTART_COUNT": restart, "CLUSTERKIT_ATTEMPT_ID": attempt_id}
    result = fake_slurm.run(render_sbatch(make_spec(nodes=2)), nodelist="localhost", extra_env=env)
    assert result.returncode == 0, result.stderr
    (torchrun,) = fake_slurm.calls("torchrun")
    assert f"--rdzv_endpoint=localhost:{rendezvous_port(3, attempt=moved)}" in torchrun.argv


def test_ports_of_the_same_job_id_on_two_clusters_differ() -> None:
    assert len({rendezvous_port(3, name) for name in ("other", "third", "pytest", "dev")}) == 4
    assert rendezvous_port(41, "dev") != rendezvous_port(42, "dev")


def test_a_fixed_port_is_kept(fake_slurm: FakeSlurm) -> None:
    result = fake_slurm.run(render_sbatch(make_spec(nodes=2, launcher={"type": "torchrun", "port": 29400})),
                            nodelist="localhost")
    assert result.returncode == 0, result.stderr
    (torchrun,) = fake_slurm.calls("torchrun")
    assert "--rdzv_endpoint=localhost:29400" in torchrun.argv
