"""The lock plan, pure: what each pip layer's lock depends on, which locks are stale, what is
installed before a layer, and which of a resolution's pins the layer moves.

No Docker, no network, no compile: every file is read through a :class:`Source`, so
``lock --check``, audit-deps and the pull-request gate (a git-ref source) share this code.

A layer's inputs are named ``key -> digest`` lines stored in its lock's header: the lock format
and resolver versions, the recipe's platform and first interpreter, its index settings,
``no_deps`` and ``override``, the bytes of its requirements file and every ``-r``/``-c``
include, the base record and every earlier lock's content digest. A changed input names
itself. Waivers are not inputs: they never change what pip resolves, only the verdict on it,
which lock, audit-deps, the gate and the guard each compute afresh.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from audit.errors import LockError, UsageError
from audit.history.snapshot import Distribution, canonical_name
from audit.lock.files import (
    LOCK_FORMAT,
    BaseRecord,
    Lock,
    PinMetadata,
    base_relpath,
    digest_inputs,
    lock_relpath,
    parse_base,
    read_file,
    read_lock,
    requires_lines,
    rerecord_hint,
    sha256,
)
from audit.lock.format import Pin
from audit.lock.trust import base_record_mismatch
from audit.project.frontdoor import FrontDoor
from audit.project.sources import Source
from audit.recipe.model import PipLayer, Recipe, Step
from audit.recipe.requirements_in import parse_requirements

PIP_TOOLS_VERSION = "7.6.2"
PIP_VERSION = "25.2"
RESOLVER = f"pip-tools=={PIP_TOOLS_VERSION} pip=={PIP_VERSION}"
UV_VERSION = "0.13.9"  # audit.lock.resolvers.uv installs exactly this one
RESOLVERS = {"pip-tools": RESOLVER, "uv": f"uv=={UV_VERSION}"}


def resolver_label(recipe: Recipe) -> str:
    """What compiles the recipe's locks, with its version: part of every lock's inputs."""
    return RESOLVERS[recipe.resolver]


BASE_ORIGIN = "the base image"


@dataclass(frozen=True)
class LockState:
    step: Step
    relpath: str
    status: str  # "fresh" | "stale" | "missing"
    reason: str
    # the layer's input lines now (none when no base record says what they are)
    inputs: Mapping[str, str] = field(default_factory=dict)


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
    """One package installed before a layer: its version, who installed it, and what pip's
    resolver reads of it (so a package no index carries still takes part in resolution)."""

    name: str  # canonical (PEP 503)
    version: str
    origin: str  # BASE_ORIGIN or a step label
    requires_dist: tuple[str, ...] = ()
    requires_python: str = ""
    raw_name: str = ""


def pip_steps(recipe: Recipe, until: str | None = None) -> list[Step]:
    return [s for s in recipe.steps(until) if isinstance(s.layer, PipLayer)]


def _layer(step: Step) -> PipLayer:
    assert isinstance(step.layer, PipLayer)
    return step.layer


def _text_digest(value: str) -> str:
    """The digest of a setting's text."""
    return sha256(value.encode())


def layer_index_urls(recipe: Recipe, layer: PipLayer) -> tuple[str, ...]:
    """The indexes one pip layer may use: its primary (the image's, or its own
    ``primary_index``) and the extra one it names."""
    extra = (recipe.index(layer.index).url,) if layer.index else ()
    return (recipe.layer_index_url(layer), *extra)


def _read_files(source: Source, recipe: Recipe, step: Step) -> dict[str, bytes]:
    folder = recipe.directory.as_posix()
    layer = _layer(step)
    relpath = f"{folder}/{layer.requirements}"
    allowed = layer_index_urls(recipe, layer)
    parsed = parse_requirements(source, relpath, allowed_index_urls=allowed)
    return {path.removeprefix(folder + "/"): source.read_bytes(path) for path in parsed.files}


def layer_inputs(
    source: Source,
    recipe: Recipe,
    step: Step,
    base_digest: str,
    earlier: Mapping[str, str],
    *,
    resolver: str | None = None,
) -> LayerInputs:
    """The inputs of ``step`` given the base record's digest and earlier locks' effect digests
    (:func:`after_inputs`: only the layers its own image holds, :meth:`Recipe.before`)."""
    layer = _layer(step)
    files = _read_files(source, recipe, step)
    extra = recipe.index(layer.index).url if layer.index else None
    index_url = recipe.layer_index_url(layer)
    digests = {
        "format": _text_digest(LOCK_FORMAT),
        "resolver": _text_digest(resolver or resolver_label(recipe)),
        "platform": _text_digest(recipe.platform),
        "interpreter": _text_digest(recipe.interpreters[0]),
        "index": _text_digest(index_url),
        "extra-index": _text_digest(extra or ""),
        "pre": _text_digest(str(layer.pre)),
        "no-deps": _text_digest(str(layer.no_deps)),
        "override": _text_digest(" ".join(layer.override)),
        "base": base_digest,
    }
    digests |= {f"file {path}": sha256(data) for path, data in files.items()}
    digests |= {f"after {slug}": content for slug, content in earlier.items()}
    relpath = lock_relpath(recipe, step)
    return LayerInputs(
        step, relpath, layer.requirements, files, index_url, extra, layer.pre, digests
    )


def changed_inputs(
    old: Mapping[str, str], new: Mapping[str, str], also: Mapping[str, str] | None = None
) -> list[str]:
    """Input names whose digest differs, was added or went away, sorted. ``also``: a digest an
    input may still be recorded with and mean the same (an ``after`` input written before
    locks recorded :attr:`Lock.effect_digest`: the earlier lock's whole-text digest)."""
    also = also or {}
    return sorted(
        key
        for key in set(old) | set(new)
        if old.get(key) != new.get(key) and (key not in also or old.get(key) != also[key])
    )


def after_inputs(earlier: Mapping[str, Lock | None]) -> tuple[dict[str, str], dict[str, str]]:
    """The ``after`` digests of a layer whose earlier layers' locks are ``earlier`` (slug ->
    lock, None when missing): each lock's effect digest, and its whole-text digest, which a
    lock written before effect digests recorded (:func:`changed_inputs` ``also``)."""
    effect = {slug: lock.effect_digest if lock else "missing" for slug, lock in earlier.items()}
    text = {f"after {slug}": lock.content_digest for slug, lock in earlier.items() if lock}
    return effect, text


def in_image(
    recipe: Recipe, step: Step, earlier: Mapping[str, Lock | None]
) -> dict[str, Lock | None]:
    """The entries of ``earlier`` (by step slug) for layers ``step``'s own image holds: the
    layers before it on its stage's chain, not those of a stage beside it."""
    before = recipe.before(step)
    return {slug: item for slug, item in earlier.items() if slug in before}


def _describe_change(keys: Sequence[str]) -> str:
    names = [key.removeprefix("file ") for key in keys]
    return "inputs changed: " + ", ".join(names)


def read_base_digest(source: Source, recipe: Recipe) -> tuple[BaseRecord, str] | None:
    """The base record and the digest of its bytes, or None when it was never recorded."""
    relpath = base_relpath(recipe)
    if not source.exists(relpath):
        return None
    data = read_file(source, relpath, rerecord_hint)
    digest = sha256(data)
    return parse_base(data, source.describe(relpath), digest, source.memo), digest


def _state_of(
    source: Source, inputs: LayerInputs, earlier_stale: str | None, also: Mapping[str, str]
) -> tuple[LockState, Lock | None]:
    step, relpath, now = inputs.step, inputs.relpath, inputs.digests
    lock = _lock_at(source, relpath)
    if lock is None:
        return LockState(step, relpath, "missing", "no lock yet", now), None
    if earlier_stale:
        return LockState(step, relpath, "stale", earlier_stale, now), lock
    changed = changed_inputs(lock.inputs, inputs.digests, also)
    if changed:
        return LockState(step, relpath, "stale", _describe_change(changed), now), lock
    return LockState(step, relpath, "fresh", "inputs unchanged", now), lock


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
    earlier: dict[str, Lock | None] = {}
    stale_since = base_record_mismatch(recipe, base[0], source.front)  # another base: all stale
    for step in pip_steps(recipe):
        after, also = after_inputs(in_image(recipe, step, earlier))
        inputs = layer_inputs(source, recipe, step, base[1], after)
        state, lock = _state_of(source, inputs, stale_since, also)
        found.append(state)
        if state.status != "fresh" and stale_since is None:
            stale_since = f"an earlier layer changed: {step.label}"
        earlier[step.slug] = lock
        if lock is not None:
            locks[step.slug] = lock
    return Survey(tuple(found), base, locks)


def read_locks(source: Source, recipe: Recipe) -> Survey:
    """The base record and every existing lock, read and verified as :func:`survey_locks` reads
    them (the same errors), without judging freshness: ``states`` is empty and no layer's
    inputs are read. For a reader that needs the locks' pins only (the gate's base ref)."""
    base = read_base_digest(source, recipe)
    if base is None:
        return Survey((), None, {})
    found = {step.slug: _lock_at(source, lock_relpath(recipe, step)) for step in pip_steps(recipe)}
    return Survey((), base, {slug: lock for slug, lock in found.items() if lock is not None})


def _lock_at(source: Source, relpath: str) -> Lock | None:
    """The verified lock at ``relpath``, or None when there is none yet."""
    if not source.exists(relpath):
        return None
    return read_lock(source, relpath)


def check_locks(source: Source, recipe: Recipe) -> list[LockState]:
    """The state of every pip layer's lock, in build order; a stale layer stales all later."""
    return list(survey_locks(source, recipe).states)


def _no_base(source: Source, recipe: Recipe, step: Step, reason: str) -> LockState:
    relpath = lock_relpath(recipe, step)
    return LockState(step, relpath, "stale" if source.exists(relpath) else "missing", reason)


# -- what is installed before a layer -------------------------------------------------------


def base_constraints(
    record: BaseRecord, interpreter: str, where: str, front: FrontDoor
) -> list[Constraint]:
    """The base winners of ``interpreter`` with their requirements; unparsable versions cannot
    take part in resolution and are skipped."""
    for environment in record.environments:
        if environment.interpreter == interpreter:
            return [
                _from_distribution(dist, where, front)
                for _, dist in sorted(environment.winners().items())
                if _is_version(dist.version)
            ]
    found = ", ".join(env.interpreter for env in record.environments) or "none"
    raise LockError(
        f"{where}: no snapshot of {interpreter} (found: {found})",
        f"re-record the base: {front.command('lock', 'IMAGE --record-base')}",
    )


def _from_distribution(dist: Distribution, where: str, front: FrontDoor) -> Constraint:
    if dist.requires_dist is None:
        raise LockError(
            f"{where}: recorded without requirement metadata (an older layer-audit wrote it)",
            f"re-record the base: {front.command('lock', 'IMAGE --record-base')}",
        )
    name = dist.raw_name or dist.name
    return Constraint(
        name=dist.name,
        version=dist.version,
        origin=BASE_ORIGIN,
        requires_dist=dist.requires_dist,
        requires_python=dist.requires_python,
        raw_name=name,
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
            meta = lock.metadata.get(pin.name, PinMetadata(()))
            installed[pin.name] = Constraint(
                pin.name, pin.version, step.label, meta.requires_dist, meta.requires_python
            )
    return installed


def existing_pins(installed: Mapping[str, Constraint]) -> str:
    """pip-compile's "existing output": every installed version, preferred while it satisfies
    every requirement (pip-tools drops a preference only when it makes resolution impossible:
    ``pip install``'s only-if-needed strategy)."""
    return "".join(f"{c.name}=={Version(c.version)}\n" for _, c in sorted(installed.items()))


def moved_pins(installed: Mapping[str, Constraint], pins: Mapping[str, Pin]) -> dict[str, Pin]:
    """The pins a layer installs or changes: not installed, or at another version."""
    return {
        name: pin
        for name, pin in sorted(pins.items())
        if name not in installed or not same_version(installed[name].version, pin.version)
    }


def same_version(a: str, b: str) -> bool:
    """Equal as PEP 440 versions (``2.9.0+CU130`` is ``2.9.0+cu130``), else as text."""
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


_BLOCK_START = re.compile(r"^[A-Za-z0-9]")


def pin_blocks(text: str) -> dict[str, str]:
    """pip-compile output split per pin: canonical name -> its lines (pin, hashes, ``# via``)."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if _BLOCK_START.match(line):
            name = canonical_name(re.split(r"[=<>!~;\[ ]", line, maxsplit=1)[0])
            current = blocks.setdefault(name, [])
        elif not line.startswith((" ", "\t")):
            current = None  # a top-level comment: not part of any pin
        if current is not None:
            current.append(line)
    return {name: "\n".join(lines) + "\n" for name, lines in blocks.items()}


def lock_body(blocks: Mapping[str, str], metadata: Mapping[str, PinMetadata]) -> str:
    """The lock body: the moved pins' blocks, then what pip reads of each (``# requires``)."""
    return "".join(blocks[name] for name in sorted(blocks)) + requires_lines(metadata)


_VIA = re.compile(r"^\s+# via\s*(?P<first>.*)$")
_VIA_MORE = re.compile(r"^\s+#   (?P<parent>\S.*)$")


def via_parents(block: str) -> list[str]:
    """Who pulled a pin in, from pip-compile's ``# via`` lines: names or ``-r FILE``."""
    parents: list[str] = []
    inside = False
    for line in block.splitlines():
        via, more = _VIA.match(line), _VIA_MORE.match(line)
        if via:
            inside = True
            parents += [via["first"].strip()] if via["first"].strip() else []
        elif more and inside:
            parents.append(more["parent"].strip())
    return parents


def requirement_on(name: str, requires: Iterable[str]) -> str | None:
    """The first requirement string in ``requires`` about ``name`` (no markers evaluated)."""
    for text in requires:
        head = re.split(r"[\s=<>!~;\[(]", text.strip(), maxsplit=1)[0]
        if canonical_name(head) == name:
            return text.strip()
    return None


def who_asks(name: str, parents: Iterable[str], after: Mapping[str, Constraint]) -> list[str]:
    """``flashinfer-python 0.6.18 requires nvidia-nccl-cu13==2.29.7`` for each parent."""
    found = []
    for parent in parents:
        if parent.startswith("-r ") or parent.startswith("-c "):
            found.append(f"{parent.split(' ', 1)[1]} asks for it directly")
            continue
        other = after.get(canonical_name(parent))
        wanted = requirement_on(name, other.requires_dist) if other else None
        if other is not None:
            asks = f"requires {wanted}" if wanted else f"depends on {name}"
            found.append(f"{other.raw_name or other.name} {other.version} {asks}")
    return found


# -- deliberate moves -------------------------------------------------------------------------


@dataclass(frozen=True)
class Upgrade:
    """What a lock run may move on purpose (``--upgrade``, ``--upgrade-package``).

    Without it a re-lock prefers, besides everything installed before the layer, what the
    layer's previous lock pinned: one edited line moves one package, not every pin. With
    ``everything`` the layer's own pins go to the newest allowed; ``packages`` (canonical name
    -> exact version, or None for the newest allowed) lose their preference wherever they are.
    """

    everything: bool = False
    packages: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.everything or bool(self.packages)


def read_ahead_inputs(
    source: Source,
    recipe: Recipe,
    states: Sequence[LockState],
    base_digest: str,
    *,
    resolver: str,
    upgrade: Upgrade,
) -> list[LayerInputs]:
    """The inputs of the layers of ``states`` a run will compile that resolve (a no_deps layer
    only pins): what a resolver may read ahead for (``Resolver.warm``)."""
    stale = [s.step for s in states if s.status != "fresh" or upgrade.active]
    return [
        layer_inputs(source, recipe, step, base_digest, {}, resolver=resolver)
        for step in stale
        if isinstance(step.layer, PipLayer) and not step.layer.no_deps
    ]


def installed_versions(pins: Iterable[Constraint]) -> set[tuple[str, str]]:
    """(canonical name, normalized version) of what ``pins`` install."""
    return {(c.name, str(Version(c.version))) for c in pins}


def parse_upgrade_package(text: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME==VERSION`` from the command line; UsageError (exit 2) otherwise."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise UsageError(
            f"--upgrade-package {text!r}: {exc}", "write NAME or NAME==VERSION"
        ) from exc
    specs = list(requirement.specifier)
    if requirement.marker or requirement.url or requirement.extras or len(specs) > 1:
        raise UsageError(
            f"--upgrade-package {text!r}: not NAME or NAME==VERSION", "e.g. torch==2.9.1"
        )
    if specs and (specs[0].operator != "==" or "*" in specs[0].version):
        raise UsageError(f"--upgrade-package {text!r}: only == pins a version", "e.g. torch==2.9.1")
    return canonical_name(requirement.name), str(Version(specs[0].version)) if specs else None


def preferred_pins(
    installed: Mapping[str, Constraint],
    previous: Lock | None,
    upgrade: Upgrade,
    given: Mapping[str, str] | None = None,
) -> str:
    """The resolver's existing output for one layer: what is installed (with its hash from
    ``given``, canonical name -> ``sha256:HEX`` of its stand-in, when known), then what the
    layer's previous lock pinned (unless ``--upgrade``) with its hashes, without the packages
    to upgrade. The hashes let pip-compile's ``--reuse-hashes`` keep every pin that did not
    move, installed ones included, without fetching or hashing its files again."""
    digests = given or {}
    preferred: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
        name: (c.version, None, (digests[name],) if name in digests else ())
        for name, c in installed.items()
    }
    if previous is not None and not upgrade.everything:
        preferred |= {n: (p.version, p.marker, p.hashes) for n, p in previous.pins.items()}
    for name in upgrade.packages:
        preferred.pop(name, None)
    return "".join(_preferred_line(name, *pin) for name, pin in sorted(preferred.items()))


def _preferred_line(name: str, version: str, marker: str | None, hashes: tuple[str, ...]) -> str:
    """``name==version [; marker]`` with one ``--hash`` continuation line per hash."""
    line = f"{name}=={_normal(version)}" + (f" ; {marker}" if marker else "")
    return line + "".join(f" \\\n    --hash={digest}" for digest in hashes) + "\n"


def _normal(version: str) -> str:
    try:
        return str(Version(version))
    except InvalidVersion:
        return version


def upgrade_constraints(upgrade: Upgrade) -> str:
    """``NAME==VERSION`` lines for the packages ``--upgrade-package`` names with a version."""
    return "".join(f"{n}=={v}\n" for n, v in sorted(upgrade.packages.items()) if v is not None)


def pin_moves(previous: Lock | None, current: Lock) -> list[tuple[str, str | None, str | None]]:
    """(name, old, new) for every pin that differs between two locks of one layer, sorted."""
    old = {n: p.version for n, p in previous.pins.items()} if previous else {}
    new = {n: p.version for n, p in current.pins.items()}
    return [
        (name, old.get(name), new.get(name))
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    ]
