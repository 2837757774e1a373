"""A lean dataclass behaves like the stdlib's own, judged against twins made by `dataclasses.dataclass`."""

from __future__ import annotations

import dataclasses
import pickle
import re
from dataclasses import field
from pathlib import Path

import pytest

from clusterkit.lean_dataclass import lean_dataclass

PACKAGE = Path(__file__).resolve().parents[1] / "clusterkit"


def twins(body: dict, **options: bool) -> tuple[type, type]:
    """The same class made both ways."""
    annotations = {"name": "str", "size": "int", "tags": "list", "note": "str"}
    namespace = {"__annotations__": annotations, "__doc__": "x", "note": field(default="", compare=False, repr=False),
                 "tags": field(default_factory=list), "size": 1, **body}
    stdlib = dataclasses.dataclass(type("Thing", (), dict(namespace)), **options)
    lean = lean_dataclass(type("Thing", (), dict(namespace)), **options)
    return stdlib, lean


@pytest.mark.parametrize("options", [{}, {"frozen": True}, {"eq": False}])
def test_repr_equality_and_hashing_match_the_stdlib(options: dict) -> None:
    stdlib, lean = twins({}, **options)
    for args in (("a",), ("a", 2, ["x"], "n"), ("a'\n\u2028", 3)):
        one, other = stdlib(*args), lean(*args)
        assert repr(one) == repr(other)
        assert (stdlib(*args) == one) == (lean(*args) == other)
        assert (stdlib("b") == one) == (lean("b") == other)
        assert (one == other) is False  # different classes never compare equal
    assert (stdlib.__hash__ is None) == (lean.__hash__ is None)
    if options.get("frozen"):
        same = lean("a", 2, ("x",), "ignored in hashing and equality")  # type: ignore[arg-type]
        assert hash(same) == hash(lean("a", 2, ("x",))) == hash(stdlib("a", 2, ("x",)))
        assert same == lean("a", 2, ("x",))
        with pytest.raises(dataclasses.FrozenInstanceError):
            same.size = 5
    if options.get("eq") is False:
        assert lean("a") != lean("a") and hash(lean("a")) != 0


def test_methods_the_class_defines_itself_are_kept() -> None:
    body = {"__repr__": lambda self: "mine", "__eq__": lambda self, other: True, "__hash__": lambda self: 7}
    for options in ({}, {"frozen": True}):
        _, lean = twins(dict(body), **options)
        assert repr(lean("a")) == "mine" and lean("a") == 3 and hash(lean("a")) == 7


def test_a_frozen_class_defining_only_eq_is_hashed_like_the_stdlib() -> None:
    stdlib, lean = twins({"__eq__": lambda self, other: True}, frozen=True)
    assert hash(lean("a", 2, ())) == hash(stdlib("a", 2, ()))


def test_recursive_values_and_pickling() -> None:
    _, lean = twins({})
    loop = lean("a")
    loop.tags.append(loop)
    assert repr(loop) == "Thing(name='a', size=1, tags=[...])"
    from clusterkit.cluster.spec import ClusterSpec
    spec = ClusterSpec(name="demo", queues=[])
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert dataclasses.replace(spec, name="other") != spec


def test_clusterkit_declares_every_dataclass_lean() -> None:
    # CLI start-up depends on it: each stdlib-generated method is compiled at import (about 0.1 ms).
    plain = [f"{path.relative_to(PACKAGE.parent)}:{number}"
             for path in PACKAGE.rglob("*.py")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.match(r"\s*@(dataclasses\.)?dataclass\b", line)]
    assert plain == [], "use clusterkit.lean_dataclass.lean_dataclass instead of @dataclass"
