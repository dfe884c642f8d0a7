"""``/etc/ld.so.cache`` and ``/etc/ld.so.conf``, read from their bytes and texts.

PURE: standard library only, Python 3.9 syntax.

The cache is what ``ldconfig`` wrote: the loader consults it after LD_LIBRARY_PATH and RUNPATH,
and takes the FIRST entry for a name whose flags fit the process (x86-64: libc6 + x86-64
``0x0303``; aarch64: libc6 + AArch64 ``0x0a03``). Two formats exist: the old
``ld.so-1.7.0`` (12-byte entries) and the new ``glibc-ld.so.cache1.1`` (24-byte entries), which
older ``ldconfig`` appends after an old table and glibc 2.32+ writes alone. String offsets of the
new format count from the start of its header. :func:`parse_cache` keeps the file's order.

``ld.so.conf`` is read by ``ldconfig`` only (never by the loader): one folder a line, ``#``
comments, ``include PATTERN`` (a glob, relative patterns from the including file's folder) and
``hwcap`` lines (ignored by current glibc). :func:`conf_folders` follows includes, once each.
"""

from __future__ import annotations

import fnmatch
import posixpath
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
_NEW_HEADER = 48  # magic+version 20, nlibs 4, len_strings 4, flags 1+3, extension 4, unused 12
_NEW_ENTRY = 24  # int32 flags, uint32 key, uint32 value, uint32 osversion, uint64 hwcap
_OLD_ENTRY = 12  # int32 flags, uint32 key, uint32 value
# FLAG_ELF_LIBC6 (0x0003) combined with the architecture's "required" bits (dl-cache.h).
CACHE_FLAGS = {"x86_64": 0x0303, "aarch64": 0x0A03, "i386": 0x0003, "arm": 0x0003}


class LdCacheError(ValueError):
    """Bytes that are not an ld.so cache (the text says what is wrong)."""


@dataclass(frozen=True)
class CacheEntry:
    """One line of ``ldconfig -p``: a name, the path it maps to, and the entry's flags."""

    soname: str
    path: str
    flags: int

    def fits(self, machine: str) -> bool:
        return self.flags == CACHE_FLAGS.get(machine, -1)


def _cstring(data: bytes, offset: int) -> str:
    if not 0 <= offset < len(data):
        raise LdCacheError(f"a string offset ({offset}) points outside the file")
    end = data.find(b"\0", offset)
    return data[offset : end if end >= 0 else len(data)].decode("utf-8", "replace")


def _new_entries(data: bytes, start: int) -> tuple[CacheEntry, ...]:
    if len(data) < start + _NEW_HEADER:
        raise LdCacheError("the new-format header is cut short")
    order = ">" if data[start + 28] == 3 else "<"  # header flags: 2 little, 3 big endian
    (count,) = struct.unpack_from(order + "I", data, start + 20)
    if start + _NEW_HEADER + count * _NEW_ENTRY > len(data):
        raise LdCacheError(f"{count} entries do not fit in {len(data)} bytes")
    found = []
    for index in range(count):
        at = start + _NEW_HEADER + index * _NEW_ENTRY
        flags, key, value = struct.unpack_from(order + "iII", data, at)
        found.append(CacheEntry(_cstring(data, start + key), _cstring(data, start + value), flags))
    return tuple(found)


def _old_entries(data: bytes) -> tuple[CacheEntry, ...]:
    header = len(OLD_MAGIC) + 1 + 4  # magic, padding to 4, nlibs
    if len(data) < header:
        raise LdCacheError("the old-format header is cut short")
    (count,) = struct.unpack_from("<I", data, 12)
    strings = header + count * _OLD_ENTRY
    if strings > len(data):
        raise LdCacheError(f"{count} entries do not fit in {len(data)} bytes")
    found = []
    for index in range(count):
        flags, key, value = struct.unpack_from("<iII", data, header + index * _OLD_ENTRY)
        found.append(CacheEntry(_cstring(data, strings + key), _cstring(data, strings + value),
                                flags))  # fmt: skip
    return tuple(found)


def parse_cache(data: bytes) -> tuple[CacheEntry, ...]:
    """Every entry of a cache file in its order (the new table where there is one)."""
    start = data.find(NEW_MAGIC)
    if start >= 0 and (start == 0 or data.startswith(OLD_MAGIC)):
        return _new_entries(data, start)
    if data.startswith(OLD_MAGIC):
        return _old_entries(data)
    raise LdCacheError("no ld.so cache magic (neither glibc-ld.so.cache1.1 nor ld.so-1.7.0)")


def cache_map(entries: tuple[CacheEntry, ...], machine: str) -> dict[str, tuple[str, ...]]:
    """soname -> paths in cache order, for the entries that fit ``machine`` (the loader takes
    the first that exists)."""
    found: dict[str, list[str]] = {}
    for entry in entries:
        if entry.fits(machine):
            found.setdefault(entry.soname, []).append(entry.path)
    return {name: tuple(paths) for name, paths in found.items()}


def conf_folders(
    read: Callable[[str], str | None],
    listdir: Callable[[str], list[str]],
    path: str = "/etc/ld.so.conf",
) -> tuple[str, ...]:
    """The folders ``ldconfig`` would scan from ``path`` and its includes, in order, each once.

    ``read`` gives a file's text (None: absent); ``listdir`` a folder's names (for include
    globs). An include cycle is followed once.
    """
    found: list[str] = []
    _conf_file(path, read, listdir, found, set())
    return tuple(found)


def _conf_file(
    path: str,
    read: Callable[[str], str | None],
    listdir: Callable[[str], list[str]],
    found: list[str],
    seen: set[str],
) -> None:
    if path in seen:
        return
    seen.add(path)
    for raw in (read(path) or "").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("include") and line[7:8] in (" ", "\t"):
            for pattern in line[8:].split():
                for included in _glob(posixpath.join(posixpath.dirname(path), pattern), listdir):
                    _conf_file(included, read, listdir, found, seen)
        elif line.startswith("/") and not line.startswith("hwcap"):
            folder = posixpath.normpath(line.split("=", 1)[0].rstrip())
            if folder not in found:
                found.append(folder)


def _glob(pattern: str, listdir: Callable[[str], list[str]]) -> list[str]:
    """The files matching a glob whose wildcards are in the last component (ld.so.conf's
    ``include /etc/ld.so.conf.d/*.conf``), sorted as glob(3) sorts them."""
    folder, name = posixpath.split(pattern)
    if not any(c in name for c in "*?["):
        return [pattern]
    return [posixpath.join(folder, n) for n in sorted(listdir(folder)) if fnmatch.fnmatch(n, name)]
