"""The standard export: a stage's predicted environment as a PEP 751 ``pylock.<stage>.toml``.

What a stage ships is the base image's packages with every lock up to it applied
(:mod:`audit.history.predict`). A package some lock pins at the version the stage ships is an
installable ``[[packages]]`` entry: its name, version, the index it comes from and one
``wheels``/``sdist`` entry per file of that version whose sha256 the lock lists (the files
are looked up on the index by the engine: :mod:`audit.index.files`). A package only the
base image provides is not installable from any index (a vendor's source-built vLLM, a torch
``+cu130``): it is named, with its version, under ``[tool.layer-audit]``, so the file says
exactly what the stage holds and an installer given the file installs only what can be.

Invariants: only fresh locks are exported (a stale or missing one up to the stage is bad
input); the same inputs render byte-identical text; every URL is redacted (no userinfo).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from audit.errors import LockError, UsageError
from audit.history.predict import Installed, base_environment, base_markers, predict_from
from audit.lock.files import BaseRecord, base_relpath
from audit.lock.format import Pin
from audit.lock.plan import survey_locks
from audit.project.sources import Source
from audit.recipe.model import PipLayer, Recipe, Step
from audit.redact import redact

LOCK_VERSION = "1.0"
CREATED_BY = "layer-audit"


@dataclass(frozen=True)
class ExportedFile:
    """A file of a package as the export names it (PEP 751): file name, absolute URL and sha256."""

    filename: str
    url: str
    sha256: str


@dataclass(frozen=True)
class Locked:
    """A package of the stage that a lock pins: where to look for its files."""

    name: str
    version: str
    hashes: tuple[str, ...]  # sha256 hex digests the lock allows
    indexes: tuple[str, ...]  # the layer's extra index first, then the primary index
    lock: str  # the lock's project-relative path


@dataclass(frozen=True)
class StageExport:
    """A stage's environment split into what locks pin and what only the base provides."""

    recipe: Recipe
    stage: str
    record: BaseRecord
    locked: tuple[Locked, ...]
    from_base: tuple[tuple[str, str], ...]  # (name, version)


def stage_export(source: Source, recipe: Recipe, stage: str) -> StageExport:
    """What ``stage`` ships, from fresh locks only (else :class:`LockError`, exit 2)."""
    if stage not in {s.name for s in recipe.stages}:
        names = ", ".join(s.name for s in recipe.stages)
        raise UsageError(f"--stage {stage}: {recipe.source} has no such stage", f"one of: {names}")
    survey = survey_locks(source, recipe)
    if survey.base is None:
        raise LockError(
            f"{base_relpath(recipe)}: missing: {recipe.name} has no base snapshot",
            f"record it: nox -s lock -- {recipe.name} --record-base",
        )
    wanted = {step.slug for step in recipe.steps(until=stage)}
    for state in survey.states:
        if state.step.slug in wanted and state.status != "fresh":
            raise LockError(
                f"{state.relpath}: {state.status} ({state.reason}): it cannot be exported",
                f"recompile the locks first: nox -s lock -- {recipe.name}",
            )
    record = survey.base[0]
    base = base_environment(record, recipe, source)
    steps = [p for p in predict_from(base, source, recipe, survey.locks) if p.step.slug in wanted]
    shipped = steps[-1].after if steps else base
    pins = _latest_pins(recipe, [(p.step, survey.locks[p.step.slug].pins) for p in steps if p.lock])
    return _split(recipe, stage, record, shipped, pins)


def _latest_pins(
    recipe: Recipe, locks: Sequence[tuple[Step, Mapping[str, Pin]]]
) -> dict[str, Locked]:
    """Each name's pin in the last lock (build order) that pins it."""
    found: dict[str, Locked] = {}
    for step, pins in locks:
        indexes = (*_extra_index(recipe, step), recipe.index_url)
        relpath = f"locks/{recipe.name}/{step.slug}.txt"
        for name, pin in pins.items():
            hashes = tuple(h.removeprefix("sha256:") for h in pin.hashes if h.startswith("sha256:"))
            found[name] = Locked(name, pin.version, hashes, indexes, relpath)
    return found


def _extra_index(recipe: Recipe, step: Step) -> tuple[str, ...]:
    layer = step.layer
    if isinstance(layer, PipLayer) and layer.index:
        return (recipe.index(layer.index).url,)
    return ()


def _split(
    recipe: Recipe, stage: str, record: BaseRecord, shipped: Installed, pins: Mapping[str, Locked]
) -> StageExport:
    locked, from_base = [], []
    for name in sorted(shipped):
        dist = shipped[name]
        pin = pins.get(name)
        if pin is not None and pin.version == dist.version:
            locked.append(pin)
        else:
            from_base.append((name, dist.version))
    return StageExport(recipe, stage, record, tuple(locked), tuple(from_base))


# --- the document ---------------------------------------------------------------------------


def pylock_document(
    export: StageExport, files: Mapping[str, Sequence[ExportedFile]], index_of: Mapping[str, str]
) -> dict[str, Any]:
    """The PEP 751 table: ``files`` are each locked package's matching files, ``index_of``
    the index that listed them (by package name)."""
    python = _python_version(export)
    document: dict[str, Any] = {"lock-version": LOCK_VERSION}
    if python:
        document["requires-python"] = f"=={python}"
    document["created-by"] = CREATED_BY
    document["packages"] = [
        _package(pin, files[pin.name], index_of[pin.name]) for pin in export.locked
    ]
    document["tool"] = {"layer-audit": _tool_table(export)}
    return document


def _python_version(export: StageExport) -> str | None:
    """The full version of the interpreter pip layers install with (its markers, else the
    version the snapshot recorded)."""
    markers = base_markers(export.record, export.recipe)
    if markers.get("python_full_version"):
        return markers["python_full_version"]
    wanted = export.recipe.interpreters[0]
    environments = export.record.environments
    found = [e for e in environments if e.interpreter == wanted] or list(environments)
    return found[0].python if found and found[0].python else None


def _package(pin: Locked, files: Sequence[ExportedFile], index: str) -> dict[str, Any]:
    wheels = [f for f in files if f.filename.endswith(".whl")]
    sdists = [f for f in files if not f.filename.endswith(".whl")]
    package: dict[str, Any] = {"name": pin.name, "version": pin.version, "index": redact(index)}
    if sdists:
        package["sdist"] = _file(sdists[0])
    if wheels:
        package["wheels"] = [_file(f) for f in wheels]
    return package


def _file(found: ExportedFile) -> dict[str, Any]:
    return {"name": found.filename, "url": redact(found.url), "hashes": {"sha256": found.sha256}}


def _tool_table(export: StageExport) -> dict[str, Any]:
    record = export.record
    return {
        "image": export.recipe.name,
        "stage": export.stage,
        "base-image": record.image,
        "base-image-id": record.image_id,
        "platform": export.recipe.platform,
        "installed-by-base": [{"name": n, "version": v} for n, v in export.from_base],
    }


def matching_files(pin: Locked, listed: Iterable[ExportedFile]) -> list[ExportedFile]:
    """The files of ``pin``'s version the lock allows (by sha256), in file-name order."""
    allowed = set(pin.hashes)
    return sorted((f for f in listed if f.sha256 in allowed), key=lambda f: f.filename)


# --- TOML -----------------------------------------------------------------------------------


def render_toml(document: Mapping[str, Any]) -> str:
    """``document`` as TOML: top-level keys, then ``[[packages]]`` (with ``[packages.sdist]``
    and ``[[packages.wheels]]``), then ``[tool.layer-audit]``. Strings are JSON-escaped, which
    TOML basic strings accept."""
    lines = [
        f"{key} = {_value(value)}"
        for key, value in document.items()
        if key not in ("packages", "tool")
    ]
    for package in document["packages"]:
        lines += ["", "[[packages]]"]
        lines += [f"{k} = {_value(v)}" for k, v in package.items() if k not in ("sdist", "wheels")]
        if "sdist" in package:
            lines += ["", "[packages.sdist]", *_pairs(package["sdist"])]
        for wheel in package.get("wheels", ()):
            lines += ["", "[[packages.wheels]]", *_pairs(wheel)]
    for tool, table in document.get("tool", {}).items():
        lines += ["", f"[tool.{tool}]", *_pairs(table)]
    return "\n".join(lines) + "\n"


def _pairs(table: Mapping[str, Any]) -> list[str]:
    return [f"{key} = {_value(value)}" for key, value in table.items()]


def _value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        return "[\n" + "".join(f"    {_value(v)},\n" for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")
