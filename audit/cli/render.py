"""``python -m audit render IMAGE [--stage vK]``: write the build context ``build/<image>/``."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from audit.cli.context import RunContext
from audit.cli.options import JSON, TERMINAL, add_report_arguments
from audit.cli.output import Output, command_reports
from audit.errors import EXIT_OK
from audit.render.plan import RenderResult
from audit.render.stages import BuildArgs, parse_build_arg
from audit.render.write import render_image

FORMATS = (TERMINAL, JSON)
RENDER_SCHEMA = "layer-audit.render/1"
HELP = "render an image's Dockerfile and build context into build/<image>/"
DESCRIPTION = (
    "Validate images/IMAGE/image.toml and render build/IMAGE/: the Dockerfile (stages v1 ... "
    "vN), the requirements, locks, copied files, policy.json and recipe.json."
)


@dataclass(frozen=True)
class RenderOptions:
    """The command line, parsed once, and the project it runs in."""

    root: Path  # the project around the working folder
    image: str
    stage: str | None
    output: Output
    build_args: BuildArgs = ()

    @classmethod
    def from_args(cls, args: argparse.Namespace, context: RunContext) -> RenderOptions:
        return cls(
            context.root(),
            args.image,
            args.stage,
            command_reports(args, FORMATS),
            tuple(parse_build_arg(text) for text in args.build_args),
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
    add_report_arguments(parser, FORMATS, what="what was written, left unchanged and removed")


def handle(args: argparse.Namespace, context: RunContext) -> int:
    options = RenderOptions.from_args(args, context)
    result = render_image(
        options.root, options.image, stage=options.stage, build_args=options.build_args
    )
    if options.output.fmt == JSON:
        text = json.dumps(render_json(options.image, result, options.root), indent=2)
        options.output.write(text + "\n")
    else:
        options.output.print(*show(result, options.root))
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


def show(result: RenderResult, root: Path) -> tuple[Table, str]:
    """A table of the context's files (written, unchanged or removed), and a summary line."""
    changed = set(result.changed)
    table = Table(title=f"{result.context.relative_to(root)}/", title_justify="left")
    table.add_column("file")
    table.add_column("status")
    for path in result.files:
        status = "[green]written[/]" if path in changed else "[dim]unchanged[/]"
        table.add_row(escape(path.relative_to(result.context).as_posix()), status)
    for path in result.removed:
        table.add_row(escape(path.relative_to(result.context).as_posix()), "[yellow]removed[/]")
    summary = (
        f"{len(result.changed)} written, {len(result.files) - len(result.changed)} unchanged, "
        f"{len(result.removed)} removed: {escape(str(result.dockerfile.relative_to(root)))}"
    )
    return table, summary
