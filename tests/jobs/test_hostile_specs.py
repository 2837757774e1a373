"""Every text field of a job spec, given hostile values, for every runtime x launcher: either refused
with a finding that names the field, or rendered; each rendered script then runs under real bash
with the fake Slurm (tests/fakes.py), and the canary file never appears.

Per runtime x launcher and hostile value, one spec carries the value in every field that accepts it
(a field whose value is refused keeps a plain one), so each script is run once.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clusterkit.errors import ClusterkitError
from clusterkit.findings import Level
from clusterkit.jobs.render import render_sbatch
from clusterkit.jobs.spec import LAUNCHERS, RUNTIMES, job_from_dict
from clusterkit.jobs.validators import MANAGED_DIRECTIVES, validate_job
from clusterkit.spec_reader import SpecError

from tests.fakes import FakeSlurm
from tests.jobs.test_job_quoting import sbatch_directives

CANARY = "canary"


def hostile_values(canary: Path) -> list[str]:
    return [
        f"x\ntouch {canary}",
        f"x\rtouch {canary}",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"'; touch {canary}; '",
        f'"; touch {canary}; "',
        f"; touch {canary}",
        "%x",
        f"x\u2028touch {canary}",
        f"x\u2029touch {canary}",
        "a" * 100_000 + f"$(touch {canary})",
    ]


def _set(*keys: str) -> Callable[[dict, str], None]:
    def setter(data: dict, value: str) -> None:
        target = data
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    return setter


def _set_item(*keys: str) -> Callable[[dict, str], None]:
    def setter(data: dict, value: str) -> None:
        target = data
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = [value, *target.get(keys[-1], [])[1:]]
    return setter


def _env_key(data: dict, value: str) -> None:
    data["env"] = {value: "v", **data["env"]}


# (the field as findings name it, how to put a value there)
FIELDS: list[tuple[str, Callable[[dict, str], None]]] = [
    ("name", _set("name")), ("cluster", _set("cluster")), ("partition", _set("partition")),
    ("instance", _set("instance")), ("workdir", _set("workdir")), ("time", _set("time")),
    ("signal", _set("signal")), ("logs.output", _set("logs", "output")), ("logs.error", _set("logs", "error")),
    ("checkpoint_dir", _set("checkpoint_dir")), ("run_id", _set("run_id")),
    ("container.runtime", _set("container", "runtime")), ("container.image", _set("container", "image")),
    ("container.workdir", _set("container", "workdir")), ("container.mounts", _set_item("container", "mounts")),
    ("command.script", _set("command", "script")), ("command.args", _set_item("command", "args")),
    ("launcher.type", _set("launcher", "type")), ("launcher.cpu_bind", _set("launcher", "cpu_bind")),
    ("launcher.compile_args", _set_item("launcher", "compile_args")),
    ("launcher.compile_cache", _set("launcher", "compile_cache")),
    ("env.MY_VAR", _set("env", "MY_VAR")), ("env", _env_key),
    ("stack.aws_ofi_nccl", _set("stack", "aws_ofi_nccl")), ("stack.libfabric", _set("stack", "libfabric")),
    ("stack.nccl", _set("stack", "nccl")), ("stack.efa_installer", _set("stack", "efa_installer")),
    ("stack.neuron", _set("stack", "neuron")), ("supervise.python", _set("supervise", "python")),
    ("sbatch", _set_item("sbatch")),
]


def base_spec(runtime: str, launcher: str) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "hostile", "nodes": 2, "instance": "trn1" if launcher == "neuron" else "local",
        "launcher": {"type": launcher, "compile_args": ["--steps", "1"]},
        "command": {"script": "train.py", "args": ["--flag", "v"]}, "env": {"MY_VAR": "v"},
        "time": "60", "signal": "USR1@60", "checkpoint_dir": "/fsx/ckpt", "run_id": "r1", "max_restarts": 1,
        "workdir": "/fsx/work", "logs": {"output": "logs/%x_%j.out", "error": "logs/%x_%j.err"},
        "sbatch": ["--comment=c"], "stack": {"aws_ofi_nccl": "1.13.2", "libfabric": "1.22", "nccl": "2.27.7",
                                             "efa_installer": "1.43.2", "neuron": "2.25"},
        "supervise": {"python": "python3"},
    }
    if runtime != "none":
        data["container"] = {"runtime": runtime, "mounts": ["/fsx"], "workdir": "/fsx/work",
                             "image": "/fsx/img.sqsh" if runtime == "pyxis" else "example.com/img:1"}
    return data


def refusals(data: dict) -> list[tuple[str, str]]:
    """(path, message) of the errors loading and the rules find; [] when the spec is accepted."""
    try:
        spec = job_from_dict(data)
    except SpecError as error:
        return [(f.path, f.message) for f in error.findings]
    return [(f.path, f.message) for f in validate_job(spec) if f.level is Level.ERROR]


def names_field(path: str, field: str) -> bool:
    return path == field or path.startswith((f"{field}.", f"{field}["))


@pytest.fixture
def python3_runs_the_step(fake_slurm: FakeSlurm) -> None:
    """A stand-in for the supervisor: `python3 -m ... -- STEP...` runs STEP."""
    script = fake_slurm.bin / "python3"
    script.write_text('#!/bin/bash\nwhile [[ $# -gt 0 && $1 != -- ]]; do shift; done\nshift\nexec "$@"\n')
    script.chmod(0o755)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_hostile_values_are_refused_or_stay_inert(fake_slurm: FakeSlurm, python3_runs_the_step: None,
                                                  runtime: str, launcher: str) -> None:
    canary = fake_slurm.root / CANARY
    fake_slurm.link("touch", shutil.which("touch") or "/usr/bin/touch")  # what a value would run
    base = base_spec(runtime, launcher)
    assert refusals(base) == []
    rendered = 0
    for value in hostile_values(canary):
        combined = copy.deepcopy(base)
        for field, setter in FIELDS:
            alone = copy.deepcopy(base)
            setter(alone, value)
            problems = refusals(alone)
            if problems:
                # Refused: by a finding on this very field (with its message), never by a crash.
                assert any(names_field(path, field) for path, _ in problems), (field, value[:30], problems)
            else:
                setter(combined, value)
        # Fields accepted one by one may clash together (a name with '/' and %x in the log path): the
        # rules name the field, and it keeps its plain value.
        for _ in FIELDS:
            problems = refusals(combined)
            if not problems:
                break
            for path, _message in problems:
                _restore_field(combined, base, next(field for field, _ in FIELDS if names_field(path, field)))
        script = render_sbatch(job_from_dict(combined))
        rendered += 1
        for directive in sbatch_directives(script):
            assert directive[2:].partition("=")[0] in {*MANAGED_DIRECTIVES, "comment"}, directive[:60]
        fake_slurm.run(script, extra_env={"SLURM_RESTART_COUNT": "0"}, timeout=60)
        assert not canary.exists(), f"a value ran as a command: {value[:40]!r}"
    assert rendered == len(hostile_values(canary))


def _restore_field(combined: dict, base: dict, field: str) -> None:
    """Put the base spec's value of `field` back into `combined`."""
    keys = field.split(".")
    if field == "env":
        combined["env"] = {"MY_VAR": combined["env"].get("MY_VAR", "v")}
        return
    source, target = base, combined
    for key in keys[:-1]:
        source, target = source.get(key, {}), target.setdefault(key, {})
    if keys[-1] in source:
        target[keys[-1]] = copy.deepcopy(source[keys[-1]])
    else:
        target.pop(keys[-1], None)


def test_a_refusal_is_one_clear_line_per_field() -> None:
    with pytest.raises(ClusterkitError) as raised:
        render_sbatch(job_from_dict({**base_spec("none", "torchrun"), "partition": "gpu\ntouch x"}))
    message = str(raised.value)
    assert "partition" in message and "control character" in message and "\n" not in message
