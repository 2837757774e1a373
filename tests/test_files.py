"""Atomic file writing: the whole new text or the old file, never half, and no temporary files left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from clusterkit.errors import ClusterkitError
from clusterkit.files import write_atomically, write_user_file, write_user_files


def test_a_write_replaces_the_file_whole_privately_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "config.yaml"
    target.write_text("old\n")
    write_atomically(target, "new ü\n" * 1000)
    assert target.read_text(encoding="utf-8") == "new ü\n" * 1000
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path: Path) -> None:
    target = tmp_path / "config.yaml"
    target.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(target, "half \udc80 written")  # a lone surrogate cannot be written as UTF-8
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


def test_a_planted_link_at_a_temporary_name_is_never_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    names = iter([b"\x00" * 6, b"\x01" * 6])
    monkeypatch.setattr(os, "urandom", lambda n: next(names))
    (tmp_path / f".config.yaml.{'00' * 6}.tmp").symlink_to(victim)  # the first name tried is taken
    write_atomically(tmp_path / "config.yaml", "new\n")
    assert victim.read_text() == "keep\n" and (tmp_path / "config.yaml").read_text() == "new\n"


def test_refusals_name_the_path_and_write_nothing(tmp_path: Path) -> None:
    with pytest.raises(ClusterkitError, match="does not exist"):
        write_atomically(tmp_path / "missing" / "config.yaml", "x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ClusterkitError, match="a FIFO"):
        write_user_file(fifo, "x")
    assert stat.S_ISFIFO(fifo.stat().st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_several_files_are_written_all_or_none(tmp_path: Path) -> None:
    first = tmp_path / "config.yaml"
    first.write_text("old\n")
    with pytest.raises(ClusterkitError, match="does not exist"):
        write_user_files([(first, "new\n"), (tmp_path / "missing" / "template.yaml", "new\n")])
    assert first.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["config.yaml"]
    write_user_files([(first, "new\n"), (tmp_path / "template.yaml", "template\n")])
    assert first.read_text() == "new\n" and (tmp_path / "template.yaml").read_text() == "template\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "template.yaml"]
