"""A :class:`~audit.native.scene.Scene` read from a live filesystem (the host, or inside a
container), with pyelftools.

HOST side. Nothing is run: the loader settings come from the environment passed in, the
cache and ``ld.so.conf`` from their files, the folders from listings. What is read:

- every folder the loader could search (LD_LIBRARY_PATH, the cache's folders, ``ld.so.conf``'s,
  the default ones) and every folder named by a recorded file's RPATH/RUNPATH, to a fixed
  point: listed (names containing ``.so``), symbolic links recorded with their targets;
- ELF facts of: every file under the package trees given (``site-packages/torch``,
  ``nvidia``...), every CUDA-family file of the searched folders, and the extra files given
  (the interpreter, ``_ctypes``);
- owners: a wheel's RECORD (``name version``), dpkg's ``info/*.list`` (package and version),
  else a CUDA toolkit folder (``/usr/local/cuda-13.0``).

``trim`` keeps the recording small: imports only from CUDA-family files, defined symbols only of
CUDA-family files. Unreadable files and symbolic link loops are recorded as such, never raised.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from audit.native.catalog import Owner, family_of, toolkit_owner
from audit.native.elf import ElfFacts, Unreadable
from audit.native.elfread import read_path
from audit.native.fsview import FileSystemView, LinkLoop, resolve_links
from audit.native.ldcache import LdCacheError, cache_map, conf_folders, parse_cache
from audit.native.scene import PythonFacts, Scene
from audit.native.search import LoaderSettings, expand

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from audit.native.elf import FileFacts


@dataclass
class _Reading:
    """What one gathering has read so far (mutable, local to one call)."""

    files: dict[str, FileFacts] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    listings: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def link_components(self, path: str) -> str:
        """Record every symbolic link on ``path``; its real path ("" on a loop)."""
        try:
            return resolve_links(path, self._readlink)
        except LinkLoop:
            return ""

    def _readlink(self, candidate: str) -> str | None:
        try:
            target = os.readlink(candidate)  # noqa: PTH115 (the target as written)
        except OSError:
            return None
        self.links[candidate] = target
        return target

    def list_folder(self, folder: str) -> str | None:
        """List ``folder`` (its real path), recording its ``.so`` names and their links."""
        real = self.link_components(folder)
        if not real or real in self.listings:
            return real or None
        try:
            names = sorted(e.name for e in os.scandir(real) if ".so" in e.name)
        except OSError:
            return None
        self.listings[real] = tuple(names)
        for name in names:
            if Path(real, name).is_symlink():
                self.links[f"{real}/{name}"] = os.readlink(f"{real}/{name}")  # noqa: PTH115
        return real

    def read(self, path: str) -> str:
        """Read the file at ``path`` (links followed and recorded); its real path."""
        real = self.link_components(path)
        if not real:
            return ""
        self.list_folder(posixpath.dirname(real))
        if real not in self.files and Path(real).is_file():
            self.files[real] = read_path(real)
        return real


def _environment_folders(value: str | None) -> list[str]:
    return [entry for entry in (value or "").split(":") if entry.startswith("/")]


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)  # noqa: PTH208 (names only)
    except OSError:
        return []


def _text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def loader_settings(
    environ: Mapping[str, str], machine: str, system_folders: tuple[str, ...] = (),
    hwcaps: tuple[str, ...] = (), cwd: str | None = None,
) -> LoaderSettings:  # fmt: skip
    """The settings of a process started with ``environ`` on this filesystem."""
    try:
        cache: dict[str, tuple[str, ...]] | None = cache_map(
            parse_cache(Path("/etc/ld.so.cache").read_bytes()), machine
        )
    except (OSError, LdCacheError):
        cache = None
    return LoaderSettings(
        machine=machine, bits=64, ld_library_path=environ.get("LD_LIBRARY_PATH"), cache=cache,
        conf_folders=conf_folders(_text, _listdir), system_folders=system_folders,
        hwcaps=hwcaps, cwd=cwd,
    )  # fmt: skip


def _search_folders(settings: LoaderSettings, sonames: set[str]) -> list[str]:
    folders = _environment_folders(settings.ld_library_path)
    for soname, paths in sorted((settings.cache or {}).items()):
        if soname in sonames or family_of(soname):
            folders += [posixpath.dirname(p) for p in paths]
    return folders + list(settings.conf_folders) + list(settings.defaults())


def _list_paths(facts: ElfFacts, real: str, settings: LoaderSettings) -> list[str]:
    """The folders a file's RPATH/RUNPATH name, expanded with its own origin."""
    found = []
    for value in (facts.rpath, facts.runpath):
        for entry in (value or "").split(":"):
            folder = expand(entry, posixpath.dirname(real), settings.tokens()) if entry else None
            if folder and folder.startswith("/"):
                found.append(posixpath.normpath(folder))
    return found


def _scan_tree(reading: _Reading, root: str) -> None:
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            if ".so" in name and not name.endswith((".py", ".pyc", ".pyi", ".h")):
                reading.read(f"{folder}/{name}")


def gather(
    trees: Iterable[str],
    settings: LoaderSettings,
    extra_files: Iterable[str] = (),
    python: PythonFacts | None = None,
    trim: bool = False,
) -> Scene:
    """The scene of this filesystem for a process with ``settings``: package ``trees`` read
    whole, the loader's folders listed, CUDA-family files read, RPATH/RUNPATH folders
    followed to a fixed point."""
    reading = _Reading()
    for tree in trees:
        _scan_tree(reading, tree)
    for path in extra_files:
        reading.read(path)
    _follow_folders(reading, settings)
    view = FileSystemView(_trimmed(reading.files) if trim else dict(reading.files),
                          dict(reading.links), dict(reading.listings))  # fmt: skip
    return Scene(view, settings, owners(view, python), python)


def _follow_folders(reading: _Reading, settings: LoaderSettings) -> None:
    """List every folder the loader may search and read the CUDA-family files there, until
    no recorded file names a new folder."""
    listed: set[str] = set()
    while True:
        facts = [(p, f) for p, f in reading.files.items() if isinstance(f, ElfFacts)]
        sonames = {n for _, f in facts for n in f.needed}
        folders = _search_folders(settings, sonames)
        folders += [d for p, f in facts for d in _list_paths(f, p, settings)]
        new = [d for d in dict.fromkeys(folders) if d not in listed]
        if not new:
            return
        for folder in new:
            listed.add(folder)
            real = reading.list_folder(folder)
            for name in reading.listings.get(real or "", ()):
                if family_of(name) is not None:
                    reading.read(f"{real}/{name}")


def _trimmed(files: Mapping[str, FileFacts]) -> dict[str, FileFacts]:
    def family(name: str) -> bool:
        return family_of(name) is not None

    return {
        path: facts.trimmed(family, family(facts.soname or path))
        if isinstance(facts, ElfFacts) else facts
        for path, facts in files.items()
    }  # fmt: skip


def owners(view: FileSystemView, python: PythonFacts | None) -> dict[str, Owner]:
    """Real path -> owner for every recorded file a wheel, a deb package or a toolkit owns."""
    found: dict[str, Owner] = {}
    for site in python.sites if python else ():
        found.update(_wheel_owners(site, view))
    found.update({p: o for p, o in _deb_owners(view).items() if p not in found})
    for path in view.files:
        toolkit = toolkit_owner(path)
        if path not in found and toolkit is not None:
            found[path] = toolkit
    return found


def _wheel_owners(site: str, view: FileSystemView) -> dict[str, Owner]:
    found = {}
    for info in sorted(Path(site).glob("*.dist-info")):
        header = _text(str(info / "METADATA")) or ""
        fields = dict(line.split(": ", 1) for line in header.split("\n\n", 1)[0].splitlines()
                      if ": " in line)  # fmt: skip
        name = fields.get("Name", "").lower().replace("_", "-")
        for line in (_text(str(info / "RECORD")) or "").splitlines():
            relpath = line.rsplit(",", 2)[0]
            real = posixpath.normpath(f"{site}/{relpath}")
            if ".so" in relpath and real in view.files:
                found[real] = Owner("wheel", name, fields.get("Version", ""))
    return found


def _deb_owners(view: FileSystemView, root: str = "/") -> dict[str, Owner]:
    """dpkg's file lists for the CUDA-family files recorded (paths in lists are as packaged:
    matched through the view's real paths of ``/lib`` and ``/usr/lib``)."""
    wanted = {p for p in view.files if family_of(p) is not None}
    if not wanted:
        return {}
    versions = _dpkg_versions(_text(f"{root}var/lib/dpkg/status") or "")
    found = {}
    for listing in sorted(Path(f"{root}var/lib/dpkg/info").glob("*.list")):
        package = listing.name[: -len(".list")].split(":")[0]
        for line in (_text(str(listing)) or "").splitlines():
            if ".so" not in line or family_of(line) is None:
                continue
            real = _real(view, line)
            if real in wanted and real not in found:
                found[real] = Owner("deb", package, versions.get(package, ""))
    return found


def _real(view: FileSystemView, path: str) -> str:
    try:
        return view.realpath(path) if path.startswith("/") else ""
    except ValueError:
        return ""


def _dpkg_versions(status: str) -> dict[str, str]:
    found = {}
    for block in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "Package" in fields:
            found[fields["Package"]] = fields.get("Version", "")
    return found


def unreadable_files(scene: Scene) -> list[tuple[str, str]]:
    """(path, why) of every recorded file the reader could not use."""
    return [(p, f.reason) for p, f in sorted(scene.view.files.items()) if isinstance(f, Unreadable)]
