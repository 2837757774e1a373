"""The house rules, checked over the import graph: packages import only downward, and never in a cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "clusterkit"

# Lowest first. A unit may import its own layer's ground-floor modules and anything below; nothing above.
LAYERS: list[set[str]] = [
    {"errors", "lean_dataclass", "findings", "rules", "runtime", "versions", "files", "spec_reader", "yaml_text",
     "resources", "catalog", "offerings", "pids", "stack_versions",
     "goodput"},  # the goodput model and simulator: pure, so the checkpoint manager may choose its interval
    {"registry", "slurm", "transport"},
    {"resilience"},  # the in-job runtime: checkpoints, heartbeats, the supervisor (runs the health check by name)
    {"stack"},  # what is on a node and how to check it, the health check among them
    {"cluster"},
    {"providers"},
    {"jobs"},  # the watcher and the nccl-tests job with the rest of submission
    {"cli", "__main__"},
]
LAYER_OF = {unit: index for index, units in enumerate(LAYERS) for unit in units}


def _unit(module: str) -> str | None:
    """`clusterkit.jobs.spec` -> `jobs`; `clusterkit` itself -> None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "clusterkit" and len(parts) > 1 else None


def _module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every clusterkit module `path` imports, at module level or inside functions (both are real needs)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("clusterkit")}


def _graph() -> dict[str, set[str]]:
    """Unit -> the other units it imports."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        source = _unit(_module_name(path))
        if source is None:
            continue
        graph[source]
        for target in map(_unit, _imports(path)):
            if target is not None and target != source and target in LAYER_OF:
                graph[source].add(target)
    return graph


def test_every_unit_has_a_layer() -> None:
    units = {path.stem if path.is_file() else path.name for path in PACKAGE.iterdir()
             if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()}
    assert units - set(LAYER_OF) == set(), "add new modules and packages to LAYERS (and docs/architecture.md)"


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                  if LAYER_OF[target] > LAYER_OF[source])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found: list[list[str]] = []

    def visit(unit: str, path: list[str]) -> None:
        state[unit] = 1
        for target in sorted(graph.get(unit, ())):
            if state.get(target) == 1:
                found.append(path[path.index(target):] + [unit, target] if target in path else [unit, target])
            elif target not in state:
                visit(target, path + [unit])
        state[unit] = 2

    for unit in sorted(graph):
        if unit not in state:
            visit(unit, [])
    return found


def test_no_unit_imports_upward() -> None:
    assert upward(_graph()) == []


def test_no_cycle_between_units() -> None:
    assert cycles(_graph()) == []


def test_the_checks_catch_what_the_old_code_did() -> None:
    # providers.local imported resilience.health for one constant, closing a cycle; resilience.health imported
    # stack.doctor, and stack.nccl_tests submitted through jobs: both upward now that resilience sits low.
    old = {"providers": {"resilience", "cluster"}, "resilience": {"stack"}, "stack": {"jobs"}, "jobs": {"providers"}}
    assert upward(old) == ["resilience -> stack", "stack -> jobs"]
    assert cycles(old) == [["jobs", "providers", "resilience", "stack", "jobs"]]


def test_imports_inside_functions_count() -> None:
    found = _imports(PACKAGE / "jobs" / "plan.py")
    assert "clusterkit.jobs.render" in found  # imported inside plan_job


@pytest.mark.parametrize(("module", "absent"), [
    ("clusterkit.providers.local.cluster", "clusterkit.resilience.checkpoint"),
    ("clusterkit.cli", "clusterkit.providers.aws"),
    ("clusterkit.runtime", "clusterkit.slurm"),
    # The plotting library loads when a timeline is drawn, not with the modules that draw it or hand it out.
    ("clusterkit.jobs.handle", "matplotlib"),
    ("clusterkit.jobs.timeline_picture", "matplotlib"),
    ("clusterkit.cli.timeline", "matplotlib"),
])
def test_importing_a_module_loads_only_what_it_needs(module: str, absent: str) -> None:
    code = f"import sys, {module}; print({absent!r} in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("argv", [["--help"], ["goodput", "--help"], ["status", "--help"], ["timeline", "--help"]])
def test_the_cli_start_does_not_import_the_plotting_library(argv: list[str]) -> None:
    # -X importtime names every module imported, whoever imported it.
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "clusterkit", *argv], capture_output=True,
                            text=True, check=True)
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "clusterkit" in imported and "matplotlib" not in imported


def _units_loaded_by(module: str) -> set[str]:
    """The clusterkit units a fresh interpreter holds after `import module`."""
    code = f"import sys, {module}; print(' '.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {unit for unit in map(_unit, result.stdout.split()) if unit is not None}


# dcp_writer imports torch (seconds per interpreter); the import graph above covers its clusterkit imports.
RESILIENCE_MODULES = sorted(f"clusterkit.resilience.{path.stem}" for path in (PACKAGE / "resilience").glob("*.py")
                            if path.stem not in ("__init__", "dcp_writer"))


@pytest.mark.parametrize("module", RESILIENCE_MODULES)
def test_the_in_job_runtime_loads_nothing_above_it(module: str) -> None:
    # The supervisor and the checkpoint library run inside the job: they load neither jobs nor the stack.
    above = {unit for unit in _units_loaded_by(module) if LAYER_OF[unit] > LAYER_OF["resilience"]}
    assert above == set()


def test_the_checkpoint_library_loads_only_the_ground_floor() -> None:
    assert _units_loaded_by("clusterkit.resilience.checkpoint") - {"resilience"} <= LAYERS[0]


def test_the_local_provider_loads_no_parallelcluster_rule_book() -> None:
    # The neutral request and plan live in providers/; the local provider once loaded the AWS rules with them.
    code = "import sys, clusterkit.providers.local.cluster; print('clusterkit.cluster.validators' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def _finding_constructions(path: Path) -> list[str]:
    """`file:line` of each `Finding(...)` call in `path` (by name or as `findings.Finding`)."""
    return [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "Finding"
                                               or getattr(node.func, "attr", None) == "Finding")]


def test_findings_are_built_only_by_the_builders() -> None:
    # findings.error, warning and info are the one way to make a finding: one idiom, one place for its checks.
    found = [where for path in sorted(PACKAGE.rglob("*.py")) if path != PACKAGE / "findings.py"
             for where in _finding_constructions(path)]
    assert found == [], "build these with findings.error, warning or info"
