"""``lock IMAGE``, the whole command: what ``build_run`` is to ``build``.

Order of work: answer from the verified-fresh stamp when it holds; load the recipe; let the base
record answer or refuse (``--from-snapshot``, another base, PEP 668: :mod:`base_record`); look at
the locks without the file lock. ``--check`` compiles nothing and exits 1 when a lock is stale or
missing, or when a fresh lock fails today's policy and waivers. Otherwise, when every lock is
fresh, the same judgment is the whole run; when something must be written, hold
``locks/<image>/.lock``, record ``base.json`` when asked or missing, then walk the pip layers in
build order (:class:`~audit.lock.run.LockRun`) and compile only the stale or missing ones.

Invariants: a fresh lock is re-judged on every full run (cheap: no resolver runs), so deleting a
waiver fails ``lock`` at once; the stamp is written only for an answer that was judged clean;
what a killed earlier run left (labelled containers, work folders) is removed before compiling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit.base.record import BaseOptions, before_lock
from audit.errors import EXIT_OK, EXIT_VIOLATION, UsageError
from audit.host import atomic, console
from audit.lock.host_builds import HostBuilds
from audit.lock.plan import LockState, Survey, Upgrade, pip_steps, survey_locks
from audit.lock.stamp import RecordingSource, fresh_answer, fresh_message, write_stamp
from audit.policy.findings import Finding
from audit.project.frontdoor import FrontDoor
from audit.project.sources import DirectorySource, Source
from audit.recipe.model import Recipe
from audit.recipe.parse import load_recipe

if TYPE_CHECKING:
    from audit.lock.run import LockRun

JSON_SCHEMA = "layer-audit.lock/1"


@dataclass(frozen=True, kw_only=True)
class LockOptions:
    """The ``lock`` command line, parsed once."""

    image: str
    stage: str | None = None
    check: bool = False
    host: bool = False
    docker: str | None = None
    resolver: str | None = None  # must agree with the recipe's (refused otherwise)
    upgrade: Upgrade = field(default_factory=Upgrade)
    base: BaseOptions = field(default_factory=BaseOptions)
    fmt: str = "terminal"
    output: Path | None = None  # the JSON summary's file (stdout without)
    builds: HostBuilds = field(default_factory=HostBuilds)  # sdists it may build here

    @property
    def quiet(self) -> bool:
        """JSON on stdout: the human lines go nowhere (errors still go to stderr)."""
        return self.fmt == "json"


@dataclass
class LockSummary:
    """What a run found and did, for ``--format json`` (the text form prints as it goes)."""

    image: str
    fresh: int = 0
    stale: list[dict[str, str]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    moved: list[dict[str, str | None]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def to_json(self, code: int) -> dict[str, Any]:
        return {
            "schema": JSON_SCHEMA,
            "image": self.image,
            "exit_code": code,
            "fresh": self.fresh,
            "stale": self.stale,
            "written": self.written,
            "moved": self.moved,
            "findings": [finding.to_json() for finding in self.findings],
        }


def run_lock(root: Path, options: LockOptions) -> int:
    """The exit code of ``lock`` with ``options`` in the project at ``root``."""
    summary = LockSummary(options.image)
    code = _run(root, options, summary)
    if options.quiet:
        text = json.dumps(summary.to_json(code), indent=2)
        if options.output is not None:
            atomic.write_text(options.output, text + "\n")
        else:
            console.plain(text)
    return code


def _run(root: Path, options: LockOptions, summary: LockSummary) -> int:
    answer = _stamped_answer(root, options)
    if answer is not None:
        console.plain(answer)
        return EXIT_OK
    source = RecordingSource(DirectorySource(root))
    recipe = load_recipe(source, options.image)
    _refuse_options(recipe, options)
    answered = before_lock(root, source, recipe, options.base)
    if answered is not None:
        return answered
    # Look first without the file lock: on unchanged inputs that look (and the judgment of
    # the fresh locks) is the whole run. Only when something must be written is the lock
    # taken, and lock_image looks again under it.
    survey = survey_locks(source, recipe)
    states = upto(list(survey.states), recipe, options.stage)
    look = _Look(root, recipe, survey, source)
    if options.check:
        return _check(look, options, summary)
    asks_work = options.base.record or options.upgrade.active
    if survey.base is not None and not asks_work and _all_fresh(states):
        return _judge_fresh(look, options, summary)
    from audit.host import atomic
    from audit.project import paths

    with atomic.exclusive(paths.locks_dir(root, recipe.name) / ".lock"):
        code = lock_image(root, source, recipe, options, summary)
        _look_again_and_stamp(root, options.image)
    return code


def _refuse_options(recipe: Recipe, options: LockOptions) -> None:
    """``--stage`` must name a stage; ``--resolver`` must agree with the recipe's resolver."""
    if options.stage and options.stage not in [s.name for s in recipe.stages]:
        names = ", ".join(s.name for s in recipe.stages)
        raise UsageError(
            f"--stage {options.stage}: no such stage in {recipe.source}",
            f"choose one of: {names}",
        )
    if options.resolver and options.resolver != recipe.resolver:
        raise UsageError(
            f"--resolver {options.resolver}: {recipe.source} resolves with "
            f'"{recipe.resolver}", and a lock remembers its resolver: locks made with another '
            "one would be stale for every later lock --check, audit-deps and build",
            f'set resolver = "{options.resolver}" under [image] in {recipe.source}, then run '
            "lock again (every lock is recompiled once with it)",
        )


def _stamped_answer(root: Path, options: LockOptions) -> str | None:
    """The verified-fresh stamp's answer; runs that ask for work or JSON never take it."""
    if options.base.record or options.base.snapshot or options.upgrade.active or options.quiet:
        return None
    return fresh_answer(str(root), options.image, options.stage, check=options.check)


def upto(states: list[LockState], recipe: Recipe, stage: str | None) -> list[LockState]:
    """The states of the pip layers of stages v1 up to ``stage`` (every stage when None)."""
    wanted = {step.slug for step in pip_steps(recipe, stage)}
    return [state for state in states if state.step.slug in wanted]


def _all_fresh(states: list[LockState]) -> bool:
    return all(state.status == "fresh" for state in states)


# -- the fresh path: judged, never compiled ---------------------------------------------------


def policy_errors(
    source: Source, recipe: Recipe, survey: Survey, stage: str | None
) -> list[Finding]:
    """Every failing finding of the layers up to ``stage`` under today's policy and waivers,
    judged as audit-deps judges them (one waiver ledger, in build order); [] without a base."""
    from audit.history.predict import StepJudge, base_environment, base_markers, predict_from

    if survey.base is None:
        return []
    record = survey.base[0]
    base = base_environment(record, recipe, source)
    wanted = {step.slug for step in pip_steps(recipe, stage)}
    judge = StepJudge(recipe, date.today(), base_markers(record, recipe))
    found: list[Finding] = []
    for predicted in predict_from(base, source, recipe, survey.locks):
        where = f"{recipe.name} {predicted.step.label}"
        findings = judge.judge(predicted.step, predicted.before, predicted.after, where)
        if predicted.step.slug in wanted:
            found += [finding for finding in findings if finding.fails]
    return found


def _judged(
    recipe: Recipe, survey: Survey, source: Source, options: LockOptions, summary: LockSummary
) -> int:
    """Exit 1 naming every failing finding of the fresh locks, else 0."""
    errors = policy_errors(source, recipe, survey, options.stage)
    summary.findings += errors
    if not errors:
        return EXIT_OK
    if not options.quiet:
        from rich.markup import escape

        for finding in errors:
            console.stdout.print(
                f"policy: {escape(finding.where)}: {finding.rule}: {escape(finding.told)}"
            )
        console.stderr.print(
            f"{len(errors)} finding{'s' if len(errors) > 1 else ''} of fresh locks "
            "fail today's policy and waivers: restore the waiver, or move the pin "
            f"({source.front.command('lock', recipe.name + ' --upgrade-package NAME')})"
        )
    return EXIT_VIOLATION


@dataclass(frozen=True)
class _Look:
    """One recorded look at a project's locks (what the stamp will record)."""

    root: Path
    recipe: Recipe
    survey: Survey
    source: RecordingSource


def _judge_fresh(look: _Look, options: LockOptions, summary: LockSummary) -> int:
    states = upto(list(look.survey.states), look.recipe, options.stage)
    summary.fresh = len(states)
    return _judge_and_stamp(look, options, summary, len(states), check=False)


def _check(look: _Look, options: LockOptions, summary: LockSummary) -> int:
    states = upto(list(look.survey.states), look.recipe, options.stage)
    code = report_check(look.recipe.name, states, summary, look.source.front, quiet=options.quiet)
    if code != EXIT_OK:
        return code
    return _judge_and_stamp(look, options, summary, len(states), check=True)


def _judge_and_stamp(
    look: _Look, options: LockOptions, summary: LockSummary, fresh: int, *, check: bool
) -> int:
    """Fresh locks judged under today's policy; only a clean verdict is stamped and said."""
    code = _judged(look.recipe, look.survey, look.source, options, summary)
    if code == EXIT_OK:
        stamp_fresh(look.root, look.recipe, look.survey, look.source)
        if not options.quiet:
            console.plain(fresh_message(fresh, check=check))
    return code


def report_check(
    image: str,
    states: list[LockState],
    summary: LockSummary,
    front: FrontDoor,
    *,
    quiet: bool = False,
) -> int:
    """Exit 1 listing every stale or missing lock; 0 (and nothing printed) when all are fresh."""
    bad = [state for state in states if state.status != "fresh"]
    summary.fresh = len(states) - len(bad)
    summary.stale += [_state_json(state) for state in bad]
    if not bad:
        return EXIT_OK
    if not quiet:
        from rich.markup import escape

        for state in bad:
            console.stdout.print(
                f"{state.status}: {state.relpath} ({escape(state.step.label)}): "
                f"{escape(state.reason)}"
            )
        console.stderr.print(
            f"{len(bad)} of {len(states)} locks need: {front.command('lock', image)}"
        )
    return EXIT_VIOLATION


def _state_json(state: LockState) -> dict[str, str]:
    return {
        "lock": state.relpath,
        "layer": state.step.label,
        "status": state.status,
        "reason": state.reason,
    }


def stamp_fresh(root: Path, recipe: Recipe, survey: Survey, source: RecordingSource) -> None:
    """Record what ``source`` saw, with the lock count of every ``--stage`` found all fresh."""
    if survey.base is None:
        return  # lock would record the base first: not an answer the stamp can give
    states = list(survey.states)
    wanted: list[str | None] = [None, *(stage.name for stage in recipe.stages)]
    fresh = [(stage, upto(states, recipe, stage)) for stage in wanted]
    answers = [(stage, len(states)) for stage, states in fresh if _all_fresh(states)]
    write_stamp(str(root), recipe.name, source, answers)


def _look_again_and_stamp(root: Path, image: str) -> None:
    """After compiling, one more (recorded) look: the stamp holds only what a check saw."""
    source = RecordingSource(DirectorySource(root))
    recipe = load_recipe(source, image)
    survey = survey_locks(source, recipe)
    if not policy_errors(source, recipe, survey, None):
        stamp_fresh(root, recipe, survey, source)


# -- compiling ------------------------------------------------------------------------------


def lock_image(
    root: Path, source: Source, recipe: Recipe, options: LockOptions, summary: LockSummary
) -> int:
    """Record the base if asked or missing, then compile every stale lock (hold the file lock)."""
    from audit.base.record import record_base
    from audit.lock.files import base_relpath
    from audit.lock.plan import base_constraints, installed_versions, read_ahead_inputs
    from audit.lock.resolvers import select

    _prepare_docker(recipe, options)
    if recipe.resolver != "uv" and not options.host:  # pip-tools compiles in the prelude
        from audit.build.prelude import ensure_prelude

        ensure_prelude(root, recipe, f"compiling {recipe.name}'s locks in its base")
    survey = survey_locks(source, recipe)
    if options.base.record or survey.base is None:
        record_base(root, source, recipe)
        survey = survey_locks(source, recipe)
    assert survey.base is not None
    states = upto(list(survey.states), recipe, options.stage)
    if _all_fresh(states) and not options.upgrade.active:
        summary.fresh = len(states)
        code = _judged(recipe, survey, source, options, summary)
        if code == EXIT_OK and not options.quiet:
            console.plain(fresh_message(len(states), check=False))
        return code
    record, base_digest = survey.base
    where = source.describe(base_relpath(recipe))
    base_pins = base_constraints(record, recipe.interpreters[0], where, source.front)
    backend = select(recipe, record, host=options.host, builds=options.builds)
    ahead = read_ahead_inputs(
        source, recipe, states, base_digest, resolver=backend.label, upgrade=options.upgrade
    )
    # the read-ahead starts first: the runner's own imports and setup happen while it fetches
    with backend.warm(ahead, installed_versions(base_pins)):
        from audit.history.predict import StepJudge, base_markers
        from audit.lock.run import LockRun

        judge = StepJudge(recipe, date.today(), base_markers(record, recipe))
        run = LockRun(
            root=root,
            source=source,
            recipe=recipe,
            base_pins=base_pins,
            base_digest=base_digest,
            fresh_locks=survey.locks,
            judge=judge,
            backend=backend,
            upgrade=options.upgrade,
        )
        for state in states:
            run.visit(state)
    _summarize(run, options, summary)
    return EXIT_OK


def _prepare_docker(recipe: Recipe, options: LockOptions) -> None:
    """The docker client asked for; what a killed run left (containers, work folders) removed."""
    from audit.docker.run_label import sweep_containers, sweep_folders
    from audit.lock.resolvers.job import WORK_PREFIX

    sweep_folders(WORK_PREFIX)
    if recipe.resolver != "uv" and not options.host:
        sweep_containers()
    if options.docker:
        from audit.docker import host as docker_host

        docker_host.detect_client(options.docker)


def _summarize(run: LockRun, options: LockOptions, summary: LockSummary) -> None:
    from audit.lock.view import direction, print_moves, print_summary

    summary.written += [state.relpath for state, action in run.done if action == "compiled"]
    summary.fresh = sum(1 for _, action in run.done if action == "kept")
    summary.moved += [
        {
            "layer": label,
            "name": name,
            "before": old,
            "after": new,
            "direction": direction(name, old, new),
        }
        for label, name, old, new in run.moves
    ]
    if not options.quiet:
        print_summary(run.done)
        print_moves(run.moves, options.upgrade)
