"""The facts of one ELF shared object that decide where and whether it loads.

PURE: standard library only, Python 3.9 syntax (vendored into images with the guard).

Invariants: every tuple is in file order (``needed``) or sorted (version names, symbols), so two
reads of the same file give equal objects and byte-identical JSON. ``rpath``/``runpath`` are
``None`` when the tag is absent and the raw string (``$ORIGIN`` unexpanded) when present: an
empty DT_RUNPATH still switches DT_RPATH off. Symbols are the dynamic ones only (what the loader
binds), never ``.symtab``.

JSON (``ElfFacts.to_json``)::

    {"machine": "x86_64", "bits": 64, "soname": "libcusparse.so.12",
     "needed": ["libnvJitLink.so.13", ...], "rpath": null, "runpath": "$ORIGIN",
     "imports": [{"file": "libnvJitLink.so.13",
                  "versions": [{"name": "libnvJitLink.so.13", "weak": false,
                                "symbols": ["__nvJitLinkAddData_13_0", ...]}]}],
     "defines": [{"name": "libcusparse.so.12", "symbols": ["cusparseCreate", ...]}],
     "nodeflib": false}

A file that cannot be read as ELF is an :class:`Unreadable`
(``{"unreadable": "<why>", "invalid": true}``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

# e_machine values of the architectures the loader model knows (ELF gABI numbers).
MACHINES = {3: "i386", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv64", 21: "ppc64"}
UNVERSIONED = ""  # the "version" of a global symbol defined without one (.gnu.version index 1)


class ElfFormatError(ValueError):
    """JSON that does not have the shape :meth:`ElfFacts.to_json` writes (the text says where)."""


@dataclass(frozen=True)
class NeededVersion:
    """One version an object needs from one DT_NEEDED file (an ``Elf_Vernaux``), with the
    undefined, non-weak dynamic symbols bound to it through ``.gnu.version``."""

    name: str
    weak: bool = False
    symbols: tuple[str, ...] = ()


@dataclass(frozen=True)
class VersionNeed:
    """The versions an object needs from the file ``file`` (an ``Elf_Verneed``'s ``vn_file``,
    which is a DT_NEEDED name)."""

    file: str
    versions: tuple[NeededVersion, ...]


@dataclass(frozen=True)
class VersionDefinition:
    """The dynamic symbols an object defines at version ``name`` (``UNVERSIONED``: defined
    global without a version, which a versioned, non-hidden reference also accepts)."""

    name: str
    symbols: tuple[str, ...]


@dataclass(frozen=True)
class Unreadable:
    """A file that is there but whose facts are not known, and why. ``invalid``: the loader
    refuses it too (no ELF magic, cut short: "invalid ELF header"); otherwise only this reader
    could not read it (over its byte cap, no permission) and the loader may well map it."""

    reason: str
    invalid: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"unreadable": self.reason, "invalid": self.invalid}


@dataclass(frozen=True)
class ElfFacts:
    """What the dynamic loader reads of one ELF file before and while mapping it."""

    machine: str
    bits: int
    soname: str = ""
    needed: tuple[str, ...] = ()
    rpath: str | None = None
    runpath: str | None = None
    imports: tuple[VersionNeed, ...] = ()
    defines: tuple[VersionDefinition, ...] = ()
    nodeflib: bool = False  # DF_1_NODEFLIB: neither the cache nor the default folders

    @property
    def has_versions(self) -> bool:
        """Whether the file defines versions at all (without, ld.so accepts any version)."""
        return bool(self.defines)

    def version_names(self) -> set[str]:
        return {d.name for d in self.defines if d.name != UNVERSIONED}

    def defines_symbol(self, symbol: str, version: str) -> bool:
        """Whether a versioned reference ``symbol@version`` binds here: defined at that
        version, or defined global and unversioned (glibc's ``check_match``)."""
        return any(d.name in (version, UNVERSIONED) and symbol in d.symbols for d in self.defines)

    def need(self, file: str) -> VersionNeed | None:
        return next((n for n in self.imports if n.file == file), None)

    def trimmed(self, keep_imports: Callable[[str], bool], keep_defines: bool) -> ElfFacts:
        """These facts with only the imports from files ``keep_imports`` accepts, and without
        defined symbols unless ``keep_defines`` (version names stay): smaller recordings."""
        imports = tuple(n for n in self.imports if keep_imports(n.file))
        defines = (
            self.defines
            if keep_defines
            else tuple(VersionDefinition(d.name, ()) for d in self.defines)
        )
        return replace(self, imports=imports, defines=defines)

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "bits": self.bits,
            "soname": self.soname,
            "needed": list(self.needed),
            "rpath": self.rpath,
            "runpath": self.runpath,
            "imports": [_need_json(n) for n in self.imports],
            "defines": [{"name": d.name, "symbols": list(d.symbols)} for d in self.defines],
            "nodeflib": self.nodeflib,
        }


def _need_json(need: VersionNeed) -> dict[str, Any]:
    versions = [{"name": v.name, "weak": v.weak, "symbols": list(v.symbols)} for v in need.versions]
    return {"file": need.file, "versions": versions}


def sorted_unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(items)))


def _get(data: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(data, dict) or key not in data:
        raise ElfFormatError(f"{where}: missing {key!r}")
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ElfFormatError(f"{where}.{key}: expected {kind.__name__}")
    return value


def _optional_str(data: Any, key: str, where: str) -> str | None:
    return (
        None
        if isinstance(data, dict) and data.get(key, "") is None
        else _get(data, key, str, where)
    )


def _strings(data: Any, key: str, where: str) -> tuple[str, ...]:
    values = _get(data, key, list, where)
    if not all(isinstance(v, str) for v in values):
        raise ElfFormatError(f"{where}.{key}: expected a list of strings")
    return tuple(values)


def _need_from_json(data: Any, where: str) -> VersionNeed:
    versions = tuple(
        NeededVersion(
            _get(v, "name", str, f"{where}.versions[{i}]"),
            _get(v, "weak", bool, f"{where}.versions[{i}]"),
            _strings(v, "symbols", f"{where}.versions[{i}]"),
        )
        for i, v in enumerate(_get(data, "versions", list, where))
    )
    return VersionNeed(_get(data, "file", str, where), versions)


def facts_from_json(data: Any, where: str = "facts") -> FileFacts:
    """:meth:`ElfFacts.to_json` or :meth:`Unreadable.to_json` back; :class:`ElfFormatError`
    naming ``where`` when the shape is wrong."""
    if isinstance(data, dict) and set(data) == {"unreadable", "invalid"}:
        return Unreadable(_get(data, "unreadable", str, where), _get(data, "invalid", bool, where))
    imports = tuple(
        _need_from_json(n, f"{where}.imports[{i}]")
        for i, n in enumerate(_get(data, "imports", list, where))
    )
    defines = tuple(
        VersionDefinition(
            _get(d, "name", str, f"{where}.defines[{i}]"),
            _strings(d, "symbols", f"{where}.defines[{i}]"),
        )
        for i, d in enumerate(_get(data, "defines", list, where))
    )
    return ElfFacts(
        machine=_get(data, "machine", str, where),
        bits=_get(data, "bits", int, where),
        soname=_get(data, "soname", str, where),
        needed=_strings(data, "needed", where),
        rpath=_optional_str(data, "rpath", where),
        runpath=_optional_str(data, "runpath", where),
        imports=imports,
        defines=defines,
        nodeflib=_get(data, "nodeflib", bool, where),
    )


if TYPE_CHECKING:
    FileFacts = ElfFacts | Unreadable  # what a reader makes of one file
