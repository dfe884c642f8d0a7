"""Writes that never leave a half-written file, and a lock so two runs cannot interleave."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from audit.errors import AuditError, BadInput, EnvironmentProblem

NEW_FILE_MODE = 0o666  # what open() asks for; the umask takes its bits off, as for open()
# Temporary files of atomic writes: ``.NAME.audit-<pid>-<random>.tmp`` beside NAME
# (git-ignored); the marker keeps other programs' temporaries out of the clean-up.
TEMP_MARKER = "audit"
TEMPORARY = re.compile(r"^\..+\." + TEMP_MARKER + r"-(?P<pid>\d+)-[A-Za-z0-9_]+\.tmp$")
STALE_AFTER = 3600.0  # seconds: a temporary whose writer cannot be told apart is left this long
_cleaned: set[Path] = set()  # folders already swept by this process


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

    Returns False and leaves ``path`` alone when it already holds exactly ``data``, so
    re-renders keep their modification times. Temporaries a killed run left in the folder are
    removed first (:func:`clean_temporaries`). A failed write leaves ``path`` as it was
    and raises :class:`EnvironmentProblem` (disk full, read-only) or :class:`BadInput`.
    """
    clean_temporaries(path.parent)
    if path.is_file() and path.read_bytes() == data:
        return False
    make_folder(path.parent)
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


def make_folder(folder: Path) -> None:
    """Create ``folder`` and its parents; a file where a folder must be is bad input (exit 2).

    A plain file named ``build`` at the project root is reported as such, never as a
    FileExistsError traceback.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        blocker = next(
            (p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), folder
        )
        raise BadInput(
            f"{blocker}: is a file, but a folder is needed here (for {folder})",
            f"move or remove {blocker}, then run again",
        ) from exc
    except OSError as exc:
        raise _write_error(folder, exc) from exc


def _writer_gone(match: re.Match[str], path: Path, now: float) -> bool:
    """True when the run that made this temporary file cannot still be writing it."""
    pid = int(match["pid"])
    if pid != os.getpid():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
    try:
        return now - path.lstat().st_mtime > STALE_AFTER
    except FileNotFoundError:
        return False


def clean_temporaries(folder: Path) -> list[Path]:
    """Remove temporaries a killed run left in ``folder`` (once per folder and process).

    Only files named like this module's temporaries (``.NAME.audit-<pid>-<random>.tmp``) whose
    writer is gone (its process no longer exists) or that are over an hour old are removed;
    a temporary another live run is writing is never touched. Returns what was removed.
    """
    if folder in _cleaned:
        return []
    _cleaned.add(folder)
    removed = []
    now = time.time()
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            match = TEMPORARY.match(entry.name)
            path = Path(entry.path)
            if match and entry.is_file(follow_symlinks=False) and _writer_gone(match, path, now):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed.append(path)
    return removed


def _replace(path: Path, data: bytes) -> None:
    mode = _target_mode(path)
    prefix = f".{path.name}.{TEMP_MARKER}-{os.getpid()}-"
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
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

    make_folder(path.parent)
    lock = FileLock(str(path), timeout=timeout)
    try:
        with lock:
            yield
    except Timeout as exc:
        raise EnvironmentProblem(
            f"{path}: another run holds this lock", "wait for it to finish, then run again"
        ) from exc
