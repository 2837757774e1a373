"""The one way a value reaches a script: every `{{ ... }}` in the templates is quoted or checked text,
and no script expands an array in a form bash < 4.4 rejects under `set -u` when it is empty."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from clusterkit.jobs.nccl_tests import nccl_test_spec
from clusterkit.jobs.render import ShellText, UnquotedValue, comment, sbatch_escape, shquote, template_environment
from clusterkit.jobs.spec import LAUNCHERS, RUNTIMES

from tests.jobs.test_job_shellcheck import combination_spec

GOLDEN_DIRS = [Path(__file__).parent / "golden", Path(__file__).parents[1] / "stack" / "golden"]
GOLDEN_SCRIPTS = sorted(path for directory in GOLDEN_DIRS for path in directory.glob("*.sbatch"))

# `${name[@]+"${name[@]}"}` expands to nothing for an empty array on every bash; a bare
# `"${name[@]}"` (or [*]) aborts with "unbound variable" under `set -u` on bash < 4.4 (Amazon Linux 2).
SAFE_EXPANSION = re.compile(r'\$\{(\w+)\[([@*])\]\+"\$\{\1\[\2\]\}"\}')
ANY_EXPANSION = re.compile(r"\$\{!?#?\w+\[[@*]\]")


def unsafe_array_expansions(script: str) -> list[str]:
    return ANY_EXPANSION.findall(SAFE_EXPANSION.sub("", script))


def test_a_plain_value_in_a_template_is_an_error() -> None:
    template = template_environment().from_string("echo {{ value }}\n")
    with pytest.raises(UnquotedValue, match="without quoting"):
        template.render(value="$(reboot)")
    assert template.render(value=shquote("$(reboot)")) == "echo '$(reboot)'\n"
    assert template.render(value=8) == "echo 8\n"
    with pytest.raises(UnquotedValue):
        template.render(value=True)


def test_the_templates_print_no_literals() -> None:
    # Jinja folds a literal at compile time past the check (and would HTML-escape it): literal text
    # belongs in the template itself.
    from clusterkit.resources import job_templates_dir

    for template in sorted((job_templates_dir() / "sbatch").glob("*.j2")):
        assert not re.search(r"\{\{-?\s*[\"']", template.read_text()), template.name


@pytest.mark.parametrize("text", ["a\nb", "a\rb", "a\u2028b", "a\u2029b", "a\x00b", "a\x85b"])
def test_comments_and_sbatch_lines_refuse_line_breaks(text: str) -> None:
    for checked in (comment, sbatch_escape):
        with pytest.raises(UnquotedValue):
            checked(text)


def test_checked_text_is_not_html_escaped() -> None:
    template = template_environment().from_string("{{ value }}")
    assert template.render(value=shquote("a<b>&'c'")) == shquote("a<b>&'c'")
    assert isinstance(shquote("x"), ShellText)


def test_the_golden_scripts_are_all_checked() -> None:
    assert len(GOLDEN_SCRIPTS) >= 17


@pytest.mark.parametrize("path", GOLDEN_SCRIPTS, ids=lambda path: path.name)
def test_no_golden_script_expands_an_array_unsafely(path: Path) -> None:
    assert unsafe_array_expansions(path.read_text()) == []


@pytest.mark.parametrize(("runtime", "launcher"), [(r, l) for r in RUNTIMES for l in LAUNCHERS])
def test_no_rendered_combination_expands_an_array_unsafely(runtime: str, launcher: str) -> None:
    from clusterkit.jobs.render import render_sbatch

    instance = "trn1" if launcher == "neuron" else "p4de"
    assert unsafe_array_expansions(render_sbatch(combination_spec(runtime, launcher, instance))) == []


@pytest.mark.parametrize(("instance", "nodes"), [("p5", 2), ("trn1", 4)])
def test_no_validation_job_expands_an_array_unsafely(instance: str, nodes: int) -> None:
    from clusterkit.jobs.render import render_sbatch

    assert unsafe_array_expansions(render_sbatch(nccl_test_spec(nodes, instance_type=instance))) == []


def test_the_check_catches_the_unsafe_form() -> None:
    assert unsafe_array_expansions('srun "${flags[@]}" x') == ["${flags[@]"]
    assert unsafe_array_expansions('echo ${#flags[@]} "${flags[*]}"') == ["${#flags[@]", "${flags[*]"]
    assert unsafe_array_expansions('srun ${flags[@]+"${flags[@]}"} x') == []


def test_the_safe_form_expands_an_empty_array_under_set_u() -> None:
    script = 'set -u; flags=(); printf "[%s]" ${flags[@]+"${flags[@]}"} end; flags=("a b" c); ' \
             'printf "[%s]" ${flags[@]+"${flags[@]}"}'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout == "[end][a b][c]"
