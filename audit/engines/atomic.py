"""Writes that never leave a half-written file, and a lock so two runs cannot interleave."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from audit.core.errors import AuditError, BadInput, EnvironmentProblem

NEW_FILE_MODE = 0o666  # what open() asks for; the umask takes its bits off, as for open()


def _current_umask() -> int:
    """The process umask: read from /proc (Linux), else set and restored at once."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o077)  # the strictest value, for the instant another thread might see it
    os.umask(mask)
    return mask


def _target_mode(path: Path) -> int:
    """An existing file keeps its mode; a new one gets open()'s (0644 under the usual umask)."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return NEW_FILE_MODE & ~_current_umask()


def write_bytes(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename).

    Returns False and touches nothing when the file already holds exactly ``data``,
    so re-renders keep their modification times. A failed write leaves ``path`` as it was
    and raises :class:`EnvironmentProblem` (disk full, read-only) or :class:`BadInput`.
    """
    if path.is_file() and path.read_bytes() == data:
        return False
    try:
        if path.exists() and not path.is_file() and not path.is_dir():
            _write_through(path, data)
        else:
            _replace(path, data)
    except OSError as exc:
        raise _write_error(path, exc) from exc
    return True


def _write_through(path: Path, data: bytes) -> None:
    """A device or pipe (``/dev/null``, ``/dev/stdout``) is written, never renamed over."""
    with path.open("wb") as handle:
        handle.write(data)


def _replace(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _target_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600: readable by its owner only
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        raise


def _write_error(path: Path, exc: OSError) -> AuditError:
    """One located error for a failed write; ``path`` itself is untouched."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return EnvironmentProblem(
            f"{path}: no space left on device", "free disk space, then run again"
        )
    if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.EEXIST):
        return BadInput(f"{path}: cannot write a file here ({exc.strerror})", "choose another path")
    return EnvironmentProblem(
        f"{path}: cannot write ({exc.strerror})", "check permissions and free space"
    )


def write_text(path: Path, text: str) -> bool:
    """Atomic text write in UTF-8 with ``\\n`` line ends; see :func:`write_bytes`."""
    return write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def exclusive(path: Path, timeout: float = 600.0) -> Iterator[None]:
    """Hold an exclusive file lock at ``path`` (created beside the files it guards)."""
    from filelock import FileLock, Timeout  # only runs that write pay for importing it

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), timeout=timeout)
    try:
        with lock:
            yield
    except Timeout as exc:
        raise EnvironmentProblem(
            f"{path}: another run holds this lock", "wait for it to finish, then run again"
        ) from exc
