"""What one layer changes, as facts that depend only on the layer's bytes.

PURE: standard library only. A :class:`LayerDelta` is what :mod:`audit.history.walk.layer`
reads from a layer's tar stream and what the cache stores by diff-id; the fold
(:mod:`audit.history.walk.fold`) applies deltas in order to know the image after each layer.

Paths are absolute POSIX paths inside the image (``/usr/lib/python3/dist-packages``),
normalised (no ``.``/``..`` components, no trailing ``/``); a layer whose member names leave
the image root is refused before a delta exists.

Facts (one per tracked member, the last one wins when a layer names a path twice):

- :class:`Meta`: a ``METADATA``/``PKG-INFO`` file, or a distutils ``.egg-info`` file: the
  header fields the in-image snapshot reads, and the sha256 of the whole file;
- :class:`Blob`: a small file read whole: ``INSTALLER``, ``direct_url.json``, ``requires.txt``,
  ``pyvenv.cfg``, ``patchlevel.h``, a site folder's ``*.pth``, ``/etc/passwd``, os-release,
  ``ld.so.conf`` files (``text``, bounded), or a file known by its digest only (``RECORD``,
  ``installed-files.txt``: ``text`` ""). A RECORD of an ``nvidia-*`` distribution also lists
  its shared libraries (``libraries``, paths relative to the site folder);
- :class:`Packages`: an OS package database (dpkg ``status``, a distroless ``status.d/*``
  file, apk ``installed``), parsed;
- :class:`LdCache`: ``/etc/ld.so.cache``: its entries (SONAME, path, flags) in the file's
  order, or why the bytes are no cache;
- :class:`Library`: a shared library of the CUDA family: size and what the ELF hook said;
- :class:`Binary`: another ELF file the loader model reads (a requester of its Python rules
  under ``torch``, ``cupy``, ``jax``, ``nvidia``..., or ``_ctypes``): size and the hook's facts;
- :class:`Link`: a symbolic link (every one: merged ``/usr`` and interpreters resolve
  through them) or a hard link to a tracked file;
- :class:`Marker`: a member whose existence matters: a site folder, a ``.dist-info`` /
  ``.egg-info`` folder, a Python standard library (``lib/pythonX.Y/os.py``), ``lib-dynload``,
  a Python executable (with the hook's ELF facts), any other shared object (a name the loader
  may find: ``libc.so.6``, an extension module).

Besides the facts: whiteouts (``.wh.NAME``: NAME and all below it are gone from lower layers),
opaque folders (``.wh..wh..opq``: the folder's lower contents are gone), and every path the
layer holds (folders and the rest apart), because any member hides what lower layers had at
its path (a file also hides what they had below it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from audit.history.system import OsPackage

FORMAT = "layer-audit.walk-delta/2"  # /2: loader facts (Binary, shared objects, cache flags)

# Marker kinds
SITE_DIR = "site-dir"
DIST_DIR = "dist-dir"
STDLIB = "stdlib"
DYNLOAD = "lib-dynload"
EXECUTABLE = "executable"
SHARED = "shared-object"
MARKERS = (SITE_DIR, DIST_DIR, STDLIB, DYNLOAD, EXECUTABLE, SHARED)


@dataclass(frozen=True, slots=True)
class Meta:
    """A metadata file's header (what pip reads of an installed distribution)."""

    path: str
    sha256: str
    name: str
    version: str
    requires: tuple[str, ...]
    requires_python: str


@dataclass(frozen=True, slots=True)
class Blob:
    """A small file: its digest, its text when it was read (bounded), its shared libraries."""

    path: str
    sha256: str
    text: str = ""
    libraries: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Packages:
    """An OS package database file, parsed (``manager``: dpkg or apk)."""

    path: str
    manager: str
    packages: tuple[OsPackage, ...]


@dataclass(frozen=True, slots=True)
class LdCache:
    """``/etc/ld.so.cache``: (SONAME, path, flags) in the file's order; ``invalid`` says why
    the bytes are no cache (the loader then ignores the file)."""

    path: str
    entries: tuple[tuple[str, str, int], ...]
    invalid: str = ""


@dataclass(frozen=True, slots=True)
class Library:
    """A CUDA-family shared library file; ``elf`` is the ELF hook's JSON-able answer."""

    path: str
    size: int
    elf: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Binary:
    """An ELF file the loader model reads that is not of the CUDA family (a requester)."""

    path: str
    size: int
    elf: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """A symbolic link (``target`` as stored) or a hard link (``target`` a path in the image)."""

    path: str
    target: str
    hard: bool = False


@dataclass(frozen=True, slots=True)
class Marker:
    """A member whose existence matters (``kind`` one of :data:`MARKERS`); ``elf``: the ELF
    hook's facts of a Python executable."""

    path: str
    kind: str
    elf: Mapping[str, Any] | None = None


Fact = Meta | Blob | Packages | LdCache | Library | Binary | Link | Marker


@dataclass(frozen=True)
class LayerDelta:
    """One layer's changes. ``size`` is the tar stream's length in bytes (uncompressed),
    ``files`` its member count; ``dirs``/``others`` every folder / non-folder path it holds."""

    facts: tuple[Fact, ...]
    whiteouts: tuple[str, ...] = ()
    opaque: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()
    others: tuple[str, ...] = ()
    size: int = 0
    files: int = 0
    notes: tuple[str, ...] = field(default=())  # what was read only in part (limits hit)


# ----------------------------------------------------------------------------- JSON


def _marker(path: str, item: dict[str, Any]) -> Marker:
    if item["kind"] not in MARKERS:
        raise ValueError(f"unknown marker {item['kind']!r}")
    return Marker(path, item["kind"], item.get("elf"))


# One writer and one reader per fact type; the JSON tag is the key.
_WRITERS: dict[type, tuple[str, Callable[[Any], dict[str, Any]]]] = {
    Meta: ("meta", lambda f: {"sha256": f.sha256, "name": f.name, "version": f.version,
                              "requires": list(f.requires), "requires_python": f.requires_python}),
    Blob: ("blob", lambda f: {"sha256": f.sha256, "text": f.text, "libraries": list(f.libraries)}),
    Packages: ("packages", lambda f: {"manager": f.manager, "packages": [
        [p.name, p.version, p.architecture, p.source] for p in f.packages]}),
    LdCache: ("ldcache", lambda f: {"entries": [list(e) for e in f.entries],
                                    "invalid": f.invalid}),
    Library: ("library", lambda f: {"size": f.size, "elf": f.elf}),
    Binary: ("binary", lambda f: {"size": f.size, "elf": f.elf}),
    Link: ("link", lambda f: {"target": f.target, "hard": f.hard}),
    Marker: ("marker", lambda f: {"kind": f.kind, **({"elf": f.elf} if f.elf else {})}),
}  # fmt: skip
_READERS: dict[str, Callable[[str, dict[str, Any]], Fact]] = {
    "meta": lambda p, i: Meta(p, i["sha256"], i["name"], i["version"], tuple(i["requires"]),
                              i["requires_python"]),
    "blob": lambda p, i: Blob(p, i["sha256"], i["text"], tuple(i["libraries"])),
    "packages": lambda p, i: Packages(p, i["manager"],
                                      tuple(OsPackage(*row) for row in i["packages"])),
    "ldcache": lambda p, i: LdCache(p, tuple((str(k), str(v), int(f)) for k, v, f in i["entries"]),
                                    str(i["invalid"])),
    "library": lambda p, i: Library(p, int(i["size"]), i["elf"]),
    "binary": lambda p, i: Binary(p, int(i["size"]), i["elf"]),
    "link": lambda p, i: Link(p, i["target"], bool(i["hard"])),
    "marker": _marker,
}  # fmt: skip


def _fact_json(fact: Fact) -> dict[str, Any]:
    tag, write = _WRITERS[type(fact)]
    return {"t": tag, "p": fact.path, **write(fact)}


def _fact(item: dict[str, Any]) -> Fact:
    reader = _READERS.get(item["t"])
    if reader is None:
        raise ValueError(f"unknown fact {item['t']!r}")
    return reader(item["p"], item)


def delta_to_json(delta: LayerDelta) -> dict[str, Any]:
    """The delta as JSON values (paths lists joined by newlines: a layer of 100,000 files
    loads as two strings, not 100,000)."""
    return {
        "facts": [_fact_json(fact) for fact in delta.facts],
        "whiteouts": list(delta.whiteouts),
        "opaque": list(delta.opaque),
        "dirs": "\n".join(delta.dirs),
        "others": "\n".join(delta.others),
        "size": delta.size,
        "files": delta.files,
        "notes": list(delta.notes),
    }


def _lines(text: str) -> tuple[str, ...]:
    return tuple(text.split("\n")) if text else ()


def delta_from_json(data: Any) -> LayerDelta:
    """:func:`delta_to_json` read back; ``ValueError`` (or ``KeyError``/``TypeError``) on any
    other shape: the cache treats such an entry as absent."""
    if not isinstance(data, dict):
        raise ValueError("not an object")
    return LayerDelta(
        facts=tuple(_fact(item) for item in data["facts"]),
        whiteouts=tuple(str(p) for p in data["whiteouts"]),
        opaque=tuple(str(p) for p in data["opaque"]),
        dirs=_lines(str(data["dirs"])),
        others=_lines(str(data["others"])),
        size=int(data["size"]),
        files=int(data["files"]),
        notes=tuple(str(n) for n in data["notes"]),
    )
