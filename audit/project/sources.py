"""Where project files are read from: the working tree, or a git ref (for the gate).

Everything that reads recipes, requirements, base snapshots and locks takes a :class:`Source`
and project-relative POSIX paths (``images/demo/image.toml``), so the same code audits the
working tree and any commit without checking it out.

Project files are project files: :func:`read_project_file` reads only regular files inside
the project, up to a size cap, and never blocks (a FIFO is opened non-blocking, then refused
by the type of the open file, so there is no window between checking and reading).
"""

from __future__ import annotations

import errno
import os
import stat
from functools import cached_property
from pathlib import Path
from typing import Protocol

from audit.errors import ProjectFileError
from audit.project.frontdoor import FrontDoor
from audit.project.memo import Memo

MiB = 1024 * 1024
TEXT_LIMIT = 1 * MiB  # recipes, requirements, includes, templates, copy sources
LOCK_LIMIT = 32 * MiB  # locks and base snapshots of large stacks, hashes included
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_HINT = "make it a regular file inside the project (copy it in instead of linking it)"


class Source(Protocol):
    """Read-only access to project files by project-relative POSIX path; ``memo``: what the
    command has already parsed of them (shared by the sources of one command); ``front``: the
    commands the project's users run, which its hints name."""

    memo: Memo

    @property
    def front(self) -> FrontDoor: ...

    def read_bytes(self, relpath: str) -> bytes:
        """The file's bytes; raises FileNotFoundError when it does not exist at this source."""
        ...

    def exists(self, relpath: str) -> bool: ...

    def listdir(self, relpath: str) -> list[str]:
        """Names directly inside a folder, sorted; empty when the folder does not exist."""
        ...

    def describe(self, relpath: str) -> str:
        """How to name the file in an error: ``images/x/image.toml`` or ``REF:images/x/...``."""
        ...


def limit_for(relpath: str) -> int:
    """The size cap of a project file: locks may be big, every other input is small text."""
    return LOCK_LIMIT if relpath.startswith("locks/") else TEXT_LIMIT


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words (``a FIFO (named pipe)``)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_inside(root: Path, path: Path, shown: str) -> None:
    """Refuse ``path`` when it (or a link on the way) resolves outside ``root``."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:  # a link loop
        raise ProjectFileError(shown, f"cannot be resolved ({exc})", _HINT) from exc
    if not real.is_relative_to(root.resolve()):
        raise ProjectFileError(shown, f"links outside the project (to {real})", _HINT)


def read_project_file(root: Path, relpath: str, *, limit: int | None = None) -> bytes:
    """The bytes of ``root/relpath``, a regular file inside ``root`` of at most ``limit`` bytes.

    Raises FileNotFoundError when it does not exist (callers decide what absence means) and
    :class:`ProjectFileError` (exit 2, naming ``relpath``) for a link out of the project, a
    FIFO, device or socket, or a file over the cap; IsADirectoryError for a folder. Never
    blocks, never reads more than ``limit + 1`` bytes.
    """
    cap = limit_for(relpath) if limit is None else limit
    path = root / relpath
    if not path.exists():  # a dangling link is as absent as a missing file
        raise FileNotFoundError(2, "No such file or directory", relpath)
    check_inside(root, path, relpath)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):  # an OSError, as reading a folder always was
            raise IsADirectoryError(errno.EISDIR, "Is a directory", relpath)
        if not stat.S_ISREG(info.st_mode):
            raise ProjectFileError(relpath, f"is {kind_of(info.st_mode)}, not a file", _HINT)
        data = _read_at_most(fd, cap + 1)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise ProjectFileError(
            relpath,
            f"larger than {cap // 1024} KiB",
            "project inputs are small text files; check that this is the file you meant",
        )
    return data


def _read_at_most(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes from ``fd`` (fewer only at the end of the file)."""
    chunks: list[bytes] = []
    while size > 0:
        chunk = os.read(fd, min(size, MiB))
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class DirectorySource:
    """Project files in a folder on disk (the working tree), read by :func:`read_project_file`."""

    def __init__(self, root: Path, memo: Memo | None = None) -> None:
        self.root = root
        self.memo = memo if memo is not None else Memo()

    @cached_property
    def front(self) -> FrontDoor:
        return FrontDoor.of(self.root)

    def read_bytes(self, relpath: str) -> bytes:
        return read_project_file(self.root, relpath)

    def exists(self, relpath: str) -> bool:
        return (self.root / relpath).exists()

    def listdir(self, relpath: str) -> list[str]:
        folder = self.root / relpath
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def describe(self, relpath: str) -> str:
        return relpath
