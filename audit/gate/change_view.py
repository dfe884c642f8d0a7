"""The change view: per image, per stage, what a pull request changes, as a reviewer reads it.

Built once from the gate's findings (and, when the gate has them, both refs' stage
environments and the head's lockstep groups); rendered four ways by the terminal, Markdown,
JSON and HTML writers (:mod:`audit.gate.change_render`, :mod:`audit.gate.markdown`).

Invariants:

- every finding of an image appears exactly once: in the owner-review list (waivers the pull
  request adds), in a stage's rows, in a lockstep group block, or among the folded "added by
  this layer" rows; nothing is dropped;
- a waived change is a warning with its waiver's reason and expiry, never an info row;
- a lockstep group that any change of the stage touches is one block naming every member the
  stage ships with its base-ref and head-ref version, so a skew is visible as one;
- plain additions (no waiver, no override, info) and unchanged packages fold behind counts.

Pure: no I/O; the same inputs give the same view.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cached_property
from typing import Any

from audit.history.diff import Comparison
from audit.history.snapshot import Distribution, canonical_name
from audit.policy.findings import ERROR, INFO, SEVERITIES, WARNING, Finding
from audit.policy.model import LockstepGroup, Waiver
from audit.policy.rules import CHANGE_RULES
from audit.report.findings import ordered

VIEW_SCHEMA = "layer-audit.changes/1"
WAIVER_RULE = "waiver-added"
LOCKSTEP_RULE = "lockstep"
OVERRIDE_RULE = "override"
ADDED = "added"
IMAGE_WIDE = ""  # the stage key of findings about the whole image (locks, base, policy)
ARROW = "→"
ADDED_BY_PR = "added by this pull request"

Env = Mapping[str, Distribution]


@dataclass(frozen=True)
class ViewRow:
    """One finding as the view shows it: the change (or notice) and its note."""

    finding: Finding
    note: str

    @property
    def package(self) -> str:
        return self.finding.package

    @property
    def change(self) -> str:
        """``4.8.1 → 4.4.0``, ``– → 1.0`` for an addition; empty for a notice."""
        f = self.finding
        if f.before is None and f.after is None:
            return ""
        return f"{f.before or '–'} {ARROW} {f.after or '–'}"

    @property
    def line(self) -> str:
        """``nvidia-cutlass-dsl 4.8.1 → 4.4.0 (waived: reason, expires 2027-01-31)``."""
        head = " ".join(part for part in (self.package, self.change) if part)
        return f"{head} ({self.note})" if self.note else head


@dataclass(frozen=True)
class Member:
    """A lockstep group member in one stage: its version at the base ref and at the head."""

    package: str
    before: str | None
    after: str | None

    @property
    def text(self) -> str:
        if self.before == self.after:
            return f"{self.package} {self.after or '–'}"
        return f"{self.package} {self.before or '–'} {ARROW} {self.after or '–'}"


@dataclass(frozen=True)
class Group:
    """A lockstep group one stage touches: every member it ships, and the rows that moved."""

    name: str
    members: tuple[Member, ...]
    rows: tuple[ViewRow, ...]  # member changes and the group's own lockstep finding
    severity: str

    @property
    def versions(self) -> tuple[str, ...]:
        """The distinct head-ref versions of the members (one: in step; more: a skew)."""
        return tuple(sorted({m.after for m in self.members if m.after is not None}))

    @property
    def skewed(self) -> bool:
        return len(self.versions) > 1

    @property
    def status(self) -> str:
        if self.skewed:
            return f"SKEW: members at {', '.join(self.versions)}"
        return f"in step at {self.versions[0]}" if self.versions else "no member installed"

    @property
    def line(self) -> str:
        """``lockstep group cutlass-dsl (in step at 4.4.0): a 4.8.1 → 4.4.0, b 4.8.1 → 4.4.0``."""
        members = ", ".join(m.text for m in self.members)
        return f"lockstep group {self.name} ({self.status}): {members}"


@dataclass(frozen=True)
class StageView:
    """One stage: rows a reviewer must read, group blocks, and what folds behind counts."""

    stage: str  # IMAGE_WIDE for findings about the whole image
    rows: tuple[ViewRow, ...]
    groups: tuple[Group, ...] = ()
    added: tuple[ViewRow, ...] = ()  # plain "added by this layer" rows
    unchanged: int | None = None  # packages shipped the same at both refs (None: not known)

    @property
    def shown(self) -> int:
        return len(self.rows) + sum(len(g.rows) for g in self.groups)

    @property
    def counts(self) -> dict[str, int]:
        """Shown rows by the severity they are shown as (folded additions are info)."""
        return dict(self._counts)

    @cached_property
    def _counts(self) -> dict[str, int]:
        """:attr:`counts`, counted once (the view is frozen; three writers read it)."""
        found = [*self.rows, *(row for group in self.groups for row in group.rows), *self.added]
        tally = Counter([severity_of(row.finding) for row in found])
        return {severity: tally[severity] for severity in SEVERITIES}

    @property
    def folded(self) -> str:
        """``3 added by this layer, 120 unchanged`` (empty when nothing folds)."""
        parts = [f"{len(self.added)} added by this layer"] if self.added else []
        parts += [f"{self.unchanged} unchanged"] if self.unchanged else []
        return ", ".join(parts)


@dataclass(frozen=True)
class ImageView:
    image: str
    stages: tuple[StageView, ...]
    review: tuple[ViewRow, ...] = ()  # waivers this pull request adds or widens


@dataclass(frozen=True)
class ImageInputs:
    """What the gate knows beyond findings: each head column's environment at both refs, as
    the gate compared them (:func:`audit.gate.matrix.column_pairs`; each column: ``base``, then
    the head's stages), the head policy's lockstep groups and waivers, and the base ref's
    waivers (what the pull request adds or widens is told from them, never from a message)."""

    pairs: Mapping[str, Comparison] = field(default_factory=dict)  # per head column, old -> new
    lockstep: tuple[LockstepGroup, ...] = ()
    waivers: tuple[Waiver, ...] = ()
    base_waivers: tuple[Waiver, ...] = ()


NEW_WAIVER = "added"
WIDENED_WAIVER = "changed or widened"


def waiver_change(waiver: Waiver, base_waivers: Sequence[Waiver]) -> str | None:
    """What the pull request does to ``waiver``: None when the base ref has it as it is,
    :data:`WIDENED_WAIVER` when the base ref has a waiver for its package, else
    :data:`NEW_WAIVER`."""
    if waiver in base_waivers:
        return None
    known = any(old.package == waiver.package for old in base_waivers)
    return WIDENED_WAIVER if known else NEW_WAIVER


def severity_of(finding: Finding) -> str:
    """What a reviewer must treat it as: a waived change is a warning, whatever it was."""
    if finding.waiver is not None and finding.rule != WAIVER_RULE and finding.severity != ERROR:
        return WARNING
    return finding.severity


def note_of(
    finding: Finding, waivers: Sequence[Waiver] = (), base_waivers: Sequence[Waiver] = ()
) -> str:
    """What the package and change columns do not already say."""
    if finding.rule == WAIVER_RULE:
        return _review_text(finding, waivers, base_waivers)
    if finding.waiver is not None:
        return f"waived: {_waiver_text(finding, waivers, base_waivers)}"
    if finding.rule in CHANGE_RULES and finding.rule != "unparsable-version":
        return finding.asked_for  # who asks for the new version, when the lock knows
    return finding.message


def _review_text(
    finding: Finding, waivers: Sequence[Waiver], base_waivers: Sequence[Waiver]
) -> str:
    """``new waiver: reason, expires 2027-01-31`` for a waiver this pull request adds."""
    for waiver in waivers:
        same = (waiver.package, waiver.from_version, waiver.to_version)
        if same == (finding.package, finding.before, finding.after):
            how = waiver_change(waiver, base_waivers)
            shown = WIDENED_WAIVER if how == WIDENED_WAIVER else "new"
            return f"{shown} waiver: {waiver.reason}{_expiry(waiver)}"
    return finding.message


def _expiry(waiver: Waiver) -> str:
    return f", expires {waiver.expires.isoformat()}" if waiver.expires else ", no expiry"


def _waiver_text(
    finding: Finding, waivers: Sequence[Waiver], base_waivers: Sequence[Waiver]
) -> str:
    """``reason, expires 2027-01-31`` from the waiver itself when its index is known."""
    index = finding.waiver_index
    if index is None or not 0 <= index < len(waivers):
        return finding.waiver or ""
    waiver = waivers[index]
    added = f" ({ADDED_BY_PR})" if waiver_change(waiver, base_waivers) else ""
    return f"{waiver.reason}{_expiry(waiver)}{added}"


def image_view(image: str, findings: Iterable[Finding], inputs: ImageInputs) -> ImageView:
    """The view of one image from its findings (the gate's, in any order)."""
    found = tuple(findings)
    review = tuple(ViewRow(f, _note(f, inputs)) for f in found if f.rule == WAIVER_RULE)
    by_stage: dict[str, list[Finding]] = {}
    for finding in found:
        if finding.rule != WAIVER_RULE:
            by_stage.setdefault(finding.stage or IMAGE_WIDE, []).append(finding)
    order = [IMAGE_WIDE, *inputs.pairs, *by_stage]
    stages = tuple(
        stage_view(stage, by_stage[stage], inputs)
        for stage in dict.fromkeys(order)
        if stage in by_stage
    )
    return ImageView(image, stages, review)


def stage_view(stage: str, findings: Sequence[Finding], inputs: ImageInputs) -> StageView:
    """One stage's rows: groups first take their members' rows, plain additions fold."""
    rows = [ViewRow(f, _note(f, inputs)) for f in _by_severity(findings)]
    groups = _groups(stage, rows, inputs)
    grouped = {id(row) for group in groups for row in group.rows}
    rest = [row for row in rows if id(row) not in grouped]
    added = tuple(row for row in rest if _plain_addition(row.finding))
    shown = tuple(row for row in rest if not _plain_addition(row.finding))
    return StageView(stage, shown, groups, added, _unchanged(stage, inputs))


def _note(finding: Finding, inputs: ImageInputs) -> str:
    return note_of(finding, inputs.waivers, inputs.base_waivers)


def _by_severity(findings: Sequence[Finding]) -> list[Finding]:
    """The report's order, with a waived change counted as the warning it is shown as."""
    keyed = ordered(tuple(findings))
    return sorted(keyed, key=lambda f: SEVERITIES.index(severity_of(f)))


def _plain_addition(finding: Finding) -> bool:
    return finding.rule == ADDED and finding.waiver is None and finding.severity == INFO


def _unchanged(stage: str, inputs: ImageInputs) -> int | None:
    """Packages this stage ships at the same version at both refs (None when not known): all
    but those the comparison of its column finds new or at another version."""
    pair = inputs.pairs.get(stage)
    return None if pair is None else len(pair.after) - len(pair.moved)


def _groups(stage: str, rows: Sequence[ViewRow], inputs: ImageInputs) -> tuple[Group, ...]:
    """A block per lockstep group that a row of this stage touches (a member's change, or the
    group's own lockstep finding)."""
    blocks = []
    for group in inputs.lockstep:
        patterns = [canonical_name(member) for member in group.members]
        mine = [row for row in rows if _in_group(row.finding, group, patterns)]
        if not mine:
            continue
        members = _members(stage, patterns, inputs, mine)
        worst = min((SEVERITIES.index(severity_of(r.finding)) for r in mine), default=2)
        blocks.append(Group(group.name, members, tuple(mine), SEVERITIES[worst]))
    return tuple(blocks)


def _in_group(finding: Finding, group: LockstepGroup, patterns: Sequence[str]) -> bool:
    if finding.rule == LOCKSTEP_RULE:
        return finding.package == group.name
    if finding.rule not in CHANGE_RULES and finding.rule != OVERRIDE_RULE:
        return False
    name = canonical_name(finding.package) if finding.package else ""
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def _members(
    stage: str, patterns: Sequence[str], inputs: ImageInputs, rows: Sequence[ViewRow]
) -> tuple[Member, ...]:
    """Every member the stage ships at either ref (its column's pair, as the gate compared
    it); without environments, the rows' own."""
    pair = inputs.pairs.get(stage)
    old, new = (pair.before, pair.after) if pair is not None else ({}, {})
    names = sorted(n for n in {*old, *new} if any(fnmatchcase(n, p) for p in patterns))
    if names:
        return tuple(Member(n, _version(old, n), _version(new, n)) for n in names)
    changes = [r.finding for r in rows if r.finding.rule != LOCKSTEP_RULE]
    return tuple(Member(f.package, f.before, f.after) for f in changes)


def _version(env: Env, name: str) -> str | None:
    dist = env.get(name)
    return dist.version if dist else None


# --- JSON ----------------------------------------------------------------------------------


def view_json(views: Iterable[ImageView]) -> list[dict[str, Any]]:
    """The views as JSON data (``changes`` of the gate's report document)."""
    return [
        {
            "image": view.image,
            "review": [_row_json(row) for row in view.review],
            "stages": [_stage_json(stage) for stage in view.stages],
        }
        for view in views
    ]


def _stage_json(stage: StageView) -> dict[str, Any]:
    return {
        "stage": stage.stage or None,
        "rows": [_row_json(row) for row in stage.rows],
        "groups": [
            {
                "name": group.name,
                "severity": group.severity,
                "status": group.status,
                "skewed": group.skewed,
                "members": [
                    {"package": m.package, "before": m.before, "after": m.after}
                    for m in group.members
                ],
                "rows": [_row_json(row) for row in group.rows],
            }
            for group in stage.groups
        ],
        "added": [_row_json(row) for row in stage.added],
        "unchanged": stage.unchanged,
    }


def _row_json(row: ViewRow) -> dict[str, Any]:
    f = row.finding
    return {
        "severity": severity_of(f),
        "rule": f.rule,
        "package": f.package,
        "before": f.before,
        "after": f.after,
        "where": f.where,
        "note": row.note,
        "waived": f.waiver is not None and f.rule != WAIVER_RULE,
        "override": f.rule == OVERRIDE_RULE,
    }
