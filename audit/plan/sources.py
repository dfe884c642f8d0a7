"""Where project files are read from: the working tree, or a git ref (for the gate).

Everything that reads recipes, requirements, base snapshots and locks takes a :class:`Source`
and project-relative POSIX paths (``images/demo/image.toml``), so the same code audits the
working tree and any commit without checking it out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Source(Protocol):
    """Read-only access to project files by project-relative POSIX path."""

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


class DirectorySource:
    """Project files in a folder on disk (the working tree)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def read_bytes(self, relpath: str) -> bytes:
        return (self.root / relpath).read_bytes()

    def exists(self, relpath: str) -> bool:
        return (self.root / relpath).exists()

    def listdir(self, relpath: str) -> list[str]:
        folder = self.root / relpath
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def describe(self, relpath: str) -> str:
        return relpath
