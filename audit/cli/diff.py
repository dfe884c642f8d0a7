"""``python -m audit diff BEFORE.json AFTER.json``: judge the change between two snapshots."""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit.cli.options import add_report_arguments
from audit.history.snapshot_diff import diff_report
from audit.host import console
from audit.report.findings import check_output, report_exit_code, summary_line
from audit.report.output import write_report


@dataclass(frozen=True)
class DiffOptions:
    """The command line, parsed and checked once (an unwritable --output: exit 2)."""

    before: Path
    after: Path
    recipe: str | None
    fmt: str
    output: Path | None
    interpreter: str | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DiffOptions:
        check_output(args.output)  # before reading anything
        return cls(args.before, args.after, args.recipe, args.fmt, args.output, args.interpreter)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="compare two snapshots and apply the policy (exit 1 on a violation)",
        description="Judge the change between two snapshot files (python -m audit snapshot) "
        "with a recipe's policy, or the default one; exit 1 on a violation.",
    )
    parser.add_argument("before", type=Path, help="snapshot file before the change")
    parser.add_argument("after", type=Path, help="snapshot file after the change")
    parser.add_argument(
        "--recipe",
        metavar="NAME",
        help="take the policy from images/NAME/image.toml (default: the default policy)",
    )
    add_report_arguments(parser)
    parser.add_argument(
        "--interpreter",
        metavar="PATH",
        help="compare only this interpreter's environment (default: every one in the files)",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    options = DiffOptions.from_args(args)
    report = diff_report(
        options.before,
        options.after,
        recipe=options.recipe,
        interpreter=options.interpreter,
        today=datetime.date.today(),
    )
    write_report(report, options.fmt, options.output, console.stdout)
    if options.output is not None:
        console.stderr.print(summary_line(report), markup=False)
    return report_exit_code(report)
