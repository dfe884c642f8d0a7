"""``layer-audit init [DIR]``: scaffold a repository for layer-audit (never overwriting).

Writes ``noxfile.py`` (the same sessions, calling ``layer-audit``), one example recipe under
``images/``, ``.github/workflows/dependency-gate.yml``, ``.pre-commit-config.yaml`` (render
and ``lock --check`` hooks) and the ``.gitignore`` entries. The plan is
:func:`audit.plan.scaffold.plan_scaffold`; a file that differs is kept unless ``--force``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape

from audit.core.errors import EXIT_OK, UsageError
from audit.engines import atomic, console
from audit.plan.scaffold import DEFAULT_IMAGE, DEFAULT_SPEC, Action, PlannedFile, plan_scaffold


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "init",
        help="scaffold a repository: noxfile, an example recipe, the gate workflow, hooks",
        description="Write noxfile.py, images/IMAGE/ (an example recipe), "
        ".github/workflows/dependency-gate.yml, .pre-commit-config.yaml and .gitignore entries "
        "into DIR. Idempotent: files already there are kept (unless --force); .gitignore only "
        "gets its missing entries appended.",
    )
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
        default=DEFAULT_SPEC,
        help="what the noxfile and the workflow install with pip when layer-audit is not on "
        f"PATH (default: {DEFAULT_SPEC})",
    )
    parser.add_argument("--force", action="store_true", help="replace files that differ")
    parser.set_defaults(handler=handle, needs_project=False)


def handle(args: argparse.Namespace) -> int:
    root = (args.directory or getattr(args, "project", None) or Path.cwd()).resolve()
    if not root.is_dir():
        raise UsageError(f"{root}: no such folder", "create it first (and `git init` it)")
    plan = plan_scaffold(read_tree(root), args.image, args.spec, force=args.force)
    for planned in plan:
        if planned.writes:
            path = root / planned.relpath
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(path, planned.data)
    show(root, plan)
    return EXIT_OK


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


def show(root: Path, plan: list[PlannedFile]) -> None:
    """One line per file: what init did with it, then what to run next."""
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
        f"next: cd {escape(str(root))} && layer-audit render <image> && layer-audit lock <image>"
    )
