"""Predicted environments: what each layer of a recipe leaves installed, without Docker.

The environment after a layer is the base snapshot's winners for the recipe's first
interpreter (the one pip layers install with) with every earlier lock of its image applied in
build order: a stage starts from what the stage it builds on left, not from a stage beside it
(a stage built on an image nothing recorded holds no pip layer and starts from the base).
A pip layer without a lock, and every non-pip layer, changes nothing predictable: those
are reported elsewhere (missing locks by ``audit.gate.audit_deps``, run layers by the build guard).
Predicted distributions carry name, version and requirements (from the base record and each
lock's ``# requires`` lines) but no files, so the "rebuilt" rule never fires here.

:class:`StepJudge` applies the policy to predicted steps in build order, the way the guard
applies it in the build: scoped waivers, each unscoped waiver spent in the first stage that uses
it, and a no_deps layer's re-pins reported as overrides with what they break.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from types import MappingProxyType

from audit.errors import LockError
from audit.history.snapshot import Distribution, Environment
from audit.lock.files import BaseRecord, Lock, base_relpath, lock_relpath, read_base, read_lock
from audit.policy.findings import Finding
from audit.policy.verdict import Scope, WaiverLedger, evaluate
from audit.project.memo import Kind, Memo, Remembered
from audit.project.sources import Source
from audit.recipe.model import PipLayer, Recipe, Step

Installed = Mapping[str, Distribution]


@dataclass(frozen=True)
class PredictedStep:
    """One layer and the environments before and after it (canonical name -> distribution).

    ``lock`` is the project-relative lock path of a pip layer whose lock exists, else None;
    ``moves`` holds every name at which ``after`` may differ from ``before`` (the lock's pins:
    a layer replaces or adds, never removes).
    """

    step: Step
    before: Installed
    after: Installed
    lock: str | None = None
    moves: frozenset[str] = frozenset()


def predict(source: Source, recipe: Recipe) -> list[PredictedStep]:
    """Every layer of ``recipe`` in build order with its predicted before/after environments.

    Raises LockError (exit 2) when the base snapshot is missing or names no usable interpreter.
    """
    base = base_environment(read_base(source, base_relpath(recipe)), recipe, source)
    return predict_from(base, source, recipe)


def predict_from(
    base: Installed, source: Source, recipe: Recipe, locks: Mapping[str, Lock] | None = None
) -> list[PredictedStep]:
    """Like :func:`predict`, from an already-read base environment.

    ``locks`` (step slug -> lock) are the recipe's existing locks when the caller has read them
    already (``audit.lock.plan.survey_locks``): then no lock is read again.
    """
    start: Installed = MappingProxyType(dict(base))
    ends: dict[str, Installed] = {}  # stage name -> what its last layer leaves
    by_stage: dict[str, list[Step]] = {}
    for step in recipe.steps():
        by_stage.setdefault(step.stage.name, []).append(step)
    predicted: list[PredictedStep] = []
    for stage in recipe.stages:  # a stage starts from the stage it builds on, else the base
        parent = recipe.parent(stage)
        current = ends[parent.name] if parent is not None else start
        for step in by_stage.get(stage.name, ()):
            lock = _lock_of(source, recipe, step, locks)
            after = current if lock is None else apply_lock(current, lock, source.memo)
            relpath = None if lock is None else lock_relpath(recipe, step)
            moves = frozenset() if lock is None else frozenset(lock.pins)
            predicted.append(PredictedStep(step, current, after, relpath, moves))
            current = after
        ends[stage.name] = current
    return predicted


def base_environment(record: BaseRecord, recipe: Recipe, source: Source) -> Installed:
    """The base winners of the interpreter pip layers use, stripped to name and version."""
    environment = _pick_environment(record.environments, recipe.interpreters[0])
    if environment is None:
        where = source.describe(base_relpath(recipe))
        found = ", ".join(env.interpreter for env in record.environments) or "none"
        raise LockError(
            f"{where}: no snapshot of {recipe.interpreters[0]} (found: {found})",
            f"re-record it: {source.front.command('lock', recipe.name + ' --record-base')}",
        )
    table = source.memo.table(DISTRIBUTIONS)
    return {name: _bare(dist, table) for name, dist in environment.winners().items()}


def apply_lock(before: Installed, lock: Lock, memo: Memo | None = None) -> Installed:
    """``before`` with every pin of ``lock`` installed over it (pip replaces, never removes);
    each new distribution the one ``memo`` holds for it (see :func:`shared`)."""
    after = dict(before)
    table = memo.table(DISTRIBUTIONS) if memo is not None else None
    for name, pin in lock.pins.items():
        current = after.get(name)
        if current is None or current.version != pin.version:
            meta = lock.metadata.get(name)
            requires = meta.requires_dist if meta else None
            python = meta.requires_python if meta else ""
            after[name] = shared(
                table,
                name=name,
                version=pin.version,
                raw_name=pin.name,
                requires=requires,
                python=python,
            )
    return MappingProxyType(after)


# One object per predicted distribution in the command's memo, so "the same object" means "no
# change" across refs and images and the comparisons skip it: without it callgrind counts 16 %
# more instructions for benchmarks/bench_gate.py's 40-image gate.
DISTRIBUTIONS: Kind[tuple[object, ...], Distribution] = Kind("distributions", 1 << 15, flat=True)


def shared(
    table: Remembered[tuple[object, ...], Distribution] | None,
    *,
    name: str,
    version: str,
    raw_name: str,
    requires: tuple[str, ...] | None,
    python: str,
) -> Distribution:
    """The distribution prediction installs (what it knows of one: name, version, raw name,
    requirements, Python), the same object for every equal one the command made before when
    given its memo's ``table`` of them. Distributions are frozen, so every environment of a
    run (each ref of the gate, every image of a fleet) can share them: "the same object" then
    means "no change" across refs and images too, and the comparisons that look for changes
    skip them cheaply."""
    key = (name, version, raw_name, requires, python)
    found = table.peek(key) if table is not None else None
    if found is not None:
        return found
    made = Distribution(
        name=name,
        version=version,
        raw_name=raw_name,
        requires_dist=requires,
        requires_python=python,
    )
    return made if table is None else table.made(key, lambda: made)


def declared_overrides(step: Step, after: Installed, before: Installed) -> tuple[str, ...]:
    """What a layer re-pins on purpose: its ``override`` names; a no_deps layer, every
    package it moved."""
    if not isinstance(step.layer, PipLayer):
        return ()
    if not step.layer.no_deps:
        return step.layer.override_names
    return tuple(n for n, d in after.items() if n not in before or before[n] is not d)


@dataclass
class StepJudge:
    """The policy applied to a recipe's steps in build order, with one waiver ledger."""

    recipe: Recipe
    today: date
    markers: Mapping[str, str]
    ledger: WaiverLedger = field(default_factory=WaiverLedger)

    def judge(self, step: Step, before: Installed, after: Installed, where: str) -> list[Finding]:
        return evaluate(
            before,
            after,
            self.recipe.policy,
            where=where,
            today=self.today,
            scope=Scope(step.stage.name, step.position),
            ledger=self.ledger,
            declared=declared_overrides(step, after, before),
            markers=self.markers,
        )


def base_markers(record: BaseRecord, recipe: Recipe) -> Mapping[str, str]:
    """The PEP 508 markers of the interpreter pip layers use ({} when it was not recorded)."""
    environment = _pick_environment(record.environments, recipe.interpreters[0])
    return environment.markers if environment else {}


def _pick_environment(
    environments: tuple[Environment, ...], interpreter: str
) -> Environment | None:
    for environment in environments:
        if environment.interpreter == interpreter:
            return environment
    return environments[0] if len(environments) == 1 else None


def _lock_of(
    source: Source, recipe: Recipe, step: Step, locks: Mapping[str, Lock] | None
) -> Lock | None:
    """A pip layer's lock: from ``locks`` when given, else read when it exists."""
    if not isinstance(step.layer, PipLayer):
        return None
    if locks is not None:
        return locks.get(step.slug)
    relpath = lock_relpath(recipe, step)
    return read_lock(source, relpath) if source.exists(relpath) else None


def _bare(dist: Distribution, table: Remembered[tuple[object, ...], Distribution]) -> Distribution:
    """Name, version and requirements: what prediction knows of an installed distribution."""
    return shared(
        table,
        name=dist.name,
        version=dist.version,
        raw_name=dist.raw_name,
        requires=dist.requires_dist,
        python=dist.requires_python,
    )
