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
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from audit import atomic, console, docker_host, paths
from audit.errors import EXIT_OK, EXIT_VIOLATION, ResolutionConflict, UsageError
from audit.lock import (
    RESOLVER,
    Constraint,
    LockState,
    active_waivers,
    base_constraints,
    check_locks,
    installed_before,
    layer_inputs,
    pip_steps,
    read_base_digest,
    render_constraints,
    waiver_violations,
)
from audit.lock_compile import (
    CompileTarget,
    ambient_ca_bundle,
    clean_body,
    explain_failure,
    host_target,
    run_compile,
)
from audit.lockfile import (
    BaseRecord,
    Lock,
    base_changes,
    base_relpath,
    lock_relpath,
    parse_lock,
    read_lock,
    render_base,
    render_lock,
)
from audit.recipe import Recipe, Step
from audit.recipe_parse import load_recipe
from audit.snapshot import SCRIPT_PATH, parse_snapshot
from audit.sources import DirectorySource, Source

SNAPSHOT_TARGET = "/opt/layer-audit/snapshot.py"


@dataclass(frozen=True)
class LockOptions:
    image: str
    stage: str | None
    check: bool
    record_base: bool
    host: bool
    docker: str | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LockOptions:
        return cls(args.image, args.stage, args.check, args.record_base, args.host, args.docker)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "lock", help="compile one hermetic lock per pip layer (only the stale ones)"
    )
    parser.add_argument("image", help="recipe name: images/IMAGE/image.toml")
    parser.add_argument("--stage", help="stop after this stage (vK)")
    parser.add_argument("--check", action="store_true", help="compile nothing; exit 1 if stale")
    parser.add_argument(
        "--record-base", action="store_true", help="re-record the base image's snapshot"
    )
    parser.add_argument(
        "--host", action="store_true", help="compile on this machine (only if it matches)"
    )
    parser.add_argument("--docker", help="docker client program (default: detected)")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    options = LockOptions.from_args(args)
    root = paths.find_root()
    source = DirectorySource(root)
    recipe = load_recipe(source, options.image)
    if options.stage and options.stage not in [s.name for s in recipe.stages]:
        names = ", ".join(s.name for s in recipe.stages)
        raise UsageError(f"--stage {options.stage}: no such stage in {recipe.source}", names)
    if options.check:
        states = _upto(check_locks(source, recipe), recipe, options.stage)
        return report_check(recipe.name, states)
    with atomic.exclusive(paths.locks_dir(root, recipe.name) / ".lock"):
        return lock_image(root, source, recipe, options)


def _upto(states: list[LockState], recipe: Recipe, stage: str | None) -> list[LockState]:
    wanted = {step.slug for step in pip_steps(recipe, stage)}
    return [state for state in states if state.step.slug in wanted]


def report_check(image: str, states: list[LockState]) -> int:
    bad = [state for state in states if state.status != "fresh"]
    for state in bad:
        console.stdout.print(
            f"{state.status}: {state.relpath} ({escape(state.step.label)}): {escape(state.reason)}"
        )
    if bad:
        console.stderr.print(f"{len(bad)} of {len(states)} locks need: nox -s lock -- {image}")
        return EXIT_VIOLATION
    console.stdout.print(f"all {len(states)} locks are fresh")
    return EXIT_OK


# -- the base record ------------------------------------------------------------------------


def _snapshot_in_image(recipe: Recipe, interpreter: str) -> Any:
    mount = docker_host.BindMount(SCRIPT_PATH, SNAPSHOT_TARGET)
    out = docker_host.run_in_image(
        recipe.base_ref,
        [interpreter, SNAPSHOT_TARGET],
        mounts=[mount],
        network="none",
        platform=recipe.platform,
        timeout=600,
    )
    found = parse_snapshot(out.encode(), f"snapshot of {interpreter} in {recipe.base_ref}")
    return dataclasses.replace(found[0], interpreter=interpreter)


def record_base(root: Path, source: Source, recipe: Recipe) -> BaseRecord:
    """Snapshot every interpreter inside the base image; write base.json; print what changed."""
    console.stderr.print(f"recording the base snapshot of {recipe.base_ref}")
    info = docker_host.image_info(recipe.base_ref)
    environments = tuple(_snapshot_in_image(recipe, i) for i in recipe.interpreters)
    digest = recipe.base_digest or next(iter(info.repo_digests), None)
    record = BaseRecord(recipe.base, info.id, digest, environments)
    old = read_base_digest(source, recipe)
    atomic.write_text(root / base_relpath(recipe), render_base(record))
    for line in base_changes(old[0] if old else None, record) or ["no change"]:
        console.stdout.print(f"base: {escape(line)}")
    return record


# -- compiling ------------------------------------------------------------------------------


def image_target(recipe: Recipe, record: BaseRecord) -> CompileTarget:
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
    if options.docker:
        docker_host.detect_client(options.docker)
    base = read_base_digest(source, recipe)
    if options.record_base or base is None:
        record_base(root, source, recipe)
        base = read_base_digest(source, recipe)
    assert base is not None
    record, base_digest = base
    states = _upto(check_locks(source, recipe), recipe, options.stage)
    if all(state.status == "fresh" for state in states):
        console.stdout.print(f"all {len(states)} locks are fresh: nothing to compile")
        return EXIT_OK
    target = _target(recipe, record, options)
    where = source.describe(base_relpath(recipe))
    base_pins = base_constraints(record, recipe.interpreters[0], where)
    compiler = _Compiler(root, source, recipe, target, base_pins, base_digest)
    for state in states:
        compiler.visit(state)
    _print_summary(compiler.done)
    return EXIT_OK


def _target(recipe: Recipe, record: BaseRecord, options: LockOptions) -> CompileTarget:
    if options.host:
        return host_target(recipe.platform, record, recipe.interpreters[0])
    return image_target(recipe, record)


@dataclass
class _Compiler:
    """Walks the layers in order, keeping what each earlier layer pinned."""

    root: Path
    source: Source
    recipe: Recipe
    target: CompileTarget
    base_pins: list[Constraint]
    base_digest: str
    earlier: list[tuple[Step, Lock]] = dataclasses.field(default_factory=list)
    done: list[tuple[LockState, str]] = dataclasses.field(default_factory=list)

    def visit(self, state: LockState) -> None:
        if state.status == "fresh":
            lock = read_lock(self.source, state.relpath)
            self.done.append((state, "kept"))
        else:
            lock = self.compile(state.step)
            self.done.append((state, "compiled"))
        self.earlier.append((state.step, lock))

    def compile(self, step: Step) -> Lock:
        earlier = {s.slug: lock.content_digest for s, lock in self.earlier}
        inputs = layer_inputs(self.source, self.recipe, step, self.base_digest, earlier)
        installed = installed_before(self.base_pins, self.earlier)
        waivers = active_waivers(self.recipe.policy.waivers, date.today())
        console.stderr.print(f"compiling {escape(step.label)} for {self.target.platform}")
        outcome = run_compile(self.target, inputs, render_constraints(installed, waivers))
        if outcome.returncode != 0:
            raise explain_failure(outcome.log, inputs, installed)
        text = render_lock(
            self.recipe.name, step, RESOLVER, inputs.digests, clean_body(outcome.output)
        )
        relpath = lock_relpath(self.recipe, step)
        lock = parse_lock(text.encode(), relpath)
        pins = {name: pin.version for name, pin in lock.pins.items()}
        for constraint, version in waiver_violations(installed, pins, waivers):
            raise ResolutionConflict(
                f"{step.label}: {constraint.name} moved from {constraint.version} "
                f"(installed by {constraint.origin}) to {version}, which no waiver names",
                "pin it in the requirements file to the waived version",
            )
        atomic.write_text(self.root / relpath, text)
        return lock


def _print_summary(done: list[tuple[LockState, str]]) -> None:
    table = Table("lock", "layer", "action", "why")
    for state, action in done:
        reason = state.reason if action == "compiled" else ""
        table.add_row(state.relpath, escape(state.step.label), action, escape(reason))
    console.stdout.print(table)
