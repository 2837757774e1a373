"""Version strings as the stack's tools print them, compared as numbers."""

from __future__ import annotations

import pytest

from clusterkit.versions import at_least, version_tuple


@pytest.mark.parametrize(("text", "version"), [("1.7.4", (1, 7, 4)), ("1.13.2-aws", (1, 13, 2)), ("2", (2,)),
                                               ("v2.29.3-1", (2, 29, 3)), ("1.10", (1, 10)), ("latest", None),
                                               (None, None)])
def test_version_tuple(text: str | None, version: tuple[int, ...] | None) -> None:
    assert version_tuple(text) == version


def test_at_least_compares_numbers_not_text() -> None:
    assert at_least("1.10", "1.7") and not at_least("1.1", "1.7")
    assert not at_least("latest", "1.0")
