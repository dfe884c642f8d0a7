"""One state of a walked image as the loader model reads it: the scene, as JSON text.

PURE: standard library, the loader model's pure core (:mod:`audit.native`) and the walk's
facts. :func:`loader_text` gives, for a state that holds a CUDA-family library, the same
:class:`~audit.native.scene.Scene` the in-image snapshot records (``system.loader``), built
from what the walk read of the layers, so that :mod:`audit.native.bridge` resolves a walked
image and a guarded one alike:

- ``view.files``: the ELF facts the walk's hook read (CUDA-family libraries, the requesters of
  the model's Python rules, Python executables, ``_ctypes``), by real path;
- ``view.listings``: the shared objects (names holding ``.so``) of every folder the loader may
  search (``LD_LIBRARY_PATH``, the ld.so cache's folders, ``ld.so.conf``'s, the default
  ones, every recorded file's RPATH/RUNPATH) and of every folder holding a recorded file;
- ``view.links``: the symbolic links in those folders and on the way to them;
- ``settings``: the machine, ``LD_LIBRARY_PATH`` of the state's environment (an ``ENV``
  layer changes it), the cache (entries that fit the machine), ``ld.so.conf``'s folders,
  whether the image is multiarch (``/usr/lib/<triplet>`` exists);
- ``owners``: the ``nvidia-*`` wheel whose RECORD lists a library, else the CUDA toolkit
  folder it lies in;
- ``python``: the environment whose site folders hold the most recorded files (where the
  CUDA packages are), its real executable, its site folders, its ``_ctypes``.

Invariant: the text is canonical JSON (sorted keys, no spaces), so two states with the same
facts give the same text, and a facts mapping the hook wrote that is not ELF facts JSON is
left out (the file is then listed, not read).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any, Protocol

from audit.history.snapshot import Environment
from audit.history.walk.delta import EXECUTABLE, Binary, Fact, LdCache, Library, Link, Marker
from audit.native.catalog import family_of, toolkit_owner
from audit.native.elf import ElfFormatError, facts_from_json
from audit.native.ldcache import CacheEntry, cache_map, conf_folders
from audit.native.pyrules import PACKAGE_TREES
from audit.native.search import LoaderSettings, default_folders, expand

# PEP 508's platform_machine -> the ELF machine and class the loader model compares
_ELF_MACHINES = {
    "x86_64": ("x86_64", 64), "aarch64": ("aarch64", 64), "i686": ("i386", 32),
    "armv7l": ("arm", 32), "ppc64le": ("ppc64", 64), "riscv64": ("riscv64", 64),
}  # fmt: skip
LD_CACHE = "/etc/ld.so.cache"


class WalkedState(Protocol):
    """What the scene is read from: :class:`audit.history.walk.fold.ImageState`."""

    @property
    def facts(self) -> Mapping[str, Fact]: ...

    def resolve(self, path: str, seen: dict[str, str] | None = None) -> str: ...


class _Reading:
    """One state read for the loader model (local to one call; ``parsed`` is the fold's
    memo of facts already checked, by the identity of the fact that holds them)."""

    def __init__(self, state: WalkedState, parsed: dict[int, tuple[Fact, bool]]) -> None:
        self.state, self.parsed = state, parsed
        self.links: dict[str, str] = {}
        self.real: dict[str, str] = {}

    def resolve(self, path: str) -> str:
        """``path`` resolved in the image, every link met recorded ("" on a loop)."""
        if path not in self.real:
            self.real[path] = self.state.resolve(path, self.links)
        return self.real[path]

    def valid(self, fact: Fact, elf: Mapping[str, Any]) -> bool:
        """Whether ``elf`` is facts JSON (checked once per fact)."""
        known = self.parsed.get(id(fact))
        if known is None or known[0] is not fact:
            try:
                facts_from_json(dict(elf), fact.path)
                known = (fact, True)
            except (ElfFormatError, ValueError, TypeError, KeyError):
                known = (fact, False)
            self.parsed[id(fact)] = known
        return known[1]


def _elf_of(fact: Fact) -> Mapping[str, Any] | None:
    if isinstance(fact, (Library, Binary)):
        return fact.elf
    return fact.elf if isinstance(fact, Marker) and fact.kind == EXECUTABLE else None


def loader_text(
    state: WalkedState,
    *,
    machine: str,
    environ: Mapping[str, str],
    environments: tuple[Environment, ...],
    owners: Mapping[str, str],
    parsed: dict[int, tuple[Fact, bool]],
) -> str:
    """The scene of ``state`` as canonical JSON; "" when it holds no CUDA-family library."""
    if not any(isinstance(f, Library) for f in state.facts.values()):
        return ""
    reading = _Reading(state, parsed)
    files = _files(reading)
    settings = _settings(reading, machine, environ)
    python = _python(reading, environments, files)
    listings = _listings(reading, _folders(reading, files, settings, python))
    scene = {  # the links last: resolving the listings' links records them
        "view": {"files": files, "links": dict(sorted(reading.links.items())),
                 "listings": listings},
        "settings": settings,
        "owners": _owners(files, owners),
        "python": python,
    }  # fmt: skip
    return json.dumps(scene, sort_keys=True, separators=(",", ":"))


def _files(reading: _Reading) -> dict[str, Any]:
    """Real path -> ELF facts JSON of every file the hook read (a package's extension only
    where it needs a CUDA-family library: the others change nothing the model answers)."""
    found: dict[str, Any] = {}
    for path, fact in reading.state.facts.items():
        elf = _elf_of(fact)
        if elf is not None and isinstance(fact, Binary) and not _wanted(path, elf):
            continue
        if elf is not None and reading.valid(fact, elf):
            real = reading.resolve(path)
            if real:
                found[real] = elf
    return found


def _wanted(path: str, elf: Mapping[str, Any]) -> bool:
    """A requester the rules read (their trees, ``_ctypes``), or one that needs the family."""
    needed = elf.get("needed")
    if isinstance(needed, list) and any(family_of(str(n)) is not None for n in needed):
        return True
    name = posixpath.basename(path)
    return name.startswith("_ctypes.") or any(f"-packages/{t}/" in path for t in PACKAGE_TREES)


def _settings(reading: _Reading, machine: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """:class:`~audit.native.search.LoaderSettings` as the scene's JSON writes them."""
    elf_machine, bits = _ELF_MACHINES.get(machine, (machine, 64))
    triplet = reading.resolve(f"/usr/lib/{elf_machine}-linux-gnu") + "/"
    multiarch = any(path.startswith(triplet) for path in reading.state.facts)
    conf = conf_folders(_reader(reading), _lister(reading))
    return {
        "machine": elf_machine, "bits": bits, "ld_library_path": environ.get("LD_LIBRARY_PATH"),
        "cache": _cache(reading, elf_machine), "conf_folders": list(conf), "system_folders": [],
        "hwcaps": [], "cwd": None, "lib": "", "platform": "", "multiarch": multiarch,
    }  # fmt: skip


def _cache(reading: _Reading, machine: str) -> dict[str, list[str]] | None:
    fact = reading.state.facts.get(reading.resolve(LD_CACHE))
    if not isinstance(fact, LdCache) or fact.invalid:
        return None
    entries = tuple(CacheEntry(soname, path, flags) for soname, path, flags in fact.entries)
    return {name: list(paths) for name, paths in sorted(cache_map(entries, machine).items())}


def _reader(reading: _Reading) -> Any:
    def read(path: str) -> str | None:
        from audit.history.walk.delta import Blob

        fact = reading.state.facts.get(reading.resolve(path))
        return fact.text if isinstance(fact, Blob) else None

    return read


def _lister(reading: _Reading) -> Any:
    def listdir(folder: str) -> list[str]:
        real = reading.resolve(folder)
        prefix = real.rstrip("/") + "/"
        return sorted({p[len(prefix) :].split("/", 1)[0] for p in reading.state.facts
                       if p.startswith(prefix)})  # fmt: skip

    return listdir


def _python(
    reading: _Reading, environments: tuple[Environment, ...], files: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The interpreter whose site folders hold the most recorded files (the first on a tie)."""
    best: tuple[int, dict[str, Any]] | None = None
    for env in environments:
        executable = reading.resolve(env.interpreter)
        fact = reading.state.facts.get(executable)
        if not isinstance(fact, Marker) or fact.kind != EXECUTABLE:
            continue  # a site folder no interpreter sees
        sites = [p for p in env.paths if not _stdlib(p)]
        held = sum(1 for path in files for s in sites if path.startswith(reading.resolve(s) + "/"))
        python = {"executable": executable, "sites": sites, "ctypes": _ctypes(reading, env)}
        if best is None or held > best[0]:
            best = (held, python)
    return best[1] if best else None


def _stdlib(path: str) -> bool:
    name = posixpath.basename(path)
    return name == "lib-dynload" or (name.startswith("python") and "-packages" not in path)


def _ctypes(reading: _Reading, env: Environment) -> str:
    for folder in env.paths:
        if folder.endswith("/lib-dynload"):
            prefix = reading.resolve(folder) + "/_ctypes."
            found = sorted(p for p, f in reading.state.facts.items()
                           if p.startswith(prefix) and isinstance(f, Binary))  # fmt: skip
            return found[0] if found else ""
    return ""


def _folders(
    reading: _Reading,
    files: Mapping[str, Any],
    settings: Mapping[str, Any],
    python: Mapping[str, Any] | None,
) -> list[str]:
    """Every folder the loader may search or the Python rules may list, as written."""
    found = [e for e in str(settings["ld_library_path"] or "").split(":") if e.startswith("/")]
    needed = {n for elf in files.values() for n in elf.get("needed", ())}
    for soname, paths in (settings["cache"] or {}).items():
        if soname in needed or family_of(soname) is not None:
            found += [posixpath.dirname(p) for p in paths]
    found += list(settings["conf_folders"])
    found += list(default_folders(settings["machine"], settings["multiarch"]))
    tokens = LoaderSettings(machine=settings["machine"]).tokens()
    for path, elf in files.items():
        found.append(posixpath.dirname(path))
        for value in (elf.get("rpath"), elf.get("runpath")):
            for entry in str(value or "").split(":"):
                folder = expand(entry, posixpath.dirname(path), tokens) if entry else None
                if folder and folder.startswith("/"):
                    found.append(posixpath.normpath(folder))
    if python is not None:
        found += [python["executable"], *python["sites"]]
    return list(dict.fromkeys(found))


def _listings(reading: _Reading, folders: list[str]) -> dict[str, list[str]]:
    """Real folder -> its shared objects' names (files and links), for every folder above."""
    names: dict[str, set[str]] = {}
    for path, fact in reading.state.facts.items():
        name = posixpath.basename(path)
        if ".so" in name and (not isinstance(fact, Link) or not fact.hard):
            names.setdefault(posixpath.dirname(path), set()).add(name)
    found: dict[str, list[str]] = {}
    for folder in folders:
        real = reading.resolve(folder)
        if real and real in names and real not in found:
            found[real] = sorted(names[real])
            for name in found[real]:
                if isinstance(reading.state.facts.get(f"{real}/{name}"), Link):
                    reading.resolve(f"{real}/{name}")  # records the link and where it leads
    return dict(sorted(found.items()))


def _owners(files: Mapping[str, Any], owners: Mapping[str, str]) -> dict[str, Any]:
    """Real path -> owner JSON: the wheel whose RECORD lists it, else its toolkit folder."""
    found: dict[str, Any] = {}
    for path in sorted(files):
        label = owners.get(path, "")
        if label:
            name, _, version = label.partition(" ")
            found[path] = {"kind": "wheel", "name": name, "version": version}
            continue
        toolkit = toolkit_owner(path)
        if toolkit is not None:
            found[path] = {"kind": toolkit.kind, "name": toolkit.name, "version": toolkit.version}
    return found
