"""The one spec reader: bounded YAML, text kept as written, every error at once, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterkit import spec_reader
from clusterkit.errors import ClusterkitError
from clusterkit.spec_reader import MAX_DEPTH, SpecError, field_options, load, parse_text

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))


def clusterkit(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, timeout=60)
    return result, time.monotonic() - started


@pytest.fixture(scope="module")
def abusive_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("abusive")
    files = {"alias-bomb": ALIAS_BOMB, "deep": "[" * 10_000 + "]" * 10_000,
             "deep-mapping": "".join(f"{' ' * i}k{i}:\n" for i in range(200))}
    paths = {}
    for name, text in files.items():
        paths[name] = root / f"{name}.yaml"
        paths[name].write_text(text)
    paths["huge"] = root / "huge.yaml"
    with open(paths["huge"], "wb") as stream:
        stream.truncate(50 * 2**20)  # 50 MB
    paths["latin1"] = root / "latin1.yaml"
    paths["latin1"].write_bytes("name: caf\xe9\n".encode("latin-1"))
    return paths


def test_the_alias_bomb_is_about_a_kilobyte() -> None:
    assert len(ALIAS_BOMB) < 1100 and ALIAS_BOMB.count("*") == 81  # 9**10 values if expanded


@pytest.mark.parametrize("name", ["alias-bomb", "deep", "deep-mapping", "huge", "latin1"])
@pytest.mark.parametrize("verb", [["submit", "--dry-run"], ["validate"]])
def test_abusive_files_get_one_line_fast_and_no_traceback(abusive_files: dict[str, Path], name: str,
                                                          verb: list[str]) -> None:
    result, seconds = clusterkit(verb[0], str(abusive_files[name]), *verb[1:])
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    assert str(abusive_files[name]) in lines[0]
    assert seconds < 3.0  # the whole process, start-up included; the reading itself is checked below


@pytest.mark.parametrize("name", ["alias-bomb", "deep", "deep-mapping", "huge", "latin1"])
def test_abusive_files_are_refused_in_under_a_second(abusive_files: dict[str, Path], name: str) -> None:
    started = time.monotonic()
    with pytest.raises(SpecError):
        spec_reader.read_file(abusive_files[name], "spec")
    assert time.monotonic() - started < 1.0


def test_nesting_up_to_the_limit_is_fine() -> None:
    assert parse_text("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(SpecError, match=f"nested more than {MAX_DEPTH} levels"):
        parse_text("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_small_aliases_still_work() -> None:
    tree = parse_text("base: &b {x: 1}\nother: *b\n")
    assert spec_reader.plain_data(tree) == {"base": {"x": "1"}, "other": {"x": "1"}}


@pytest.mark.parametrize(("text", "message"), [
    ("a: !!python/object:os.system x\n", "tag"),
    ("a: 1\n---\nb: 2\n", "more than one YAML document"),
    ("a: *nothing\n", "names no anchor"),
    ("? [a]\n: b\n", "mapping key"),
])
def test_yaml_a_spec_never_needs_is_refused(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_text(text)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="not a regular file"):
        spec_reader.read_file(fifo, "spec")


@dataclass
class Inner:
    kind: str = field(default="a", metadata=field_options(key="type"))
    count: int = 1


@dataclass
class Outer:
    name: str
    version: str | None = None
    flag: bool = False
    inner: Inner = field(default_factory=Inner)
    items: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)


def test_text_stays_as_written_and_numbers_are_decimal() -> None:
    tree = parse_text("name: 0010\nversion: 1.10\ninner: {type: b, count: 0010}\nitems: [1.0, yes, ~x]\n"
                      "labels: {a: 1.20, b: true}\n")
    loaded, findings = load(Outer, tree)
    assert findings == []
    assert loaded == Outer(name="0010", version="1.10", inner=Inner("b", 10), items=["1.0", "yes", "~x"],
                           labels={"a": "1.20", "b": "true"})


def test_every_error_is_reported_with_path_value_fix_and_rule() -> None:
    tree = parse_text("nme: x\nflag: yes\ninner: {typ: b, count: '3'}\nitems: {a: 1}\nlabels: {a: null}\n"
                      "version: " + "v" * 500 + "\n")
    loaded, findings = load(Outer, tree, rule_prefix="test")
    assert loaded is None
    by_path = {f.path: f for f in findings}
    assert set(by_path) == {"nme", "flag", "inner.typ", "inner.count", "items", "labels.a", "name"}
    assert by_path["nme"].fix == "did you mean 'name'?" and by_path["nme"].rule == "test.unknown-key"
    assert "yes/no are ambiguous" in by_path["flag"].fix and by_path["flag"].value == "yes"
    assert by_path["inner.typ"].fix == "did you mean 'type'?"
    assert "without quotes" in by_path["inner.count"].fix
    assert by_path["name"].message == "missing required key 'name'"


def test_long_values_are_shortened_in_findings() -> None:
    loaded, findings = load(Outer, {"name": "x", "flag": "y" * 100_000})
    (finding,) = findings
    assert len(str(finding.value)) < 100 and "100,000 characters" in str(finding.value)


def test_duplicate_keys_are_an_error_not_a_silent_overwrite() -> None:
    loaded, findings = load(Outer, parse_text("name: a\nname: b\n"))
    assert loaded is None and findings[0].rule == "spec.duplicate-key" and findings[0].path == "name"


# --- fuzzing: any text gives a tree or one SpecError line, quickly --------------------------------

YAML_BITS = list("abc:-[]{}&*!|>'\"\n #%@,?01.~\t\\") + ["&a ", "*a", "!!str ", "---\n", "- ", "key: ", "\u2028",
                                                        "\x00", "\x85", "\ufeff"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=300), st.lists(st.sampled_from(YAML_BITS), max_size=200).map("".join)))
def test_fuzz_the_reader_never_raises_anything_else_or_takes_long(text: str) -> None:
    started = time.monotonic()
    try:
        tree = parse_text(text)
    except ClusterkitError as error:
        assert "\n" not in str(error)
    else:
        load(Outer, tree)
    assert time.monotonic() - started < 1.0
