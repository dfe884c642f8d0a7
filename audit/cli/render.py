"""``python -m audit render IMAGE [--stage vK]``: write the build context ``build/<image>/``."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from audit.errors import EXIT_OK
from audit.host import console
from audit.project.paths import find_root
from audit.render.plan import RenderResult
from audit.render.stages import BuildArgs, parse_build_arg
from audit.render.write import render_image

FORMATS = ("table", "json")
RENDER_SCHEMA = "layer-audit.render/1"


@dataclass(frozen=True)
class RenderOptions:
    """The command line, parsed once, and the project it runs in."""

    root: Path  # the project around the working folder
    image: str
    stage: str | None
    fmt: str = "table"
    build_args: BuildArgs = ()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RenderOptions:
        return cls(
            find_root(),
            args.image,
            args.stage,
            args.fmt,
            tuple(parse_build_arg(text) for text in args.build_args),
        )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "render",
        help="render an image's Dockerfile and build context into build/<image>/",
        description="Validate images/IMAGE/image.toml and render build/IMAGE/: the Dockerfile "
        "(stages v1 ... vN), the requirements, locks, copied files, policy.json and recipe.json.",
    )
    parser.add_argument("image", help="a recipe: the folder name under images/")
    parser.add_argument(
        "--stage",
        "--target",
        metavar="vK",
        help="render what stage vK (or the Dockerfile stage name its target gives) needs: for "
        "a chain, v1 up to vK (default: every stage)",
    )
    parser.add_argument(
        "--build-arg",
        dest="build_args",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="write this value as the build argument's default in the Dockerfile (repeatable)",
    )
    parser.add_argument(
        "--format",
        dest="fmt",
        choices=FORMATS,
        default="table",
        help="json: print what was written, left unchanged and removed (default: table)",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    options = RenderOptions.from_args(args)
    result = render_image(
        options.root, options.image, stage=options.stage, build_args=options.build_args
    )
    if options.fmt == "json":
        text = json.dumps(render_json(options.image, result, options.root), indent=2)
        console.stdout.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        show(result, options.root)
    return EXIT_OK


def render_json(image: str, result: RenderResult, root: Path) -> dict[str, Any]:
    """``layer-audit.render/1``: the context, its Dockerfile and each file's status (paths
    relative to the project; written = its bytes or mode changed)."""
    changed = set(result.changed)

    def relative(path: Path) -> str:
        return path.relative_to(root).as_posix()

    return {
        "schema": RENDER_SCHEMA,
        "image": image,
        "context": relative(result.context),
        "dockerfile": relative(result.dockerfile),
        "written": [relative(p) for p in result.files if p in changed],
        "unchanged": [relative(p) for p in result.files if p not in changed],
        "removed": [relative(p) for p in result.removed],
    }


def show(result: RenderResult, root: Path) -> None:
    """A table of the context's files: written, unchanged or removed."""
    changed = set(result.changed)
    table = Table(title=f"{result.context.relative_to(root)}/", title_justify="left")
    table.add_column("file")
    table.add_column("status")
    for path in result.files:
        status = "[green]written[/]" if path in changed else "[dim]unchanged[/]"
        table.add_row(escape(path.relative_to(result.context).as_posix()), status)
    for path in result.removed:
        table.add_row(escape(path.relative_to(result.context).as_posix()), "[yellow]removed[/]")
    console.stdout.print(table)
    console.stdout.print(
        f"{len(result.changed)} written, {len(result.files) - len(result.changed)} unchanged, "
        f"{len(result.removed)} removed: {escape(str(result.dockerfile.relative_to(root)))}"
    )
