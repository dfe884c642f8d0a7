"""Atomic writes: the modes files end up with, and no temporary file left behind."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit import atomic


@pytest.fixture
def umask_027() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_gets_the_mode_open_would_give_it(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic.write_text(tmp_path / "a.txt", "one\n")
        with (tmp_path / "b.txt").open("w") as handle:
            handle.write("one\n")
    finally:
        os.umask(old)
    assert mode(tmp_path / "a.txt") == mode(tmp_path / "b.txt") == 0o644


def test_the_umask_is_respected(tmp_path: Path, umask_027: None) -> None:
    atomic.write_text(tmp_path / "a.txt", "one\n")
    assert mode(tmp_path / "a.txt") == 0o640


def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "script.sh"
    path.write_text("old\n")
    path.chmod(0o750)
    assert atomic.write_text(path, "new\n")
    assert path.read_text() == "new\n"
    assert mode(path) == 0o750
    assert [p.name for p in tmp_path.iterdir()] == ["script.sh"]


def test_unchanged_content_is_not_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    atomic.write_text(path, "same\n")
    before = path.stat().st_mtime_ns
    assert not atomic.write_text(path, "same\n")
    assert path.stat().st_mtime_ns == before
