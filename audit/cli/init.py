"""``layer-audit init [DIR]``: scaffold a repository for layer-audit (never overwriting).

Writes ``noxfile.py`` (the same sessions, calling ``layer-audit``), one example recipe under
``images/``, ``.github/workflows/dependency-gate.yml``, ``.pre-commit-config.yaml`` (render
and ``lock --check`` hooks) and the ``.gitignore`` entries. The plan is
:func:`audit.project.scaffold.plan_scaffold`; a file that differs is kept unless ``--force``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from rich.markup import escape

from audit.cli.context import RunContext
from audit.errors import EXIT_OK, AuditError, EnvironmentProblem, UsageError
from audit.host import atomic, console
from audit.project.scaffold import DEFAULT_IMAGE, Action, PlannedFile, plan_scaffold
from audit.project.self_spec import self_spec

NEEDS_PROJECT = False
HELP = "scaffold a repository: noxfile, an example recipe, the gate workflow, hooks"
DESCRIPTION = (
    "Write noxfile.py, images/IMAGE/ (an example recipe), .github/workflows/dependency-gate.yml, "
    ".pre-commit-config.yaml and .gitignore entries into DIR. Idempotent: files already there "
    "are kept (unless --force); .gitignore only gets its missing entries appended."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory", nargs="?", type=Path, help="the repository (default: --project or here)"
    )
    parser.add_argument(
        "--image",
        default=DEFAULT_IMAGE,
        help=f"the example recipe's name (default: {DEFAULT_IMAGE})",
    )
    parser.add_argument(
        "--spec",
        default=None,
        help="the pip requirement the workflows and the noxfile install layer-audit by: a git "
        "URL at a commit (layer-audit @ git+https://HOST/ORG/layer-audit@SHA), a wheel's URL, "
        "a version your index serves (default: where this layer-audit was installed from)",
    )
    parser.add_argument("--force", action="store_true", help="replace files that differ")


def handle(args: argparse.Namespace, context: RunContext) -> int:
    root = (args.directory or getattr(args, "project", None) or Path.cwd()).resolve()
    if not root.is_dir():
        raise UsageError(f"{root}: no such folder", "create it first (and `git init` it)")
    spec = args.spec or _default_spec()
    plan = plan_scaffold(read_tree(root), args.image, spec, force=args.force)
    write_plan(root, plan)
    show(root, plan, args.image)
    return EXIT_OK


def _default_spec() -> str:
    """Where this layer-audit came from; a warning when CI cannot install it from there."""
    found = self_spec()
    if not found.portable:
        console.stderr.print(
            "[yellow]warning:[/] the workflows will install layer-audit from "
            f"{escape(found.spec)}, a path on this machine: a CI runner cannot; run init again "
            "with --spec (a git URL at a commit, a wheel's URL, or a version your index serves) "
            "and --force",
            emoji=False,
        )
    return found.spec


def write_plan(root: Path, plan: list[PlannedFile]) -> None:
    """Write every planned file, or none: a failure removes what this run created (folders
    too) and is exit 3 naming the folder; files that existed are replaced atomically or kept."""
    _check_writable(root)
    created: list[Path] = []
    try:
        for planned in plan:
            if planned.writes:
                path = root / planned.relpath
                created += _new_folders(root, path.parent)
                if not path.exists():
                    created.append(path)
                atomic.write_bytes(path, planned.data)
    except (OSError, AuditError) as exc:
        _remove(created)
        why = exc.message if isinstance(exc, AuditError) else str(exc)
        raise EnvironmentProblem(
            f"{root}: layer-audit init could not write its files ({why}); nothing was changed",
            exc.hint
            if isinstance(exc, AuditError) and exc.hint
            else "run it in a folder you can write to (a clone of your repository)",
        ) from exc


def _check_writable(root: Path) -> None:
    """Refuse a read-only folder before anything is written (exit 3)."""
    if not os.access(root, os.W_OK | os.X_OK):
        raise EnvironmentProblem(
            f"{root}: not writable: layer-audit init writes nothing there",
            "run it in a folder you can write to (a clone of your repository)",
        )


def _new_folders(root: Path, folder: Path) -> list[Path]:
    """The folders between ``root`` and ``folder`` that do not exist yet, outermost first."""
    missing = [p for p in (folder, *folder.parents) if p.is_relative_to(root) and not p.exists()]
    return list(reversed(missing))


def _remove(created: list[Path]) -> None:
    for path in reversed(created):  # files, then their folders, innermost first
        with contextlib.suppress(OSError):
            path.rmdir() if path.is_dir() else path.unlink()


def read_tree(root: Path) -> Callable[[str], bytes | None]:
    """A reader of ``root``'s files for the plan; a folder where a file goes is refused."""

    def read(relpath: str) -> bytes | None:
        path = root / relpath
        if path.is_dir():
            raise UsageError(
                f"{path}: a folder where layer-audit init writes a file",
                "move the folder away, or run init in another repository",
            )
        return path.read_bytes() if path.is_file() else None

    return read


def show(root: Path, plan: list[PlannedFile], image: str) -> None:
    """One line per file: what init did with it, then what to run next (for ``image``, the
    recipe it wrote)."""
    colour = {Action.CREATE: "green", Action.OVERWRITE: "yellow", Action.APPEND: "green"}
    for planned in plan:
        style = colour.get(planned.action, "dim")
        console.stdout.print(f"  [{style}]{planned.action.value:>11}[/] {escape(planned.relpath)}")
    kept = [p.relpath for p in plan if p.action is Action.KEEP]
    if kept:
        console.stdout.print(
            f"[yellow]{len(kept)} file(s) kept as they were[/]: --force replaces them"
        )
    console.stdout.print(
        f"next: cd {escape(str(root))} && layer-audit render {escape(image)} && "
        f"layer-audit lock {escape(image)}"
    )
