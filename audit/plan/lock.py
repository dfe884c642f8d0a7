"""The lock plan, pure: what each pip layer's lock depends on, which locks are stale, and the
constraints that hold everything installed before a layer.

No Docker, no network, no compile: every file is read through a :class:`Source`, so
``lock --check``, audit-deps and the pull-request gate (a git-ref source) share this code.

A layer's inputs are named ``key -> digest`` lines stored in its lock's header: the lock format
and resolver versions, the recipe's platform and first interpreter, its index settings, the
bytes of its requirements file and every ``-r``/``-c`` include, the base record, every earlier
lock's content digest, and the waivers (they relax constraints). A changed input names itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date

from packaging.version import InvalidVersion, Version

from audit.core.errors import LockError
from audit.core.policy import Waiver
from audit.plan.lockfile import (
    LOCK_FORMAT,
    BaseRecord,
    Lock,
    base_relpath,
    digest_inputs,
    lock_relpath,
    parse_base,
    parse_lock,
    read_file,
    sha256,
)
from audit.plan.recipe import PipLayer, Recipe, Step
from audit.plan.requirements_in import parse_requirements
from audit.plan.sources import Source
from audit.plan.trust import base_record_mismatch

PIP_TOOLS_VERSION = "7.6.2"
PIP_VERSION = "25.2"
RESOLVER = f"pip-tools=={PIP_TOOLS_VERSION} pip=={PIP_VERSION}"
BASE_ORIGIN = "the base image"


@dataclass(frozen=True)
class LockState:
    step: Step
    relpath: str
    status: str  # "fresh" | "stale" | "missing"
    reason: str


@dataclass(frozen=True)
class LayerInputs:
    """Everything one pip layer's lock is compiled from, and the digest lines that name it."""

    step: Step
    relpath: str  # the lock, project-relative
    requirements: str  # the layer's file, recipe-relative (as pip-compile sees it)
    files: Mapping[str, bytes]  # recipe-relative path -> bytes, the layer's file and includes
    index_url: str
    extra_index_url: str | None
    pre: bool
    digests: Mapping[str, str]

    @property
    def digest(self) -> str:
        return digest_inputs(self.digests)


@dataclass(frozen=True)
class Constraint:
    """One package installed before a layer: its version and who installed it."""

    name: str
    version: str
    origin: str  # BASE_ORIGIN or a step label


def pip_steps(recipe: Recipe, until: str | None = None) -> list[Step]:
    return [s for s in recipe.steps(until) if isinstance(s.layer, PipLayer)]


def _layer(step: Step) -> PipLayer:
    assert isinstance(step.layer, PipLayer)
    return step.layer


def _text_digest(value: str) -> str:
    return sha256(value.encode())


def layer_index_urls(recipe: Recipe, layer: PipLayer) -> tuple[str, ...]:
    """The indexes one pip layer may use: the primary and the one it names."""
    extra = (recipe.index(layer.index).url,) if layer.index else ()
    return (recipe.index_url, *extra)


def _read_files(source: Source, recipe: Recipe, step: Step) -> dict[str, bytes]:
    folder = recipe.directory.as_posix()
    layer = _layer(step)
    relpath = f"{folder}/{layer.requirements}"
    allowed = layer_index_urls(recipe, layer)
    parsed = parse_requirements(source, relpath, allowed_index_urls=allowed)
    return {path.removeprefix(folder + "/"): source.read_bytes(path) for path in parsed.files}


def waivers_digest(waivers: Sequence[Waiver]) -> str:
    return _text_digest(json.dumps([w.to_json() for w in waivers], sort_keys=True))


def layer_inputs(
    source: Source, recipe: Recipe, step: Step, base_digest: str, earlier: Mapping[str, str]
) -> LayerInputs:
    """The inputs of ``step`` given the base record's digest and earlier locks' content digests."""
    layer = _layer(step)
    files = _read_files(source, recipe, step)
    extra = recipe.index(layer.index).url if layer.index else None
    digests = {
        "format": _text_digest(LOCK_FORMAT),
        "resolver": _text_digest(RESOLVER),
        "platform": _text_digest(recipe.platform),
        "interpreter": _text_digest(recipe.interpreters[0]),
        "index": _text_digest(recipe.index_url),
        "extra-index": _text_digest(extra or ""),
        "pre": _text_digest(str(layer.pre)),
        "base": base_digest,
        "waivers": waivers_digest(recipe.policy.waivers),
    }
    digests |= {f"file {path}": sha256(data) for path, data in files.items()}
    digests |= {f"after {slug}": content for slug, content in earlier.items()}
    relpath = lock_relpath(recipe, step)
    return LayerInputs(
        step, relpath, layer.requirements, files, recipe.index_url, extra, layer.pre, digests
    )


def changed_inputs(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """Input names whose digest differs, was added or went away, sorted."""
    return sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))


def _describe_change(keys: Sequence[str]) -> str:
    names = [key.removeprefix("file ") for key in keys]
    return "inputs changed: " + ", ".join(names)


def read_base_digest(source: Source, recipe: Recipe) -> tuple[BaseRecord, str] | None:
    """The base record and the digest of its bytes, or None when it was never recorded."""
    relpath = base_relpath(recipe)
    if not source.exists(relpath):
        return None
    data = read_file(source, relpath, "re-record it: nox -s lock -- IMAGE --record-base")
    return parse_base(data, source.describe(relpath)), sha256(data)


def _state_of(
    source: Source, inputs: LayerInputs, earlier_stale: str | None
) -> tuple[LockState, Lock | None]:
    step, relpath = inputs.step, inputs.relpath
    if not source.exists(relpath):
        return LockState(step, relpath, "missing", "no lock yet"), None
    data = read_file(source, relpath, "compile it: nox -s lock -- IMAGE")
    lock = parse_lock(data, source.describe(relpath))
    if earlier_stale:
        return LockState(step, relpath, "stale", earlier_stale), lock
    changed = changed_inputs(lock.inputs, inputs.digests)
    if changed:
        return LockState(step, relpath, "stale", _describe_change(changed)), lock
    return LockState(step, relpath, "fresh", "inputs unchanged"), lock


@dataclass(frozen=True)
class Survey:
    """What one look at the locks found: each layer's state in build order, the base record
    with its digest (None when never recorded) and every lock it parsed, by step slug."""

    states: tuple[LockState, ...]
    base: tuple[BaseRecord, str] | None
    locks: Mapping[str, Lock]


def survey_locks(source: Source, recipe: Recipe) -> Survey:
    """Read the base record and every lock once; a stale layer stales all later ones."""
    base = read_base_digest(source, recipe)
    if base is None:
        reason = f"no base snapshot ({base_relpath(recipe)})"
        states = tuple(_no_base(source, recipe, step, reason) for step in pip_steps(recipe))
        return Survey(states, None, {})
    found: list[LockState] = []
    locks: dict[str, Lock] = {}
    earlier: dict[str, str] = {}
    stale_since = base_record_mismatch(recipe, base[0])  # another base: every lock is stale
    for step in pip_steps(recipe):
        inputs = layer_inputs(source, recipe, step, base[1], earlier)
        state, lock = _state_of(source, inputs, stale_since)
        found.append(state)
        if state.status != "fresh" and stale_since is None:
            stale_since = f"an earlier layer changed: {step.label}"
        earlier[step.slug] = lock.content_digest if lock else "missing"
        if lock is not None:
            locks[step.slug] = lock
    return Survey(tuple(found), base, locks)


def check_locks(source: Source, recipe: Recipe) -> list[LockState]:
    """The state of every pip layer's lock, in build order; a stale layer stales all later."""
    return list(survey_locks(source, recipe).states)


def _no_base(source: Source, recipe: Recipe, step: Step, reason: str) -> LockState:
    relpath = lock_relpath(recipe, step)
    return LockState(step, relpath, "stale" if source.exists(relpath) else "missing", reason)


# -- constraints ----------------------------------------------------------------------------


def base_constraints(record: BaseRecord, interpreter: str, where: str) -> list[Constraint]:
    """The base winners of ``interpreter``; unparsable versions cannot be pinned and are skipped."""
    for environment in record.environments:
        if environment.interpreter == interpreter:
            return [
                Constraint(name, dist.version, BASE_ORIGIN)
                for name, dist in sorted(environment.winners().items())
                if _is_version(dist.version)
            ]
    found = ", ".join(env.interpreter for env in record.environments) or "none"
    raise LockError(
        f"{where}: no snapshot of {interpreter} (found: {found})",
        "re-record the base: nox -s lock -- IMAGE --record-base",
    )


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def installed_before(
    base: Iterable[Constraint], earlier: Iterable[tuple[Step, Lock]]
) -> dict[str, Constraint]:
    """Name -> what is installed before a layer: the base, then each earlier lock over it."""
    installed = {c.name: c for c in base}
    for step, lock in earlier:
        for pin in lock.pins.values():
            installed[pin.name] = Constraint(pin.name, pin.version, step.label)
    return installed


def waiver_for(constraint: Constraint, waivers: Sequence[Waiver]) -> Waiver | None:
    """The waiver that lets ``constraint`` move, if any (its package and from-version match)."""
    for waiver in waivers:
        if waiver.package == constraint.name and waiver.from_version in ("*", constraint.version):
            return waiver
    return None


def constraint_line(constraint: Constraint, waiver: Waiver | None) -> str | None:
    """The pip constraint for one installed package; a waiver widens it to its target version.

    pip constraints cannot say "this version or that one", so a waiver becomes the range
    spanning both; :func:`waiver_violations` then refuses anything in between.
    """
    if waiver is None:
        return f"{constraint.name}=={constraint.version}"
    if waiver.to_version == "*":
        return None
    low, high = sorted((Version(constraint.version), Version(waiver.to_version)))
    return f"{constraint.name}>={low},<={high}"


def render_constraints(installed: Mapping[str, Constraint], waivers: Sequence[Waiver]) -> str:
    """The constraints file text: sorted, one line per package, deterministic."""
    lines = [constraint_line(c, waiver_for(c, waivers)) for _, c in sorted(installed.items())]
    return "".join(f"{line}\n" for line in lines if line is not None)


def waiver_violations(
    installed: Mapping[str, Constraint], pins: Mapping[str, str], waivers: Sequence[Waiver]
) -> list[tuple[Constraint, str]]:
    """Waived packages that landed on a version neither installed nor named by the waiver."""
    bad = []
    for name, version in sorted(pins.items()):
        constraint = installed.get(name)
        waiver = waiver_for(constraint, waivers) if constraint else None
        if constraint is None or waiver is None or waiver.to_version == "*":
            continue
        allowed = {Version(constraint.version), Version(waiver.to_version)}
        if Version(version) not in allowed:
            bad.append((constraint, version))
    return bad


def active_waivers(waivers: Sequence[Waiver], today: date) -> tuple[Waiver, ...]:
    """Waivers that still relax constraints: an expired one relaxes nothing."""
    return tuple(w for w in waivers if w.expires is None or w.expires >= today)
