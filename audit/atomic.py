"""Writes that never leave a half-written file, and a lock so two runs cannot interleave."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from audit.errors import EnvironmentProblem


def write_bytes(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename).

    Returns False and touches nothing when the file already holds exactly ``data``,
    so re-renders keep their modification times.
    """
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        raise
    return True


def write_text(path: Path, text: str) -> bool:
    """Atomic text write in UTF-8 with ``\\n`` line ends; see :func:`write_bytes`."""
    return write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def exclusive(path: Path, timeout: float = 600.0) -> Iterator[None]:
    """Hold an exclusive file lock at ``path`` (created beside the files it guards)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), timeout=timeout)
    try:
        with lock:
            yield
    except Timeout as exc:
        raise EnvironmentProblem(
            f"{path}: another run holds this lock", "wait for it to finish, then run again"
        ) from exc
