"""Dataclasses that cost less to define: clusterkit's one way to declare one.

Python 3.11's `dataclasses` compiles every generated method with its own `exec()`, about 0.1 ms each;
with a frozen dataclass generating six, defining clusterkit's classes was the largest single part of a
CLI command's start-up. A lean dataclass is a real dataclass (`fields`, `asdict`, `replace` work) whose
`__repr__`, `__eq__` and `__hash__` are shared functions that behave exactly like the generated ones,
so only `__init__` (and a frozen class's guards) are compiled per class.
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import Any, TypeVar

T = TypeVar("T")


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{item.name}={getattr(self, item.name)!r}" for item in dataclasses.fields(self) if item.repr)
    return f"{type(self).__qualname__}({shown})"


def _compared(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, item.name) for item in dataclasses.fields(self) if item.compare)


def _eq(self: Any, other: Any) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _compared(self) == _compared(other)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, item.name) for item in dataclasses.fields(self)
                      if (item.compare if item.hash is None else item.hash)))


def lean_dataclass(cls: type[T] | None = None, /, *, frozen: bool = False,
                   eq: bool = True) -> Any:
    """`@dataclass`, `@dataclass(frozen=True)` or `@dataclass(eq=False)`, with the same behaviour."""

    def make(cls: type[T]) -> type[T]:
        own = dict(cls.__dict__)  # what the class body defines itself is kept, as dataclass keeps it
        made = dataclasses.dataclass(cls, repr=False, eq=False, frozen=frozen)
        if "__repr__" not in own:
            made.__repr__ = _repr  # type: ignore[assignment]
        if eq:
            if "__eq__" not in own:
                made.__eq__ = _eq  # type: ignore[assignment]
            if own.get("__hash__", dataclasses.MISSING) in (dataclasses.MISSING, None):
                # dataclass: an eq class is unhashable unless frozen, which hashes its compared fields
                made.__hash__ = _hash if frozen else None  # type: ignore[assignment]
        return made

    return make if cls is None else make(cls)

