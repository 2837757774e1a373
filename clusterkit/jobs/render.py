"""Render a job spec into an sbatch script: one pure function, same spec in, same text out.

Decisions (which directives, which environment, what each task runs) are made here in Python;
the templates in job-templates/sbatch/ only lay them out. Every value that reaches the shell
passes the `shquote` filter, and every value in an #SBATCH line the `sbatch_escape` filter.
"""

from __future__ import annotations

import functools
import re
import shlex
from typing import Any

from clusterkit import runtime
from clusterkit.errors import ClusterkitError
from clusterkit.findings import errors
from clusterkit.jobs.environment import job_environment
from clusterkit.jobs.spec import JobSpec, Mount
from clusterkit.jobs.validators import validate_job

# Slurm variables a program inside a docker container may read (docker passes no environment by itself).
DOCKER_SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST", "SLURM_NODEID",
                          "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_RESTART_COUNT")

# Characters sbatch's #SBATCH parser treats specially: quotes, '#' (starts a comment) and '\'.
_SBATCH_SPECIAL = re.compile(r"""([\\"'#])""")


def render_sbatch(spec: JobSpec) -> str:
    """The sbatch script for `spec`; raises ClusterkitError if validate_job finds errors."""
    problems = errors(validate_job(spec))
    if problems:
        raise ClusterkitError(f"job spec {spec.name!r} has errors: " + "; ".join(str(e) for e in problems),
                              fix=problems[0].fix or "fix the fields named")
    template = _template_environment().get_template("job.sbatch.j2")
    return template.render(job=sbatch_context(spec))


def sbatch_context(spec: JobSpec) -> dict[str, Any]:
    """What the templates lay out, decided from the spec (plain data: printable as JSON for a dry run)."""
    facts = spec.instance_facts
    environment = job_environment(spec)
    per_node_launcher = spec.launcher.kind in ("torchrun", "neuron")
    runtime = spec.container.runtime
    return {
        "name": spec.name,
        "directives": _directives(spec, tasks_per_node=1 if per_node_launcher else spec.processes),
        "environment": sorted(environment.variables.items()),
        "environment_summary": environment.summary,
        # In a container the image sets its own library path; the host's would shadow it.
        "library_dirs": list(environment.library_dirs) if runtime == "none" else [],
        "launcher": spec.launcher.kind,
        "port": spec.launcher.port,
        "processes_per_node": spec.processes,
        "compile": spec.launcher.compile,
        "program": _program(spec),
        "compile_program": _program(spec) + list(spec.launcher.compile_args),
        "runtime": runtime,
        "image": spec.container.image,
        "mounts": list(spec.container.mounts),
        "container_workdir": spec.container.workdir or spec.workdir,
        "gpu": facts is not None and facts.accelerator == "gpu",
        "devices": _docker_devices(spec),
        "docker_env_names": sorted(set(environment.variables) | set(DOCKER_SLURM_VARIABLES)),
        "supervisor": _supervisor_command(spec),
    }


def _supervisor_command(spec: JobSpec) -> list[str]:
    if spec.supervise is None:
        return []
    supervision = spec.supervise
    state_dir = runtime.run_state_dir(spec.checkpoint_dir) if spec.checkpoint_dir else None
    return runtime.supervisor_command(supervision.python, hang_timeout=supervision.hang_timeout,
                                      app_retries=supervision.app_retries, state_dir=state_dir)


def _directives(spec: JobSpec, tasks_per_node: int) -> list[tuple[str, str | None]]:
    directives: list[tuple[str, str | None]] = [("job-name", spec.name)]
    if spec.partition:
        directives.append(("partition", spec.partition))
    directives += [("nodes", str(spec.nodes)), ("ntasks-per-node", str(tasks_per_node))]
    if spec.gpus_per_node is not None:
        directives.append(("gpus-per-node", str(spec.gpus_per_node)))
    if spec.exclusive:
        directives.append(("exclusive", None))
    directives.append(("wait-all-nodes", "1"))
    if spec.time:
        directives.append(("time", spec.time))
    directives.append(("requeue", None) if spec.requeue else ("no-requeue", None))
    if spec.signal:
        # A supervised job's warning goes to the supervisor (the batch shell's process), which has
        # the step save a checkpoint and requeues the job.
        supervised_signal = spec.supervise and not spec.signal.startswith(("B:", "R:", "RB:", "BR:"))
        directives.append(("signal", f"B:{spec.signal}" if supervised_signal else spec.signal))
    directives.append(("output", spec.logs.output))
    if spec.logs.error:
        directives.append(("error", spec.logs.error))
    directives.append(("open-mode", "append"))
    if spec.workdir:
        directives.append(("chdir", spec.workdir))
    for extra in spec.sbatch:
        option, has_value, value = extra[2:].partition("=")
        directives.append((option, value if has_value else None))
    return directives


def _program(spec: JobSpec) -> list[str]:
    """The words after the launcher: torchrun runs .py files itself, anything else with --no-python."""
    command = spec.command
    if spec.launcher.kind in ("torchrun", "neuron"):
        prefix = [] if command.is_python else ["--no-python"]
    else:
        prefix = ["python"] if command.is_python else []
    return [*prefix, command.script, *command.args]


def _docker_devices(spec: JobSpec) -> list[str]:
    facts = spec.instance_facts
    if spec.container.runtime != "docker" or facts is None:
        return []
    devices = [f"/dev/infiniband/uverbs{index}" for index in range(facts.efa_interfaces)]
    if facts.accelerator == "neuron":
        devices += [f"/dev/neuron{index}" for index in range(facts.accelerator_count)]
    return devices


def mount_spec(mount: Mount) -> str:
    """SOURCE:TARGET[:ro], the syntax pyxis, docker and apptainer share."""
    return f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")


def sbatch_escape(value: str) -> str:
    """Escape a value for an #SBATCH line, which sbatch splits into words itself.

    A backslash makes sbatch take the next character literally, but does not keep a space inside
    the word; double quotes do (and Slurm versions differ on '#' inside quotes, hence the escapes).
    """
    escaped = _SBATCH_SPECIAL.sub(r"\\\1", value)
    return f'"{escaped}"' if re.search(r"\s", value) else escaped


@functools.lru_cache(maxsize=1)
def _template_environment() -> Any:
    import jinja2

    from clusterkit.resources import job_templates_dir

    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(job_templates_dir() / "sbatch")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # shell text, not HTML: quoting is the filters' job
    )
    environment.filters["shquote"] = lambda value: shlex.quote(str(value))
    environment.filters["sbatch_escape"] = sbatch_escape
    environment.filters["mount_spec"] = mount_spec
    return environment
