"""From a snapshot's ``system`` to the native libraries it records, resolved by the model.

PURE: standard library only (plus the pure core), Python 3.9 syntax: the guard vendors it.

A ``system.native`` lists every copy of each CUDA-family SONAME (and, in files recorded before
the loader model, which copy each loader maps by the in-image script's rough rules). When the
system also carries ``system.loader`` (the scene the in-image script records, or the one the
layer walk builds from the layers), :func:`resolve_system` resolves it with the model, in
these processes:

1. one per Python package the rules know (torch, cupy, jax: each imported alone, with its
   work), and one per other package library that needs a CUDA-family SONAME
   (``<site>/<package>/lib/*.so*``, ``<site>/<package>/*.so``, ``<site>/*.so``: an extension
   such as ``flash_attn_2_cuda``), imported by its path alone;
2. one per library of an ``nvidia`` wheel (or in a site folder's ``nvidia`` tree) that none
   of those mapped, loaded by its path alone, as cuda-pathfinder and torch's preload load
   them (its own dependencies are then searched as the loader searches them);
3. one that opens by name from the interpreter every SONAME that no package process mapped
   and no wheel library maps as its dependency or ``dlopen`` (cuDNN's sub-libraries are
   opened by cuDNN through its RUNPATH, never by name from Python; NCCL is, by vLLM).

Each load's ``by`` names the requester and why the loader took that copy (``… (runpath
$ORIGIN)``), which the ``shadowed-native`` finding prints, and the same typed. The versioned
needs every mapped object's copy does not meet (:mod:`audit.native.versions`) come with them,
once each. The copies stay the system's own.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from audit.history.system import NativeLibrary, NativeLoad, System
from audit.native.catalog import family_of
from audit.native.process import LoadStep, run_process
from audit.native.pyrules import PACKAGE_TREES, RULES, library_opens
from audit.native.scene import Scene, scene_from_json
from audit.native.search import Reason
from audit.native.versions import version_findings

if TYPE_CHECKING:
    from audit.native.process import Load, ProcessOutcome
    from audit.native.scene import Copy
    from audit.native.versions import VersionFinding


@dataclass(frozen=True)
class Resolution:
    """A system resolved: its libraries with the model's loads, and every versioned need of a
    mapped object that the copy mapped for it does not meet (deduplicated, in process
    order). ``scene`` is None where the system recorded no loader facts (then ``libraries``
    are the system's own and ``unmet`` is empty)."""

    libraries: tuple[NativeLibrary, ...]
    unmet: tuple[VersionFinding, ...] = ()
    scene: Scene | None = None


def scene_of(system: System) -> Scene | None:
    """The loader facts a snapshot recorded, as a scene (None: none recorded)."""
    if not system.loader:
        return None
    return scene_from_json(json.loads(system.loader), "system.loader")


def requester(load: Load) -> str:
    """Who asked for the file: the object whose DT_NEEDED or ``dlopen`` mapped it, or, for a
    load by path or through ``ctypes``, the step (``torch: _preload_cuda_deps …``, ``dlopen
    libnccl.so.2``: the Python code that asked, not the ``_ctypes`` module it calls through)."""
    by_path = load.reason in (Reason.PRELOAD, Reason.PATH, Reason.EXEC)
    from_python = posixpath.basename(load.requirer).startswith("_ctypes.")
    return (load.step if by_path or from_python else "") or load.requirer or load.step


def describe(load: Load) -> str:
    """``<requester> (<why>)``: who asked for the file and how the loader found it."""
    how = load.reason.value + (f" {load.entry}" if load.entry else "")
    return f"{requester(load)} ({how})"


def processes(scene: Scene, sonames: list[str]) -> list[ProcessOutcome]:
    """The predicted processes (see the module's list): the packages', each unmapped wheel
    library's, then one that opens ``sonames`` by name (each where no package mapped it)."""
    if scene.python is None:
        return []
    found = []
    for rule in RULES.values():
        steps = rule(scene)
        if steps:
            found.append(_run(scene, [steps]))
    found += [_run(scene, [[LoadStep(path, "", Reason.PATH, f"import {path}")]])
              for path in extension_requesters(scene)]  # fmt: skip
    mapped = {load.soname for outcome in found for load in outcome.loads}
    wheel = []
    for copy in _wheel_copies(scene, mapped):
        wheel.append(_run(scene, [[_by_path(scene, copy)]]))
        found_by_others = {x.soname for x in wheel[-1].loads if x.path != copy.path}
        mapped |= found_by_others  # a library that finds them itself: no one opens them by name
    probes = [LoadStep(s, scene.python.ctypes, Reason.PATH, f"dlopen {s}") for s in sonames
              if s not in mapped]  # fmt: skip
    return [*found, *wheel, *([_run(scene, [[p] for p in probes])] if probes else [])]


def extension_requesters(scene: Scene) -> list[str]:
    """The package libraries outside the rules' trees that need a CUDA-family SONAME: at a
    site's root, in a package folder, or in its ``lib`` folder (paths as recorded, sorted)."""
    sites = scene.python.sites if scene.python else ()
    found = []
    for path, facts in scene.view.elf_files():
        relpath = next((path[len(s) + 1 :] for s in sites if path.startswith(s + "/")), "")
        parts = relpath.split("/")
        if not relpath or parts[0] in PACKAGE_TREES or len(parts) > 3:
            continue
        if len(parts) == 3 and parts[1] != "lib":
            continue
        if any(family_of(name) is not None for name in facts.needed):
            found.append(path)
    return found


def _wheel_copies(scene: Scene, mapped: set[str]) -> list[Copy]:
    """The copies a wheel installed (its RECORD, or a site's ``nvidia`` tree) whose SONAME no
    package process mapped, each SONAME once (the first copy in ``sys.path`` order)."""
    sites = scene.python.sites if scene.python else ()
    found: dict[str, Copy] = {}
    for site in sites:
        for copy in scene.family_copies():
            owner = scene.owners.get(copy.path)
            in_tree = copy.path.startswith(f"{site}/nvidia/")
            if (in_tree or (owner and owner.kind == "wheel")) and copy.soname not in mapped:
                found.setdefault(copy.soname, copy)
    return [found[soname] for soname in sorted(found)]


def _by_path(scene: Scene, copy: Copy) -> LoadStep:
    assert scene.python is not None
    label = f"dlopen {posixpath.basename(copy.path)} by path (as cuda-pathfinder does)"
    return LoadStep(copy.path, scene.python.ctypes, Reason.PRELOAD, label)


def _run(scene: Scene, phases: list[list[LoadStep]]) -> ProcessOutcome:
    assert scene.python is not None
    return run_process(scene.view, scene.settings, scene.python.executable, phases,
                       library_opens(scene))  # fmt: skip


def resolve_system(system: System) -> Resolution:
    """``system`` resolved by the model (unchanged, nothing unmet, when it recorded no loader
    facts)."""
    scene = scene_of(system)
    if scene is None:
        return Resolution(system.native)
    outcomes = processes(scene, [library.soname for library in system.native])
    libraries = tuple(replace(lib, loads=_loads(lib, outcomes)) for lib in system.native)
    unmet: dict[tuple[str, str, str, str, str], VersionFinding] = {}
    for outcome in outcomes:
        for finding in version_findings(outcome, scene.view):
            key = (finding.requirer, finding.needed, finding.version, finding.symbol,
                   finding.loaded.path)  # fmt: skip
            unmet.setdefault(key, finding)
    return Resolution(libraries, tuple(unmet.values()), scene)


def resolved_libraries(system: System) -> tuple[NativeLibrary, ...]:
    """``system.native`` with each library's loads as the model resolves them (unchanged when
    the snapshot recorded no loader facts)."""
    return resolve_system(system).libraries


def _loads(library: NativeLibrary, outcomes: list[ProcessOutcome]) -> tuple[NativeLoad, ...]:
    found: list[NativeLoad] = []
    for outcome in outcomes:
        for load in outcome.loaded(library.soname):
            item = NativeLoad(describe(load), load.path, requester(load), load.reason.value,
                              load.entry)  # fmt: skip
            if item not in found:
                found.append(item)
    return tuple(found) or (NativeLoad(f"dlopen {library.soname}", ""),)
