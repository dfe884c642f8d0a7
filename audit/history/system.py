"""Below Python: the OS packages and native libraries of an image, as a snapshot records them.

PURE CORE: standard library only, Python 3.9 syntax (vendored into images for the guard).

The in-image script (``audit/inimage/snapshot.py``) writes one optional ``system`` object per
environment (the image's, so the guard records it with its first interpreter only)::

    "system": {"os": {"manager": "dpkg"|"apk"|"rpm"|"", "distro": "debian-12", "note": str,
                      "packages": [{"name", "version", "architecture", "source"}, ...]},
               "native": [{"soname": "libnccl.so.2",
                           "copies": [{"path",
                                       "origin": "wheel"|"LD_LIBRARY_PATH"|"system"|"ld.so.conf",
                                       "owner": "nvidia-nccl-cu13 2.30.7" or "",
                                       "soname", "version": "2.29.7" or ""}, ...],
                           "loads": [{"by": loader path or "dlopen <soname>",
                                      "path": the copy the dynamic loader maps, "" if none}]}],
               "loader": {...}}  # optional: the facts audit/native resolves (its scene JSON)

A snapshot without it (recorded before this existed) reads as ``None``: nothing is compared.
OS packages are named ``deb:<name>`` (``apk:<name>``; ``deb:<name>:<arch>`` when one name is
installed for two architectures), which is also how a waiver names one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MANAGERS = ("dpkg", "apk", "rpm", "")
PREFIXES = {"dpkg": "deb", "apk": "apk", "rpm": "rpm", "": "os"}
_PACKAGE_FIELDS = ("name", "version", "architecture", "source")
_COPY_FIELDS = ("path", "origin", "owner", "soname", "version")


class SystemFormatError(ValueError):
    """A ``system`` object that does not have the documented shape (the caller says where)."""


@dataclass(frozen=True)
class OsPackage:
    """One installed OS package as its package database lists it."""

    name: str
    version: str
    architecture: str
    source: str


@dataclass(frozen=True)
class NativeCopy:
    """One file of a library family: where, who installed it (a wheel's ``name version``)."""

    path: str
    origin: str
    owner: str
    soname: str
    version: str

    @property
    def release(self) -> str:
        """The copy's version: from its file name, else its owner's (a wheel names its files
        by SONAME: ``nvidia-nccl-cu13 2.30.7``'s ``libnccl.so.2`` is 2.30.7); "" unknown."""
        return self.version or self.owner.partition(" ")[2]


@dataclass(frozen=True)
class NativeLoad:
    """``by`` (a package's library, or ``dlopen <soname>``) maps ``path`` ("" when none).

    Where the loader model resolved it (:mod:`audit.native.bridge`), also typed: ``requirer``
    the object (its path as opened) or step that asked, ``reason`` why the loader took that
    copy (``ld_library_path``, ``runpath``, ``cache``, ``preload``, ...: the values of
    :class:`audit.native.search.Reason`) and ``entry`` the search-list entry or folder that
    found it. A snapshot file holds ``by`` and ``path`` only."""

    by: str
    path: str
    requirer: str = ""
    reason: str = ""
    entry: str = ""


@dataclass(frozen=True)
class NativeLibrary:
    """Every copy of one SONAME on the image, and which copy each loader gets."""

    soname: str
    copies: tuple[NativeCopy, ...]
    loads: tuple[NativeLoad, ...]

    def copy_at(self, path: str) -> NativeCopy | None:
        return next((copy for copy in self.copies if copy.path == path), None)


@dataclass(frozen=True)
class System:
    """The image below Python: its package manager's packages and its native libraries."""

    manager: str
    note: str
    packages: tuple[OsPackage, ...]
    native: tuple[NativeLibrary, ...] = ()
    distro: str = ""  # ID-VERSION_ID of os-release: debian-12, ubuntu-24.04, alpine-3.20.3
    loader: str = ""  # the loader facts as canonical JSON text ("" not recorded)

    def keyed(self) -> dict[str, OsPackage]:
        """``deb:<name>`` (``deb:<name>:<arch>`` for a name installed twice) -> package."""
        prefix = PREFIXES.get(self.manager, "os")
        counts: dict[str, int] = {}
        for package in self.packages:
            counts[package.name] = counts.get(package.name, 0) + 1
        return {
            f"{prefix}:{p.name}" + (f":{p.architecture}" if counts[p.name] > 1 else ""): p
            for p in self.packages
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "os": {
                "manager": self.manager,
                "distro": self.distro,
                "note": self.note,
                "packages": [_fields(p, _PACKAGE_FIELDS) for p in self.packages],
            },
            "native": [_library_json(library) for library in self.native],
            **({"loader": json.loads(self.loader)} if self.loader else {}),
        }


def _fields(item: Any, names: tuple[str, ...]) -> dict[str, str]:
    return {name: getattr(item, name) for name in names}


def _library_json(library: NativeLibrary) -> dict[str, Any]:
    return {
        "soname": library.soname,
        "copies": [_fields(c, _COPY_FIELDS) for c in library.copies],
        "loads": [{"by": load.by, "path": load.path} for load in library.loads],
    }


def _object(value: Any, fields: tuple[str, ...], key: str) -> dict[str, str]:
    if not isinstance(value, dict) or set(value) != set(fields):
        raise SystemFormatError(f"{key}: expected an object with keys {sorted(fields)}")
    for name in fields:
        if not isinstance(value[name], str):
            raise SystemFormatError(f"{key}.{name}: expected a string")
    return value


def _list(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise SystemFormatError(f"{key}: expected a list")
    return value


def _parse_library(value: Any, key: str) -> NativeLibrary:
    item = _object_keys(value, ("soname", "copies", "loads"), key)
    if not isinstance(item["soname"], str):
        raise SystemFormatError(f"{key}.soname: expected a string")
    copies = tuple(
        NativeCopy(**_object(c, _COPY_FIELDS, f"{key}.copies[{i}]"))
        for i, c in enumerate(_list(item["copies"], f"{key}.copies"))
    )
    loads = tuple(
        NativeLoad(**_object(d, ("by", "path"), f"{key}.loads[{i}]"))
        for i, d in enumerate(_list(item["loads"], f"{key}.loads"))
    )
    return NativeLibrary(item["soname"], copies, loads)


def _object_keys(value: Any, fields: tuple[str, ...], key: str) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != set(fields):
        raise SystemFormatError(f"{key}: expected an object with keys {sorted(fields)}")
    return value


def parse_system(value: Any, key: str) -> System:
    """The ``system`` object of a snapshot environment; :class:`SystemFormatError` if malformed."""
    loader = value.get("loader") if isinstance(value, dict) else None
    if isinstance(value, dict) and "loader" in value:
        if not isinstance(loader, dict):
            raise SystemFormatError(f"{key}.loader: expected an object")
        value = {k: v for k, v in value.items() if k != "loader"}
    item = _object_keys(value, ("os", "native"), key)
    os_item = _object_keys(item["os"], ("manager", "distro", "note", "packages"), f"{key}.os")
    if os_item["manager"] not in MANAGERS:
        raise SystemFormatError(f"{key}.os.manager: expected one of {MANAGERS}")
    if not isinstance(os_item["note"], str) or not isinstance(os_item["distro"], str):
        raise SystemFormatError(f"{key}.os: note and distro must be strings")
    packages = tuple(
        OsPackage(**_object(p, _PACKAGE_FIELDS, f"{key}.os.packages[{i}]"))
        for i, p in enumerate(_list(os_item["packages"], f"{key}.os.packages"))
    )
    native = tuple(
        _parse_library(n, f"{key}.native[{i}]")
        for i, n in enumerate(_list(item["native"], f"{key}.native"))
    )
    text = json.dumps(loader, sort_keys=True, separators=(",", ":")) if loader else ""
    return System(os_item["manager"], os_item["note"], packages, native, os_item["distro"], text)
