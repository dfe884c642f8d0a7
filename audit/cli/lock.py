"""``python -m audit lock IMAGE``: record the base snapshot, compile stale pip-layer locks.

Order of work: hold ``locks/<image>/.lock``; record ``base.json`` when asked or missing (the
snapshot script inside the base image: no network, read-only); then walk the pip layers in
build order and compile only the stale or missing ones, each against a constraints file that
holds everything installed before it. ``--check`` compiles nothing and exits 1 when any lock
is stale or missing.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit.cli.lock_fast import RecordingSource, fresh_answer, fresh_message, write_stamp
from audit.core.errors import EXIT_OK, EXIT_VIOLATION, EnvironmentProblem, UsageError
from audit.engines import console
from audit.plan import frontdoor, paths
from audit.plan.lock import (
    LockState,
    Survey,
    Upgrade,
    base_constraints,
    parse_upgrade_package,
    pip_steps,
    read_base_digest,
    survey_locks,
)
from audit.plan.lockfile import (
    BaseRecord,
    base_changes,
    base_relpath,
    render_base,
)
from audit.plan.recipe import Recipe
from audit.plan.recipe_parse import load_recipe
from audit.plan.sources import DirectorySource, Source

# Docker, pip-tools driving, the file lock and rich tables are imported inside the functions
# that compile: a re-run on unchanged inputs needs none of them and must not pay for them.
if TYPE_CHECKING:
    from audit.engines.lock_compile import CompileTarget
    from audit.engines.lock_run import Backend, LockRun

SNAPSHOT_TARGET = "/opt/layer-audit/snapshot.py"


@dataclass(frozen=True)
class LockOptions:
    image: str
    stage: str | None
    check: bool
    record_base: bool
    host: bool
    docker: str | None
    resolver: str | None = None
    upgrade: Upgrade = field(default_factory=Upgrade)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LockOptions:
        packages = dict(parse_upgrade_package(text) for text in args.upgrade_package)
        return cls(
            args.image, args.stage, args.check, args.record_base, args.host, args.docker,
            args.resolver, Upgrade(args.upgrade, packages),
        )  # fmt: skip


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "lock",
        help="compile one hermetic lock per pip layer (only the stale ones)",
        description="Record the base image's snapshot (locks/IMAGE/base.json) when missing, then "
        "compile a hash-pinned pip-tools lock for every stale pip layer, inside the base image, "
        "against everything installed before it. Needs Docker, except for --check.",
    )
    parser.add_argument("image", help="a recipe: the folder name under images/")
    parser.add_argument(
        "--stage",
        metavar="vK",
        help="lock the pip layers of stages v1 up to vK only (default: every stage)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compile nothing; exit 1 when a lock is stale or missing",
    )
    parser.add_argument(
        "--record-base",
        action="store_true",
        help="snapshot the base image again and rewrite locks/IMAGE/base.json",
    )
    parser.add_argument(
        "--host",
        action="store_true",
        help="compile with this machine's Python instead of inside the base image "
        "(only when its platform and Python version match the base)",
    )
    parser.add_argument(
        "--upgrade",
        action="store_true",
        help="move every layer's own pins to the newest versions allowed (what the base and "
        "earlier layers installed stays given); the summary says what moved",
    )
    parser.add_argument(
        "--upgrade-package",
        metavar="NAME[==VERSION]",
        action="append",
        default=[],
        help="move this package (to VERSION, or the newest allowed) wherever it is pinned or "
        "installed, and nothing else; repeatable",
    )
    parser.add_argument(
        "--resolver",
        choices=("pip-tools", "uv"),
        help="resolve with this backend for this run instead of image.toml's [image] resolver "
        "(uv runs here for the target's Python and platform: no image, no emulation)",
    )
    from audit.engines import docker_host  # light, but off the import path of a fresh re-run

    docker_host.add_client_option(parser)
    from audit.engines.base_record import add_options  # --from-snapshot, --image-id, --repo-digest

    add_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    options = LockOptions.from_args(args)
    root = paths.find_root()
    answer = _stamped_answer(root, options)
    if answer is not None:
        console.plain(answer)
        return EXIT_OK
    source = RecordingSource(DirectorySource(root))
    recipe = load_recipe(source, options.image)
    if options.resolver:
        recipe = dataclasses.replace(recipe, resolver=options.resolver)
    if options.stage and options.stage not in [s.name for s in recipe.stages]:
        names = ", ".join(s.name for s in recipe.stages)
        raise UsageError(
            f"--stage {options.stage}: no such stage in {recipe.source}",
            f"choose one of: {names}",
        )
    from audit.engines.base_record import before_lock  # --from-snapshot; another base; PEP 668

    answered = before_lock(root, source, recipe, args)
    if answered is not None:
        return answered
    # Look first without the file lock: on unchanged inputs that look is the whole run. Only
    # when something must be written is the lock taken, and lock_image looks again under it.
    survey = survey_locks(source, recipe)
    states = _upto(list(survey.states), recipe, options.stage)
    if options.check:
        code = report_check(recipe.name, states)
        if code == EXIT_OK:
            stamp_fresh(root, recipe, survey, source)
        return code
    upgrading = options.upgrade.active
    if survey.base is not None and not options.record_base and _all_fresh(states) and not upgrading:
        stamp_fresh(root, recipe, survey, source)
        return _nothing_to_compile(states)
    from audit.engines import atomic

    with atomic.exclusive(paths.locks_dir(root, recipe.name) / ".lock"):
        code = lock_image(root, source, recipe, options)
        _look_again_and_stamp(root, options.image)
    return code


def _stamped_answer(root: Path, options: LockOptions) -> str | None:
    """The verified-fresh stamp's answer; --record-base always does the work it asks for."""
    if options.record_base or options.resolver or options.upgrade.active:
        return None
    return fresh_answer(str(root), options.image, options.stage, check=options.check)


def stamp_fresh(root: Path, recipe: Recipe, survey: Survey, source: RecordingSource) -> None:
    """Record what ``source`` saw, with the lock count of every ``--stage`` found all fresh."""
    if survey.base is None:
        return  # lock would record the base first: not an answer the stamp can give
    states = list(survey.states)
    wanted: list[str | None] = [None, *(stage.name for stage in recipe.stages)]
    fresh = [(stage, _upto(states, recipe, stage)) for stage in wanted]
    answers = [(stage, len(upto)) for stage, upto in fresh if _all_fresh(upto)]
    write_stamp(str(root), recipe.name, source, answers)


def _look_again_and_stamp(root: Path, image: str) -> None:
    """After compiling, one more (recorded) look: the stamp holds only what a check saw."""
    source = RecordingSource(DirectorySource(root))
    recipe = load_recipe(source, image)
    stamp_fresh(root, recipe, survey_locks(source, recipe), source)


def _upto(states: list[LockState], recipe: Recipe, stage: str | None) -> list[LockState]:
    wanted = {step.slug for step in pip_steps(recipe, stage)}
    return [state for state in states if state.step.slug in wanted]


def _all_fresh(states: list[LockState]) -> bool:
    return all(state.status == "fresh" for state in states)


def _nothing_to_compile(states: list[LockState]) -> int:
    console.plain(fresh_message(len(states), check=False))
    return EXIT_OK


def report_check(image: str, states: list[LockState]) -> int:
    bad = [state for state in states if state.status != "fresh"]
    if not bad:
        console.plain(fresh_message(len(states), check=True))
        return EXIT_OK
    from rich.markup import escape

    for state in bad:
        console.stdout.print(
            f"{state.status}: {state.relpath} ({escape(state.step.label)}): {escape(state.reason)}"
        )
    console.stderr.print(
        f"{len(bad)} of {len(states)} locks need: {frontdoor.command('lock', image)}"
    )
    return EXIT_VIOLATION


# -- the base record ------------------------------------------------------------------------


def _snapshot_in_image(recipe: Recipe, interpreter: str) -> Any:
    from audit.core.snapshot import SCRIPT_PATH, parse_snapshot
    from audit.engines import docker_host
    from audit.engines.base_record import missing_interpreter

    mount = docker_host.BindMount(SCRIPT_PATH, SNAPSHOT_TARGET)
    try:
        out = docker_host.run_in_image(
            recipe.base_ref,
            [interpreter, SNAPSHOT_TARGET],
            mounts=[mount],
            network="none",
            platform=recipe.platform,
            timeout=600,
        )
    except EnvironmentProblem as exc:
        raise missing_interpreter(recipe, interpreter, exc) or exc from exc
    found = parse_snapshot(out.encode(), f"snapshot of {interpreter} in {recipe.base_ref}")
    return dataclasses.replace(found[0], interpreter=interpreter)


def record_base(root: Path, source: Source, recipe: Recipe) -> BaseRecord:
    """Snapshot every interpreter inside the base image; write base.json; print what changed."""
    from rich.markup import escape

    from audit.engines import atomic, docker_host
    from audit.engines.registry import ensure_image, repository_digest

    ensure_image(recipe.base_ref, f"recording the base of {recipe.name}")
    console.stderr.print(f"recording the base snapshot of {recipe.base_ref}")
    info = docker_host.image_info(recipe.base_ref)
    environments = tuple(_snapshot_in_image(recipe, i) for i in recipe.interpreters)
    digest = recipe.base_digest or repository_digest(recipe.base, info.repo_digests)
    record = BaseRecord(recipe.base, info.id, digest, environments)
    old = read_base_digest(source, recipe)
    atomic.write_text(root / base_relpath(recipe), render_base(record))
    for line in base_changes(old[0] if old else None, record) or ["no change"]:
        console.stdout.print(f"base: {escape(line)}")
    return record


# -- compiling ------------------------------------------------------------------------------


def image_target(recipe: Recipe, record: BaseRecord) -> CompileTarget:
    from audit.engines import docker_host
    from audit.engines.lock_compile import CompileTarget, ambient_ca_bundle
    from audit.engines.registry import ensure_image

    ensure_image(recipe.base_ref, f"compiling {recipe.name}'s locks in its base")
    info = docker_host.image_info(recipe.base_ref)
    if info.id != record.image_id:
        console.stderr.print(
            f"[yellow]warning:[/] {recipe.base_ref} is now {info.id}, the base record has "
            f"{record.image_id}: re-record it with --record-base"
        )
    interpreter = recipe.interpreters[0]
    return CompileTarget(
        recipe.base_ref, info.id, interpreter, recipe.platform, ambient_ca_bundle()
    )


def lock_image(root: Path, source: Source, recipe: Recipe, options: LockOptions) -> int:
    """Record the base if asked or missing, then compile every stale lock (hold the file lock)."""
    if options.docker:
        from audit.engines import docker_host

        docker_host.detect_client(options.docker)
    survey = survey_locks(source, recipe)
    if options.record_base or survey.base is None:
        record_base(root, source, recipe)
        survey = survey_locks(source, recipe)
    assert survey.base is not None
    states = _upto(list(survey.states), recipe, options.stage)
    if _all_fresh(states) and not options.upgrade.active:
        return _nothing_to_compile(states)
    compiler = _compiler(root, source, recipe, options, survey)
    for state in states:
        compiler.visit(state)
    _print_summary(compiler.done)
    _print_moves(compiler.moves, options.upgrade)
    return EXIT_OK


def _direction(name: str, old: str | None, new: str | None) -> str:
    """upgraded, downgraded, variant...; a pin gone from the lock now stays as installed."""
    from audit.core.diff import diff
    from audit.core.snapshot import Distribution

    if new is None:
        return "no longer pinned: what is installed stays"
    before = {name: Distribution(name, old)} if old else {}
    changes = diff(before, {name: Distribution(name, new)})
    return changes[0].kind if changes else "unchanged"


def _print_moves(moves: list[tuple[str, str, str | None, str | None]], upgrade: Upgrade) -> None:
    """What this run moved on purpose, with the direction (the gate shows it too)."""
    from rich.markup import escape

    if not upgrade.active:
        return
    for label, name, old, new in moves:
        kind = _direction(name, old, new)
        console.stdout.print(
            f"moved: {escape(label)}: {name} {old or '-'} -> {new or '-'} ({kind})"
        )
    missing = sorted(set(upgrade.packages) - {name for _, name, _, _ in moves})
    for name in missing:
        console.stderr.print(f"[yellow]note:[/] --upgrade-package {name}: nothing moved")


def _compiler(
    root: Path, source: Source, recipe: Recipe, options: LockOptions, survey: Survey
) -> LockRun:
    from audit.engines.lock_run import LockRun
    from audit.plan.predict import StepJudge, base_markers

    assert survey.base is not None
    record, base_digest = survey.base
    where = source.describe(base_relpath(recipe))
    base_pins = base_constraints(record, recipe.interpreters[0], where)
    judge = StepJudge(recipe, date.today(), base_markers(record, recipe))
    backend = _backend(recipe, record, options)
    return LockRun(
        root, source, recipe, base_pins, base_digest, survey.locks, judge, backend,
        options.upgrade,
    )  # fmt: skip


def _backend(recipe: Recipe, record: BaseRecord, options: LockOptions) -> Backend:
    """uv on this machine for the target, or pip-tools in the image (or on a matching host)."""
    from audit.engines.lock_run import PipToolsBackend, UvBackend
    from audit.engines.uv_compile import uv_target

    if recipe.resolver == "uv":
        return UvBackend(uv_target(record, recipe.interpreters[0], recipe.platform))
    return PipToolsBackend(_target(recipe, record, options))


def _target(recipe: Recipe, record: BaseRecord, options: LockOptions) -> CompileTarget:
    if options.host:
        from audit.engines.lock_compile import host_target

        return host_target(recipe.platform, record, recipe.interpreters[0])
    return image_target(recipe, record)


def _print_summary(done: list[tuple[LockState, str]]) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table("lock", "layer", "action", "why")
    for state, action in done:
        reason = state.reason if action == "compiled" else ""
        table.add_row(state.relpath, escape(state.step.label), action, escape(reason))
    console.stdout.print(table)
