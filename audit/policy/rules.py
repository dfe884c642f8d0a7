"""Every finding rule's name, once: what kind of rule it is and whether a waiver may name it.

PURE CORE: the standard library only, Python 3.9 syntax (vendored into images for the guard).

The verdict, the recipe parser (which rules a ``[[policy.waiver]]`` may name), the gate and its
Markdown, the reports' rule order and the JSON Schemas all read their rule names from
:data:`RULES`; ``tests/test_rules.py`` keeps the schemas in step. Adding a rule is one line
here (``Rule(name, kind, waivable)``) plus the code that raises its finding.

Kinds: ``change`` (one finding per changed distribution between two environments), ``state``
(one environment breaks a rule: judged where it first breaks), ``verdict`` (about a waiver or
an override), ``lock`` (a lock against the recipe or the build), ``gate`` (what a pull request
changes in the recipes), ``audit`` (what an audit could not look at).
"""

from __future__ import annotations

from dataclasses import dataclass

CHANGE = "change"
STATE = "state"
VERDICT = "verdict"
LOCK = "lock"
GATE = "gate"
AUDIT = "audit"


@dataclass(frozen=True)
class Rule:
    """One rule: its name (as findings, waivers and reports spell it), its kind, and whether a
    ``[[policy.waiver]]`` may name it (``rule = "…"``)."""

    name: str
    kind: str
    waivable: bool = False


RULES = (
    Rule("added", CHANGE),
    Rule("upgraded", CHANGE),
    Rule("downgraded", CHANGE, waivable=True),
    Rule("removed", CHANGE, waivable=True),
    Rule("variant", CHANGE, waivable=True),
    Rule("rebuilt", CHANGE, waivable=True),
    Rule("shadowed", CHANGE, waivable=True),
    Rule("unparsable-version", CHANGE, waivable=True),
    Rule("lockstep", STATE, waivable=True),
    Rule("cuda-suffix", STATE, waivable=True),
    Rule("requirement", STATE, waivable=True),
    Rule("forbidden", STATE, waivable=True),
    Rule("shadowed-native", STATE, waivable=True),
    Rule("missing-symbol", STATE, waivable=True),
    Rule("override", VERDICT),
    Rule("waiver-expired", VERDICT),
    Rule("waiver-spent", VERDICT),
    Rule("lock-mismatch", LOCK),
    Rule("stale-lock", LOCK),
    Rule("missing-lock", LOCK),
    Rule("waiver-added", GATE),
    Rule("run-layer-changed", GATE),
    Rule("base-image", GATE),
    Rule("stale-base", GATE),
    Rule("image-removed", GATE),
    Rule("stage-removed", GATE),
    Rule("interpreter", AUDIT),
    Rule("base-source", AUDIT),
)

BY_NAME = {rule.name: rule for rule in RULES}
NAMES = tuple(rule.name for rule in RULES)
CHANGE_RULES = frozenset(rule.name for rule in RULES if rule.kind == CHANGE)
STATE_RULES = frozenset(rule.name for rule in RULES if rule.kind == STATE)
WAIVABLE = tuple(rule.name for rule in RULES if rule.waivable)


def of_kind(kind: str) -> tuple[str, ...]:
    """The names of every rule of ``kind``, in :data:`RULES` order."""
    return tuple(rule.name for rule in RULES if rule.kind == kind)


def known(name: str) -> bool:
    """Is ``name`` a rule of this registry?"""
    return name in BY_NAME
