"""``lock``'s base record: recorded in the image, from a snapshot file, another base, PEP 668.

:func:`add_options` adds ``--from-snapshot FILE``, ``--image-id`` and ``--repo-digest`` to
``lock``; :func:`before_lock` runs once the recipe is loaded and either answers the run (an
exit code) or lets ``lock`` go on (None):

- ``--from-snapshot FILE`` (it and the identity options imply ``--record-base``, so the
  verified-fresh stamp never answers them): write ``base.json`` from the file (atomically, under
  ``locks/<image>/.lock``), print what changed, and stop: no image is needed here.
- a ``base.json`` that records another base than the recipe's (``lock --check`` says stale):
  compiling against it would write locks that stay stale, so ``lock`` refuses (exit 2) and names
  ``--record-base``, the explicit act.
- recording from the image a base whose first interpreter (the one pip layers install with) is
  externally managed (PEP 668) while the recipe does not set ``break_system_packages``: exit 2
  naming the setting (one probe container, only when recording).
- a base without Python (``base_stage``): the prelude is built first (:mod:`audit.build.prelude`)
  and recorded in its place; the record names it ``<base>+<stage>`` and no repository digest
  (the base's own digest pins the prelude's FROM, where BuildKit enforces it).

Invariant: a refusal writes nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from audit.base.snapshot_file import record_from_snapshot
from audit.docker.run_label import run_labels
from audit.errors import EXIT_OK, EnvironmentProblem, LockError, RecipeError, UsageError
from audit.history.snapshot import SNAPSHOT_LIMIT, Environment, read_bounded
from audit.host import atomic, console
from audit.lock.files import BaseRecord, base_changes, base_relpath, render_base
from audit.lock.plan import read_base_digest
from audit.lock.trust import base_record_mismatch, record_hint
from audit.project import paths
from audit.project.frontdoor import FrontDoor
from audit.project.sources import Source
from audit.recipe.model import Recipe

SNAPSHOT_TARGET = "/opt/layer-audit/snapshot.py"

# Prints 1 when the interpreter is externally managed (PEP 668), as pip decides it: not a
# virtual environment, and the marker file in its standard library folder.
PEP668_PROBE = (
    "import os, sys, sysconfig; print(int(sys.prefix == sys.base_prefix and os.path.isfile("
    "os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED'))))"
)


@dataclass(frozen=True)
class SnapshotFile:
    """``--from-snapshot FILE`` and the identity of the image it was taken in."""

    path: Path
    image_id: str | None = None
    repo_digest: str | None = None


@dataclass(frozen=True)
class BaseOptions:
    """What the command line asks of the base record."""

    check: bool = False
    record: bool = False  # --record-base (implied by --from-snapshot)
    snapshot: SnapshotFile | None = None
    identity_without_file: bool = False  # --image-id / --repo-digest without --from-snapshot


def before_lock(root: Path, source: Source, recipe: Recipe, options: BaseOptions) -> int | None:
    """Answer ``--from-snapshot`` or refuse a record of another base; None lets ``lock`` go on."""
    if options.snapshot is not None:
        return record_snapshot_file(root, source, recipe, options.snapshot, check=options.check)
    if options.identity_without_file:
        raise UsageError("--image-id and --repo-digest go with --from-snapshot FILE")
    if options.check:
        return None
    base = read_base_digest(source, recipe)
    if base is not None and not options.record:
        stale = base_record_mismatch(recipe, base[0], source.front)
        if stale:
            raise LockError(stale, record_hint(recipe.name, source.front))
    if base is None or options.record:
        from audit.docker.registry import ensure_image  # printed, by digest when pinned

        ensure_image(recipe.base_ref, f"recording the base of {recipe.name}")
        if recipe.base_stage is not None:
            from audit.build.prelude import build_prelude

            build_prelude(root, recipe, f"recording the base of {recipe.name}")
        if not recipe.break_system_packages:
            refuse_externally_managed(recipe, source.front)
    return None


def record_snapshot_file(
    root: Path, source: Source, recipe: Recipe, snapshot: SnapshotFile, *, check: bool = False
) -> int:
    """Write ``base.json`` from ``snapshot``; print what changed and what is next."""
    if check:
        raise UsageError(
            "--from-snapshot records the base: it does not go with --check",
            source.front.command(
                "lock", f"{recipe.name} --record-base --from-snapshot FILE --image-id ID"
            ),
        )
    path = snapshot.path
    try:
        data = read_bounded(path, SNAPSHOT_LIMIT)  # a FIFO or a 200 MB file: exit 2
    except OSError as exc:
        raise UsageError(f"--from-snapshot {path}: cannot read ({exc.strerror})") from exc
    record = record_from_snapshot(recipe, data, str(path), snapshot.image_id, snapshot.repo_digest)
    write_record(root, source, recipe, record)
    console.stderr.print(
        f"next: {source.front.command('lock', recipe.name)} (add --host where this machine matches "
        f"{recipe.platform}); the build verifies the real image against this record"
    )
    return EXIT_OK


def write_record(root: Path, source: Source, recipe: Recipe, record: BaseRecord) -> None:
    """Replace ``base.json`` atomically under the image's file lock; print what changed."""
    with atomic.exclusive(paths.locks_dir(root, recipe.name) / ".lock"):
        replace_record(root, source, recipe, record)


def replace_record(root: Path, source: Source, recipe: Recipe, record: BaseRecord) -> None:
    """Replace ``base.json`` atomically (the caller holds the file lock); print what changed."""
    from rich.markup import escape

    try:
        old = read_base_digest(source, recipe)
    except LockError:  # a damaged record is what re-recording repairs: no "before" to show
        old = None
    atomic.write_text(root / base_relpath(recipe), render_base(record))
    for line in base_changes(old[0] if old else None, record) or ["no change"]:
        console.stdout.print(f"base: {escape(line)}")


def record_base(root: Path, source: Source, recipe: Recipe) -> BaseRecord:
    """Snapshot every interpreter inside the base image; write base.json (the caller holds the
    file lock); print what changed."""
    from audit.docker import host as docker_host
    from audit.docker.registry import ensure_image, repository_digest
    from audit.lock.trust import base_source, platform_refusal, replica_standins

    if recipe.base_stage is None:
        ensure_image(recipe.base_ref, f"recording the base of {recipe.name}")
    else:
        from audit.build.prelude import ensure_prelude

        ensure_prelude(root, recipe, f"recording the base of {recipe.name}")
    console.stderr.print(f"recording the base snapshot of {recipe.recorded_ref}")
    info = docker_host.image_info(recipe.recorded_ref)
    environments = tuple(_snapshot_in_image(recipe, i, source.front) for i in recipe.interpreters)
    digest = recipe.base_digest or repository_digest(recipe.base, info.repo_digests)
    if recipe.base_stage is not None:
        digest = None  # a local build: the base's digest pins the prelude's FROM instead
    standins = replica_standins(info.labels)
    record = BaseRecord(
        recipe.recorded_base, info.id, digest, environments, base_source(info.labels), standins
    )
    refusal = platform_refusal(recipe, record, f"{recipe.base_ref} ({info.os}/{info.architecture})")
    if refusal is not None:
        raise refusal
    replace_record(root, source, recipe, record)
    return record


def _snapshot_in_image(recipe: Recipe, interpreter: str, front: FrontDoor) -> Environment:
    from audit.docker import host as docker_host
    from audit.history.snapshot import SCRIPT_PATH, parse_snapshot

    mount = docker_host.BindMount(SCRIPT_PATH, SNAPSHOT_TARGET)
    try:
        out = docker_host.run_in_image(
            recipe.recorded_ref,
            [interpreter, SNAPSHOT_TARGET],
            mounts=[mount],
            network="none",
            platform=recipe.platform,
            timeout=600,
            labels=run_labels(),
        )
    except EnvironmentProblem as exc:
        raise missing_interpreter(recipe, interpreter, exc, front) or exc from exc
    found = parse_snapshot(out.encode(), f"snapshot of {interpreter} in {recipe.recorded_ref}")
    return dataclasses.replace(found[0], interpreter=interpreter)


_NOT_THERE = ("no such file or directory", "executable file not found", "not found in $path")


def missing_interpreter(
    recipe: Recipe, interpreter: str, error: EnvironmentProblem, front: FrontDoor
) -> RecipeError | None:
    """A recipe interpreter the base image does not have is the recipe's mistake (exit 2)."""
    if not any(marker in error.message.lower() for marker in _NOT_THERE):
        return None
    return RecipeError(
        f"{recipe.source}: image.interpreters",
        f"{interpreter} does not exist in {recipe.recorded_ref}",
        "name a Python the image has (e.g. /usr/bin/python3, /opt/venv/bin/python), or (a base "
        "without Python) the stage that installs one as base_stage; "
        f"{front.command('audit-deps', '--image REF')} lists the environments it finds",
    )


def refuse_externally_managed(recipe: Recipe, front: FrontDoor) -> None:
    """Exit 2 naming ``break_system_packages`` when pip layers' interpreter (the first; the
    others are only audited) is externally managed."""
    from audit.docker import host as docker_host  # a Docker client only where a probe runs

    interpreter = recipe.interpreters[0]
    try:
        out = docker_host.run_in_image(
            recipe.recorded_ref,
            [interpreter, "-c", PEP668_PROBE],
            network="none",
            platform=recipe.platform,
            labels=run_labels(),
        )
    except EnvironmentProblem as exc:
        raise missing_interpreter(recipe, interpreter, exc, front) or exc from exc
    if out.strip() == "1":
        raise RecipeError(
            f"{recipe.source.as_posix()}: image.interpreters[1]",
            f"{interpreter} in {recipe.recorded_ref} is externally managed (PEP 668): pip "
            "layers would fail with externally-managed-environment",
            "set break_system_packages = true under [image] (pip layers then install with "
            "PIP_BREAK_SYSTEM_PACKAGES=1), or name a virtual environment's Python first",
        )
