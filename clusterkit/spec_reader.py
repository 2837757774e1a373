"""The one reader of user-written specs (cluster specs, job specs): bounded YAML in, dataclasses out.

Reading is two steps, and neither raises on a bad value:

1. `parse_text` / `read_file` turn YAML into a small tree of `Scalar`, `Sequence` and `Mapping`
   nodes. Scalars keep the text the user wrote, so `1.10` stays `"1.10"` where a string is
   expected. YAML that a spec never needs is refused in one line, quickly: files over
   `MAX_SPEC_BYTES`, text that is not UTF-8, more than one document, nesting deeper than
   `MAX_DEPTH`, aliases that expand past `MAX_VALUES` values, and tags.
2. `load(cls, data)` builds `cls` from a tree (or from plain Python data) by the dataclasses' type
   hints and reports every problem at once as a Finding with the field's path, the value
   (shortened) and a fix. A dataclass field may name its YAML key (`metadata={"key": "type"}`);
   short forms (a command as one string, a launcher as its kind) are functions that rewrite a
   value before it is converted: per field (`metadata={"short": f}`) or per type (`short_forms=`).

`control_characters(spec)` is every spec kind's single-line rule: it walks a loaded spec's dataclasses
(every text field, list item, map key and map value) against one set of control characters
(`findings.CONTROL_RE`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import stat
import types
import typing
from collections.abc import Callable, Iterator, Mapping as MappingABC
from dataclasses import field
from pathlib import Path
from typing import Any, TypeVar

from clusterkit.errors import ClusterkitError
from clusterkit.findings import CONTROL_RE, Finding, error, errors, escape_controls, shorten, similar_names
from clusterkit.lean_dataclass import lean_dataclass

MAX_SPEC_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_VALUES = 50_000
# Of the control characters (`findings.CONTROL_RE`), what a multi-line field (`field_options(multiline=True)`:
# a program argument or an environment value, which reaches the program quoted, byte for byte) may hold.
MULTILINE_CONTROLS = frozenset("\t\n\r\u2028\u2029")

T = TypeVar("T")


class SpecError(ClusterkitError):
    """A spec that cannot be read or has errors; `findings` are all of them, `path` the first one's field."""

    def __init__(self, message: str, *, fix: str | None = None, findings: list[Finding] | None = None) -> None:
        super().__init__(message, fix=fix)
        self.findings = list(findings or [])
        self.path = self.findings[0].path if self.findings else ""


# ----- the tree -----------------------------------------------------------------------------------


@lean_dataclass(eq=False)
class Scalar:
    """A YAML scalar as written, with its line."""

    text: str
    plain: bool  # unquoted and untagged: the only form that may be read as a number, bool or null
    line: int = 0


@lean_dataclass(eq=False)
class Sequence:
    """A YAML sequence, with its line."""

    items: list[Node] = field(default_factory=list)
    line: int = 0


@lean_dataclass(eq=False)
class Mapping:
    """A YAML mapping, its keys in order, with its line."""

    items: list[tuple[Scalar, Node]] = field(default_factory=list)
    line: int = 0


Node = Scalar | Sequence | Mapping

_NULL_WORDS = frozenset(("", "~", "null", "Null", "NULL"))
_TRUE_WORDS = frozenset(("true", "True", "TRUE"))
_FALSE_WORDS = frozenset(("false", "False", "FALSE"))
_YAML11_BOOLS = frozenset(("yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF", "y", "n"))
_INT_RE = re.compile(r"^[-+]?[0-9]+$")
_FLOAT_RE = re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$")
_STR_TAG = "tag:yaml.org,2002:str"


def read_file(path: str | os.PathLike[str], what: str) -> Node | None:
    """Parse the spec file at `path`; anything but a readable regular UTF-8 file of sane size is one line."""
    return parse_text(read_text(path, what), str(path))


def read_text(path: str | os.PathLike[str], what: str) -> str:
    """The text of a user-named spec file, bounded: never blocks on a FIFO, never reads a huge file."""
    fix = f"pass the path of a readable {what}"
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(f"cannot read {what} {str(path)!r}: not a regular file", fix=fix)
        if info.st_size > MAX_SPEC_BYTES:
            raise SpecError(f"{what} {str(path)!r} is {info.st_size:,} bytes; a spec is at most "
                            f"{MAX_SPEC_BYTES:,}", fix="is this the right file?")
        with open(path, "rb") as stream:
            data = stream.read(MAX_SPEC_BYTES + 1)
    except OSError as error:
        raise SpecError(f"cannot read {what} {str(path)!r}: {error.strerror or error}", fix=fix) from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{what} {str(path)!r} is over {MAX_SPEC_BYTES:,} bytes", fix="is this the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(f"{what} {str(path)!r} is not UTF-8 text (byte {error.start})",
                        fix="save the file as UTF-8") from None


def parse_text(text: str, source: str = "<spec>") -> Node | None:
    """YAML text to a tree; None for an empty document. Bad or abusive YAML raises SpecError (one line)."""
    import yaml  # lazy: keep CLI start fast

    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(f"{source}: {len(text):,} characters; a spec is at most {MAX_SPEC_BYTES:,}",
                        fix="is this the right file?")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return _build(yaml.parse(text, Loader=loader), source)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise SpecError(f"{source}:{where} not valid YAML: {problem}",
                        fix="fix the YAML syntax (indentation, colons, quotes)") from None
    except (RecursionError, MemoryError):
        raise SpecError(f"{source}: too complex to read", fix="write a plain spec") from None


def _build(events: Any, source: str) -> Node | None:
    """Nodes from parser events, iteratively: depth, documents and alias expansion are bounded here."""
    import yaml

    stack: list[tuple[Sequence | Mapping, list[Node]]] = []
    anchors: dict[str, tuple[Node, int]] = {}
    sizes: dict[int, int] = {}  # id(collection) -> values in it, aliases expanded
    opened_anchor: list[str | None] = []
    root: Node | None = None
    documents = 0
    values = 0

    def refuse(message: str, fix: str) -> SpecError:
        return SpecError(f"{source}: {message}", fix=fix)

    def add(node: Node, size: int, anchor: str | None) -> None:
        nonlocal root, values
        values += size
        if values > MAX_VALUES:
            raise refuse(f"more than {MAX_VALUES:,} values (aliases included)", "write the spec out plainly")
        if anchor is not None:
            anchors[anchor] = (node, size)
        if not stack:
            root = node
            return
        parent, pending = stack[-1]
        sizes[id(parent)] += size
        if isinstance(parent, Sequence):
            parent.items.append(node)
        elif pending:
            key = pending.pop()
            if not isinstance(key, Scalar):
                raise refuse(f"line {parent.line + 1}: a mapping key must be a plain value", "use text keys")
            parent.items.append((key, node))
        else:
            pending.append(node)

    for event in events:
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise refuse("holds more than one YAML document", "keep one spec per file (remove '---')")
        elif isinstance(event, yaml.ScalarEvent):
            if event.tag not in (None, _STR_TAG, "!"):
                raise refuse(f"line {event.start_mark.line + 1}: YAML tag {event.tag!r} is not allowed in a spec",
                             "remove the tag")
            plain = event.tag is None and bool(event.implicit[0])
            add(Scalar(event.value, plain, event.start_mark.line), 1, event.anchor)
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if event.tag not in (None, "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"):
                raise refuse(f"line {event.start_mark.line + 1}: YAML tag {event.tag!r} is not allowed in a spec",
                             "remove the tag")
            if len(stack) >= MAX_DEPTH:
                raise refuse(f"nested more than {MAX_DEPTH} levels deep", "a spec is a few levels deep at most")
            node: Sequence | Mapping = (Sequence(line=event.start_mark.line)
                                        if isinstance(event, yaml.SequenceStartEvent)
                                        else Mapping(line=event.start_mark.line))
            sizes[id(node)] = 1
            stack.append((node, []))
            opened_anchor.append(event.anchor)
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            node, _ = stack.pop()
            add(node, sizes.pop(id(node)), opened_anchor.pop())
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor not in anchors:
                raise refuse(f"alias *{event.anchor} names no anchor", "define the anchor first")
            target, size = anchors[event.anchor]
            add(target, size, None)
    return root


# ----- from a tree (or plain Python data) to dataclasses -----------------------------------------

ShortForm = Callable[[Any], Any]
"""Rewrites a value written in a short form into the long form; raises ValueProblem when it cannot."""


class ValueProblem(Exception):
    """Raised by a short form: the value cannot be read; becomes a finding on the field."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


class _Invalid(Exception):
    """A value could not be converted; its finding is already recorded."""


def field_options(key: str | None = None, short: ShortForm | None = None, multiline: bool = False) -> dict[str, Any]:
    """Dataclass field metadata for the reader: the YAML key (when it differs), a short form, and whether the
    field's text may hold tabs and line breaks (see `control_characters`)."""
    options: dict[str, Any] = {}
    if key is not None:
        options["key"] = key
    if short is not None:
        options["short"] = short
    if multiline:
        options["multiline"] = True
    return options


def join_path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def load(cls: type[T], data: Any, *, short_forms: MappingABC[type, ShortForm] | None = None,
         rule_prefix: str = "spec") -> tuple[T | None, list[Finding]]:
    """Build `cls` from a tree or plain data. No object when any finding is an error."""
    reader = _Reader(dict(short_forms or {}), rule_prefix)
    try:
        return reader.dataclass(data, cls, ""), reader.findings
    except _Invalid:
        return None, reader.findings


def load_or_raise(cls: type[T], data: Any, *, source: str, short_forms: MappingABC[type, ShortForm] | None = None,
                  rule_prefix: str = "spec") -> T:
    """`load`, raising SpecError with every error when there is one."""
    loaded, findings = load(cls, data, short_forms=short_forms, rule_prefix=rule_prefix)
    if loaded is None:
        raise spec_error(source, findings)
    return loaded


def spec_error(source: str, findings: list[Finding]) -> SpecError:
    refused = errors(findings)
    first = refused[0]
    more = f" (and {len(refused) - 1} more: {'; '.join(str(f) for f in refused[1:4])})" if len(refused) > 1 else ""
    shown = "" if first.value is None else f" (got {first.value!r})"
    return SpecError(f"{source}: {first.path}: {first.message}{shown}{more}", fix=first.fix or None,
                     findings=refused)


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> dict[str, tuple[str, object, dataclasses.Field]]:
    """YAML key -> (attribute name, type hint, field) of a dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.metadata.get("key", f.name): (f.name, hints[f.name], f) for f in dataclasses.fields(cls) if f.init}


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _describe(value: Any) -> str:
    if isinstance(value, (Mapping, MappingABC)):
        return "a mapping"
    if isinstance(value, (Sequence, list, tuple)):
        return "a list"
    if value is None or (isinstance(value, Scalar) and value.plain and value.text in _NULL_WORDS):
        return "nothing (null)"
    if isinstance(value, Scalar):
        return f"{'text' if not value.plain else 'value'} {shorten(value.text)!r}"
    return f"{type(value).__name__} {shorten(value)!r}"


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, Scalar) and value.plain and value.text in _NULL_WORDS)


def shown_value(value: Any) -> object:
    """A finding's value: the text the user wrote (Finding shortens it)."""
    if isinstance(value, Scalar):
        return value.text
    if isinstance(value, (Mapping, Sequence, MappingABC, list, tuple)):
        return None
    return value


class _Reader:
    def __init__(self, short_forms: dict[type, ShortForm], rule_prefix: str) -> None:
        self.short_forms = short_forms
        self.rule_prefix = rule_prefix
        self.findings: list[Finding] = []

    def error(self, path: str, rule: str, message: str, value: Any = None, fix: str = "") -> _Invalid:
        self.findings.append(error(path or "<spec>", message, fix, shown_value(value), f"{self.rule_prefix}.{rule}"))
        return _Invalid()

    def convert(self, value: Any, hint: Any, path: str, short: ShortForm | None = None) -> Any:
        origin = typing.get_origin(hint)
        optional = origin in (typing.Union, types.UnionType)
        if optional:
            if _is_null(value):
                return None
            hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
            origin = typing.get_origin(hint)
        short = short or (self.short_forms.get(hint) if isinstance(hint, type) else None)
        if short is not None:
            try:
                value = short(value)
            except ValueProblem as problem:
                raise self.error(path, "value", problem.message, value, problem.fix) from None
            if value is None and optional:
                return None
        if dataclasses.is_dataclass(hint):
            return self.dataclass(value, hint, path)
        if origin in (list, tuple):
            return self.sequence(value, hint, origin, path)
        if origin is dict:
            return self.string_map(value, path)
        return self.scalar(value, hint, path)

    def sequence(self, value: Any, hint: Any, origin: type, path: str) -> Any:
        items = value.items if isinstance(value, Sequence) else value
        if not isinstance(items, (list, tuple)):
            raise self.error(path, "type", f"expected a list, got {_describe(value)}", value, "write [a, b, ...]")
        item_hint = typing.get_args(hint)[0]
        converted, failed = [], False
        for index, item in enumerate(items):
            try:
                converted.append(self.convert(item, item_hint, join_path(path, index)))
            except _Invalid:
                failed = True
        if failed:
            raise _Invalid()
        return tuple(converted) if origin is tuple else converted

    def mapping_items(self, value: Any, path: str) -> list[tuple[str, Any]]:
        if isinstance(value, Mapping):
            pairs = [(key.text, item) for key, item in value.items]
        elif isinstance(value, MappingABC):
            pairs = []
            for key, item in value.items():
                if not isinstance(key, str):
                    raise self.error(path, "type", f"keys must be text, got {_describe(key)}", key, "quote the key")
                pairs.append((key, item))
        else:
            raise self.error(path, "type", f"expected a mapping, got {_describe(value)}", value,
                             "write `key: value` lines")
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise self.error(join_path(path, key), "duplicate-key", f"key {key!r} appears twice", key,
                                 "keep one of them")
            seen.add(key)
        return pairs

    def string_map(self, value: Any, path: str) -> dict[str, str]:
        result, failed = {}, False
        for key, item in self.mapping_items(value, path):
            try:
                if _is_null(item):
                    raise self.error(join_path(path, key), "required", "has no value", None,
                                     f'write {key}: "" for an empty value')
                result[key] = self.text(item, join_path(path, key))
            except _Invalid:
                failed = True
        if failed:
            raise _Invalid()
        return result

    def dataclass(self, value: Any, cls: type, path: str) -> Any:
        fields = _fields(cls)
        kwargs, failed, given = {}, False, set()
        for key, item in self.mapping_items(value, path):
            if key not in fields:
                self.error(join_path(path, key), "unknown-key", f"unknown key {key!r}", None,
                           _did_you_mean(key, fields))
                failed = True
                continue
            name, hint, spec_field = fields[key]
            given.add(key)
            if _is_null(item):
                if _required(spec_field):
                    self.error(join_path(path, key), "required", f"{key!r} must have a value", None,
                               f"write `{key}: ...`")
                    failed = True
                continue  # null: the field's default
            try:
                kwargs[name] = self.convert(item, hint, join_path(path, key), spec_field.metadata.get("short"))
            except _Invalid:
                failed = True
        for key, (_, _, spec_field) in fields.items():
            if key not in given and _required(spec_field):
                self.error(join_path(path, key), "required", f"missing required key {key!r}", None,
                           f"add `{key}: ...`")
                failed = True
        if failed:
            raise _Invalid()
        return cls(**kwargs)

    def text(self, value: Any, path: str) -> str:
        if isinstance(value, Scalar):
            text = value.text
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            text = str(value)
        else:
            raise self.error(path, "type", f"expected text, got {_describe(value)}", value, "quote the value")
        if "\x00" in text:
            raise self.error(path, "value", "contains a NUL byte, which no file or program argument can carry",
                             value, "remove the NUL byte")
        return text

    def scalar(self, value: Any, hint: Any, path: str) -> Any:
        if hint is str:
            return self.text(value, path)
        if hint is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, Scalar) and value.plain and value.text in _TRUE_WORDS | _FALSE_WORDS:
                return value.text in _TRUE_WORDS
            fix = "write true or false" + (" (YAML 1.1 words such as yes/no are ambiguous)"
                                           if isinstance(value, Scalar) and value.text in _YAML11_BOOLS else "")
            raise self.error(path, "type", f"expected true or false, got {_describe(value)}", value, fix)
        if hint is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, Scalar) and value.plain and _INT_RE.match(value.text):
                return int(value.text)
            raise self.error(path, "type", f"expected a whole number, got {_describe(value)}", value,
                             "write a number such as 4, without quotes")
        if hint is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, Scalar) and value.plain and _FLOAT_RE.match(value.text):
                return float(value.text)
            raise self.error(path, "type", f"expected a number, got {_describe(value)}", value, "write e.g. 0.5")
        raise TypeError(f"the spec reader cannot read fields of type {hint!r}")  # a bug in a spec class


def _did_you_mean(key: str, known: MappingABC[str, object]) -> str:
    close = similar_names(key, known)
    if close:
        return f"did you mean {close[0]!r}?"
    return "known keys: " + ", ".join(known)


# ----- one line of text: every spec kind's single-line rule ----------------------------------------


@lean_dataclass(frozen=True)
class TextValue:
    """One piece of text in a loaded spec: `path` names it as the user wrote it (a map's key by the map's
    path); `multiline` when its field may hold tabs and line breaks."""

    path: str
    text: str
    multiline: bool = False


def text_values(spec: object) -> Iterator[TextValue]:
    """Every text of a spec, from its dataclasses' fields (a field added later is walked too): values, list
    items, and the keys and values of maps."""
    return _text_values(spec, "", False)


def _text_values(value: object, path: str, multiline: bool) -> Iterator[TextValue]:
    if isinstance(value, str):
        yield TextValue(path, value, multiline)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for spec_field in dataclasses.fields(value):
            yield from _text_values(getattr(value, spec_field.name),
                                    join_path(path, spec_field.metadata.get("key", spec_field.name)),
                                    spec_field.metadata.get("multiline", False))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _text_values(item, join_path(path, index), multiline)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield TextValue(path, key)  # a key is a name (an environment variable, a setting): one line
            yield from _text_values(item, join_path(path, key), multiline)


def control_character(value: TextValue) -> Finding | None:
    """The error for the first control character `value` may not hold, else None."""
    found = next((char for char in CONTROL_RE.findall(value.text)
                  if not (value.multiline and char in MULTILINE_CONTROLS)), None)
    if found is None:
        return None
    if value.multiline:
        why, fix = "only tabs and line breaks may be in it", "remove the control character"
    else:
        why, fix = "a value is one line of printable text", "remove line breaks, tabs and control characters"
    message = f"holds the control character U+{ord(found):04X} ({why})"
    return error(value.path, message, fix, escape_controls(value.text))


def control_characters(spec: object) -> Iterator[Finding]:
    """Every spec kind's single-line rule: an error for each text of `spec` holding a control character."""
    for value in text_values(spec):
        finding = control_character(value)
        if finding is not None:
            yield finding


# ----- helpers for short forms ---------------------------------------------------------------------


def plain_data(value: Any) -> Any:
    """A tree as plain Python data (scalars as the text written): for short forms that restructure."""
    if isinstance(value, Scalar):
        return None if _is_null(value) else value.text
    if isinstance(value, Sequence):
        return [plain_data(item) for item in value.items]
    if isinstance(value, Mapping):
        return {key.text: plain_data(item) for key, item in value.items}
    return value


def items_of(value: Any) -> list[Any] | None:
    """The items of a list (tree or plain), else None."""
    if isinstance(value, Sequence):
        return value.items
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def text_of(value: Any) -> str | None:
    """The text of a scalar (tree or plain str), else None."""
    if isinstance(value, Scalar):
        return value.text
    if isinstance(value, str):
        return value
    return None


def is_mapping(value: Any) -> bool:
    return isinstance(value, (Mapping, MappingABC))


def load_path(cls: type[T], path: str | Path, what: str, *,
              short_forms: MappingABC[type, ShortForm] | None = None, rule_prefix: str = "spec") -> T:
    """Read, parse and load a spec file, raising SpecError with every error."""
    return load_or_raise(cls, read_file(path, what), source=str(path), short_forms=short_forms,
                         rule_prefix=rule_prefix)


def with_text(data: Any, dotted_path: str, text: str) -> Any:
    """`data` (a tree or plain data) with the value at `a.b` set to `text`, as if the user had written it
    quoted there; the original is not changed. Data that is not a mapping is returned as it is (the
    loader reports that)."""
    head, _, rest = dotted_path.partition(".")
    if isinstance(data, Mapping):
        items = list(data.items)
        for index, (key, value) in enumerate(items):
            if key.text == head:
                items[index] = (key, with_text(value, rest, text) if rest else Scalar(text, plain=False))
                return Mapping(items, data.line)
        items.append((Scalar(head, plain=True), with_text(Mapping(), rest, text) if rest else Scalar(text, False)))
        return Mapping(items, data.line)
    if isinstance(data, MappingABC):
        copy = dict(data)
        copy[head] = with_text(copy.get(head) or {}, rest, text) if rest else text
        return copy
    if data is None:
        return with_text({}, dotted_path, text)
    return data
