"""The one judge of a layer: what the policy says of the step from one state to the next.

PURE: standard library and ``packaging`` only, Python 3.9 syntax (the guard runs it inside
images). The guard judges each guarded layer with :func:`judge_layer`; the layer walk and any
other producer of a :class:`~audit.history.model.History` are judged with
:func:`judge_history`, which walks the steps in order with one waiver ledger, so a step's
verdict does not depend on who observed it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from audit.history.model import History, LayerRef
from audit.history.snapshot import Environment
from audit.policy.findings import Finding
from audit.policy.model import Policy
from audit.policy.system_rules import LoadChange, Resolutions, evaluate_system, load_changes
from audit.policy.verdict import Scope, WaiverLedger, evaluate, evaluate_shadowed

if TYPE_CHECKING:
    import datetime as _dt

# An install that says it re-pins without resolving (the field's fix: ``pip install --no-deps
# nvidia-nccl-cu13==2.30.7``) declares what it moves: overrides, not downgrades.
_NO_DEPS_INSTALL = re.compile(r"\b(?:pip3?|uv\s+pip)\s+install\b[^;&|]*\s--no-deps\b")
# What every guarded RUN of a rendered recipe says of itself (the guard's command line in
# audit/templates/parts/guard.j2): ``guard.py --step v2-01``.
_GUARDED = re.compile(r"/guard\.py --step v(\d+)-(\d+)\b")


@dataclass(frozen=True)
class LayerVerdict:
    """The findings of one step, the layer that made it, and which copy of each native library
    loads where the step changed that (``loads``: from the loader model, where the state
    recorded loader facts)."""

    ref: LayerRef
    findings: tuple[Finding, ...]
    loads: tuple[LoadChange, ...] = ()

    @property
    def fails(self) -> bool:
        return any(finding.fails for finding in self.findings)


def judge_layer(
    before: Environment | None,
    after: Environment | None,
    policy: Policy,
    *,
    where: str,
    today: _dt.date,
    scope: Scope,
    ledger: WaiverLedger,
    declared: Collection[str] = (),
    system: bool = True,
) -> list[Finding]:
    """One environment's findings for one step: changes of the winning copies and new state
    violations (:func:`evaluate`), copies newly shadowed, and, when ``system``, what changed
    below Python. An environment that is gone (``after`` None) had every package removed."""
    old = before.winners() if before is not None else {}
    new = after.winners() if after is not None else {}
    seen = after if after is not None else before
    markers = seen.markers if seen is not None else {}
    findings = evaluate(
        old, new, policy, where=where, today=today, scope=scope, ledger=ledger,
        declared=declared, markers=markers,
    )  # fmt: skip
    if after is not None:
        findings += evaluate_shadowed(before, after, policy, where=where, today=today)
    if system and after is not None:
        findings += evaluate_system(
            before.system if before is not None else None, after.system, policy,
            where=where, today=today, scope=scope, ledger=ledger,
        )  # fmt: skip
    return findings


Declared = Callable[["LayerRef", "Environment | None", "Environment | None"], Collection[str]]


def declared_by_instruction(
    ref: LayerRef, before: Environment | None, after: Environment | None
) -> tuple[str, ...]:
    """What a ``--no-deps`` install re-pins on purpose in one environment: every package it
    moved that was installed before it (a package it adds overrides nothing). A rendered
    recipe's guarded layer installs its lock with ``--no-deps`` too: that says nothing (the
    recipe's own ``override`` does: :func:`audit.gate.images.recipe_declared`)."""
    if before is None or after is None or not _NO_DEPS_INSTALL.search(ref.instruction):
        return ()
    if guarded_step(ref.instruction) is not None:
        return ()
    was = before.winners()
    return tuple(n for n, d in after.winners().items() if n in was and was[n] != d)


def guarded_step(instruction: str) -> tuple[str, int] | None:
    """(stage, 1-based layer) of a rendered recipe's guarded ``RUN``, read from the guard's own
    command line in the instruction (an image's history keeps it); None for anything else."""
    match = _GUARDED.search(instruction)
    return (f"v{match.group(1)}", int(match.group(2))) if match else None


def where_of(image: str, ref: LayerRef) -> str:
    """``<image> <stage> layer <n>`` for a human (the instruction is shown beside it)."""
    stage = f" {ref.stage}" if ref.stage else ""
    return f"{image}{stage} layer {ref.layer if ref.layer is not None else ref.index}"


def judge_history(
    history: History,
    policy: Policy,
    *,
    today: _dt.date,
    declared: Declared = declared_by_instruction,
) -> list[LayerVerdict]:
    """Every step of ``history`` judged in order, one ledger for the waivers it spends.

    Environments are matched by interpreter; what lies below Python is judged once per step
    (with the first environment, or alone when the image has none), each system resolved by
    the loader model once (:class:`~audit.policy.system_rules.Resolutions`).
    """
    ledger = WaiverLedger()
    resolutions = Resolutions()
    verdicts = []
    for before, after in history.steps():
        ref = after.ref
        where = where_of(history.image, ref)
        scope = Scope(ref.stage, ref.layer)
        both = (*after.environments, *before.environments)
        keys = list(dict.fromkeys(env.interpreter for env in both))
        found: list[Finding] = []
        for key in keys:
            old, new = before.environment(key), after.environment(key)
            label = where if len(keys) == 1 else f"{where} ({key})"
            found += judge_layer(
                old, new, policy, where=label, today=today, scope=scope, ledger=ledger,
                declared=declared(ref, old, new), system=False,
            )  # fmt: skip
        found += evaluate_system(
            before.system, after.system, policy, where=where, today=today, scope=scope,
            ledger=ledger, resolutions=resolutions,
        )  # fmt: skip
        located = tuple(f.located(history.image, ref.stage, ref.layer) for f in found)
        loads = (
            load_changes(before.system, after.system, resolutions)
            if before.system != after.system
            else ()
        )
        verdicts.append(LayerVerdict(ref, located, loads))
    return verdicts
