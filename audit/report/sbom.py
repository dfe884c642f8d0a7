"""A CycloneDX SBOM per built stage, made from the guard's trail with ``cyclonedx-python-lib``.

The stage's environment is the snapshot its last guarded layer left (or, for a stage without
one, the stage before it, down to ``locks/<image>/base.json``). Every distribution of every
audited interpreter becomes a ``library`` component with its purl (``pkg:pypi/name@version``),
the hashes its installing layer's lock pins (where it has a lock) and properties naming the
interpreter, the location and the layer that installed it (``base image`` for the base's).

The image's OS packages (the ``system`` its first interpreter's snapshot recorded) are
components too: ``pkg:deb/debian/libc6@2.36-9+deb12u4?arch=amd64&distro=debian-12``
(``apk`` for Alpine), with the layer that installed or changed them (``base image`` for the base's).

The CUDA-family native libraries of that ``system`` are components too, one per file
(``pkg:generic/libnccl.so.2@2.30.7?path=/usr/lib/...``), with which copy loads and why as the
loader model resolves them (:mod:`audit.native.bridge`): properties ``soname``, ``owner``
(the wheel, else the search folder it lies in), ``loaded-by`` (one per requester: ``<who>
(<why>)``), ``shadows`` (on a copy that loads for some requester: the other copies of its
SONAME, which that requester did not get) or ``shadowed-by`` (on a copy that loads for no
one: the copies that do), and the layer.

Invariants: the components are exactly the trail's distributions, one per interpreter and
copy, plus its OS packages and native library files once each; the document is
deterministic for one trail and one ``created`` time (serial number derived from the
content, components sorted); nothing here talks to Docker.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from audit.errors import LockError, SnapshotError
from audit.history.model import History
from audit.history.snapshot import Environment, parse_snapshot
from audit.history.system import System
from audit.host import atomic
from audit.lock.files import base_relpath, lock_relpath, read_base, read_lock
from audit.project.paths import reports_dir
from audit.project.sources import DirectorySource
from audit.recipe.model import PipLayer, Recipe, Step
from audit.report.layers import layer_label

SBOM_NAME = "sbom.cdx.json"
SNAPSHOT_SUFFIX = ".snapshot.json"
BASE_LAYER = "base image"
PROPERTY = "layer-audit"


@dataclass(frozen=True)
class Entry:
    """One component to be: a distribution as one interpreter sees it, and where it came from."""

    interpreter: str
    name: str
    version: str
    location: str
    layer: str
    hashes: tuple[str, ...]
    ecosystem: str = "pypi"  # purl type: pypi, deb, apk
    namespace: str = ""  # purl namespace of OS packages: debian, ubuntu, alpine
    qualifiers: tuple[tuple[str, str], ...] = ()  # purl qualifiers: arch, distro, path
    properties: tuple[tuple[str, str], ...] = ()  # more layer-audit properties (native files)


def guarded_snapshots(
    recipe: Recipe, stage: str, files: Mapping[str, bytes]
) -> list[tuple[Step, tuple[Environment, ...]]]:
    """Each guarded layer up to ``stage`` whose snapshot is in the trail, in build order."""
    found = []
    for step in recipe.steps(until=stage):
        data = files.get(f"{step.slug}{SNAPSHOT_SUFFIX}")
        if data is not None:
            found.append((step, parse_snapshot(data, f"trail {step.slug}{SNAPSHOT_SUFFIX}")))
    return found


def _state(env: Environment) -> dict[str, tuple[str, str, str]]:
    return {d.name: (d.version, d.location, d.digest) for d in env.distributions}


def entries(
    root: Path, recipe: Recipe, stage: str, files: Mapping[str, bytes]
) -> tuple[Entry, ...]:
    """Every distribution the stage ships, per interpreter, with its installing layer."""
    source = DirectorySource(root)
    base = read_base(source, base_relpath(recipe)).environments
    layers = guarded_snapshots(recipe, stage, files)
    final = layers[-1][1] if layers else base
    origin: dict[tuple[str, str], Step | None] = {}
    before = {env.interpreter: _state(env) for env in base}
    for step, envs in layers:
        for env in envs:
            previous = before.get(env.interpreter, {})
            for name, state in _state(env).items():
                if previous.get(name) != state:
                    origin[(env.interpreter, name)] = step
            before[env.interpreter] = _state(env)
    hashes = _lock_hashes(source, recipe, {s for s in origin.values() if s is not None})
    found = list(os_entries(base, layers))
    found += native_entries(system_of(final), _native_origin(base, layers))
    for env in final:
        for dist in env.distributions:
            by = origin.get((env.interpreter, dist.name))
            label = by.label if by else BASE_LAYER
            pinned = hashes.get((by.slug, dist.name, dist.version), ()) if by else ()
            found.append(
                Entry(env.interpreter, dist.name, dist.version, dist.location, label, pinned)
            )
    return tuple(sorted(found, key=_entry_key))


def _entry_key(entry: Entry) -> tuple[str, str, str, str, str]:
    return entry.ecosystem, entry.interpreter, entry.name, entry.location, entry.version


OS_PURL_TYPES = {"dpkg": "deb", "apk": "apk"}


def system_of(envs: Sequence[Environment]) -> System | None:
    """The image's OS packages and libraries: recorded with the first interpreter."""
    return envs[0].system if envs else None


def _os_state(system: System | None) -> dict[str, str]:
    return {key: p.version for key, p in (system.keyed() if system else {}).items()}


def os_entries(
    base: Sequence[Environment], layers: Sequence[tuple[Step, Sequence[Environment]]]
) -> list[Entry]:
    """One entry per OS package of the last recorded system, with the layer that installed or
    changed it (a step whose previous state was not recorded does not claim the packages)."""
    before = system_of(base)
    final, origin = before, {}
    for step, envs in layers:
        after = system_of(envs)
        if after is None:
            continue
        if before is not None:
            old = _os_state(before)
            origin.update({k: step for k, v in _os_state(after).items() if old.get(k) != v})
        before = final = after
    return [_os_entry(final, key, origin.get(key)) for key in sorted(_os_state(final))]


def _native_origin(
    base: Sequence[Environment], layers: Sequence[tuple[Step, Sequence[Environment]]]
) -> dict[str, str]:
    """Path -> the label of the step that last changed that native library file."""
    before, origin = _native_state(system_of(base)), {}
    for step, envs in layers:
        after = system_of(envs)
        if after is not None:
            now = _native_state(after)
            origin.update({path: step.label for path, v in now.items() if before.get(path) != v})
            before = now
    return origin


def _os_entry(system: System | None, key: str, step: Step | None) -> Entry:
    assert system is not None
    package = system.keyed()[key]
    distro = system.distro
    qualifiers = [("arch", package.architecture)] if package.architecture else []
    qualifiers += [("distro", distro)] if distro else []
    return Entry(
        interpreter="(system)",
        name=package.name,
        version=package.version,
        location=f"{system.manager} database",
        layer=step.label if step else BASE_LAYER,
        hashes=(),
        ecosystem=OS_PURL_TYPES.get(system.manager, "generic"),
        namespace=distro.partition("-")[0],
        qualifiers=tuple(qualifiers),
    )


def _lock_hashes(
    source: DirectorySource, recipe: Recipe, steps: set[Step]
) -> dict[tuple[str, str, str], tuple[str, ...]]:
    """(slug, name, version) -> the sha256 hashes the layer's lock pins, for pip layers."""
    found: dict[tuple[str, str, str], tuple[str, ...]] = {}
    for step in steps:
        relpath = lock_relpath(recipe, step)
        if not isinstance(step.layer, PipLayer) or not source.exists(relpath):
            continue
        for pin in read_lock(source, relpath).pins.values():
            found[(step.slug, pin.name, pin.version)] = pin.hashes
    return found


@dataclass(frozen=True)
class Subject:
    """What the SBOM describes: an image (repository) at a version (stage or tag)."""

    name: str
    version: str
    ref: str
    description: str


def stage_subject(recipe: Recipe, stage: str) -> Subject:
    return Subject(
        recipe.repository,
        stage,
        f"{recipe.name}:{stage}",
        f"{recipe.name} {stage}, audited by layer-audit",
    )


def make_bom(
    recipe: Recipe | Subject, stage: str, found: Sequence[Entry], created: _dt.datetime
) -> str:
    """The CycloneDX document (JSON, spec 1.6) for ``found``; deterministic for its inputs.

    ``recipe`` is a recipe (the subject is its ``stage``) or any :class:`Subject`.
    """
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    about = recipe if isinstance(recipe, Subject) else stage_subject(recipe, stage)
    subject = Component(
        name=about.name,
        version=about.version,
        type=ComponentType.CONTAINER,
        bom_ref=about.ref,
        description=about.description,
    )
    components = []
    for entry in found:
        hashes = [
            HashType(alg=HashAlgorithm.SHA_256, content=value.removeprefix("sha256:"))
            for value in entry.hashes
            if value.startswith("sha256:")
        ]
        properties = [
            Property(name=f"{PROPERTY}:interpreter", value=entry.interpreter),
            Property(name=f"{PROPERTY}:location", value=entry.location or "(predicted)"),
            Property(name=f"{PROPERTY}:layer", value=entry.layer),
            *(Property(name=f"{PROPERTY}:{key}", value=value) for key, value in entry.properties),
        ]
        purl = PackageURL(
            entry.ecosystem,
            namespace=entry.namespace or None,
            name=entry.name,
            version=entry.version,
            qualifiers=dict(entry.qualifiers) or None,
        )
        components.append(
            Component(
                name=entry.name,
                version=entry.version,
                type=ComponentType.LIBRARY,
                purl=purl,
                bom_ref=_bom_ref(entry, purl.to_string()),
                hashes=hashes,
                properties=properties,
            )
        )
    bom = Bom(components=components, serial_number=_serial(about.ref, found))
    bom.metadata.component = subject
    bom.metadata.timestamp = created
    bom.register_dependency(subject, components)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the library warns about optional fields left out
        return str(JsonV1Dot6(bom).output_as_string(indent=2)) + "\n"


NATIVE = "(native)"  # the interpreter column of a native library file


def native_entries(system: System | None, origin: Mapping[str, str]) -> list[Entry]:
    """One entry per CUDA-family library file of ``system`` with its loads as the loader model
    resolves them; ``origin`` names, by path, the layer that left the file as it is."""
    if system is None or not system.native:
        return []
    from audit.native.bridge import resolved_libraries

    found = []
    for library in resolved_libraries(system):
        loaded = {load.path for load in library.loads if load.path}
        for copy in library.copies:
            properties = [("soname", library.soname)]
            properties += [("owner", copy.owner or copy.origin or "unknown")]
            properties += [("loaded-by", load.by) for load in library.loads
                           if load.path == copy.path]  # fmt: skip
            others = sorted(c.path for c in library.copies if c.path != copy.path)
            if copy.path in loaded:
                properties += [("shadows", path) for path in others]
            else:
                properties += [("shadowed-by", path) for path in sorted(loaded)]
            found.append(Entry(
                NATIVE, library.soname, copy.release or "unknown", copy.path,
                origin.get(copy.path, BASE_LAYER), (), "generic",
                qualifiers=(("path", copy.path),), properties=tuple(properties),
            ))  # fmt: skip
    return found


def _native_state(system: System | None) -> dict[str, str]:
    """Path -> version of every native library file (what a layer changes)."""
    return {c.path: c.release for lib in (system.native if system else ()) for c in lib.copies}


def _bom_ref(entry: Entry, purl: str) -> str:
    if entry.ecosystem == "pypi":
        return f"{entry.interpreter}:{entry.location}:{entry.name}@{entry.version}"
    return purl


def _serial(ref: str, found: Sequence[Entry]) -> uuid.UUID:
    """A serial number derived from the content: the same trail gives the same document."""
    digest = hashlib.sha256(f"{ref}\0{found!r}".encode()).hexdigest()
    return uuid.uuid5(uuid.NAMESPACE_URL, f"urn:layer-audit:{digest}")


def write_sbom(
    root: Path, recipe: Recipe, stage: str, files: Mapping[str, bytes], created: str
) -> Path:
    """Write ``build/reports/<image>/<stage>/sbom.cdx.json``; ``created`` is RFC 3339 UTC."""
    moment = _dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    try:
        found = entries(root, recipe, stage, files)
    except (LockError, SnapshotError, FileNotFoundError) as exc:
        raise SnapshotError(f"{recipe.name} {stage}: cannot make the SBOM: {exc}") from exc
    path = reports_dir(root, recipe.name, stage) / SBOM_NAME
    atomic.write_text(path, make_bom(recipe, stage, found, moment))
    return path


def history_entries(history: History) -> list[Entry]:
    """Every distribution, OS package and native library file of the last state, each with the
    layer that left it as it is (``layer 14 (runtime 3, Dockerfile:41)``): the walk knows
    every layer."""
    if not history.states:
        return []
    origin: dict[tuple[str, str], str] = {}
    os_origin: dict[str, str] = {}
    native_origin: dict[str, str] = {}
    before: dict[str, dict[str, tuple[str, str, str]]] = {}
    old_os: dict[str, str] = {}
    old_native: dict[str, str] = {}
    for state in history.states[1:]:
        label = layer_label(state.ref)
        for env in state.environments:
            now, was = _state(env), before.get(env.interpreter, {})
            origin.update({(env.interpreter, n): label for n, v in now.items() if was.get(n) != v})
            before[env.interpreter] = now
        now_os, now_native = _os_state(state.system), _native_state(state.system)
        os_origin.update({k: label for k, v in now_os.items() if old_os.get(k) != v})
        native_origin.update({k: label for k, v in now_native.items() if old_native.get(k) != v})
        old_os, old_native = now_os, now_native
    last = history.states[-1]
    found = [
        Entry(env.interpreter, d.name, d.version, d.location,
              origin.get((env.interpreter, d.name), BASE_LAYER), ())
        for env in last.environments
        for d in env.distributions
    ]  # fmt: skip
    found += [
        replace(_os_entry(last.system, key, None), layer=os_origin.get(key, BASE_LAYER))
        for key in sorted(_os_state(last.system))
    ]
    found += native_entries(last.system, native_origin)
    return sorted(found, key=_entry_key)


def image_sbom(history: History, ref: str, created: str) -> str:
    """The CycloneDX document of a walked image: every environment of its last state, its OS
    packages and its native library files, each with the layer that installed it (no lock
    hashes: none was read)."""
    name, _, tag = ref.rpartition(":")
    if "/" in tag or not name:  # a registry port, not a tag
        name, tag = ref, "latest"
    subject = Subject(name, tag, ref, f"{ref}, audited by layer-audit")
    moment = _dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    return make_bom(subject, tag, history_entries(history), moment)
