"""The pull-request gate: what moving from one commit to another does to every image.

Both sides are read through a :class:`audit.project.sources.Source` (a git ref, see
:mod:`audit.project.gitsource`), predicted from their base snapshots and locks
(:mod:`audit.history.predict`)
and compared image by image, stage by stage: the environment each stage ships at the base ref
against the one it ships at the head. A change is reported once, at the first stage it shows
up in (a lock change in v1 reaches v2…v8 too, but v1 is what the reviewer must look at), and
attributed to the head layer that installs the new version. The verdict comes from the head's
policy and waivers; waivers the pull request adds are listed and marked on what they allow.
Locks must be fresh at the head (the ``lock --check`` logic), and a re-recorded base image gets
its own section. Pure given the two sources: no Docker, no network, no checkout.

:func:`gate_result` also returns two stage matrices per image for the Markdown to lead with:
the head ref's packages x stages (the policy applied layer by layer, as audit-deps does, so
overrides and waivers are marked), and what the pull request changes per stage (base ref
against head ref).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from types import MappingProxyType

from audit.errors import LockError
from audit.gate.change_view import (
    ADDED_BY_PR,
    OVERRIDE_RULE,
    WAIVER_RULE,
    ImageInputs,
    ImageView,
    image_view,
    severity_of,
    waiver_change,
)
from audit.gate.matrix import (
    StageMatrix,
    change_matrix,
    column_pairs,
    columns_matrix,
    declared_marks,
    finding_marks,
)
from audit.gate.unrecorded import not_audited, touched
from audit.history.diff import Comparison
from audit.history.predict import (
    Installed,
    PredictedStep,
    StepJudge,
    base_environment,
    base_markers,
    declared_overrides,
    predict_from,
)
from audit.history.snapshot import canonical_name
from audit.history.system import System
from audit.lock.files import BaseRecord, base_relpath
from audit.lock.plan import LockState, read_locks, survey_locks
from audit.lock.refusal import refused_findings
from audit.lock.trust import describe_source, source_finding
from audit.policy.findings import ERROR, INFO, WARNING, Finding
from audit.policy.model import Policy, Waiver
from audit.policy.rules import CHANGE_RULES, STATE_RULES
from audit.policy.system_rules import evaluate_system
from audit.policy.verdict import (
    Scope,
    WaiverLedger,
    change_key,
    check_state,
    evaluate,
)
from audit.project.frontdoor import CONSOLE_SCRIPT, FrontDoor
from audit.project.memo import Memo
from audit.project.sources import Source
from audit.recipe.model import PipLayer, Recipe, RunLayer, Stage, Step
from audit.recipe.parse import load_recipe
from audit.report.findings import Report, Section

TITLE_SEPARATOR = ": "
WAIVERS_PART = f"waivers {ADDED_BY_PR}"
NEEDS_REVIEW = "needs owner review"
RUN_LAYER_RULE = "run-layer-changed"
NOT_PREDICTABLE = "not predictable: the build's guard will judge it"
BASE_IMAGE_RULE = "base-image"
STALE_BASE_RULE = "stale-base"
WAIVER_SPENT_RULE = "waiver-spent"
EMPTY: Installed = MappingProxyType({})

FindingKey = tuple[str, str, str | None, str | None]
LockKey = tuple[str, str, str]  # relpath, status, reason


@dataclass(frozen=True)
class Side:
    """One image at one ref: its recipe and predicted environments (empty when absent).

    ``stages`` maps each stage name to the environment that stage ships (after its last layer);
    ``lock_states`` is the freshness of each pip layer's lock, from the same single read, or
    None when the read did not judge it (the base ref's: see :func:`lock_findings`).
    """

    recipe: Recipe | None
    base_record: BaseRecord | None
    base_env: Installed
    steps: tuple[PredictedStep, ...]
    stages: Mapping[str, Installed]
    lock_states: tuple[LockState, ...] | None = ()
    stdin_digests: Mapping[str, str] = field(default_factory=dict)  # run stdin file -> sha256
    front: FrontDoor = CONSOLE_SCRIPT  # the commands this side's hints name

    @property
    def final_env(self) -> Installed:
        return self.steps[-1].after if self.steps else self.base_env

    @property
    def markers(self) -> Mapping[str, str]:
        if self.recipe is None or self.base_record is None:
            return {}
        return base_markers(self.base_record, self.recipe)


ABSENT = Side(None, None, EMPTY, (), MappingProxyType({}))


@dataclass(frozen=True)
class ImageMatrices:
    """One image's matrices: ``head`` (packages x base, v1 … vN at the head ref; None when
    not asked for: only the Markdown shows it) and ``changes`` (per stage, base ref -> head
    ref; None for an image the pull request adds)."""

    image: str
    head: StageMatrix | None
    changes: StageMatrix | None


@dataclass(frozen=True)
class GateResult:
    """The gate's report and, per image the head ref has, its matrices and its change view
    (in image order)."""

    report: Report
    matrices: tuple[ImageMatrices, ...]
    views: tuple[ImageView, ...] = ()


def section_title(image: str, part: str) -> str:
    return f"{image}{TITLE_SEPARATOR}{part}"


def image_of(section: Section) -> str:
    """The image a gate section belongs to (its title before the separator)."""
    return section.title.partition(TITLE_SEPARATOR)[0]


def gate_result(
    base: Source,
    head: Source,
    *,
    today: date,
    title: str = "dependency gate",
    strict_waivers: bool = False,
    strict: bool = False,
    head_matrices: bool = True,
) -> GateResult:
    """Compare every image at ``base`` with ``head``; the verdict follows the head's policy.

    Waivers the pull request adds or widens come first (every image's, before anything else)
    and fail the gate with ``strict_waivers``, so that a waiver lands through its own reviewed
    pull request. An image with no base record at the head is "not audited": a warning when
    the pull request does not touch it, an error when it does or with ``strict``. An image
    whose record the pull request adds is compared as if it were new. ``head_matrices``:
    also each image's stage matrix at the head ref (judged layer by layer, as audit-deps
    does: only the Markdown shows it, so a caller that prints none leaves it out).
    """
    old, new = recipe_names(base), recipe_names(head)
    sections: list[Section] = []
    matrices: list[ImageMatrices] = []
    views: list[ImageView] = []
    for name in sorted(old | new):  # one image at a time: what it read is then let go
        before = load_recipe(base, name) if name in old else None
        after = load_recipe(head, name) if name in new else None
        if after is not None and not head.exists(base_relpath(after)):
            unrecorded = _not_audited(after, base, head, strict=strict)
            sections.append(unrecorded)
            views.append(image_view(name, unrecorded.findings, ImageInputs()))
            continue
        found, matrix, view = _image(
            name, before, after, base, head, today=today, strict=strict_waivers, whole=head_matrices
        )
        sections += found
        matrices += [matrix] if matrix else []
        views += [view] if found else []
    waivers = [section for section in sections if is_waiver_section(section)]
    rest = [section for section in sections if not is_waiver_section(section)]
    return GateResult(Report(title, (*waivers, *rest)), tuple(matrices), tuple(views))


def recipe_names(source: Source) -> set[str]:
    """The images ``source`` has a recipe for (``images/<name>/image.toml``)."""
    return {n for n in source.listdir("images") if source.exists(f"images/{n}/image.toml")}


def is_waiver_section(section: Section) -> bool:
    return section.title.endswith(TITLE_SEPARATOR + WAIVERS_PART)


ImagePart = tuple[list[Section], ImageMatrices | None, ImageView]


def _image(
    name: str,
    old: Recipe | None,
    new: Recipe | None,
    base: Source,
    head: Source,
    *,
    today: date,
    strict: bool = False,
    whole: bool = True,
) -> ImagePart:
    """Everything the gate says about one image (empty sections left out), the image's
    matrices (None when the head removes it; the head's stage matrix only when ``whole``) and
    its change view."""
    if new is None:
        removed = _removed_image(name)
        return [removed], None, image_view(name, removed.findings, ImageInputs())
    recorded_before = old is not None and base.exists(base_relpath(old))
    old_side = read_side(base, old, judge_locks=False) if old and recorded_before else ABSENT
    new_side = read_side(head, new)
    base_waivers = old.policy.waivers if old else ()
    added = added_waivers(old.policy if old else None, new.policy)
    pairs = column_pairs(_columns(old_side), _columns(new_side))  # compared once, read four times
    base_section, base_keys = _base_section(name, old_side, new_side, pairs["base"], today)
    waivers = _waiver_findings(name, added, base_waivers, strict=strict)
    sections = [
        Section(section_title(name, WAIVERS_PART), tuple(waivers)),
        Section(section_title(name, "locks"), tuple(lock_findings(new_side, old_side, base, head))),
        base_section,
        *_stage_sections(name, old_side, new_side, pairs, seen=base_keys, today=today),
    ]
    kept = [_mark_added(section, new.policy, added) for section in sections if section.findings]
    found = tuple(finding for section in kept for finding in section.findings)
    old_matrix = old_side if recorded_before else None
    matrices = image_matrices(
        name, old_matrix, new_side, found, today, pairs=pairs, whole=whole, memo=head.memo
    )
    inputs = ImageInputs(pairs, new.policy.lockstep, new.policy.waivers, base_waivers)
    return kept, matrices, image_view(name, found, inputs)


def _not_audited(recipe: Recipe, base: Source, head: Source, *, strict: bool) -> Section:
    """An image with no base record at the head: nothing to predict. It fails where the pull
    request touches the image (its recipe, requirements, files or locks) or with ``strict``."""
    changed = touched(base, head, recipe.name)
    why = "this pull request changes it" if changed else "--strict" if strict else ""
    finding = not_audited(recipe, fails=changed or strict, why=why, front=head.front)
    return Section(section_title(recipe.name, "not audited"), (finding,))


def image_matrices(
    name: str,
    old: Side | None,
    new: Side,
    found: tuple[Finding, ...],
    today: date,
    *,
    pairs: Mapping[str, Comparison],
    whole: bool = True,
    memo: Memo | None = None,
) -> ImageMatrices:
    """The head's stage matrix (with ``whole``) and, when the base ref has the image, the
    change matrix of its column ``pairs`` marked with the gate's own findings (rows remembered
    in the command's ``memo``)."""
    head = None
    if whole:
        marks = head_marks(name, new, today)
        among = _column_moves(new)
        head = columns_matrix(name, _columns(new), marks, among=among, memo=memo)
    if old is None:
        return ImageMatrices(name, head, None)
    changes = change_matrix(name, pairs, finding_marks(found), memo=memo)
    return ImageMatrices(name, head, changes)


def head_marks(name: str, side: Side, today: date) -> dict[tuple[str, str], str]:
    """(stage, package) marks of the head's own progression: every package a layer re-pins on
    purpose is ``override``; with waivers in the policy, each layer is judged as audit-deps
    judges it and what a waiver allowed is ``waived`` (no waiver: nothing to judge, which
    keeps the gate fast)."""
    assert side.recipe is not None
    marks = declared_marks(side.steps)
    if not side.recipe.policy.waivers:
        return marks
    judge = StepJudge(side.recipe, today, side.markers)
    waived = _change_waiver_names(side.recipe.policy)
    judged = [
        finding.located(name, p.step.stage.name, p.step.position)
        for p in side.steps
        if p.before is not p.after  # a layer without a lock changes nothing predictable
        and (waived is None or _moves_any(p, waived))
        for finding in judge.judge(p.step, *_judged_envs(p, waived), f"{name} {p.step.label}")
    ]
    return {**marks, **finding_marks(judged)}


def _judged_envs(
    predicted: PredictedStep, waived: frozenset[str] | None
) -> tuple[Installed, Installed]:
    """The step's environments as :func:`head_marks` judges them: whole, or with change waivers
    only, just the packages they name. A change waiver waives only a change of its own package,
    so the marks (and the waivers spent) come out the same; only the messages of findings no
    mark reads would differ (the vLLM layer of a fleet's image moves 200 packages, of which a
    waiver names one)."""
    if waived is None:
        return predicted.before, predicted.after
    before, after = predicted.before, predicted.after
    return (
        {name: before[name] for name in waived if name in before},
        {name: after[name] for name in waived if name in after},
    )


def _change_waiver_names(policy: Policy) -> frozenset[str] | None:
    """The packages the policy's waivers name when every waiver is a change waiver (no
    ``rule``: it waives only a change of its own package); None when one names a rule."""
    if any(waiver.rule is not None for waiver in policy.waivers):
        return None
    return frozenset(canonical_name(waiver.package) for waiver in policy.waivers)


def _moves_any(predicted: PredictedStep, names: frozenset[str]) -> bool:
    """Whether the step may change one of ``names`` (another object, or none, after it). A
    step that changes none of them cannot use a change waiver: judging it marks nothing and
    spends no waiver, so :func:`head_marks` skips it."""
    before, after = predicted.before, predicted.after
    return any(before.get(name) is not after.get(name) for name in names)


def _columns(side: Side) -> dict[str, Installed]:
    """``base`` then each stage's shipped environment."""
    return {"base": side.base_env, **side.stages}


def _column_moves(side: Side) -> list[frozenset[str]]:
    """Per stage column of :func:`_columns` (after ``base``), every name at which it may differ
    from the column before: the pins of the stage's layers (none: the stage ships the same)."""
    assert side.recipe is not None
    return [
        frozenset().union(*(p.moves for p in side.steps if p.step.stage is stage))
        for stage in side.recipe.stages
    ]


def read_side(source: Source, recipe: Recipe, *, judge_locks: bool = True) -> Side:
    """Predict ``recipe`` at ``source``, reading its base record and locks once (the survey that
    also says which locks are fresh; without ``judge_locks`` only read, ``lock_states`` None);
    no base snapshot is :class:`LockError` (exit 2)."""
    survey = survey_locks(source, recipe) if judge_locks else read_locks(source, recipe)
    if survey.base is None:  # an empty base would report every package as removed
        relpath = base_relpath(recipe)
        raise LockError(
            f"{source.describe(relpath)}: missing: {recipe.name} has no base snapshot at this "
            "ref, so its environments cannot be compared",
            "record it and commit it: "
            + source.front.command("lock", recipe.name + " --record-base"),
        )
    record = survey.base[0]
    base_env = base_environment(record, recipe, source)
    steps = tuple(predict_from(base_env, source, recipe, survey.locks))
    stages = _stage_envs(recipe, base_env, steps)
    stdin = _stdin_digests(source, recipe)
    states = survey.states if judge_locks else None
    return Side(recipe, record, base_env, steps, stages, states, stdin, source.front)


def _stdin_digests(source: Source, recipe: Recipe) -> Mapping[str, str]:
    """The sha256 of each run layer's standard-input file at this ref (a heredoc kept as a
    file): the command text alone does not change when only the script does."""
    names = {s.layer.stdin for s in recipe.steps() if isinstance(s.layer, RunLayer)} - {None}
    folder = recipe.source.parent.as_posix()
    return MappingProxyType(
        {
            name: hashlib.sha256(source.read_bytes(f"{folder}/{name}")).hexdigest()
            for name in sorted(n for n in names if n)
        }
    )


def _stage_envs(
    recipe: Recipe, base_env: Installed, steps: tuple[PredictedStep, ...]
) -> Mapping[str, Installed]:
    shipped: dict[str, Installed] = {}
    for stage in recipe.stages:  # a stage without pip layers ships what it builds on
        parent = recipe.parent(stage)
        start = shipped[parent.name] if parent is not None else base_env
        shipped[stage.name] = next(
            (p.after for p in reversed(steps) if p.step.stage is stage), start
        )
    return MappingProxyType(shipped)


def added_waivers(old: Policy | None, new: Policy) -> tuple[Waiver, ...]:
    """Waivers of the head's policy that the base's policy does not have."""
    known = old.waivers if old else ()
    return tuple(waiver for waiver in new.waivers if waiver_change(waiver, known))


def lock_findings(new: Side, old: Side, base: Source, head: Source) -> list[Finding]:
    """A finding per stale or missing lock at the head, naming its requirements file, and
    after it the violations ``lock`` refused that layer for (its refusal record at ``head``,
    for exactly these inputs: rule, package, versions, askers).

    It fails the gate unless the base already had exactly that problem: a pull request is
    judged by what it changes, so a lock that was missing before it only warns. ``old``'s
    locks are judged (at ``base``) only when the head has a lock that is not fresh.
    """
    assert new.recipe is not None and new.lock_states is not None  # the head, judged
    unfresh = _unfresh(new.lock_states)
    if not unfresh:
        return []
    hint = f"recompile the locks and commit them: {head.front.command('lock', new.recipe.name)}"
    before = _unfresh(_judged(old, base))
    found = []
    for key, state in unfresh.items():
        step = state.step
        finding = _lock_finding(new.recipe, state, hint, key in before)
        found.append(finding.located(new.recipe.name, step.stage.name, step.position))
        refused = refused_findings(head, new.recipe, state)  # why lock wrote none: typed
        found += [dataclasses.replace(f, severity=finding.severity) for f in refused]
    return found


def _judged(side: Side, source: Source) -> tuple[LockState, ...]:
    """``side``'s lock states, judged at ``source`` now when its read left them out."""
    if side.lock_states is not None:
        return side.lock_states
    assert side.recipe is not None  # ABSENT's states are ()
    return survey_locks(source, side.recipe).states


def _unfresh(states: Iterable[LockState]) -> dict[LockKey, LockState]:
    """Each lock that is not fresh, by what makes two lock problems the same."""
    return {(s.relpath, s.status, s.reason): s for s in states if s.status != "fresh"}


def _lock_finding(recipe: Recipe, state: LockState, hint: str, preexisting: bool) -> Finding:
    assert isinstance(state.step.layer, PipLayer)  # check_locks only looks at pip layers
    requirements = f"{recipe.directory.as_posix()}/{state.step.layer.requirements}"
    problem = "changed without recompiling" if state.status == "stale" else "has no lock"
    already = " (already so at the base: not caused by this pull request)" if preexisting else ""
    return Finding(
        rule=f"{state.status}-lock",
        severity=WARNING if preexisting else ERROR,
        package=state.relpath,
        before=None,
        after=None,
        message=f"{requirements} {problem} ({state.reason}){already}",
        where=f"{recipe.name} {state.step.label}",
        hint=hint,
    )


def _removed_image(name: str) -> Section:
    message = f"images/{name} is removed by this pull request: its stages are no longer built"
    finding = Finding("image-removed", INFO, "", None, None, message, where=name).located(name)
    return Section(section_title(name, "image removed"), (finding,))


def _base_section(
    name: str, old: Side, new: Side, pair: Comparison, today: date
) -> tuple[Section, set[FindingKey]]:
    """What a changed base image (record or reference) changes, and the keys it reported;
    ``pair`` compares the two base environments."""
    assert new.recipe is not None
    title = section_title(name, "base image")
    old_ref = old.recipe.base_ref if old.recipe else None
    if old.base_record == new.base_record and old_ref == new.recipe.base_ref:
        return Section(title, _source_note(name, new)), set()
    stale = _stale_base(name, new)
    if stale is not None:  # the snapshot is of another image: predicting from it means nothing
        both = (_base_identity(old, new, f"{name} base image"), stale)
        return Section(title, tuple(f.located(name) for f in both)), set()
    where = f"{name} base image"
    policy = new.recipe.policy
    found = evaluate(pair.before, pair.after, policy, where=where, today=today, compared=pair)
    found += evaluate_system(
        _recorded_system(old), _recorded_system(new), policy, where=where, today=today
    )
    identity = _base_identity(old, new, where)
    shown = _still_broken(found, new, policy, where)
    located = tuple(f.located(name) for f in (identity, *shown))
    return Section(title, located), {finding_key(f) for f in found}


def _still_broken(found: list[Finding], side: Side, policy: Policy, where: str) -> list[Finding]:
    """The base's findings without the state rules its image's last stage no longer breaks (a
    base holding the FlashInfer a later layer replaces): audit-deps' rule for the base. Their
    keys stay reported, so no stage repeats them."""
    if not side.stages:
        return found
    envs = side.base_record.environments if side.base_record else ()
    markers = envs[0].markers if envs else None
    final = list(side.stages.values())[-1]
    still = {(f.rule, f.package) for f in check_state(final, policy, where=where, markers=markers)}
    return [f for f in found if f.rule not in STATE_RULES or (f.rule, f.package) in still]


def _source_note(name: str, side: Side) -> tuple[Finding, ...]:
    """An unchanged base recorded elsewhere than in the image (a replica, a snapshot file):
    the info audit-deps shows for it, with the stand-ins."""
    if side.recipe is None:
        return ()
    found = source_finding(name, side.recipe.base_ref, side.base_record)
    return (found,) if found else ()


def _recorded_system(side: Side) -> System | None:
    """The OS packages and native libraries the side's base record holds (None: not recorded)."""
    envs = side.base_record.environments if side.base_record else ()
    return envs[0].system if envs else None


def _stale_base(name: str, side: Side) -> Finding | None:
    """An error when the recorded base snapshot is not of the image the recipe names."""
    recipe, record = side.recipe, side.base_record
    if recipe is None or record is None or record.image == recipe.base:
        return None
    return Finding(
        STALE_BASE_RULE,
        ERROR,
        "",
        None,
        None,
        f"{recipe.source.as_posix()} names base {recipe.base}, but "
        f"locks/{recipe.name}/base.json records {record.image}: the base snapshot is stale",
        where=f"{name} base image",
        hint="re-record it and recompile the locks: "
        + side.front.command("lock", f"{recipe.name} --record-base"),
    )


def _base_identity(old: Side, new: Side, where: str) -> Finding:
    def describe(side: Side) -> str:
        if side.recipe is None:
            return "(no image)"
        record = side.base_record
        recorded = f"image id {record.image_id}" if record else "no base snapshot"
        if record and record.source:
            recorded += f", {describe_source(record)}"
        return f"{side.recipe.base_ref} ({recorded})"

    message = f"base image changed: {describe(old)} -> {describe(new)}"
    return Finding(BASE_IMAGE_RULE, INFO, "", None, None, message, where=where)


def _stage_sections(
    name: str,
    old: Side,
    new: Side,
    pairs: Mapping[str, Comparison],
    *,
    seen: set[FindingKey],
    today: date,
) -> list[Section]:
    """One section per head stage with the changes that first show up there (``pairs``: per
    head stage, the base ref's environment for it, or its last, against the head's)."""
    assert new.recipe is not None
    sections: list[Section] = []
    ledger = WaiverLedger()
    for stage in new.recipe.stages:
        pair = pairs[stage.name]
        where = f"{name} {stage.name}"
        found = evaluate(
            pair.before,
            pair.after,
            new.recipe.policy,
            compared=pair,
            reported=seen,
            where=where,
            today=today,
            scope=Scope(stage.name),
            ledger=ledger,
            declared=_overridden_in(new, stage),
            markers=new.markers,
        )
        fresh = [_attributed(f, new, stage) for f in found if finding_key(f) not in seen]
        fresh = [f if f.layer else f.located(name, stage.name) for f in fresh]
        seen = _seen_keys(found) | _carried(seen, pair)
        runs = run_layer_findings(name, old, new, stage)
        sections.append(Section(section_title(name, stage.name), (*runs, *fresh)))
    sections += [_removed_stage(name, stage) for stage in _dropped_stages(old, new)]
    return sections


def _seen_keys(found: list[Finding]) -> set[FindingKey]:
    """The keys of ``found``; an override's also under every change rule, so that a re-pin an
    earlier stage declared is not reported again as a downgrade by the stages after it; a
    change's also as a spent waiver, so that a waived change a later stage inherits is not
    reported there as "waiver spent"."""
    keys = {finding_key(f) for f in found}
    for f in found:
        if f.rule == OVERRIDE_RULE:
            keys |= {(rule, f.package, f.before, f.after) for rule in CHANGE_RULES}
        if f.rule in CHANGE_RULES:  # a later stage inheriting it: no "waiver spent" note either
            keys.add((WAIVER_SPENT_RULE, f.package, f.before, f.after))
    return keys


def _carried(seen: set[FindingKey], pair: Comparison) -> set[FindingKey]:
    """The keys of the changes ``pair`` still holds that ``seen`` reported: :func:`evaluate`
    leaves out those that do not fail, so the next stage learns of them here (the others are
    in its findings). No ``waiver-spent`` key is owed for them: a change's kind, so whether it
    fails, follows from its versions, and one that does not fail never spends a waiver."""
    return {key for c in pair.changes if (key := change_key(c)) in seen}


def _overridden_in(side: Side, stage: Stage) -> tuple[str, ...]:
    """What the no_deps layers of ``stage`` re-pin on purpose (at this side)."""
    names: list[str] = []
    for predicted in side.steps:
        if predicted.step.stage is stage:
            names += declared_overrides(predicted.step, predicted.after, predicted.before)
    return tuple(names)


RunKey = tuple[str, str, str]  # stage, command, sha256 of its standard input ("" without)


def _run_key(side: Side, step: Step) -> RunKey:
    assert isinstance(step.layer, RunLayer)
    digest = side.stdin_digests.get(step.layer.stdin or "", "")
    return step.stage.name, step.layer.command, digest


def _run_steps(side: Side) -> list[Step]:
    steps = side.recipe.steps() if side.recipe else ()
    return [step for step in steps if isinstance(step.layer, RunLayer)]


def run_layer_findings(name: str, old: Side, new: Side, stage: Stage) -> list[Finding]:
    """A warning per shell (``run``) layer of ``stage`` that is new or changed at the head.

    What a shell step installs cannot be predicted from locks: only the build's guard sees
    it. A command the base ref already ran in the same stage, with the same standard input,
    is not reported again; one whose stdin file alone changed is, and says so.
    """
    before = {_run_key(old, step) for step in _run_steps(old)}
    commands = {key[:2] for key in before}
    found = []
    for step in _run_steps(new):
        key = _run_key(new, step)
        if step.stage is stage and key not in before:
            found.append(_run_finding(name, step, new.front, only_stdin=key[:2] in commands))
    return found


def _run_finding(name: str, step: Step, front: FrontDoor, *, only_stdin: bool = False) -> Finding:
    assert isinstance(step.layer, RunLayer)
    changed = f" (its standard input {step.layer.stdin} changed)" if only_stdin else ""
    return Finding(
        RUN_LAYER_RULE,
        WARNING,
        "",
        None,
        None,
        f"{NOT_PREDICTABLE}: {step.layer.command}{changed}",
        where=f"{name} {step.label}",
        hint=f"build the image ({front.command('build')}) to see what this command changes",
    ).located(name, step.stage.name, step.position)


def finding_key(finding: Finding) -> FindingKey:
    """What makes two findings the same change, wherever they were seen."""
    return finding.rule, finding.package, finding.before, finding.after


def _attributed(finding: Finding, side: Side, stage: Stage) -> Finding:
    """Name the head layer of ``stage`` that installs the finding's new version, if one does."""
    if not finding.package or finding.after is None:
        return finding
    for predicted in reversed(side.steps):
        if predicted.step.stage is stage and _moves(predicted, finding.package):
            assert side.recipe is not None
            step = predicted.step
            where = f"{side.recipe.name} {step.label}"
            return finding.placed(
                where=where, image=side.recipe.name, stage=step.stage.name, layer=step.position
            )
    return finding


def _moves(predicted: PredictedStep, package: str) -> bool:
    old, new = predicted.before.get(package), predicted.after.get(package)
    return new is not None and (old is None or old.version != new.version)


def _dropped_stages(old: Side, new: Side) -> list[Stage]:
    if old.recipe is None or new.recipe is None:
        return []
    kept = {stage.name for stage in new.recipe.stages}
    return [stage for stage in old.recipe.stages if stage.name not in kept]


def _removed_stage(name: str, stage: Stage) -> Section:
    message = f"stage {stage.name} is removed by this pull request"
    finding = Finding("stage-removed", INFO, "", None, None, message, where=f"{name} {stage.name}")
    finding = finding.located(name, stage.name)
    return Section(section_title(name, stage.name), (finding,))


def _waiver_findings(
    name: str, added: Iterable[Waiver], base_waivers: tuple[Waiver, ...], *, strict: bool
) -> list[Finding]:
    """Each new or widened waiver: a warning a reviewer must read even when nothing else
    moved, or an error with ``strict`` (waivers then land through their own pull request)."""
    findings = []
    for waiver in added:
        expiry = f", expires {waiver.expires.isoformat()}" if waiver.expires else ""
        how = waiver_change(waiver, base_waivers)
        message = (
            f"waiver {how} by this pull request ({NEEDS_REVIEW}): {waiver.package} "
            f"{waiver.from_version} -> {waiver.to_version}: {waiver.reason}{expiry}"
        )
        hint = "the image's owners must agree with the reason before merging"
        if strict:
            hint = (
                "--strict-waivers: land the waiver in a pull request of its own, reviewed by "
                "the image's owners (CODEOWNERS), then rebase this one on it"
            )
        findings.append(
            Finding(
                WAIVER_RULE,
                ERROR if strict else WARNING,
                waiver.package,
                waiver.from_version,
                waiver.to_version,
                message,
                where=f"{name} policy",
                hint=hint,
            ).located(name)
        )
    return findings


def _mark_added(section: Section, policy: Policy, added: tuple[Waiver, ...]) -> Section:
    """Every waived change becomes the warning a reviewer must read (the core's verdict keeps
    it at info: it is allowed); say so on those a waiver added by this pull request allowed
    (the waiver is known by its index in the head's ``policy``)."""
    return Section(section.title, tuple(_marked(f, policy, added) for f in section.findings))


def _marked(finding: Finding, policy: Policy, added: tuple[Waiver, ...]) -> Finding:
    if finding.waiver is None or finding.rule == WAIVER_RULE:
        return finding
    finding = dataclasses.replace(finding, severity=severity_of(finding))
    index = finding.waiver_index
    if index is not None and index < len(policy.waivers) and policy.waivers[index] in added:
        return dataclasses.replace(finding, waiver=f"{finding.waiver} ({ADDED_BY_PR})")
    return finding
