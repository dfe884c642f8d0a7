"""``python -m audit export IMAGE [--stage vK] --format pylock``: the standard export.

Writes ``pylock.<stage>.toml`` (PEP 751) per stage into ``--output DIR`` (default
``build/export/IMAGE/``): what the base and the locks install, with the index and the hashes of
every file a lock allows (see :mod:`audit.report.pylock`). Exit 0 written; 2 an unknown stage or a
stale, missing or unusable lock (nothing written); 3 the index did not answer.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from audit.cli.context import RunContext
from audit.cli.output import check_output
from audit.errors import EXIT_OK
from audit.host import console
from audit.report.pylock_export import Exported, export_pylock

FORMATS = ("pylock",)
SCHEMA = "layer-audit.export/1"


@dataclass(frozen=True)
class ExportOptions:
    """The command line, parsed once, and the project it runs in."""

    root: Path
    image: str
    stage: str | None
    output: Path
    fmt: str
    json: bool

    @classmethod
    def from_args(cls, args: argparse.Namespace, context: RunContext) -> ExportOptions:
        root = context.root()
        output = args.output or root / "build" / "export" / args.image
        if output.exists() and not output.is_dir():
            check_output(output / "pylock.toml", "--output")  # names the file in the way
        return cls(root, args.image, args.stage, output, args.format, args.print_json)


HELP = "export each stage's predicted environment as a PEP 751 pylock.toml"
DESCRIPTION = (
    "Write pylock.<stage>.toml (PEP 751) for every stage (or --stage vK): the packages the "
    "locks install with their index and hashes, and what the base image provides. Needs fresh "
    "locks and the index (to name each file a lock allows)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("image", help="a recipe: the folder name under images/")
    parser.add_argument("--stage", metavar="vK", help="export this stage only (default: every)")
    parser.add_argument(
        "--format", choices=FORMATS, default="pylock", help="the standard (default: pylock)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        metavar="DIR",
        help="the folder to write into (default: build/export/IMAGE/)",
    )
    parser.add_argument(
        "--json",
        dest="print_json",
        action="store_true",
        help="print what was written as JSON instead of a table",
    )


def handle(args: argparse.Namespace, context: RunContext) -> int:
    options = ExportOptions.from_args(args, context)
    written = export_pylock(options.root, options.image, options.stage, options.output)
    if options.json:
        text = json.dumps(export_json(options, written), indent=2, sort_keys=True)
        console.stdout.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        show(written, options.root)
    return EXIT_OK


def export_json(options: ExportOptions, written: list[Exported]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "image": options.image,
        "format": options.fmt,
        "files": [
            {
                "stage": item.stage,
                "path": _shown(item.path, options.root),
                "packages": item.locked,
                "installed_by_base": item.from_base,
                "validated_by": item.validated_by,
            }
            for item in written
        ],
    }


def _shown(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def show(written: list[Exported], root: Path) -> None:
    table = Table(title="pylock export (PEP 751)", title_justify="left")
    for column in ("stage", "file", "packages", "from the base", "validated"):
        table.add_column(column)
    for item in written:
        checked = item.validated_by or "[yellow]no PEP 751 reader in this packaging[/]"
        table.add_row(
            escape(item.stage),
            escape(_shown(item.path, root)),
            str(item.locked),
            str(item.from_base),
            escape(checked) if item.validated_by else checked,
        )
    console.stdout.print(table)
