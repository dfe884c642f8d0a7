"""One search of glibc's dynamic loader: where a name without a slash is found, and why.

PURE: standard library only, Python 3.9 syntax.

The order, as ``_dl_map_object`` in glibc's ``elf/dl-load.c`` runs it (x86_64 and aarch64 alike):

1. **DT_RPATH**, only when the requesting object has no DT_RUNPATH: the requester's, then that of
   the object that loaded the requester, and so on up the loading chain (RPATH is inherited),
   then the executable's. An object that has DT_RUNPATH contributes no DT_RPATH of its own (the
   loader drops DT_RPATH when both are present).
2. **LD_LIBRARY_PATH** of the process.
3. **DT_RUNPATH** of the requesting object only: never inherited by its dependencies, and a
   ``dlopen`` uses the RUNPATH of the object that called it.
4. **/etc/ld.so.cache**: the first entry for the name whose flags fit the process; if that file
   cannot be opened, the search goes on with step 5. Without a cache file, :func:`search` uses
   the folders ``ld.so.conf`` names (what ``ldconfig`` would write; reason ``ld.so.conf``).
5. **The default folders** (``ld.so --help`` lists them: Debian and Ubuntu put the multiarch
   folders first). An object with ``DF_1_NODEFLIB`` skips 4 and 5.

In every folder the ``glibc-hwcaps`` subfolders the settings name come first. ``$ORIGIN`` is
the folder of the path the object was OPENED as (not its real path), ``$LIB`` and
``$PLATFORM`` come from the settings; an empty list entry is the working folder. A candidate of
another ELF class or machine is skipped silently; a file that is no ELF file stops the search
with an error ("invalid ELF header"), as the loader does. Legacy hwcap folders (``tls``,
``haswell``; gone since glibc 2.37), ``LD_PRELOAD`` and ``/etc/ld.so.preload`` are not modelled.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from audit.native.elf import ElfFacts, Unreadable

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from audit.native.fsview import FileSystemView, Found

TRIPLETS = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}


class Reason(str, Enum):  # noqa: UP042 (StrEnum is 3.11; this module runs on 3.9)
    """Why a file is the one mapped for a name."""

    RPATH = "rpath"
    LD_LIBRARY_PATH = "ld_library_path"
    RUNPATH = "runpath"
    CACHE = "cache"
    LD_SO_CONF = "ld.so.conf"
    DEFAULT = "default"
    PATH = "path"  # a name with a slash (an extension module imported by path)
    PRELOAD = "preload"  # a Python package loads it by path itself (ctypes.CDLL)
    EXEC = "exec"  # the program the process runs
    ALREADY_MAPPED = "already-mapped"


def default_folders(machine: str, multiarch: bool = True) -> tuple[str, ...]:
    """The loader's system search path: Debian/Ubuntu glibc (``multiarch``) searches
    ``/lib/<triplet>``, ``/usr/lib/<triplet>``, ``/lib``, ``/usr/lib``; upstream 64-bit glibc
    ``/lib64``, ``/usr/lib64``."""
    triplet = TRIPLETS.get(machine)
    if multiarch and triplet:
        return (f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib", "/usr/lib")
    return ("/lib64", "/usr/lib64") if machine in TRIPLETS else ("/lib", "/usr/lib")


@dataclass(frozen=True)
class LoaderSettings:
    """What the loader of one process reads besides the objects: the environment, the cache,
    the system folders. ``cache`` is None when the image has no ``/etc/ld.so.cache``."""

    machine: str = "x86_64"
    bits: int = 64
    ld_library_path: str | None = None
    cache: Mapping[str, tuple[str, ...]] | None = None
    conf_folders: tuple[str, ...] = ()
    system_folders: tuple[str, ...] = ()  # empty: default_folders(machine)
    hwcaps: tuple[str, ...] = ()  # e.g. ("x86-64-v3", "x86-64-v2"), best first
    cwd: str | None = None
    lib: str = ""  # $LIB; empty: the multiarch folder of the machine
    platform: str = ""  # $PLATFORM; empty: the machine
    multiarch: bool = True

    def defaults(self) -> tuple[str, ...]:
        return self.system_folders or default_folders(self.machine, self.multiarch)

    def tokens(self) -> dict[str, str]:
        lib = self.lib or ("lib/" + TRIPLETS.get(self.machine, "") if self.multiarch else "lib64")
        return {"LIB": lib, "PLATFORM": self.platform or self.machine}


@dataclass(frozen=True)
class Requester:
    """An object asking for a name: the path it was opened as (its ``$ORIGIN``) and its facts."""

    opened_as: str
    facts: ElfFacts | None


@dataclass(frozen=True)
class Hit:
    """Where a name was found: the file, the path the loader opened, and why (the list entry
    as written, e.g. ``$ORIGIN/../lib``, and whose list it was)."""

    found: Found
    opened_as: str
    reason: Reason
    entry: str = ""
    list_of: str = ""


@dataclass(frozen=True)
class Miss:
    """A name the search did not map: why, and every folder it tried in order."""

    why: str
    tried: tuple[str, ...] = field(default=())


def expand(entry: str, origin: str | None, tokens: Mapping[str, str]) -> str | None:
    """A path list entry with ``$ORIGIN``/``${ORIGIN}``, ``$LIB``, ``$PLATFORM`` replaced; None
    when it names ``$ORIGIN`` and the origin is unknown (the loader drops such an entry)."""
    values = dict(tokens, ORIGIN=origin or "")
    out, at = [], 0
    while at < len(entry):
        char = entry[at]
        name, end = _token_at(entry, at) if char == "$" else ("", at)
        if not name:
            out.append(char)
            at += 1
            continue
        if name == "ORIGIN" and origin is None:
            return None
        out.append(values[name])
        at = end
    return "".join(out)


def _token_at(text: str, at: int) -> tuple[str, int]:
    """(token name, end) of a dynamic string token starting at ``text[at] == "$"``."""
    for name in ("ORIGIN", "PLATFORM", "LIB"):
        braced = "${" + name + "}"
        if text.startswith(braced, at):
            return name, at + len(braced)
        plain = "$" + name
        end = at + len(plain)
        if text.startswith(plain, at) and not (end < len(text) and _word(text[end])):
            return name, end
    return "", at


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _folders(value: str, origin: str | None, settings: LoaderSettings) -> Iterator[tuple[str, str]]:
    """(folder, entry as written) of a colon-separated list; an empty entry is the working
    folder (skipped when unknown)."""
    for entry in value.split(":"):
        folder = expand(entry, origin, settings.tokens()) if entry else settings.cwd
        if folder is not None and folder != "":
            yield posixpath.normpath(posixpath.join(settings.cwd or "/", folder)), entry


class _Search:
    """The state of one search: folders already tried (the loader tries each once)."""

    def __init__(self, name: str, view: FileSystemView, settings: LoaderSettings) -> None:
        self.name, self.view, self.settings = name, view, settings
        self.tried: list[str] = []

    def in_folder(self, folder: str) -> tuple[Found, str] | str | None:
        """(file, path opened) in ``folder`` or its hwcaps subfolders; a text when the file
        there stops the search (no ELF file); None when nothing fits."""
        subfolders = [f"{folder}/glibc-hwcaps/{h}" for h in self.settings.hwcaps]
        for candidate in [*subfolders, folder]:
            if candidate in self.tried:
                continue
            self.tried.append(candidate)
            path = f"{candidate}/{self.name}"
            found = self.view.lookup(path)
            verdict = check(found, self.settings) if found else "absent"
            if verdict == "":
                assert found is not None
                return found, path
            if verdict not in ("absent", "other"):
                return verdict
        return None


def check(found: Found, settings: LoaderSettings) -> str:
    """ "" when the loader maps ``found``; "other" when it skips it (another ELF class or
    machine); otherwise why it refuses it (and stops)."""
    facts = found.facts
    if isinstance(facts, Unreadable):
        return "" if not facts.invalid else f"{found.path}: {facts.reason}"
    if facts is None or (facts.machine == settings.machine and facts.bits == settings.bits):
        return ""
    return "other"


def search(
    name: str,
    chain: Sequence[Requester],
    main: Requester | None,
    view: FileSystemView,
    settings: LoaderSettings,
) -> Hit | Miss:
    """Where ``name`` (no slash) is found for the requester ``chain[0]``, whose loaders follow
    in ``chain`` (nearest first); ``main`` is the executable. An empty chain is a request from
    the executable itself."""
    state = _Search(name, view, settings)
    requester = chain[0] if chain else main
    runpath = requester.facts.runpath if requester and requester.facts else None
    steps = _rpath_steps(chain, main, settings) if runpath is None else []
    steps += [(f, e, Reason.LD_LIBRARY_PATH, "") for f, e in
              _folders(settings.ld_library_path or "", None, settings)]  # fmt: skip
    if runpath is not None and requester is not None:
        origin = posixpath.dirname(requester.opened_as)
        steps += [(f, e, Reason.RUNPATH, requester.opened_as)
                  for f, e in _folders(runpath, origin, settings)]  # fmt: skip
    for folder, entry, reason, owner in steps:
        outcome = state.in_folder(folder)
        if isinstance(outcome, str):
            return Miss(outcome, tuple(state.tried))
        if outcome is not None:
            return Hit(outcome[0], outcome[1], reason, entry, owner)
    nodeflib = bool(requester and requester.facts and requester.facts.nodeflib)
    return _system(state, nodeflib)


def _rpath_steps(
    chain: Sequence[Requester], main: Requester | None, settings: LoaderSettings
) -> list[tuple[str, str, Reason, str]]:
    steps = []
    owners = [*chain, *([main] if main is not None and main not in chain else [])]
    for owner in owners:
        facts = owner.facts
        if facts is None or facts.rpath is None or facts.runpath is not None:
            continue
        origin = posixpath.dirname(owner.opened_as)
        steps += [(f, e, Reason.RPATH, owner.opened_as)
                  for f, e in _folders(facts.rpath, origin, settings)]  # fmt: skip
    return steps


def _system(state: _Search, nodeflib: bool) -> Hit | Miss:
    """Steps 4 and 5: the cache (or ld.so.conf's folders without one), the default folders."""
    settings, defaults = state.settings, state.settings.defaults()
    if settings.cache is not None:
        paths = settings.cache.get(state.name, ())
        first = paths[0] if paths else None
        if first and not (nodeflib and posixpath.dirname(first) in defaults):
            found = state.view.lookup(first)
            if found is not None and check(found, settings) == "":
                return Hit(found, first, Reason.CACHE, first)
        conf: tuple[str, ...] = ()
    else:
        conf = settings.conf_folders
    steps = [(f, Reason.LD_SO_CONF) for f in conf]
    steps += [] if nodeflib else [(f, Reason.DEFAULT) for f in defaults]
    for folder, reason in steps:
        outcome = state.in_folder(folder)
        if isinstance(outcome, str):
            return Miss(outcome, tuple(state.tried))
        if outcome is not None:
            return Hit(outcome[0], outcome[1], reason, folder)
    return Miss("not found", tuple(state.tried))
