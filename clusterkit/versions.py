"""Version strings as the stack's tools print them, compared as tuples of numbers."""

from __future__ import annotations

import re

_LEADING_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)")


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """'v2.29.3-1' -> (2, 29, 3); '12.8.1' -> (12, 8, 1); None or no leading number -> None."""
    match = _LEADING_VERSION.match((text or "").strip())
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def at_least(version: str | None, minimum: str) -> bool:
    """Whether `version` is `minimum` or newer; an unparsable version is not."""
    have, need = version_tuple(version), version_tuple(minimum)
    return have is not None and need is not None and have >= need
