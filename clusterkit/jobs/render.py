"""Render a job spec into an sbatch script: one pure function, same spec in, same text out.

Decisions (which directives, which environment, what each task runs) are made here in Python;
the templates in job-templates/sbatch/ only lay them out. One way for a value to reach the script:
the templates render under a policy where every `{{ ... }}` must be `ShellText` (text fit to stand in
a script as it is) or a number, else rendering fails. ShellText comes only from the filters that
quote or check (`shquote`, `shwords`, `sbatch_escape`, `comment`) or from this module, for the
few fragments clusterkit writes itself (`trusted`: option names checked by a full-match rule,
constant function names, the plugin directories with `$HOSTTYPE` in them).
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable
from typing import Any

from markupsafe import Markup

from clusterkit import runtime
from clusterkit.errors import ClusterkitError
from clusterkit.findings import CONTROL_RE, errors
from clusterkit.jobs.environment import job_environment
from clusterkit.jobs.spec import JobSpec, Mount, parse_warning
from clusterkit.jobs.validators import ECR_IMAGE_RE, SBATCH_OPTION_RE, validate_job
from clusterkit.slurm import Flavor

# Slurm variables a program inside a docker container may read (docker passes no environment by itself).
DOCKER_SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST", "SLURM_NODEID",
                          "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_RESTART_COUNT",
                          "SLURM_CLUSTER_NAME")

# What the supervisor sets for each try of the step (heartbeats go there): into docker containers too.
SUPERVISOR_VARIABLES = (runtime.HEARTBEAT_DIR_ENV, runtime.ATTEMPT_ID_ENV, runtime.STOP_FILE_ENV)

# The rendezvous port of a job without launcher.port: PORT_BASE + (job id + hash of the cluster name)
# mod PORT_SPAN, computed on the node (clusterkit_rdzv_port in _rdzv.j2; `rendezvous_port` below is
# the same rule). 20000-31999 stays below Linux's ephemeral ports (32768-60999).
PORT_BASE = 20000
PORT_SPAN = 12000

# Characters sbatch's #SBATCH parser treats specially: quotes, '#' (starts a comment) and '\'.
_SBATCH_SPECIAL = re.compile(r"""([\\"'#])""")


class ShellText(Markup):
    """Text that may stand in a rendered script as it is: quoted, checked, or written by clusterkit."""


class UnquotedValue(ClusterkitError):
    """A template put a value into a script without quoting or checking it (a bug in clusterkit)."""


def trusted(text: str) -> ShellText:
    """Mark a fragment clusterkit wrote itself (never a spec value) as fit for the script."""
    return ShellText(str(text))


def shquote(value: object) -> ShellText:
    return ShellText(shlex.quote(str(value)))


def shwords(values: Iterable[object]) -> ShellText:
    """Words for a command line, each quoted."""
    return ShellText(" ".join(shlex.quote(str(value)) for value in values))


def comment(value: object) -> ShellText:
    """Text for a `#` comment: one line, else the rest of it would run as a command."""
    text = str(value)
    if CONTROL_RE.search(text):
        raise UnquotedValue(f"a control character in comment text {text[:40]!r}", fix="report this bug")
    return ShellText(text)


def sbatch_escape(value: object) -> ShellText:
    """Escape a value for an #SBATCH line, which sbatch splits into words itself.

    A backslash makes sbatch take the next character literally, but does not keep a space inside
    the word; double quotes do (and Slurm versions differ on '#' inside quotes, hence the escapes).
    A control character (a line break ends the directive) is refused (the rules refuse it in every such field first).
    """
    text = str(value)
    if CONTROL_RE.search(text):
        raise UnquotedValue(f"a control character in #SBATCH value {text[:40]!r}", fix="report this bug")
    escaped = _SBATCH_SPECIAL.sub(r"\\\1", text)
    return ShellText(f'"{escaped}"' if re.search(r"\s", text) else escaped)


def _only_checked_text(value: object) -> object:
    """The templates' finalize hook: what a `{{ ... }}` may print."""
    if isinstance(value, Markup) or (isinstance(value, int) and not isinstance(value, bool)):
        return value  # ShellText, a macro's output, or a number
    raise UnquotedValue(f"a template printed {type(value).__name__} {str(value)[:40]!r} without quoting it",
                        fix="report this bug: every value must pass shquote, shwords, sbatch_escape or comment")


def render_sbatch(spec: JobSpec, flavor: Flavor = Flavor.STOCK) -> str:
    """The sbatch script for `spec` on a cluster of `flavor`'s Slurm; raises ClusterkitError if validate_job finds
    errors."""
    problems = errors(validate_job(spec))
    if problems:
        raise ClusterkitError(f"job spec {spec.name!r} has errors: " + "; ".join(str(e) for e in problems),
                              fix=problems[0].fix or "fix the fields named")
    template = template_environment().get_template("job.sbatch.j2")
    return str(template.render(job=sbatch_context(spec, flavor)))


# The same rule in bash, printing the port on the node: the body of _rdzv.j2's clusterkit_rdzv_port,
# and of the nccom-test job's (jobs.nccl_tests), which has no rendered script of its own. Each requeue
# (SLURM_RESTART_COUNT) and each try of a supervised step (the last field of CLUSTERKIT_ATTEMPT_ID) moves it on
# by one: a relaunched step never meets the store of a try whose agent still holds the port (a silent node's).
RENDEZVOUS_PORT_SHELL = ShellText(f"""local rest=${{SLURM_CLUSTER_NAME:-}} hash=0 code
local try=${{CLUSTERKIT_ATTEMPT_ID:-0}} restart=${{SLURM_RESTART_COUNT:-0}}
try=${{try##*.}}
[[ $try =~ ^[0-9]+$ ]] || try=0
[[ $restart =~ ^[0-9]+$ ]] || restart=0
while [[ -n $rest ]]; do
  printf -v code '%d' "'${{rest:0:1}}"
  hash=$(( (hash * 31 + code) % {PORT_SPAN} ))
  rest=${{rest:1}}
done
echo $(( {PORT_BASE} + (SLURM_JOB_ID + hash + restart + try) % {PORT_SPAN} ))""")


def rendezvous_port(job_id: int, cluster_name: str = "", attempt: int = 0) -> int:
    """The port RENDEZVOUS_PORT_SHELL computes on the node for a job without launcher.port; `attempt`: its
    requeues and the tries of its step before this one."""
    digest = 0
    for char in cluster_name:
        digest = (digest * 31 + ord(char)) % PORT_SPAN
    return PORT_BASE + (job_id + digest + attempt) % PORT_SPAN


def sbatch_context(spec: JobSpec, flavor: Flavor = Flavor.STOCK) -> dict[str, Any]:
    """What the templates lay out, decided from the spec and the flavor of the cluster's Slurm (plain data: printable
    as JSON for a dry run)."""
    facts = spec.instance_facts
    environment = job_environment(spec)
    launcher = spec.launcher.kind
    per_node_launcher = launcher in ("torchrun", "neuron")
    container_runtime = spec.container.runtime
    warning = parse_warning(spec.signal) if spec.signal else None
    names = [trusted(name) for name in sorted(environment.variables)]  # checked by the env-name rule
    container_stop = "TERM" if per_node_launcher or warning is None else warning.signal
    task_functions = _task_functions(launcher, container_runtime)
    stop_file = runtime.stop_request_file(runtime.run_state_dir(spec.checkpoint_dir)) if spec.checkpoint_dir else None
    # torchrun's own window after its SIGTERM: the lead, unless the spec sets it (only recent torch reads it).
    shutdown_timeout = (warning.seconds if warning and per_node_launcher
                        and runtime.TORCH_SHUTDOWN_TIMEOUT_ENV not in environment.variables else None)
    # What the script exports for the step besides the spec's environment: into docker containers too.
    script_variables = {name for name, value in ((runtime.STOP_FILE_ENV, stop_file),
                                                 (runtime.TORCH_SHUTDOWN_TIMEOUT_ENV, shutdown_timeout)) if value}
    return {
        "name": spec.name,
        "directives": _directives(spec, tasks_per_node=1 if per_node_launcher else spec.processes),
        "environment": [(trusted(name), environment.variables[name]) for name in names],
        "environment_summary": environment.summary,
        # In a container the image sets its own library path; the host's would shadow it.
        "library_dirs": [_library_dir(d) for d in environment.library_dirs] if container_runtime == "none" else [],
        "launcher": launcher,
        "port": spec.launcher.port,
        "port_base": PORT_BASE,
        "port_span": PORT_SPAN,
        "port_shell": RENDEZVOUS_PORT_SHELL,
        "processes_per_node": spec.processes,
        "cpu_bind": spec.launcher.cpu_bind,
        "compile": launcher == "neuron" and spec.launcher.compile,
        "program": _program(spec),
        "compile_program": compile_program(_program(spec), spec.launcher.compile_args),
        "runtime": container_runtime,
        "image": spec.container.image,
        "registry": _ecr_registry(spec),
        "mounts": list(spec.container.mounts),
        "container_workdir": spec.container.workdir or spec.workdir,
        "gpu": facts is not None and facts.accelerator == "gpu",
        "neuron": facts is not None and facts.accelerator == "neuron",
        "device_globs": _device_globs(spec),
        "docker_env_names": [trusted(n) for n in sorted(set(environment.variables) | set(DOCKER_SLURM_VARIABLES)
                                                        | (set(SUPERVISOR_VARIABLES) if spec.supervise else set())
                                                        | script_variables)],
        "requeue": spec.requeue,
        "warning_signal": trusted(warning.signal) if warning else None,
        "warning_directive": trusted(warning.directive) if warning else None,
        # The stop request the ranks read on the warning, and how long they have to answer it before the signal.
        "stop_file": shquote(stop_file) if stop_file else None,
        "stop_wait": max(warning.seconds - runtime.REQUEUE_MARGIN_S, 0) if warning else 0,
        "shutdown_timeout": shutdown_timeout,
        # What the step's tasks get when asked to save and stop, and what the program then gets.
        "stop_signal": trusted("USR2" if container_runtime == "docker" else container_stop),
        "stop_signal_note": _stop_signal_note(launcher, container_runtime, container_stop),
        "container_stop_signal": trusted(container_stop),
        "task_functions": trusted(" ".join(task_functions)),
        "wrapper_functions": trusted(" ".join(dict.fromkeys((
            "clusterkit_wait", "clusterkit_stop_step", "clusterkit_run_step", "clusterkit_srun", *task_functions,
            "clusterkit_step", "clusterkit_launch_step")))),
        "supervisor": _supervisor_command(spec),
        "spares": _spares(spec),
        "hyperpod": flavor is Flavor.HYPERPOD,
        # HyperPod's auto-resume re-runs a step that failed on a faulty node, after replacing it. Under the supervisor
        # it is left out: the supervisor restarts the step (and asks HyperPod for the replacement), so that a failure
        # spends the restart budget once and no two restarters race (see decisions.decide).
        "auto_resume": flavor is Flavor.HYPERPOD and spec.supervise is None,
    }


def _task_functions(launcher: str, container_runtime: str) -> list[str]:
    """The script's functions a task needs besides its step function (declared into its shell)."""
    functions = []
    if launcher in ("torchrun", "neuron"):
        functions += ["clusterkit_rdzv_host", "clusterkit_rdzv_port", "clusterkit_wait",
                      "clusterkit_stopped_as_asked"]
    if container_runtime == "docker":
        functions += ["clusterkit_wait", "clusterkit_stopped_as_asked", "clusterkit_docker",
                      "clusterkit_docker_cleanup"]
    return list(dict.fromkeys(functions))


def _stop_signal_note(launcher: str, container_runtime: str, container_stop: str) -> str:
    if container_runtime == "docker":
        return (f"the docker tasks' shells, which pass SIG{container_stop} on to their container "
                "(the docker client ignores signals)")
    if launcher in ("torchrun", "neuron"):
        return "torchrun passes on TERM (not USR1) to its workers"
    return "the program's own signal (the spec's `signal`, else TERM)"


def _library_dir(template: str) -> ShellText:
    """A plugin directory with `{arch}` as the node's machine type, expanded there ($HOSTTYPE)."""
    before, marker, after = template.partition("{arch}")
    if not marker:
        return shquote(template)
    return ShellText(f'{shquote(before)}"$HOSTTYPE"{shquote(after)}')


def _device_globs(spec: JobSpec) -> ShellText:
    """The device files a docker container gets, matched on the node: EFA, and Neuron devices."""
    facts = spec.instance_facts
    globs = ["/dev/infiniband/uverbs*"]
    if facts is not None and facts.accelerator == "neuron":
        globs.append("/dev/neuron*")
    return trusted(" ".join(globs))


def _ecr_registry(spec: JobSpec) -> dict[str, str] | None:
    """Host and region of the image's ECR registry (docker logs in there), else None."""
    image = spec.container.image
    match = ECR_IMAGE_RE.fullmatch(image) if spec.container.runtime == "docker" and image else None
    return {"host": match.group("host"), "region": match.group("region")} if match else None


def _spares(spec: JobSpec) -> int:
    return spec.supervise.spares if spec.supervise else 0


def _supervisor_command(spec: JobSpec) -> list[str]:
    if spec.supervise is None:
        return []
    supervision = spec.supervise
    state_dir = runtime.run_state_dir(spec.checkpoint_dir) if spec.checkpoint_dir else None
    warning = parse_warning(spec.signal) if spec.signal else None
    # The warning's lead tells the supervisor a time limit (a planned requeue) from a preemption.
    return runtime.supervisor_command(supervision.python or "python3", hang_timeout=supervision.hang_timeout,
                                      app_retries=supervision.app_retries, state_dir=state_dir,
                                      signal_lead=warning.seconds if warning else None,
                                      max_time_limit_requeues=supervision.max_time_limit_requeues,
                                      max_preemptions=supervision.max_preemptions,
                                      startup_timeout=supervision.startup_timeout, spares=supervision.spares)


def _directives(spec: JobSpec, tasks_per_node: int) -> list[tuple[ShellText, str | None]]:
    directives: list[tuple[str, str | None]] = [("job-name", spec.name)]
    if spec.partition:
        directives.append(("partition", spec.partition))
    # Spares are held in the allocation beside the step's nodes, and the job outlives a node's loss (--no-kill) so
    # that the supervisor can relaunch the step on a spare instead of requeueing.
    directives += [("nodes", str(spec.allocated_nodes)), ("ntasks-per-node", str(tasks_per_node))]
    if _spares(spec):
        directives.append(("no-kill", None))
    if spec.gpus_per_node is not None:
        directives.append(("gpus-per-node", str(spec.gpus_per_node)))
    if spec.exclusive:
        directives.append(("exclusive", None))
    directives.append(("wait-all-nodes", "1"))
    if spec.time:
        directives.append(("time", spec.time))
    directives.append(("requeue", None) if spec.requeue else ("no-requeue", None))
    warning = parse_warning(spec.signal) if spec.signal else None
    if warning:
        # To the batch shell (B:), which asks the step to save and stop, then requeues the job.
        directives.append(("signal", warning.directive))
    directives.append(("output", spec.logs.output))
    if spec.logs.error:
        directives.append(("error", spec.logs.error))
    directives.append(("open-mode", "append"))
    if spec.workdir:
        directives.append(("chdir", spec.workdir))
    for extra in spec.sbatch:
        option, has_value, value = extra[2:].partition("=")
        directives.append((option, value if has_value else None))
    return [(_option(option), value) for option, value in directives]


def _option(name: str) -> ShellText:
    if not SBATCH_OPTION_RE.fullmatch(f"--{name}"):
        raise UnquotedValue(f"sbatch option {name[:40]!r} is not a long option name", fix="report this bug")
    return trusted(name)


def _program(spec: JobSpec) -> list[str]:
    """The words after the launcher: torchrun runs .py files itself, anything else with --no-python."""
    command = spec.command
    if spec.launcher.kind in ("torchrun", "neuron"):
        prefix = [] if command.is_python else ["--no-python"]
    else:
        prefix = ["python"] if command.is_python else []
    return [*prefix, command.script, *command.args]


def compile_program(program: list[str], compile_args: tuple[str, ...]) -> list[str]:
    """The training words with `compile_args` applied: an option there (`--max_steps 10` or
    `--max_steps=10`) replaces the training argument of the same name; anything else is appended."""
    replaced = {arg.split("=", 1)[0] for arg in compile_args if arg.startswith("-")}
    words: list[str] = []
    skip_value = False
    for word in program:
        if skip_value:
            skip_value = False
            if not word.startswith("-"):
                continue
        option = word.split("=", 1)[0]
        if word.startswith("-") and option in replaced:
            skip_value = "=" not in word  # `--name value`: drop the value too
            continue
        words.append(word)
    return words + list(compile_args)


def mount_spec(mount: Mount) -> str:
    """SOURCE:TARGET[:ro], the syntax pyxis, docker and apptainer share."""
    return f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")


@functools.lru_cache(maxsize=1)
def template_environment() -> Any:
    """The templates' Jinja2 environment: autoescape on (only ShellText and macro output are left as
    they are), and a finalize hook that refuses anything else in a `{{ ... }}`."""
    import jinja2

    from clusterkit.resources import job_templates_dir

    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(job_templates_dir() / "sbatch")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=True,
        finalize=_only_checked_text,
    )
    environment.filters.update(shquote=shquote, shwords=shwords, comment=comment, sbatch_escape=sbatch_escape,
                               mount_spec=mount_spec)
    return environment
