"""Container recipes: options in, a Dockerfile out (pure), with checked version combinations.

`check_recipe` returns findings (the path of each is the CLI flag, e.g. `--cuda`);
`render_dockerfile` refuses options with errors. Templates live in job-templates/containers/ and
only lay out what is decided here. jinja2 is imported only when rendering.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from clusterkit.catalog import InstanceType
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, Level, error, errors, warning
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.stack_versions import COMPONENT_NAMES, unmet_floors
from clusterkit.versions import version_tuple

ACCELERATORS = ("gpu", "neuron")
BASES = ("nvidia", "dlc")

# Defaults: versions that exist together. GPU: CUDA 12.8 (first with Blackwell), NCCL and EFA
# installer as in AWS's nccl-tests recipe. Neuron: the Trn1 packages of Neuron SDK 2.28.0.
GPU_DEFAULTS: dict[str, str] = {
    "cuda": "12.8.1",
    "ubuntu": "22.04",
    "gdrcopy": "2.5.1",
    "efa_installer": "1.47.0",
    "nccl": "2.29.3-1",
    "nccl_tests": "2.17.6",
    "torch": "2.7.1",
}
NEURON_DEFAULTS: dict[str, str] = {
    "ubuntu": "22.04",
    "efa_installer": "1.47.0",
    "neuron_runtime": "2.30.51.0",  # aws-neuronx-runtime-lib
    "neuron_collectives": "2.30.59.0",  # aws-neuronx-collectives
    "neuron_tools": "2.28.23.0",  # aws-neuronx-tools
    "neuronx_cc": "2.23.6484.0",
    "torch_neuronx": "2.9.0.*",  # the torch 2.9 line; the Neuron build comes from Neuron's index
    "neuronx_distributed": "0.17.26814",
}
# The nvidia/cuda image flavour: compilers for NCCL and nccl-tests, and cuDNN for the framework.
CUDA_IMAGE_FLAVOUR = "cudnn-devel"
# AWS Deep Learning Containers are published from this account in most regions.
DLC_ACCOUNT = "763104351884"

_VERSION_RE = re.compile(r"^v?\d+(?:\.\d+)*(?:[.-][0-9A-Za-z*]+)*$")


@lean_dataclass(frozen=True)
class RecipeOptions:
    """What to build. None means 'the default' (or, for aws_ofi_nccl, the EFA installer's copy)."""

    accelerator: str = "gpu"
    base: str = "nvidia"
    instance: str | None = None  # EC2 instance type or preset, for the combination checks
    region: str = "us-east-1"  # dlc base: which regional registry
    cuda: str | None = None
    ubuntu: str | None = None
    gdrcopy: str | None = None
    efa_installer: str | None = None
    nccl: str | None = None
    nccl_tests: str | None = None
    aws_ofi_nccl: str | None = None
    torch: str | None = None
    neuron_runtime: str | None = None
    neuron_collectives: str | None = None
    neuron_tools: str | None = None
    neuronx_cc: str | None = None
    torch_neuronx: str | None = None
    neuronx_distributed: str | None = None

    def resolved(self) -> RecipeOptions:
        """The options with every unset version filled from the defaults of the accelerator, and
        versions written as tags (v2.29.3-1) written as versions (2.29.3-1)."""
        defaults = GPU_DEFAULTS if self.accelerator == "gpu" else NEURON_DEFAULTS
        versions = {name: getattr(self, name) or defaults.get(name) for name in _VERSION_FIELDS}
        return replace(self, **{name: value.removeprefix("v") if value else value for name, value in versions.items()})


_FIELD_NAMES = {f.name for f in fields(RecipeOptions)}
_VERSION_FIELDS = ("cuda", "ubuntu", "gdrcopy", "efa_installer", "nccl", "nccl_tests", "aws_ofi_nccl", "torch",
                   "neuron_runtime", "neuron_collectives", "neuron_tools", "neuronx_cc", "torch_neuronx",
                   "neuronx_distributed")
_FLOORED = ("cuda", "nccl", "aws_ofi_nccl")  # the options the stack's version floors cover
_GPU_ONLY = ("cuda", "gdrcopy", "nccl", "nccl_tests", "aws_ofi_nccl", "torch")
_NEURON_ONLY = ("neuron_runtime", "neuron_collectives", "neuron_tools", "neuronx_cc", "torch_neuronx",
                "neuronx_distributed")
# A DLC already carries these; asking for a version of them would be silently ignored.
_DLC_CARRIES = ("efa_installer", "nccl", "aws_ofi_nccl", "gdrcopy", "ubuntu")


def flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def check_recipe(options: RecipeOptions) -> list[Finding]:
    """Check choices and version combinations; errors name the flag, the value and a fix."""
    findings: list[Finding] = []

    def refuse(name: str, message: str, fix: str, value: object = None) -> None:
        findings.append(error(flag(name), message, fix, value))

    def warn(name: str, message: str, fix: str, value: object = None) -> None:
        findings.append(warning(flag(name), message, fix, value))

    def report(level: Level, name: str, message: str, fix: str, value: object = None) -> None:
        (refuse if level is Level.ERROR else warn)(name, message, fix, value)

    if options.accelerator not in ACCELERATORS:
        refuse("accelerator", f"must be one of {', '.join(ACCELERATORS)}, not {options.accelerator!r}",
               "pass --accelerator gpu or --accelerator neuron", options.accelerator)
        return findings
    if options.base not in BASES:
        refuse("base", f"must be one of {', '.join(BASES)}, not {options.base!r}",
               "pass --base nvidia (CUDA devel image) or --base dlc (AWS Deep Learning Container)", options.base)
    for name in _VERSION_FIELDS:
        value = getattr(options, name)
        if value is not None and not _VERSION_RE.match(value):
            refuse(name, f"{value!r} is not a version", f"pass a version such as {flag(name)} 1.2.3", value)
        if value is not None and value.lower() == "latest":
            refuse(name, "'latest' is not a pinned version", "pass an exact version", value)
    wrong_side = _GPU_ONLY if options.accelerator == "neuron" else _NEURON_ONLY
    for name in wrong_side:
        if getattr(options, name) is not None:
            refuse(name, f"does not apply to a {options.accelerator} image", f"remove {flag(name)}",
                   getattr(options, name))
    if options.accelerator == "neuron" and options.base == "dlc":
        refuse("base", "the dlc base is offered for GPU images here", "use --base nvidia for Neuron images "
               "(an Ubuntu base), or start FROM a Neuron DLC yourself", options.base)
    if options.base == "dlc" and options.accelerator == "gpu":
        for name in _DLC_CARRIES:
            if getattr(options, name) is not None:
                warn(name, "is ignored with --base dlc: the Deep Learning Container carries its own",
                     f"remove {flag(name)}, or use --base nvidia to build that layer yourself",
                     getattr(options, name))
    if options.instance is not None:
        _check_instance(options, report)
    resolved = options.resolved()
    if options.accelerator == "gpu" and resolved.cuda and version_tuple(resolved.cuda) is not None:
        if len(version_tuple(resolved.cuda) or ()) < 2:
            refuse("cuda", "needs at least MAJOR.MINOR", "pass e.g. --cuda 12.8.1", resolved.cuda)
    return findings


def _check_instance(options: RecipeOptions, report: Callable[[Level, str, str, str, object], None]) -> None:
    facts = _instance_facts(options.instance or "")
    if facts is None:
        report(Level.ERROR, "instance", f"unknown instance type {options.instance!r}",
               "pass an EC2 instance type such as p5.48xlarge, or a preset such as p5", options.instance)
        return
    if facts.accelerator != options.accelerator:
        report(Level.ERROR, "instance", f"{facts.name} has {facts.accelerator} accelerators, the recipe is for "
               f"{options.accelerator}", f"pass --accelerator {facts.accelerator}"
               if facts.accelerator in ACCELERATORS else "pick an accelerated instance type", options.instance)
        return
    # The stack's one table of floors (stack_versions): aws-ofi-nccl unset is the EFA installer's bundled copy,
    # current for its version, so it misses none.
    resolved = options.resolved()
    versions = {name: getattr(resolved, name) for name in _FLOORED}
    for floor in unmet_floors(facts.name.split(".")[0], versions):
        name, have = floor.component, versions[floor.component]
        shown = COMPONENT_NAMES.get(name, name.upper())
        needs = (f"{facts.name} needs {shown} {floor.minimum} or later" if floor.level is Level.ERROR
                 else f"{shown} {floor.minimum} or later is recommended on {facts.name}")
        report(floor.level, name, f"{needs}, not {have}: {floor.problem} ({floor.source})",
               f"pass {flag(name)} {floor.minimum} or newer", have)


def _instance_facts(name: str) -> InstanceType | None:
    from clusterkit.catalog import resolve_instance_type

    return resolve_instance_type(name)


def render_dockerfile(options: RecipeOptions) -> str:
    """The Dockerfile for `options`; raises ClusterkitError naming the first error found."""
    refused = errors(check_recipe(options))
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise ClusterkitError(f"{first.path}: {first.message}{more}", fix=first.fix)
    context = recipe_context(options)
    return _template_environment().get_template(f"{options.accelerator}.Dockerfile.j2").render(recipe=context)


def recipe_context(options: RecipeOptions) -> dict[str, Any]:
    """What the template lays out (plain data)."""
    resolved = options.resolved()
    context: dict[str, Any] = {name: getattr(resolved, name) for name in _FIELD_NAMES}
    if options.accelerator == "gpu":
        cuda = version_tuple(resolved.cuda) or (0, 0)
        context["cuda_short"] = f"{cuda[0]}.{cuda[1]}"
        context["torch_index"] = f"cu{cuda[0]}{cuda[1]}"
        context["nccl_tag"] = "v" + (resolved.nccl or "").removeprefix("v")
        context["base_image"] = _gpu_base_image(resolved, cuda)
        context["ofi_nccl_dir"] = "/opt/aws-ofi-nccl" if resolved.aws_ofi_nccl else "/opt/amazon/ofi-nccl"
    else:
        context["base_image"] = f"ubuntu:{resolved.ubuntu}"
        context["ubuntu_codename"] = _UBUNTU_CODENAMES.get(resolved.ubuntu or "", "jammy")
    return context


_UBUNTU_CODENAMES = {"20.04": "focal", "22.04": "jammy", "24.04": "noble"}


def _gpu_base_image(options: RecipeOptions, cuda: tuple[int, ...]) -> str:
    if options.base == "dlc":
        # DLC tags: <torch>-gpu-<python>-cu<MAJOR><MINOR>-<os>-ec2
        return (f"{DLC_ACCOUNT}.dkr.ecr.{options.region}.amazonaws.com/pytorch-training:"
                f"{options.torch}-gpu-py312-cu{cuda[0]}{cuda[1]}-ubuntu22.04-ec2")
    return f"nvidia/cuda:{options.cuda}-{CUDA_IMAGE_FLAVOUR}-ubuntu{options.ubuntu}"


@functools.lru_cache(maxsize=1)
def _template_environment() -> Any:
    import jinja2

    from clusterkit.resources import job_templates_dir

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(job_templates_dir() / "containers")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Dockerfile text, not HTML
    )
