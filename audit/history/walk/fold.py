"""Deltas in order -> the image after every layer -> a :class:`~audit.history.model.History`.

PURE: standard library, the history model and the in-image snapshot's record builder.

:class:`ImageState` holds the tracked facts of the image so far, keyed by path, and applies a
delta the way the OCI image spec's changeset applier does: whiteouts and opaque folders first
(they only ever remove what lower layers had), then every member of the layer hides what lower
layers had at its path (a non-folder also hides everything below it), then the layer's own facts
are added.

:func:`environments` names the Python environments of one state as Python would see them, with
no interpreter run:

- a Python installation is a prefix ``P`` with a standard library ``P/lib/pythonX.Y/os.py``;
  its interpreter is the first of ``P/bin/pythonX.Y``, ``P/bin/python3``, ``P/bin/python`` that
  resolves (through the image's symbolic links) to an executable. Its site folders: Debian's
  ``/usr/local/lib/pythonX.Y/dist-packages``, ``/usr/lib/python3/dist-packages``,
  ``/usr/lib/pythonX.Y/dist-packages`` for ``/usr`` where one of them exists, else
  ``P/lib/pythonX.Y/site-packages``; before them the user site
  (``$HOME/.local/lib/pythonX.Y/site-packages``; HOME from the config, else the config's
  user's home in ``/etc/passwd`` as the engine sets it, else ``/root``);
- a virtual environment is a ``pyvenv.cfg``: its interpreter ``V/bin/python`` (else
  ``python3``, ``pythonX.Y``), its site ``V/lib/pythonX.Y/site-packages``, the base's site
  folders after it, the user site between them, when ``include-system-site-packages = true``;
- a ``site-packages``/``dist-packages`` folder holding distributions that no interpreter sees
  is an environment of its own, named by the folder (no executable exists yet).

``paths`` follow ``sys.path``: ``PYTHONPATH`` (from the config), the standard library and
``lib-dynload``, the user site, the site folders, each site folder followed by the folders
its ``*.pth`` files name (``site.addsitedir``); only folders that exist. Distributions are
the in-image snapshot's records (:func:`audit.inimage.snapshot.distribution_record`): the same
fields from the same bytes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from audit.history.model import WALK, History, LayerRef, LayerState
from audit.history.snapshot import Distribution, Environment, linux_markers, platform_of
from audit.history.system import NativeCopy, NativeLibrary, OsPackage, System
from audit.history.walk.config import OciConfig, env_timeline, layer_refs
from audit.history.walk.delta import (
    EXECUTABLE,
    SITE_DIR,
    STDLIB,
    Blob,
    Fact,
    LayerDelta,
    Library,
    Link,
    Marker,
    Meta,
    Packages,
)
from audit.history.walk.loader import loader_text
from audit.inimage.snapshot import distribution_record, distro_of, library_version

_MAX_LINKS = 40  # as the kernel's symlink limit: a loop resolves to nothing
_DIST_SUFFIXES = {".dist-info": "dist-info", ".egg-info": "egg-info"}
_DEFAULT_LIB_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
RPM_NOTE = "%s: an RPM database; RPM packages are not read (not recorded)"
NO_DATABASE = "no package database found"
EMPTY_REF = LayerRef(index=-1, instruction="", empty=True)
_F = TypeVar("_F", Meta, Blob, Packages, Library, Link, Marker)


# ----------------------------------------------------------------------------- the state


class ImageState:
    """The tracked facts of an image after the layers applied so far (mutable; the fold's)."""

    def __init__(self) -> None:
        self.facts: dict[str, Fact] = {}
        self._below: dict[str, int] = {}  # folder -> tracked paths below it

    def apply(self, delta: LayerDelta) -> bool:
        """Apply one layer; True when a tracked fact changed."""
        before = len(self.facts)
        removed = self._hide(delta) if self.facts else 0
        added = 0
        for fact in delta.facts:
            added += self._put(fact)
        return bool(removed or added) or before != len(self.facts)

    def _hide(self, delta: LayerDelta) -> int:
        removed = 0
        for path in delta.whiteouts:
            removed += self._remove(path) + self._remove_below(path)
        for path in delta.opaque:
            removed += self._remove_below(path)
        others = set(delta.others)
        for path in others & self._below.keys():
            removed += self._remove_below(path)
        for path in others & self.facts.keys():
            removed += self._remove(path)
        for path in set(delta.dirs) & self.facts.keys():
            if not isinstance(self.facts[path], Marker):  # a folder replaces a file or link
                removed += self._remove(path)
        return removed

    def _put(self, fact: Fact) -> int:
        if isinstance(fact, Link) and fact.hard:
            source = self.facts.get(fact.target)
            if source is None or isinstance(source, Link):
                return 0  # a hard link to nothing tracked: nothing to know of it
            fact = _moved(source, fact.path)
        old = self.facts.get(fact.path)
        if old is None:
            for folder in _folders(fact.path):
                self._below[folder] = self._below.get(folder, 0) + 1
        self.facts[fact.path] = fact
        return int(old != fact)

    def _remove(self, path: str) -> int:
        if self.facts.pop(path, None) is None:
            return 0
        for folder in _folders(path):
            left = self._below[folder] - 1
            if left:
                self._below[folder] = left
            else:
                del self._below[folder]
        return 1

    def _remove_below(self, folder: str) -> int:
        if folder not in self._below:
            return 0
        prefix = folder.rstrip("/") + "/"
        return sum(self._remove(path) for path in [p for p in self.facts if p.startswith(prefix)])

    # ------------------------------------------------------------------ reading the state

    def link(self, path: str) -> str | None:
        fact = self.facts.get(path)
        return fact.target if isinstance(fact, Link) and not fact.hard else None

    def resolve(self, path: str, seen: dict[str, str] | None = None) -> str:
        """``path`` with every symbolic link on it followed inside the image (an absolute target
        starts again at the image's root, ``..`` stops at it); a loop gives "". ``seen`` gets
        every link met (its path -> its target as stored)."""
        parts = [p for p in path.split("/") if p]
        done = ""
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == ".":
                continue
            if part == "..":
                done = done[: done.rfind("/")]
                continue
            here = done + "/" + part
            target = self.link(here)
            if target is None:
                done = here
                continue
            if seen is not None:
                seen[here] = target
            hops += 1
            if hops > _MAX_LINKS:
                return ""
            if target.startswith("/"):
                done = ""
            parts[:0] = [p for p in target.split("/") if p]
        return done or "/"

    def exists(self, path: str) -> bool:
        """A tracked member, or a folder holding one (after following links)."""
        real = self.resolve(path)
        return bool(real) and (real in self.facts or real in self._below)

    def is_executable(self, path: str) -> bool:
        fact = self.facts.get(self.resolve(path))
        return isinstance(fact, Marker) and fact.kind == EXECUTABLE

    def of_type(self, kind: type[_F]) -> Iterator[_F]:
        """The tracked facts of one type."""
        return (fact for fact in self.facts.values() if isinstance(fact, kind))

    def blob(self, path: str) -> Blob | None:
        fact = self.facts.get(self.resolve(path))
        return fact if isinstance(fact, Blob) else None


def _folders(path: str) -> Iterator[str]:
    """Every proper ancestor folder of ``path`` but the root."""
    cut = path.rfind("/")
    while cut > 0:
        path = path[:cut]
        yield path
        cut = path.rfind("/")


def _moved(fact: Fact, path: str) -> Fact:
    return replace(fact, path=path)


# ----------------------------------------------------------------------------- Python


@dataclass(frozen=True)
class _Install:
    """A Python installation: prefix, ``X.Y``, its lib folder name, and the full version."""

    prefix: str
    short: str
    lib: str
    full: str

    @property
    def stdlib(self) -> str:
        return f"{self.prefix}/{self.lib}/python{self.short}"


@dataclass(frozen=True)
class ConfigFacts:
    """What the environments depend on besides the layers: from the config."""

    machine: str
    environ: tuple[tuple[str, str], ...]
    user: str = ""

    def get(self, key: str, default: str = "") -> str:
        return dict(self.environ).get(key, default)


def _user_site(state: ImageState, image: ConfigFacts, short: str) -> str:
    """``$HOME/.local/lib/pythonX.Y/site-packages`` of the user the image runs as."""
    home = image.get("HOME") or _passwd_home(state, image.user)
    return f"{home.rstrip('/')}/.local/lib/python{short}/site-packages"


def _passwd_home(state: ImageState, user: str) -> str:
    """The home the engine gives ``user`` (``name``, ``uid``, either with ``:group``): its
    ``/etc/passwd`` entry's, ``/root`` for root, else ``/`` (a user the file lacks)."""
    name = user.split(":", 1)[0]
    if name in ("", "root", "0"):
        return "/root"
    passwd = state.blob("/etc/passwd")
    for line in passwd.text.splitlines() if passwd else []:
        fields = line.split(":")
        if len(fields) >= 6 and name in (fields[0], fields[2]):
            return fields[5] or "/"
    return "/"


def _prefix(path: str) -> str:
    return path[: path.rfind("/")] or "/"


def installations(state: ImageState) -> list[_Install]:
    """Every ``P/lib/pythonX.Y/os.py`` of the state, sorted by prefix."""
    found = []
    for fact in state.of_type(Marker):
        if fact.kind == STDLIB:  # /usr/lib/python3.11/os.py
            stdlib = _prefix(fact.path)
            lib = _prefix(stdlib)
            short = stdlib.rsplit("/python", 1)[1]
            found.append(_Install(_prefix(lib), short, lib.rsplit("/", 1)[1], ""))
    return sorted(found, key=lambda i: (i.prefix, i.short, i.lib))


def _with_version(install: _Install, state: ImageState, debs: dict[str, str]) -> _Install:
    return replace(install, full=_full_version(install, state, debs))


def _full_version(install: _Install, state: ImageState, debs: dict[str, str]) -> str:
    """``3.11.2``: from ``patchlevel.h``, else Debian's package of that Python, else X.Y."""
    for fact in state.of_type(Blob):
        if fact.path.startswith(f"{install.prefix}/include/python{install.short}") and (
            fact.path.endswith("/patchlevel.h")
        ):
            found = _patchlevel(fact.text)
            if found:
                return found
    for package in (f"python{install.short}-minimal", f"python{install.short}"):
        if package in debs and install.prefix == "/usr":
            return _upstream(debs[package]) or install.short
    return install.short


def _patchlevel(text: str) -> str:
    for line in text.splitlines():
        words = line.split()
        if len(words) == 3 and words[:2] == ["#define", "PY_VERSION"]:
            return words[2].strip('"').rstrip("+")
    return ""


def _upstream(version: str) -> str:
    """``3.11.2`` of Debian's ``3.11.2-6+deb12u6`` (epoch and revision dropped)."""
    text = version.split(":", 1)[-1]
    return text.rsplit("-", 1)[0] if "-" in text else text


def _interpreter(state: ImageState, folder: str, names: Sequence[str]) -> str:
    for name in names:
        if state.is_executable(f"{folder}/{name}"):
            return f"{folder}/{name}"
    return ""


def _site_folders(state: ImageState, install: _Install) -> list[str]:
    short = install.short
    if install.prefix == "/usr":
        debian = [
            f"/usr/local/lib/python{short}/dist-packages",
            "/usr/lib/python3/dist-packages",
            f"/usr/lib/python{short}/dist-packages",
        ]
        if any(state.exists(path) for path in debian):
            return debian
    return [
        f"{install.prefix}/lib/python{short}/site-packages",
        f"{install.prefix}/lib64/python{short}/site-packages",
    ]


def _with_pth(state: ImageState, sites: Sequence[str], pth: Mapping[str, list[Blob]]) -> list[str]:
    """``sites`` each followed by the folders its ``*.pth`` files name, as ``site.addsitedir``
    adds them: files by name, a line "" or ``#...`` skipped, ``import ...`` run (not here: it
    names no folder), any other line a folder relative to the site (a legacy editable
    install's ``easy-install.pth``); only folders that exist are added (:func:`_existing`).
    ``pth``: :func:`_pth_files` of ``state``."""
    found: list[str] = []
    for site in sites:
        found.append(site)
        if state.exists(site):
            for fact in pth.get(state.resolve(site), []):
                found += _pth_folders(site, fact.text)
    return found


def _pth_files(state: ImageState) -> dict[str, list[Blob]]:
    """Every ``*.pth`` file, by the (real) folder it is directly in, sorted by name: read once
    per state, for every site folder of every environment."""
    found: dict[str, list[Blob]] = {}
    for fact in state.of_type(Blob):
        if fact.path.endswith(".pth"):
            found.setdefault(_prefix(fact.path), []).append(fact)
    return {folder: sorted(facts, key=lambda f: f.path) for folder, facts in found.items()}


def _pth_folders(site: str, text: str) -> list[str]:
    """The folders one ``.pth`` file's lines name, relative ones joined to ``site``."""
    found = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", "import ", "import\t")):
            continue
        found.append(posixpath.normpath(posixpath.join(site, line.rstrip())))
    return found


def _existing(state: ImageState, paths: Sequence[str]) -> tuple[str, ...]:
    """The folders of ``paths`` that exist, each real folder once (as ``sys.path`` is read)."""
    seen: set[str] = set()
    found = []
    for path in paths:
        real = state.resolve(path)
        if real and real not in seen and state.exists(path):
            seen.add(real)
            found.append(path)
    return tuple(found)


@dataclass(frozen=True)
class _Env:
    """An environment before its distributions are read."""

    interpreter: str
    short: str
    full: str
    paths: tuple[str, ...]


def _base_envs(
    state: ImageState, installs: list[_Install], image: ConfigFacts, pth: Mapping[str, list[Blob]]
) -> list[_Env]:
    found = []
    front = [p for p in image.get("PYTHONPATH").split(":") if p.startswith("/")]
    for install in installs:
        names = (f"python{install.short}", "python3", "python")
        interpreter = _interpreter(state, f"{install.prefix}/bin", names)
        if not interpreter:
            continue
        user = _user_site(state, image, install.short)
        paths = [*front, install.stdlib, f"{install.stdlib}/lib-dynload"]
        paths += _with_pth(state, [user, *_site_folders(state, install)], pth)
        found.append(_Env(interpreter, install.short, install.full, _existing(state, paths)))
    return found


def _venv_config(text: str) -> dict[str, str]:
    """``pyvenv.cfg`` as ``site.py`` reads it: ``key = value`` lines, keys lower case."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            found[key.strip().lower()] = value.strip()
    return found


def _venv_envs(
    state: ImageState, installs: list[_Install], image: ConfigFacts, pth: Mapping[str, list[Blob]]
) -> list[_Env]:
    found = []
    front = [p for p in image.get("PYTHONPATH").split(":") if p.startswith("/")]
    for fact in state.of_type(Blob):
        if not fact.path.endswith("/pyvenv.cfg"):
            continue
        venv = _prefix(fact.path)
        config = _venv_config(fact.text)
        base = _venv_base(state, installs, config)
        full = config.get("version") or config.get("version_info") or (base.full if base else "")
        short = ".".join(full.split(".")[:2]) or _site_version(state, venv)
        if not short:
            continue
        site = f"{venv}/lib/python{short}/site-packages"
        names = ("python", "python3", f"python{short}")
        interpreter = _interpreter(state, f"{venv}/bin", names) or site
        paths = [*front]
        if base is not None:
            paths += [base.stdlib, f"{base.stdlib}/lib-dynload"]
        sites = [site]
        if base is not None and config.get("include-system-site-packages", "").lower() == "true":
            sites += [_user_site(state, image, short), *_site_folders(state, base)]
        paths += _with_pth(state, sites, pth)
        found.append(_Env(interpreter, short, full or short, _existing(state, paths)))
    return found


def _venv_base(
    state: ImageState, installs: list[_Install], config: dict[str, str]
) -> _Install | None:
    """The installation a venv's ``home`` (its base's ``bin`` folder) names."""
    home = config.get("home", "").rstrip("/")
    if not home:
        return None
    prefixes = {_prefix(home), _prefix(state.resolve(home))}
    version = config.get("version") or config.get("version_info") or ""
    short = ".".join(version.split(".")[:2])
    matches = [i for i in installs if i.prefix in prefixes and (not short or i.short == short)]
    return matches[0] if matches else None


def _site_version(state: ImageState, venv: str) -> str:
    for fact in state.of_type(Marker):
        if fact.kind == SITE_DIR and fact.path.startswith(f"{venv}/lib/python"):
            return fact.path[len(venv) + len("/lib/python") :].split("/", 1)[0]
    return ""


def _orphans(state: ImageState, seen: set[str], sites: dict[str, dict[str, str]]) -> list[_Env]:
    """Site folders with distributions that no interpreter's path holds."""
    found = []
    for site in sorted(sites):
        if site in seen or not site.endswith(("/site-packages", "/dist-packages")):
            continue
        short = ""
        for part in site.split("/"):
            if part.startswith("python") and "." in part:
                short = part[6:]
        found.append(_Env(site, short, short, (site,)))
    return found


# ----------------------------------------------------------------------------- distributions


def dist_folders(state: ImageState) -> dict[str, dict[str, str]]:
    """site folder -> {metadata folder or .egg-info file name -> kind}, from the facts."""
    found: dict[str, dict[str, str]] = {}
    for path in state.facts:
        for suffix, kind in _DIST_SUFFIXES.items():
            at = path.find(suffix)
            if at < 0:
                continue
            end = at + len(suffix)
            if end != len(path) and path[end] != "/":
                continue
            folder_path = path[:end]
            site, _, folder = folder_path.rpartition("/")
            found.setdefault(site or "/", {})[folder] = kind
    return found


def _distribution(state: ImageState, site: str, folder: str, kind: str) -> Distribution:
    entry = f"{site}/{folder}"
    fact = state.facts.get(entry)
    is_folder = not isinstance(fact, Meta)  # a distutils .egg-info file is its own metadata
    metadata = (
        entry if not is_folder else entry + ("/METADATA" if kind == "dist-info" else "/PKG-INFO")
    )
    meta = state.facts.get(metadata)
    header = None
    if isinstance(meta, Meta):
        header = (meta.name, meta.version, list(meta.requires), meta.requires_python)
    installer = requires_txt = None
    digest = ""
    if is_folder:
        found = state.facts.get(entry + "/INSTALLER")
        installer = found.text.strip() if isinstance(found, Blob) else ""
        for name in ("RECORD", "installed-files.txt"):
            source = state.facts.get(f"{entry}/{name}")
            if isinstance(source, Blob) and not digest:
                digest = source.sha256
        requires = state.facts.get(entry + "/requires.txt")
        if isinstance(requires, Blob) and kind == "egg-info" and not (header and header[2]):
            requires_txt = requires.text.encode("utf-8")
    if not digest and isinstance(meta, Meta):
        digest = meta.sha256
    record = distribution_record(
        site, folder, kind, header=header, installer=installer or "", digest=digest,
        requires_txt=requires_txt,
    )  # fmt: skip
    return Distribution(
        name=str(record["name"]), version=str(record["version"]), location=site,
        installer=str(record["installer"]), digest=str(record["digest"]),
        raw_name=str(record["raw_name"]), metadata=kind,
        requires_dist=tuple(_strings(record["requires_dist"])),
        requires_python=str(record["requires_python"]),
    )  # fmt: skip


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _site_distributions(
    state: ImageState, site: str, folders: dict[str, str]
) -> list[Distribution]:
    """One site's distributions as the in-image script orders them: by folder name, then by
    (name, raw name, version), stably."""
    found = [_distribution(state, site, f, folders[f]) for f in sorted(folders)]
    return sorted(found, key=lambda d: (d.name, d.raw_name, d.version))


def environments(state: ImageState, image: ConfigFacts) -> tuple[Environment, ...]:
    """Every Python environment of ``state`` (see the module's rules), by interpreter."""
    debs = _debian_versions(state)
    installs = [_with_version(i, state, debs) for i in installations(state)]
    pth = _pth_files(state)
    envs = _base_envs(state, installs, image, pth) + _venv_envs(state, installs, image, pth)
    sites = dist_folders(state)
    seen = {state.resolve(p) for env in envs for p in env.paths}
    envs += _orphans(state, seen, {s: f for s, f in sites.items() if state.resolve(s) not in seen})
    libc = _libc(debs)
    cache: dict[str, list[Distribution]] = {}
    found = []
    for env in sorted(envs, key=lambda e: e.interpreter):
        dists: list[Distribution] = []
        for path in env.paths:
            real = state.resolve(path)
            if real not in cache:
                cache[real] = _site_distributions(state, real, sites.get(real, {}))
            dists += [_located(d, path) for d in cache[real]]
        markers = linux_markers(image.machine, env.full)
        platform = platform_of(markers)
        found.append(
            Environment(
                env.interpreter, env.full, markers, env.paths, tuple(dists), libc, None, platform
            )
        )
    return tuple(found)


def _located(dist: Distribution, site: str) -> Distribution:
    return dist if dist.location == site else replace(dist, location=site)


def _debian_versions(state: ImageState) -> dict[str, str]:
    fact = state.facts.get("/var/lib/dpkg/status")
    if not isinstance(fact, Packages):
        return {}
    return {p.name: p.version for p in fact.packages}


def _libc(debs: dict[str, str]) -> str:
    """``glibc 2.36`` from Debian's ``libc6`` package ("" elsewhere)."""
    version = debs.get("libc6", "")
    return "glibc " + _upstream(version) if version else ""


# ----------------------------------------------------------------------------- below Python


def _databases(state: ImageState) -> tuple[str, list[OsPackage], str]:
    """(manager, packages, note) as the in-image script finds them: dpkg (``status`` and a
    distroless image's ``status.d/*``), else apk, else an RPM database (not read)."""
    dpkg: list[OsPackage] = []
    found_dpkg = found_apk = False
    apk: list[OsPackage] = []
    rpm = ""
    for fact in state.facts.values():
        if isinstance(fact, Packages):
            if fact.manager == "dpkg":
                found_dpkg = True
                dpkg += fact.packages
            else:
                found_apk = True
                apk += fact.packages
        elif isinstance(fact, Blob) and "/rpm/" in fact.path and not rpm:
            rpm = fact.path
    if found_dpkg:
        return "dpkg", dpkg, ""
    if found_apk:
        return "apk", apk, ""
    if rpm:
        return "rpm", [], RPM_NOTE % rpm
    return "", [], NO_DATABASE


def _search_folders(state: ImageState, image: ConfigFacts) -> list[tuple[str, str]]:
    """(real folder, origin) of the loader's search path: LD_LIBRARY_PATH, the default folders
    (with the architecture's triplet) and those ``ld.so.conf`` names."""
    triplet = f"{image.machine}-linux-gnu"
    found = [(d, "LD_LIBRARY_PATH") for d in image.get("LD_LIBRARY_PATH").split(":") if d]
    for base in _DEFAULT_LIB_DIRS:
        found += [(f"{base}/{triplet}", "system"), (base, "system")]
    found += [(d, "ld.so.conf") for d in ld_so_conf_folders(state)]
    return [(state.resolve(d), origin) for d, origin in found]


def ld_so_conf_folders(state: ImageState) -> list[str]:
    """The folders ``/etc/ld.so.conf`` names, its ``include``d files' too (``*`` globs read
    against the tracked ``/etc/ld.so.conf.d/*.conf``)."""
    found: list[str] = []
    pending = ["/etc/ld.so.conf"]
    done: set[str] = set()
    while pending:
        path = pending.pop(0)
        blob = state.blob(path)
        if path in done or blob is None:
            continue
        done.add(path)
        for line in blob.text.splitlines():
            entry = line.split("#", 1)[0].strip()
            if entry.startswith("include"):
                pending += _included(state, entry.split()[1:])
            elif entry.startswith("/") and entry not in found:
                found.append(entry)
    return found


def _included(state: ImageState, patterns: list[str]) -> list[str]:
    import fnmatch

    found = []
    for pattern in patterns:
        folder = _prefix(pattern)
        for fact in sorted(state.of_type(Blob), key=lambda f: f.path):
            if _prefix(fact.path) == folder and fnmatch.fnmatch(fact.path, pattern):
                found.append(fact.path)
    return found


def soname_of(path: str, elf: object) -> str:
    """The ELF reader's SONAME, else the file name cut after its first version number
    (``libnccl.so.2.29.7`` -> ``libnccl.so.2``; a name without one is its own)."""
    if isinstance(elf, dict) and isinstance(elf.get("soname"), str) and elf["soname"]:
        return str(elf["soname"])
    name = path.rsplit("/", 1)[-1]
    stem, dot, rest = name.partition(".so.")
    return f"{stem}.so.{rest.split('.', 1)[0]}" if dot and rest else name


def _wheel_owners(state: ImageState, sites: dict[str, dict[str, str]]) -> dict[str, str]:
    """Library path -> ``name version`` of the ``nvidia-*`` distribution whose RECORD lists it."""
    owners: dict[str, str] = {}
    for site in sorted(sites):
        for folder, kind in sorted(sites[site].items()):
            record = state.facts.get(f"{site}/{folder}/RECORD")
            if not folder.lower().startswith("nvidia") or not isinstance(record, Blob):
                continue
            dist = _distribution(state, site, folder, kind)
            for relpath in record.libraries:
                real = state.resolve(f"{site}/{relpath}")
                owners.setdefault(real, f"{dist.name} {dist.version}")
    return owners


def native_copies(
    state: ImageState, image: ConfigFacts, owners: dict[str, str] | None = None
) -> tuple[NativeLibrary, ...]:
    """Every CUDA-family library file, grouped by SONAME; ``loads`` left empty (the judge
    resolves them with the loader model from :attr:`System.loader`). A copy's origin:
    ``wheel`` (an ``nvidia-*`` RECORD lists it), else the first search folder holding it,
    else ""."""
    libraries = list(state.of_type(Library))
    if not libraries:
        return ()
    owners = _wheel_owners(state, dist_folders(state)) if owners is None else owners
    folders = _search_folders(state, image)
    by_soname: dict[str, list[NativeCopy]] = {}
    for library in sorted(libraries, key=lambda f: f.path):
        soname = soname_of(library.path, library.elf)
        owner = owners.get(library.path, "")
        origin = "wheel" if owner else _origin(_prefix(library.path), folders)
        version = library_version(library.path, soname)
        copy = NativeCopy(library.path, origin, owner, soname, version)
        by_soname.setdefault(soname, []).append(copy)
    return tuple(NativeLibrary(s, tuple(by_soname[s]), ()) for s in sorted(by_soname))


def _origin(folder: str, folders: list[tuple[str, str]]) -> str:
    return next((origin for path, origin in folders if path == folder), "")


def system(
    state: ImageState,
    image: ConfigFacts,
    environments: tuple[Environment, ...] = (),
    parsed: dict[int, tuple[Fact, bool]] | None = None,
) -> System:
    """The state below Python: the package database, the distro, the CUDA-family copies and,
    where there are any, the loader facts (:mod:`audit.history.walk.loader`) the judge
    resolves them with; ``environments`` are the state's (the interpreter is chosen among
    them), ``parsed`` the fold's memo of ELF facts already checked."""
    manager, packages, note = _databases(state)
    ordered = sorted(packages, key=lambda p: (p.name, p.architecture, p.version))
    release = state.blob("/etc/os-release") or state.blob("/usr/lib/os-release")
    distro = distro_of(release.text.encode("utf-8")) if release else ""
    owners = _wheel_owners(state, dist_folders(state))
    native = native_copies(state, image, owners)
    loader = (
        loader_text(state, machine=image.machine, environ=dict(image.environ),
                    environments=environments, owners=owners,
                    parsed={} if parsed is None else parsed)
        if native else ""
    )  # fmt: skip
    return System(manager, note, tuple(ordered), native, distro, loader)


# ----------------------------------------------------------------------------- the fold


def fold(image: str, config: OciConfig, deltas: dict[str, LayerDelta]) -> History:
    """The history of ``image``: ``states[0]`` the empty image, then one state per history
    entry. ``deltas`` maps each diff-id of ``config`` to its delta. Each state is read with
    the environment the image had after its entry (:func:`env_timeline`): an empty entry
    repeats the state before it, unless it is an ``ENV`` that changed the environment (a new
    ``LD_LIBRARY_PATH`` changes which copies load, a new ``PYTHONPATH`` what Python sees)."""
    state = ImageState()
    current = LayerState(EMPTY_REF, (), None)
    states = [current]
    parsed: dict[int, tuple[Fact, bool]] = {}
    environ: tuple[tuple[str, str], ...] | None = None
    for ref, env in zip(layer_refs(config), env_timeline(config), strict=True):
        facts = ConfigFacts(config.machine, env, config.user)
        moved = environ is not None and env != environ
        environ = env
        changed = (not ref.empty and state.apply(deltas[ref.digest])) or moved
        if changed or (not ref.empty and current.system is None):
            envs = environments(state, facts)
            current = LayerState(ref, envs, system(state, facts, envs, parsed))
        else:
            current = LayerState(ref, current.environments, current.system)
        states.append(current)
    return History(image, WALK, tuple(states))
