"""A filesystem as the dynamic loader sees it: facts by path, symbolic links, folder listings.

PURE: standard library only, Python 3.9 syntax.

Invariants: paths are absolute POSIX paths, normalised (no ``.``/``..``/``//``). ``files`` holds
the facts of regular files by their real path; ``links`` every symbolic link a reader met, by
its own path, with the target as written; ``listings`` the names in a folder (by its real path),
which is how the view knows a file is there whose facts were not read. A path is resolved
component by component, as the kernel does (a link's ``..`` is taken after the link), and more
than :data:`MAX_LINKS` links on one path is a loop: the path then does not exist (``ELOOP``),
and :meth:`FileSystemView.lookup` says so instead of raising.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from audit.native.elf import ElfFacts, facts_from_json

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from audit.native.elf import FileFacts

MAX_LINKS = 40  # the kernel's limit on symbolic links followed in one lookup (ELOOP)


class LinkLoop(ValueError):
    """More than :data:`MAX_LINKS` symbolic links on one path."""


@dataclass(frozen=True)
class Found:
    """A file that is there: its real path, and its facts when a reader recorded them (None:
    listed but not read, such as libc in a system folder)."""

    path: str
    facts: FileFacts | None


def resolve_links(path: str, readlink: Callable[[str], str | None]) -> str:
    """``path`` with every symbolic link on it resolved as the kernel does (component by
    component, ``..`` after a link's target, an absolute target from the root), asking
    ``readlink`` for each component's target (None: not a link); :class:`LinkLoop` past
    :data:`MAX_LINKS` links. The same walk for a recorded view and a live filesystem."""
    done = "/"
    todo = [p for p in reversed(path.split("/")) if p and p != "."]
    hops = 0
    while todo:
        part = todo.pop()
        if part == "..":
            done = posixpath.dirname(done)
            continue
        candidate = posixpath.join(done, part)
        target = readlink(candidate)
        if target is None:
            done = candidate
            continue
        hops += 1
        if hops > MAX_LINKS:
            raise LinkLoop(f"{path}: more than {MAX_LINKS} symbolic links (a loop)")
        if target.startswith("/"):
            done = "/"
        todo.extend(p for p in reversed(target.split("/")) if p and p != ".")
    return done


@dataclass(frozen=True)
class FileSystemView:
    files: Mapping[str, FileFacts] = field(default_factory=dict)
    links: Mapping[str, str] = field(default_factory=dict)
    listings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def realpath(self, path: str) -> str:
        """``path`` with every symbolic link resolved; :class:`LinkLoop` past the limit."""
        return resolve_links(path, self.links.get)

    def lookup(self, path: str) -> Found | None:
        """The file at ``path`` (links followed), or None: absent, a folder, or a link loop."""
        try:
            real = self.realpath(path)
        except LinkLoop:
            return None
        if real in self.files:
            return Found(real, self.files[real])
        folder, name = posixpath.split(real)
        if name in self.listings.get(folder, ()) and real not in self.listings:
            return Found(real, None)
        return None

    def is_folder(self, path: str) -> bool:
        """Whether ``path`` is a folder the view knows: listed, or above a listed one."""
        try:
            real = self.realpath(path)
        except LinkLoop:
            return False
        return real in self.listings or any(f.startswith(real + "/") for f in self.listings)

    def elf_files(self) -> list[tuple[str, ElfFacts]]:
        """(real path, facts) of every readable ELF file, sorted by path."""
        return [(p, f) for p, f in sorted(self.files.items()) if isinstance(f, ElfFacts)]

    def to_json(self) -> dict[str, Any]:
        return {
            "files": {path: facts.to_json() for path, facts in sorted(self.files.items())},
            "links": dict(sorted(self.links.items())),
            "listings": {folder: list(names) for folder, names in sorted(self.listings.items())},
        }


def view_from_json(data: Any, where: str = "view") -> FileSystemView:
    """:meth:`FileSystemView.to_json` back (``ElfFormatError``/``ValueError`` name ``where``)."""
    if not isinstance(data, dict) or set(data) != {"files", "links", "listings"}:
        raise ValueError(f"{where}: expected an object with files, links and listings")
    files = {
        path: facts_from_json(f, f"{where}.files[{path}]") for path, f in data["files"].items()
    }
    links = {str(k): str(v) for k, v in data["links"].items()}
    listings = {str(k): tuple(str(n) for n in v) for k, v in data["listings"].items()}
    return FileSystemView(files, links, listings)
