"""audit-deps: check every recipe's predicted environments and locks before anything is built.

For one recipe: lock freshness (``audit.lock.plan.survey_locks``: a stale or missing lock is an
error finding), then the policy (``audit.policy.verdict.evaluate``) on each pip layer's predicted
before/after environments, reported per stage ("v7 -> v8") so a reviewer sees what each stage
changes and which layer broke a rule. Violations the base image already has and that no layer
fixes are reported once, against the base. Pure given a :class:`Source`: no Docker, no network.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date

from audit.errors import UsageError
from audit.gate.unrecorded import never_recorded, not_audited
from audit.history.predict import (
    Installed,
    PredictedStep,
    StepJudge,
    base_environment,
    base_markers,
    predict_from,
)
from audit.lock.files import BaseRecord, base_relpath
from audit.lock.plan import Survey, survey_locks
from audit.lock.refusal import refused_findings
from audit.lock.trust import source_finding
from audit.policy.findings import ERROR, Finding
from audit.policy.verdict import check_state
from audit.project.frontdoor import FrontDoor
from audit.project.paths import list_images
from audit.project.sources import DirectorySource, Source
from audit.recipe.model import Recipe
from audit.recipe.parse import load_recipe
from audit.report.findings import Report, Section

MISSING_LOCK = "missing-lock"
STALE_LOCK = "stale-lock"


@dataclass(frozen=True)
class RecipeAudit:
    """The audit of one recipe: predicted steps, every finding, and the report sections."""

    recipe: Recipe
    steps: tuple[PredictedStep, ...]
    findings: tuple[Finding, ...]
    sections: tuple[Section, ...]
    recorded: bool = True  # False: never recorded, so nothing was predicted (no stage matrix)

    @property
    def failed(self) -> bool:
        return any(finding.fails for finding in self.findings)


def audit_recipe(source: Source, recipe: Recipe, *, today: date) -> RecipeAudit:
    """Audit ``recipe`` as committed at ``source`` (the work tree or a git ref)."""
    survey = survey_locks(source, recipe)  # every lock read once, for freshness and prediction
    locks = Section(f"{recipe.name} locks", tuple(_lock_findings(source, recipe, survey)))
    if survey.base is None:
        # Nothing can be predicted without the base: say so once instead of "no changes".
        return RecipeAudit(recipe, (), locks.findings, (locks,))
    base = base_environment(survey.base[0], recipe, source)
    steps = tuple(predict_from(base, source, recipe, survey.locks))
    judge = StepJudge(recipe, today, base_markers(survey.base[0], recipe))
    sections = (
        locks,
        Section(
            f"{recipe.name} base image",
            (
                *_source_findings(recipe, survey.base[0]),
                *_base_findings(recipe, base, steps, judge.markers),
            ),
        ),
        *_stage_sections(recipe, steps, judge),
    )
    sections = tuple(s for s in sections[:2] if s.findings) + sections[2:]
    findings = tuple(finding for section in sections for finding in section.findings)
    return RecipeAudit(recipe, steps, findings, sections)


def audit_report(audits: Iterable[RecipeAudit], title: str = "audit-deps") -> Report:
    """One report over several recipes, their sections in recipe order."""
    return Report(title, tuple(section for audit in audits for section in audit.sections))


def recipe_audits(
    names: Sequence[str], *, today: date, source: DirectorySource, strict: bool = False
) -> list[RecipeAudit]:
    """Each named recipe's audit (every recipe when none) of the working tree ``source``, in
    order: the report and the stage matrix are both made from them.

    A recipe that was never recorded is "not audited": a warning when every recipe is
    audited, an error when it is named or with ``strict``.
    """
    root = source.root
    selected = list(names) or list_images(root)
    if not selected:
        raise UsageError(f"no recipes under {root / 'images'}", "add images/<name>/image.toml")
    why = "named on the command line" if names else "--strict" if strict else ""
    audits = []
    for name in selected:
        recipe = load_recipe(source, name)
        if never_recorded(source, recipe):
            audits.append(unrecorded_audit(recipe, fails=bool(why), why=why, front=source.front))
        else:
            audits.append(audit_recipe(source, recipe, today=today))
    return audits


def unrecorded_audit(recipe: Recipe, *, fails: bool, why: str, front: FrontDoor) -> RecipeAudit:
    """The audit of a recipe that was never recorded: one "not audited" finding, no steps."""
    finding = not_audited(recipe, fails=fails, why=why, front=front)
    section = Section(f"{recipe.name} not audited", (finding,))
    return RecipeAudit(recipe, (), (finding,), (section,), recorded=False)


def step_where(recipe: Recipe, predicted: PredictedStep) -> str:
    """``"<image> v3 layer 2 (requirements/x.in)"``: how findings name a layer."""
    return f"{recipe.name} {predicted.step.label}"


def _stage_sections(
    recipe: Recipe, steps: tuple[PredictedStep, ...], judge: StepJudge
) -> list[Section]:
    """Per stage: one section per layer that changes the environment ("v2 -> v3: layer 2 ..")."""
    sections: list[Section] = []
    for stage in recipe.stages:
        parent = recipe.parent(stage)  # the stage it builds on (the one before, in a chain)
        title = f"{recipe.name} {parent.name if parent else 'base'} -> {stage.name}"
        changing = [p for p in steps if p.step.stage is stage and p.before is not p.after]
        sections += [_layer_section(recipe, title, p, judge) for p in changing]
        sections += [] if changing else [Section(title, ())]
    return sections


def _layer_section(
    recipe: Recipe, title: str, predicted: PredictedStep, judge: StepJudge
) -> Section:
    """The findings of one pip layer, under a title that names the stage and the layer."""
    where = step_where(recipe, predicted)
    step = predicted.step
    found = judge.judge(step, predicted.before, predicted.after, where)
    findings = [f.located(recipe.name, step.stage.name, step.position) for f in found]
    label = step.label.removeprefix(f"{step.stage.name} ")
    return Section(f"{title}: {label}", tuple(findings))


def _source_findings(recipe: Recipe, record: BaseRecord) -> list[Finding]:
    """An info naming where the base record came from, when not from the image itself (a
    snapshot file taken elsewhere, a replica and its stand-ins): every report says so."""
    found = source_finding(recipe.name, recipe.base_ref, record)
    return [found] if found else []


def _base_findings(
    recipe: Recipe, base: Installed, steps: tuple[PredictedStep, ...], markers: Mapping[str, str]
) -> list[Finding]:
    """Rules the base already breaks and the last layer still breaks: no layer caused them."""
    if not base:
        return []
    final = steps[-1].after if steps else base
    where = f"{recipe.name} base ({recipe.base_ref})"
    policy = recipe.policy
    still = {(f.rule, f.package) for f in check_state(final, policy, where=where, markers=markers)}
    return [
        f.located(recipe.name)
        for f in check_state(base, policy, where=where, markers=markers)
        if (f.rule, f.package) in still
    ]


def _lock_findings(source: Source, recipe: Recipe, survey: Survey) -> list[Finding]:
    """A finding per missing or stale lock (the base record's first), each followed by the
    violations ``lock`` refused that layer for, when its refusal record is of these inputs."""
    hint = f"record the base and compile the locks: {source.front.command('lock', recipe.name)}"
    findings: list[Finding] = []
    if survey.base is None:
        relpath = base_relpath(recipe)
        reason = f"the base image {recipe.base_ref} was never recorded: nothing can be predicted"
        record = (
            f"on a machine that has {recipe.base_ref} (docker pull or docker load it): "
            f"{source.front.command('lock', recipe.name + ' --record-base')}, "
            f"then commit locks/{recipe.name}/"
        )
        missing = _lock_finding(MISSING_LOCK, relpath, reason, recipe.name, record)
        findings.append(missing.located(recipe.name))
    for state in survey.states:
        if state.status != "fresh":
            rule = MISSING_LOCK if state.status == "missing" else STALE_LOCK
            where = f"{recipe.name} {state.step.label}"
            found = _lock_finding(rule, state.relpath, state.reason, where, hint)
            findings.append(found.located(recipe.name, state.step.stage.name, state.step.position))
            findings += refused_findings(source, recipe, state)
    return findings


def _lock_finding(rule: str, relpath: str, reason: str, where: str, hint: str) -> Finding:
    state = "missing" if rule == MISSING_LOCK else "stale"
    return Finding(
        rule=rule,
        severity=ERROR,
        package=relpath,
        before=None,
        after=None,
        message=f"{state}: {reason}",
        where=where,
        hint=hint,
    )
