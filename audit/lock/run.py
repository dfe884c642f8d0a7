"""The lock runner: walk a recipe's pip layers in build order and compile the stale ones.

The mirror of the build runner. Each stale layer is resolved the way ``pip install`` would
resolve it inside the environment the layers before it leave (a resolver of
:mod:`audit.lock.resolvers`, with stand-in wheels for everything installed and that as the
resolver's preferred pins), then judged by the policy exactly as audit-deps and the build guard
judge it (one waiver ledger for the whole walk, no_deps re-pins as overrides). Every violation
of one layer is reported in one run (exit 1) and nothing is written for it; a clean layer's lock
is written atomically and holds only what the layer installs or moves. A kept (fresh) lock is
judged the same way, under today's waivers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.errors import EnvironmentProblem, LockError, ResolutionConflict
from audit.history.predict import Installed, StepJudge, apply_lock
from audit.history.snapshot import Distribution, canonical_name
from audit.host import atomic, console
from audit.lock.files import Lock, PinMetadata, lock_relpath, parse_lock, render_lock
from audit.lock.format import parse_pins
from audit.lock.index_origin import refuse_confusion
from audit.lock.plan import (
    Constraint,
    LayerInputs,
    LockState,
    Upgrade,
    after_inputs,
    changed_inputs,
    existing_pins,
    installed_before,
    layer_inputs,
    lock_body,
    moved_pins,
    pin_blocks,
    pin_moves,
    preferred_pins,
    upgrade_constraints,
    via_parents,
    who_asks,
)
from audit.lock.progress import LockProgress
from audit.lock.refusal import Refusal, refusal_relpath, render_refusal
from audit.lock.resolvers import Resolver
from audit.lock.resolvers.job import CompileJob, Outcome, clean_body
from audit.lock.standins import standin_digests, standin_wheels
from audit.policy.findings import Finding
from audit.policy.rules import CHANGE_RULES
from audit.project.sources import Source
from audit.recipe.model import PipLayer, Recipe, Step


@dataclass(kw_only=True)
class LockRun:
    """Walks the layers in order, keeping what each earlier layer pinned and the verdicts."""

    root: Path
    source: Source
    recipe: Recipe
    base_pins: list[Constraint]
    base_digest: str
    fresh_locks: Mapping[str, Lock]  # step slug -> the lock the survey parsed
    judge: StepJudge
    backend: Resolver
    upgrade: Upgrade = field(default_factory=Upgrade)
    earlier: list[tuple[Step, Lock]] = field(default_factory=list)
    moves: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    done: list[tuple[LockState, str]] = field(default_factory=list)
    # what each visited layer leaves installed, by slug: a layer starts from the last one
    # before it in its own image (its stage's chain), not from a stage beside it
    after: dict[str, Installed] = field(default_factory=dict)

    def visit(self, state: LockState) -> None:
        """Keep a fresh lock, compile a stale or missing one; judge both (the ledger) under
        today's policy and waivers: a kept lock that no longer passes stops the run (exit 1).
        A layer's inputs are read once, for both the freshness look and the compile."""
        before = self.environment(state.step)
        keep = state.status == "fresh" and not self.upgrade.active
        inputs, also = (None, {}) if keep else self._inputs(state.step)
        if inputs is None or (not self.upgrade.active and self._still_fresh(state, inputs, also)):
            lock = self.fresh_locks[state.step.slug]
            installed = installed_before(self.base_pins, self._earlier(state.step))
            self.judge_layer(state.step, before, lock, {}, refuse=True, installed=installed)
            self.done.append((state, "kept"))
        else:
            lock = self.compile(state.step, before, inputs)
            self.done.append((state, "compiled"))
        self.earlier.append((state.step, lock))
        self.after[state.step.slug] = apply_lock(before, lock, self.source.memo)

    def _earlier(self, step: Step) -> list[tuple[Step, Lock]]:
        """The visited layers ``step``'s own image holds, in build order."""
        before = self.recipe.before(step)
        return [(s, lock) for s, lock in self.earlier if s.slug in before]

    def _inputs(self, step: Step) -> tuple[LayerInputs, dict[str, str]]:
        """``step``'s inputs after the layers before it in its image, and the whole-text
        digests an older lock may record for them (:func:`~audit.lock.plan.after_inputs`)."""
        earlier, also = after_inputs({s.slug: lock for s, lock in self._earlier(step)})
        inputs = layer_inputs(
            self.source, self.recipe, step, self.base_digest, earlier, resolver=self.backend.label
        )
        return inputs, also

    def _still_fresh(self, state: LockState, inputs: LayerInputs, also: Mapping[str, str]) -> bool:
        """Whether a lock the survey staled only because an earlier layer was stale records
        exactly today's ``inputs``, now that the earlier layers are compiled: an earlier lock
        that came out installing the same (a comment edited, a line reordered, a line added for
        a package it already installed: only its ``# via`` comments moved) gives a later layer
        the same installed set, so it is kept, not compiled again."""
        previous = self.fresh_locks.get(state.step.slug)
        if previous is None or state.status != "stale":
            return False
        return not changed_inputs(previous.inputs, inputs.digests, also)

    def environment(self, step: Step) -> Installed:
        """What is installed before ``step``, as prediction sees it: the base, then every
        visited layer's lock in its image (kept by :meth:`visit`, never recomputed)."""
        earlier = self._earlier(step)
        if earlier:
            return self.after[earlier[-1][0].slug]
        if "" not in self.after:
            self.after[""] = {c.name: _as_distribution(c) for c in self.base_pins}
        return self.after[""]

    def compile(self, step: Step, before: Installed, inputs: LayerInputs) -> Lock:
        installed = installed_before(self.base_pins, self._earlier(step))
        assert isinstance(step.layer, PipLayer)
        layer = step.layer
        previous = self.fresh_locks.get(step.slug)
        job = CompileJob(
            inputs,
            existing_pins(installed),
            standin_wheels(installed, self.source.memo),
            layer.no_deps,
            layer.override,
            preferred_pins(
                installed, previous, self.upgrade, standin_digests(installed, self.source.memo)
            ),
            upgrade_constraints(self.upgrade),
            known_metadata(previous),
        )
        with LockProgress(f"{step.label} ({self.backend.label})") as progress:
            outcome = self.backend.compile(job, progress.feed)
        log_path = self.save_log(step, outcome.log)
        if outcome.returncode != 0:
            raise self.backend.explain(outcome.log, inputs, installed, log_path)
        _warn_yanked(step, self.backend.yanked(outcome.log))
        if self.backend.merges_indexes and inputs.extra_index_url:
            chosen = chosen_files(outcome.report, step)
            refuse_confusion(step.label, inputs.extra_index_url, chosen)
        body, blocks = _body(step, outcome, installed)
        text = render_lock(self.recipe.name, step, self.backend.label, inputs.digests, body)
        relpath = lock_relpath(self.recipe, step)
        lock = parse_lock(text.encode(), relpath)
        record = self.root / refusal_relpath(self.recipe, step)

        def keep_refusal(errors: tuple[Finding, ...]) -> None:  # the gate shows why, typed
            atomic.write_text(record, render_refusal(Refusal(step.label, inputs.digest, errors)))
            console.stderr.print(
                f"refused: {escape(refusal_relpath(self.recipe, step))} says why (commit it with "
                "the requirements: the gate and audit-deps show it)"
            )

        self.judge_layer(
            step, before, lock, blocks, refuse=True, installed=installed, refused=keep_refusal
        )
        atomic.write_text(self.root / relpath, text)
        record.unlink(missing_ok=True)  # locked now: no refusal stands for this layer
        self.moves += [(step.label, *move) for move in pin_moves(previous, lock)]
        return lock

    def save_log(self, step: Step, log: str) -> str:
        """pip's whole output for this layer, kept under build/ (project-relative path)."""
        relpath = f"build/.layer-audit/lock-logs/{self.recipe.name}/{step.slug}.log"
        atomic.write_text(self.root / relpath, log)
        return relpath

    def judge_layer(
        self,
        step: Step,
        before: Installed,
        lock: Lock,
        blocks: Mapping[str, str],
        *,
        refuse: bool = False,
        installed: Mapping[str, Constraint] | None = None,
        refused: Callable[[tuple[Finding, ...]], None] | None = None,
    ) -> list[Finding]:
        """The layer's verdict; with ``refuse``, every error of it in one ResolutionConflict
        (``refused`` is handed those errors first)."""
        after = apply_lock(before, lock, self.source.memo)
        where = f"{self.recipe.name} {step.label}"
        found = self.judge.judge(step, before, after, where)
        errors = [f for f in found if f.fails]
        if refuse and errors:
            if refused is not None:
                refused(tuple(errors))
            raise _conflicts(step, errors, blocks, installed or {}, after)
        for finding in found:
            if finding.rule == "override":
                console.stderr.print(f"[yellow]override:[/] {escape(finding.message)}")
        return found


def known_metadata(lock: Lock | None) -> dict[tuple[str, str], tuple[tuple[str, ...], str]]:
    """What a layer's previous lock recorded of each pin, by (canonical name, version)."""
    if lock is None:
        return {}
    return {
        (name, pin.version): (meta.requires_dist, meta.requires_python)
        for name, pin in lock.pins.items()
        if (meta := lock.metadata.get(name)) is not None
    }


def _as_distribution(constraint: Constraint) -> Distribution:
    return Distribution(
        name=constraint.name,
        version=constraint.version,
        raw_name=constraint.raw_name,
        requires_dist=constraint.requires_dist,
        requires_python=constraint.requires_python,
    )


def _warn_yanked(step: Step, pins: list[str]) -> None:
    for pin in pins:
        console.stderr.print(
            f"[yellow]warning:[/] {escape(step.label)}: pins {escape(pin)}, a "
            "yanked release (pinned exactly in the requirements, so pip allows it): move off it "
            "if you can"
        )


# -- the lock body --------------------------------------------------------------------------


def _body(
    step: Step, outcome: Outcome, installed: Mapping[str, Constraint]
) -> tuple[str, dict[str, str]]:
    """(lock body, moved pin name -> its pip-compile block) from what the driver left."""
    metadata = report_metadata(outcome.report, step)
    assert isinstance(step.layer, PipLayer)
    repinned = pin_blocks(outcome.repins) if outcome.repins is not None else None
    if step.layer.no_deps:
        blocks = repinned if repinned is not None else no_deps_blocks(outcome.report, step)
        blocks = {n: b for n, b in blocks.items() if n in moved_pins(installed, _pins(b, step))}
    else:
        output = clean_body(outcome.output)
        overridden = set(step.layer.override_names)
        resolved = pin_blocks(output)
        found = repinned if repinned is not None else _report_repins(outcome, step, overridden)
        repins = {n: b for n, b in found.items() if n in overridden}
        merged = {n: b for n, b in resolved.items() if n not in overridden} | repins
        moved = moved_pins(installed, _pins("".join(merged.values()), step))
        blocks = {n: b for n, b in merged.items() if n in moved}
    missing = sorted(set(blocks) - set(metadata))
    if missing:
        raise EnvironmentProblem(
            f"{step.label}: pip reported no metadata for {', '.join(missing)}",
            "re-run the lock; if it persists, check the index serves these files",
        )
    return lock_body(blocks, {n: metadata[n] for n in blocks}), blocks


def _report_repins(outcome: Outcome, step: Step, overridden: set[str]) -> dict[str, str]:
    """Override lines from pip's report, for the overridden names only (they carry hashes)."""
    if not overridden:
        return {}
    items = [i for i in _report_items(outcome.report, step) if _item_name(i) in overridden]
    return no_deps_blocks(json.dumps({"install": items}), step)


def _item_name(item: Mapping[str, Any]) -> str:
    return canonical_name(str(item.get("metadata", {}).get("name", "")))


def _pins(text: str, step: Step) -> dict[str, Any]:
    from audit.lock.format import LockFormatError

    try:
        return dict(parse_pins(text))
    except LockFormatError as exc:
        raise LockError(f"{step.label}: pip-compile wrote a line we cannot read: {exc}") from exc


def _report_items(report: str, step: Step) -> list[dict[str, Any]]:
    if not report:
        return []
    try:
        items = json.loads(report)["install"]
        assert isinstance(items, list)
    except (ValueError, KeyError, TypeError, AssertionError) as exc:
        raise EnvironmentProblem(
            f"{step.label}: pip's --report is not readable ({exc})", "re-run the lock"
        ) from exc
    return items


def report_metadata(report: str, step: Step) -> dict[str, PinMetadata]:
    """Canonical name -> what pip read of each distribution it would install."""
    found = {}
    for item in _report_items(report, step):
        meta = item.get("metadata", {})
        requires = tuple(str(r) for r in meta.get("requires_dist") or ())
        python = str(meta.get("requires_python") or "")
        found[canonical_name(str(meta.get("name", "")))] = PinMetadata(requires, python)
    return found


def no_deps_blocks(report: str, step: Step) -> dict[str, str]:
    """A no_deps layer's lock lines, from pip's report: ``name==version --hash=...``."""
    blocks = {}
    for item in _report_items(report, step):
        meta = item.get("metadata", {})
        name, version = canonical_name(str(meta.get("name", ""))), str(meta.get("version", ""))
        digest = _archive_sha256(item)
        if not digest:
            raise LockError(
                f"{step.label}: {name} {version} has no sha256 in pip's report",
                "a no_deps layer pins files from an index; name versions the index serves",
            )
        blocks[name] = f"{name}=={version} \\\n    --hash=sha256:{digest}\n    # via override\n"
    return blocks


def chosen_files(report: str, step: Step) -> list[tuple[str, str, str]]:
    """(name, version, sha256) of every file pip's report says the layer installs or moves."""
    found = []
    for item in _report_items(report, step):
        meta = item.get("metadata", {})
        digest = _archive_sha256(item)
        if digest:
            found.append((_item_name(item), str(meta.get("version", "")), digest))
    return found


def _archive_sha256(item: Mapping[str, Any]) -> str:
    archive = item.get("download_info", {}).get("archive_info", {})
    hashes = archive.get("hashes") or {}
    if "sha256" in hashes:
        return str(hashes["sha256"])
    algo, _, value = str(archive.get("hash", "")).partition("=")
    return value if algo == "sha256" else ""


# -- conflicts --------------------------------------------------------------------------------


def _conflicts(
    step: Step,
    errors: Sequence[Finding],
    blocks: Mapping[str, str],
    installed: Mapping[str, Constraint],
    after: Installed,
) -> ResolutionConflict:
    """Every violation of one layer, each with who installed it and who asks otherwise."""
    lines = [_conflict_line(f, blocks, installed, after) for f in errors]
    snippets = "\n".join(f.hint for f in errors if f.hint)
    return ResolutionConflict(
        f"{step.label}: {len(errors)} violation{'s' if len(errors) > 1 else ''}, "
        "nothing written:\n" + "\n".join(lines),
        'keep what must not move with override = ["name==version"] on this layer (see '
        "docs/recipes.md), relax what asks for the other version, or waive exactly this "
        "change:\n" + snippets,
    )


def _conflict_line(
    finding: Finding,
    blocks: Mapping[str, str],
    installed: Mapping[str, Constraint],
    after: Installed,
) -> str:
    name = finding.package
    if finding.rule not in CHANGE_RULES:
        return f"  {finding.rule}: {finding.message}"
    origin = installed[name].origin if name in installed else "nothing"
    change = f"{finding.before or '(absent)'} -> {finding.after or '(absent)'}"
    asks = who_asks(name, via_parents(blocks.get(name, "")), _constraints(after))
    why = f": {'; '.join(asks)}" if asks else ""
    return f"  {finding.rule}: {name} {change} (installed by {origin}){why}"


def _constraints(env: Installed) -> dict[str, Constraint]:
    return {
        name: Constraint(name, d.version, "", d.requires_dist or (), d.requires_python, d.raw_name)
        for name, d in env.items()
    }


def escape(text: str) -> str:
    """Text shown through rich as itself (``[x]`` and ``:x:`` are not markup or emoji)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)
