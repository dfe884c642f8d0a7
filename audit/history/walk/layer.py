"""One layer's tar stream read into a :class:`~audit.history.walk.delta.LayerDelta`.

PURE: standard library, the delta model and the in-image snapshot's parsers (one code path for
metadata headers, package databases, os-release and the ld.so cache, so the walk and the guard
agree byte for byte). Bytes come in through :meth:`LayerScanner.feed`; nothing is written.

What is read of each member (the rest is skipped as it streams): see
:mod:`audit.history.walk.delta`. Bounds keep memory flat whatever the layer holds: a metadata
header is read up to its first blank line (at most :data:`HEADER_LIMIT`), a small text file up
to :data:`TEXT_LIMIT`, a package database up to :data:`DATABASE_LIMIT`; past a bound the file is
still hashed and the delta's ``notes`` say what was cut.

The ELF hook sees the files the loader model needs (:func:`elf_role`): CUDA-family libraries,
the requesters of the model's Python rules (shared objects under the package trees of
:data:`audit.native.pyrules.PACKAGE_TREES` in a site folder), Python executables and their
``_ctypes`` module. It runs in a helper thread fed the member's bytes; what it skips (a
library's code between its tables and its dynamic section) and whatever follows its answer
are dropped here, never copied to it: a 600 MB library costs what its tables cost.

TarMember names are normalised to absolute paths; a name or hard-link target that leaves the
image root (``../../etc/passwd``) raises :class:`LayerFormatError`. Symbolic link targets are
kept as written (an absolute target means the image's root, never the host's).
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from hashlib import sha256
from typing import IO, Any

from audit.history.system import OsPackage
from audit.history.walk.delta import (
    DIST_DIR,
    DYNLOAD,
    EXECUTABLE,
    SHARED,
    SITE_DIR,
    STDLIB,
    Binary,
    Blob,
    Fact,
    LayerDelta,
    LdCache,
    Library,
    Link,
    Marker,
    Meta,
    Packages,
)
from audit.history.walk.tarstream import (
    DIRECTORY,
    FILE,
    HARDLINK,
    SYMLINK,
    Sink,
    TarFormatError,
    TarMember,
    TarReader,
)
from audit.inimage.snapshot import RPM_DATABASES as _RPM_DATABASES
from audit.inimage.snapshot import _header_fields, apk_packages, dpkg_packages
from audit.native.catalog import NAME_PREFIXES
from audit.native.ldcache import LdCacheError, parse_cache
from audit.native.pyrules import PACKAGE_TREES

# The ELF hook: (path in the image, the member's bytes as a forward-only stream, its size) ->
# JSON-able facts, or None. Called while the member streams past (in a helper thread: the
# stream blocks until the bytes arrive); whatever it leaves unread is skipped.
ElfReader = Callable[[str, IO[bytes], int], Mapping[str, Any] | None]

# Shared libraries of the CUDA family: the catalog's names (file name prefixes; a name must
# also hold ".so").
CUDA_FAMILIES = NAME_PREFIXES
# What the ELF hook reads a member as (elf_role): a library of the families, a requester of
# the loader model's Python rules (or ``_ctypes``), a Python executable; else a shared object
# is only listed (its name, where the loader may find it).
FAMILY, REQUESTER, PYTHON = "family", "requester", "python"
_NOT_LIBRARIES = (".py", ".pyc", ".pyi", ".h", ".hpp", ".txt", ".json")
# What is read of a member (its role)
HEADER, TEXT, DIGEST, RECORD, DPKG, APK, LD_CACHE_ROLE = (
    "header", "text", "digest", "record", "dpkg", "apk", "ld.so.cache",
)  # fmt: skip
_DIST_INFO_FILES = {
    "METADATA": HEADER, "direct_url.json": TEXT, "INSTALLER": TEXT, "RECORD": RECORD,
    "installed-files.txt": DIGEST,
}  # fmt: skip
_EGG_INFO_FILES = {
    "PKG-INFO": HEADER, "requires.txt": TEXT, "INSTALLER": TEXT, "RECORD": RECORD,
    "installed-files.txt": DIGEST,
}  # fmt: skip


HEADER_LIMIT = 8 << 20
TEXT_LIMIT = 1 << 20
DATABASE_LIMIT = 64 << 20
_HEADER_CHUNK = 8192  # the in-image script's first read: a header is checked past it
DPKG_STATUS = "/var/lib/dpkg/status"
DPKG_STATUS_D = "/var/lib/dpkg/status.d"
APK_INSTALLED = "/lib/apk/db/installed"
OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")
LD_CACHE = "/etc/ld.so.cache"
LD_CONF = "/etc/ld.so.conf"
LD_CONF_D = "/etc/ld.so.conf.d"
USERS = "/etc/passwd"  # the user's home: where the user site is
RPM_DATABASES = tuple("/" + p for p in _RPM_DATABASES)
_SYSTEM_FILES = {
    DPKG_STATUS: DPKG, APK_INSTALLED: APK, LD_CACHE: LD_CACHE_ROLE, LD_CONF: TEXT, USERS: TEXT,
    **dict.fromkeys(OS_RELEASE, TEXT), **dict.fromkeys(RPM_DATABASES, DIGEST),
}  # fmt: skip
_DIST_SUFFIXES = (".dist-info", ".egg-info")


class LayerFormatError(ValueError):
    """The layer is not a tar archive, is cut short, or names paths outside the image."""


def normalise(name: str) -> str:
    """``./usr/bin/`` -> ``/usr/bin``; ``/`` for the root; :class:`LayerFormatError` when the
    name climbs out of the root."""
    if ".." not in name and "//" not in name and "./" not in name and not name.startswith("/"):
        return "/" + name.rstrip("/") if name not in ("", ".") else "/"
    parts: list[str] = []
    for part in name.split("/"):
        if part == "..":
            if not parts:
                raise LayerFormatError(f"member {name!r} leaves the image root")
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/" + "/".join(parts)


def _split(path: str) -> tuple[str, str]:
    cut = path.rfind("/")
    return (path[:cut] or "/"), path[cut + 1 :]


def _is_version_folder(name: str, prefix: str) -> bool:
    """``python3.11`` (or ``python3.13t``) for prefix ``python``."""
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    major, dot, minor = rest.partition(".")
    return bool(dot) and major.isdigit() and minor.rstrip("tdm").isdigit()


def is_python_executable(name: str) -> bool:
    """``python``, ``python3``, ``python3.11`` (not ``python3-config``, not ``python3.11m``)."""
    if not name.startswith("python"):
        return False
    major, dot, minor = name[6:].partition(".")
    return not name[6:] or (major.isdigit() and (not dot or minor.isdigit()))


# ----------------------------------------------------------------------------- sinks


class _Digest:
    """Hashes a member; keeps its first ``limit`` bytes when ``limit`` > 0."""

    def __init__(self, limit: int, done: Callable[[_Digest], None]) -> None:
        self.hasher = sha256()
        self.limit = limit
        self.kept = bytearray()
        self.cut = False
        self._done = done

    def write(self, data: memoryview) -> None:
        self.hasher.update(data)
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += data[:room]
            self.cut = self.cut or len(data) > room
        elif self.limit and len(data):
            self.cut = True

    def close(self) -> None:
        self._done(self)

    def digest(self) -> str:
        return "sha256:" + str(self.hasher.hexdigest())

    def text(self) -> str:
        return self.kept.decode("utf-8", "replace")


class _Header(_Digest):
    """A metadata file: hashed whole, kept until its header block is complete."""

    def write(self, data: memoryview) -> None:
        self.hasher.update(data)
        if self.limit and len(self.kept) < self.limit:
            self.kept += data[: self.limit - len(self.kept)]
            if len(self.kept) >= _HEADER_CHUNK and _header_fields(bytes(self.kept))[4]:
                self.limit = 0  # the header is complete: hash the rest only
            elif len(self.kept) >= self.limit:
                self.cut = True


class _Queued:
    """A forward-only stream over the pieces a feeder thread hands over, each with the offset
    it starts at (the ELF hook reads it). :meth:`skip` tells the feeder where reading resumes:
    the pieces that end before are dropped there, never copied or queued."""

    def __init__(self, chunks: queue.Queue[tuple[int, bytes] | None]) -> None:
        self._chunks = chunks
        self._start, self._data = 0, b""  # the current piece
        self._position = 0  # of the next byte to read
        self._ended = False
        self.skip_to = 0  # read by the feeder: pieces ending at or before it are not wanted

    def _next(self) -> bool:
        """The next piece; False at the end of the member."""
        if self._ended:
            return False
        piece = self._chunks.get()
        if piece is None:
            self._ended = True
            return False
        self._start, self._data = piece
        self._position = max(self._position, self._start)
        return True

    def read(self, size: int = -1) -> bytes:
        parts: list[bytes] = []
        wanted = size if size >= 0 else 1 << 62
        while wanted > 0:
            at = self._position - self._start
            if at >= len(self._data):
                if not self._next():
                    break
                continue
            piece = self._data[at : at + wanted]
            self._position += len(piece)
            wanted -= len(piece)
            parts.append(piece)
        return b"".join(parts)

    def skip(self, count: int) -> int:
        """Pass ``count`` bytes unread; how many there were (fewer at the end)."""
        target = self._position + count
        self.skip_to = target
        begun = self._position
        while self._position < target:
            end = self._start + len(self._data)
            if self._position < end:
                self._position = min(target, end)
            elif not self._next():
                break
        self._position = min(self._position, target)
        return self._position - begun

    def drain(self) -> None:
        while not self._ended:
            self._ended = self._chunks.get() is None


class _ElfFeed:
    """Runs the ELF hook on one member in a helper thread, fed piece by piece (at most 4
    waiting). Once the hook has answered, or while it skips, pieces are dropped unread."""

    def __init__(self, reader: ElfReader, path: str, size: int, done: Callable[[_ElfFeed], None]):
        self.path, self.size = path, size
        self.result: Mapping[str, Any] | None = None
        self.error = ""
        self._chunks: queue.Queue[tuple[int, bytes] | None] = queue.Queue(maxsize=4)
        self._stream = _Queued(self._chunks)
        self._fed = 0
        self._answered = False
        self._done = done
        self._thread = threading.Thread(target=self._run, args=(reader,), daemon=True)
        self._thread.start()

    def _run(self, reader: ElfReader) -> None:
        try:
            self.result = reader(self.path, self._stream, self.size)  # type: ignore[arg-type]
        except Exception as exc:  # a hook's failure is a note, never the walk's
            self.error = f"{type(exc).__name__}: {exc}"[:200]
        finally:
            self._answered = True
            self._stream.drain()

    def write(self, data: memoryview) -> None:
        start, self._fed = self._fed, self._fed + len(data)
        if not self._answered and self._fed > self._stream.skip_to:
            self._chunks.put((start, bytes(data)))

    def close(self) -> None:
        self._chunks.put(None)
        self._thread.join()
        self._done(self)


# ----------------------------------------------------------------------------- the scanner


class LayerScanner:
    """Feed a layer's (uncompressed) tar bytes; :meth:`finish` gives its delta."""

    def __init__(
        self, elf_reader: ElfReader | None = None, families: tuple[str, ...] = CUDA_FAMILIES
    ) -> None:
        self._reader = TarReader(self._member)
        self._elf_reader = elf_reader
        self._families = families
        self._facts: dict[str, Fact] = {}
        self._whiteouts: list[str] = []
        self._opaque: list[str] = []
        self._dirs: list[str] = []
        self._others: list[str] = []
        self._notes: list[str] = []
        self._size = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Consume the next piece of the layer's tar stream."""
        self._size += len(data)
        try:
            self._reader.feed(data)
        except TarFormatError as exc:
            raise LayerFormatError(str(exc)) from None

    def finish(self) -> LayerDelta:
        """The delta; :class:`LayerFormatError` when the stream was cut short."""
        try:
            self._reader.finish()
        except TarFormatError as exc:
            raise LayerFormatError(str(exc)) from None
        return LayerDelta(
            facts=tuple(self._facts.values()),
            whiteouts=tuple(self._whiteouts),
            opaque=tuple(self._opaque),
            dirs=tuple(self._dirs),
            others=tuple(self._others),
            size=self._size,
            files=len(self._others),
            notes=tuple(self._notes),
        )

    def _add(self, fact: Fact) -> None:
        self._facts.pop(fact.path, None)  # a path named twice: the last one counts
        self._facts[fact.path] = fact

    def _member(self, member: TarMember) -> Sink | None:
        path = normalise(member.name)
        parent, name = _split(path)
        if path == "/" or name.startswith(".wh."):
            if path != "/":
                self._whiteout(parent, name)
            return None
        if member.kind == DIRECTORY:
            self._dirs.append(path)
            self._folder(path, parent, name)
            return None
        self._others.append(path)
        self._facts.pop(path, None)  # replaced by this member, whatever it is
        return self._non_folder(member, path, parent, name)

    def _non_folder(self, member: TarMember, path: str, parent: str, name: str) -> Sink | None:
        if member.kind == SYMLINK:
            self._add(Link(path, member.linkname))
        elif member.kind == HARDLINK:
            self._hard_link(path, member.linkname)
        elif member.kind == FILE:
            return self._file(path, parent, name, member.size)
        return None

    def _whiteout(self, parent: str, name: str) -> None:
        if name == ".wh..wh..opq":
            self._opaque.append(parent)
        elif not name.startswith(".wh..wh."):  # other .wh..wh. names are aufs bookkeeping
            self._whiteouts.append((parent if parent != "/" else "") + "/" + name[4:])

    def _folder(self, path: str, parent: str, name: str) -> None:
        if name in ("site-packages", "dist-packages"):
            self._add(Marker(path, SITE_DIR))
        elif name.endswith(_DIST_SUFFIXES):
            self._add(Marker(path, DIST_DIR))
        elif name == "lib-dynload" and _is_version_folder(_split(parent)[1], "python"):
            self._add(Marker(path, DYNLOAD))

    def _hard_link(self, path: str, target: str) -> None:
        source = normalise(target)
        known = self._facts.get(source)
        if known is None:
            self._add(Link(path, source, hard=True))
        else:
            self._add(_moved(known, path))

    def _file(self, path: str, parent: str, name: str, size: int) -> Sink | None:
        folder = _split(parent)[1]
        if folder.endswith(_DIST_SUFFIXES):
            table = _DIST_INFO_FILES if folder.endswith(".dist-info") else _EGG_INFO_FILES
            return self._sink(table.get(name), path, folder.lower().startswith("nvidia"))
        if name.endswith(".egg-info"):  # a distutils .egg-info file: the PKG-INFO itself
            return self._sink(HEADER, path)
        marker = _marker(parent, folder, name)
        if marker == EXECUTABLE:
            return self._elf(path, size, PYTHON)
        if marker:
            self._add(Marker(path, marker))
            return None
        role = elf_role(parent, name, self._families)
        if role:
            return self._elf(path, size, role)
        system = _system_role(path, parent, folder, name)
        if system is None and name.endswith(".pth") and _below_site(parent) == "":
            system = TEXT  # a path configuration file: site.py adds the folders it names
        if system is None and is_shared_name(name):
            self._add(Marker(path, SHARED))
        return self._sink(system, path)

    def _sink(self, role: str | None, path: str, nvidia: bool = False) -> Sink | None:
        """The sink that reads what ``role`` needs of the member at ``path``."""
        if role == HEADER:
            return _Header(HEADER_LIMIT, self._meta_done(path))
        if role == TEXT:
            return _Digest(TEXT_LIMIT, self._blob_done(path))
        if role == DIGEST:
            return _Digest(0, self._blob_done(path))
        if role == RECORD:
            return _Digest(TEXT_LIMIT * 16 if nvidia else 0, self._record_done(path, nvidia))
        if role in (DPKG, APK):
            return _Digest(DATABASE_LIMIT, self._packages_done(path, role))
        return _Digest(DATABASE_LIMIT, self._ld_cache_done(path)) if role == LD_CACHE_ROLE else None

    def _elf(self, path: str, size: int, role: str) -> Sink | None:
        """The fact of an ELF file the loader model reads, with the hook's facts when a hook
        is set (read as the member streams past)."""
        if self._elf_reader is None:
            self._add(_elf_fact(role, path, size, None))
            return None

        def done(feed: _ElfFeed) -> None:
            if feed.error:
                self._notes.append(f"{path}: the ELF reader failed ({feed.error})")
            self._add(_elf_fact(role, path, size, _json_value(feed.result, path, self._notes)))

        return _ElfFeed(self._elf_reader, path, size, done)

    # ------------------------------------------------------------------ what each sink leaves

    def _cut(self, sink: _Digest, path: str) -> None:
        if sink.cut:
            self._notes.append(f"{path}: read only its first {sink.limit} bytes")

    def _meta_done(self, path: str) -> Callable[[_Digest], None]:
        def done(sink: _Digest) -> None:
            self._cut(sink, path)
            name, version, requires, python, _ = _header_fields(bytes(sink.kept))
            self._add(Meta(path, sink.digest(), name, version, tuple(requires), python))

        return done

    def _blob_done(self, path: str) -> Callable[[_Digest], None]:
        def done(sink: _Digest) -> None:
            self._cut(sink, path)
            self._add(Blob(path, sink.digest(), sink.text()))

        return done

    def _record_done(self, path: str, libraries: bool) -> Callable[[_Digest], None]:
        def done(sink: _Digest) -> None:
            self._cut(sink, path)
            found = _record_libraries(sink.text(), self._families) if libraries else ()
            self._add(Blob(path, sink.digest(), "", found))

        return done

    def _packages_done(self, path: str, manager: str) -> Callable[[_Digest], None]:
        def done(sink: _Digest) -> None:
            self._cut(sink, path)
            reader = dpkg_packages if manager == "dpkg" else apk_packages
            rows = tuple(
                OsPackage(p["name"], p["version"], p["architecture"], p["source"])
                for p in reader(sink.text())
            )
            self._add(Packages(path, manager, rows))

        return done

    def _ld_cache_done(self, path: str) -> Callable[[_Digest], None]:
        def done(sink: _Digest) -> None:
            self._cut(sink, path)
            try:
                entries = parse_cache(bytes(sink.kept))
            except LdCacheError as exc:
                self._notes.append(f"{path}: not read as an ld.so cache ({exc})")
                self._add(LdCache(path, (), str(exc)))
                return
            self._add(LdCache(path, tuple((e.soname, e.path, e.flags) for e in entries)))

        return done


def elf_role(parent: str, name: str, families: tuple[str, ...]) -> str:
    """What the ELF hook reads the file ``parent/name`` as ("": not at all): a library of
    ``families``; a requester: a shared object in a site folder's package tree the loader
    model's Python rules read, a package's extension or library (``<site>/*.so``,
    ``<site>/<package>/*.so``, ``<site>/<package>/lib/*.so*``: it may need a CUDA library),
    or the ``_ctypes`` module every ``ctypes.CDLL`` calls from."""
    if ".so" not in name:
        return ""
    if name.startswith(families):
        return FAMILY
    if name.endswith(_NOT_LIBRARIES) or not is_shared_name(name):
        return ""
    if name.startswith("_ctypes.") and parent.endswith("/lib-dynload"):
        return REQUESTER
    below = _below_site(parent)
    if below is None:
        return ""
    parts = below.split("/") if below else []
    in_tree = bool(parts) and parts[0] in PACKAGE_TREES
    extension = len(parts) < 2 or (len(parts) == 2 and parts[1] == "lib")
    return REQUESTER if in_tree or extension else ""


def is_shared_name(name: str) -> bool:
    """``libfoo.so``, ``libfoo.so.1.2``, ``_C.cpython-311-x86_64-linux-gnu.so``: a name the
    loader may be asked for."""
    return name.endswith(".so") or ".so." in name


def _below_site(folder: str) -> str | None:
    """The part of ``folder`` below a site folder ("" for the site itself; None outside)."""
    for site in ("/site-packages", "/dist-packages"):
        at = (folder + "/").find(site + "/")
        if at >= 0:
            return folder[at + len(site) + 1 :]
    return None


def _elf_fact(role: str, path: str, size: int, elf: Mapping[str, Any] | None) -> Fact:
    if role == FAMILY:
        return Library(path, size, elf)
    if role == PYTHON:
        return Marker(path, EXECUTABLE, elf)
    return Binary(path, size, elf)


def _system_role(path: str, parent: str, folder: str, name: str) -> str | None:
    """What is read of a file below Python (package databases, os-release, the loader's
    configuration, ``pyvenv.cfg`` and ``patchlevel.h`` for Python's own version)."""
    role = _SYSTEM_FILES.get(path)
    if role is None and (
        name == "pyvenv.cfg"
        or (name == "patchlevel.h" and _is_version_folder(folder, "python"))
        or (parent == LD_CONF_D and name.endswith(".conf"))
    ):
        role = TEXT
    if role is None and parent == DPKG_STATUS_D and not name.endswith(".md5sums"):
        role = DPKG
    return role


def _marker(parent: str, folder: str, name: str) -> str:
    """The marker kind of a file whose existence matters: a Python executable in a ``bin``
    folder, a standard library's ``os.py``; "" for any other file."""
    if name.startswith("python") and folder == "bin" and is_python_executable(name):
        return EXECUTABLE
    if name == "os.py" and _is_version_folder(folder, "python") and _in_lib(parent):
        return STDLIB
    return ""


def _in_lib(folder: str) -> bool:
    """``/usr/lib/python3.11`` (or ``lib64``): a standard library's folder."""
    return _split(_split(folder)[0])[1] in ("lib", "lib64")


def _record_libraries(text: str, families: tuple[str, ...]) -> tuple[str, ...]:
    """RECORD lines naming a library of ``families``: their paths (relative to the site)."""
    found = []
    for line in text.splitlines():
        relpath = line.rsplit(",", 2)[0]
        name = relpath.rsplit("/", 1)[-1]
        if ".so" in name and name.startswith(families):
            found.append(relpath)
    return tuple(found)


def _moved(fact: Fact, path: str) -> Fact:
    """``fact`` of a file hard-linked at ``path`` too (same bytes, another name)."""
    return replace(fact, path=path)


def _json_value(
    value: Mapping[str, Any] | None, path: str, notes: list[str]
) -> Mapping[str, Any] | None:
    """The hook's answer as plain JSON data (it is cached); a note and None when it is not."""
    if value is None:
        return None
    try:
        plain = json.loads(json.dumps(value, sort_keys=True))
    except (TypeError, ValueError) as exc:
        notes.append(f"{path}: the ELF reader's answer is not JSON data ({exc})")
        return None
    return plain if isinstance(plain, dict) else None
