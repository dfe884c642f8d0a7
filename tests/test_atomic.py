"""Atomic writes: the modes files end up with, and no temporary file left behind."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.host import atomic


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


def _read_fifo(path: Path, received: list[bytes]) -> threading.Thread:
    def read() -> None:
        with path.open("rb") as handle:
            received.append(handle.read())

    reader = threading.Thread(target=read)
    reader.start()
    return reader


def test_a_pipe_is_written_into_not_renamed_over(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = _read_fifo(fifo, received)
    assert atomic.write_bytes(fifo, b"report\n")
    reader.join(timeout=10)
    assert received == [b"report\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # still the pipe, not a file renamed over it


def test_the_snapshot_script_writes_into_a_pipe_too(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = _read_fifo(fifo, received)
    script = Path(atomic.__file__).parent.parent / "inimage" / "snapshot.py"
    subprocess.run([sys.executable, str(script), "--output", str(fifo)], check=True, timeout=60)
    reader.join(timeout=10)
    assert received and received[0].startswith(b'{"digest":')
    assert stat.S_ISFIFO(fifo.stat().st_mode)
