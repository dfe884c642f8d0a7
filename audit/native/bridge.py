"""From a snapshot's ``system`` to the native libraries it records, resolved by the model.

PURE: standard library only (plus the pure core), Python 3.9 syntax: the guard vendors it.

A snapshot's ``system.native`` lists every copy of each CUDA-family SONAME and, in files
recorded before the loader model, which copy each loader maps by the in-image script's rough
rules. When the snapshot also carries ``system.loader`` (the scene the in-image script records
for :mod:`audit.native`), :func:`resolved_libraries` replaces those loads with the model's:
one process per Python package the rules know (torch, cupy, jax: each imported alone, with its
work), and, for a SONAME none of them maps, a ``dlopen`` by name from the interpreter. Each
load's ``by`` names the requester and why the loader took that copy (``… (runpath $ORIGIN)``),
which the ``shadowed-native`` finding prints. The copies stay the snapshot's own.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

from audit.history.system import NativeLibrary, NativeLoad, System
from audit.native.process import Step, run_process
from audit.native.pyrules import RULES, library_opens
from audit.native.scene import Scene, scene_from_json
from audit.native.search import Reason

if TYPE_CHECKING:
    from audit.native.process import Load, Outcome


def scene_of(system: System) -> Scene | None:
    """The loader facts a snapshot recorded, as a scene (None: none recorded)."""
    if not system.loader:
        return None
    return scene_from_json(json.loads(system.loader), "system.loader")


def describe(load: Load) -> str:
    """``<requester> (<why>)``: who asked for the file and how the loader found it."""
    who = load.requirer or load.step
    how = load.reason.value + (f" {load.entry}" if load.entry else "")
    return f"{who} ({how})"


def processes(scene: Scene, sonames: list[str]) -> list[Outcome]:
    """One predicted process per package installed, then one that opens ``sonames`` by name
    from the interpreter (each once, where no package process mapped it)."""
    if scene.python is None:
        return []
    found = []
    for rule in RULES.values():
        steps = rule(scene)
        if steps:
            found.append(_run(scene, [steps]))
    mapped = {load.soname for outcome in found for load in outcome.loads}
    probes = [Step(s, scene.python.ctypes, Reason.PATH, f"dlopen {s}") for s in sonames
              if s not in mapped]  # fmt: skip
    return [*found, _run(scene, [[p] for p in probes])] if probes else found


def _run(scene: Scene, phases: list[list[Step]]) -> Outcome:
    assert scene.python is not None
    return run_process(scene.view, scene.settings, scene.python.executable, phases,
                       library_opens(scene))  # fmt: skip


def resolved_libraries(system: System) -> tuple[NativeLibrary, ...]:
    """``system.native`` with each library's loads as the model resolves them (unchanged when
    the snapshot recorded no loader facts)."""
    scene = scene_of(system)
    if scene is None:
        return system.native
    outcomes = processes(scene, [library.soname for library in system.native])
    return tuple(replace(library, loads=_loads(library, outcomes)) for library in system.native)


def _loads(library: NativeLibrary, outcomes: list[Outcome]) -> tuple[NativeLoad, ...]:
    found: list[NativeLoad] = []
    for outcome in outcomes:
        for load in outcome.loaded(library.soname):
            item = NativeLoad(describe(load), load.path)
            if item not in found:
                found.append(item)
    return tuple(found) or (NativeLoad(f"dlopen {library.soname}", ""),)
