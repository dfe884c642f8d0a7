"""``python -m audit diff BEFORE.json AFTER.json``: judge the change between two snapshots."""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass
from pathlib import Path

from audit.cli.context import RunContext
from audit.cli.options import JSON, MARKDOWN, TERMINAL, add_report_arguments
from audit.cli.output import Output, command_reports
from audit.history.snapshot_diff import diff_report, load_policy
from audit.host import console
from audit.report.findings import report_exit_code, summary_line
from audit.report.output import write_report

FORMATS = (TERMINAL, JSON, MARKDOWN)
HELP = "compare two snapshots and apply the policy (exit 1 on a violation)"
DESCRIPTION = (
    "Judge the change between two snapshot files (python -m audit snapshot) with a recipe's "
    "policy, or the default one; exit 1 on a violation."
)


@dataclass(frozen=True)
class DiffOptions:
    """The command line, parsed and checked once (an unwritable --output: exit 2)."""

    before: Path
    after: Path
    recipe: str | None
    output: Output
    interpreter: str | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DiffOptions:
        output = command_reports(args, FORMATS)  # before reading anything
        return cls(args.before, args.after, args.recipe, output, args.interpreter)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("before", type=Path, help="snapshot file before the change")
    parser.add_argument("after", type=Path, help="snapshot file after the change")
    parser.add_argument(
        "--recipe",
        metavar="NAME",
        help="take the policy from images/NAME/image.toml (default: the default policy)",
    )
    add_report_arguments(parser, FORMATS)
    parser.add_argument(
        "--interpreter",
        metavar="PATH",
        help="compare only this interpreter's environment (default: every one in the files)",
    )


def handle(args: argparse.Namespace, context: RunContext) -> int:
    options = DiffOptions.from_args(args)
    policy = load_policy(context.source() if options.recipe else None, options.recipe)
    report = diff_report(
        options.before,
        options.after,
        policy=policy,
        interpreter=options.interpreter,
        today=datetime.date.today(),
    )
    write_report(report, options.output.fmt, options.output.path, console.stdout)
    if options.output.path is not None:
        console.stderr.print(summary_line(report), markup=False)
    return report_exit_code(report)
