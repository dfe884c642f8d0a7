"""``python -m audit gate``: what a pull request does to every image's dependencies.

``gate --base REF [--head REF] [--repo PATH]`` reads both refs straight from git (no checkout),
compares every image stage by stage and applies the head's policy (see :mod:`audit.plan.gate`).
An image with no base record is "not audited" (a warning, counted; an error where the pull
request touches it, and for every such image with ``--strict``).
Prints the report (``--format``), writes Markdown to ``--markdown FILE`` and to
``$GITHUB_STEP_SUMMARY`` when set, JSON to ``--json FILE``. Exit 0 pass, 1 a policy violation,
2 bad input (a ref that does not resolve, an unreadable file), 3 git missing or failing.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from audit.core.errors import EnvironmentProblem
from audit.engines import atomic, console
from audit.engines.gitsource import gate_refs
from audit.engines.reports import write_report
from audit.plan import frontdoor
from audit.plan.gate_markdown import gate_markdown
from audit.plan.report import FORMATS, Report, check_output, render_text, report_exit_code

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


@dataclass(frozen=True)
class GateOptions:
    """The command line, parsed once."""

    base: str
    head: str
    repo: Path
    fmt: str
    markdown: Path | None
    json: Path | None
    summary: Path | None  # GitHub's job summary file, appended to
    strict_waivers: bool = False
    strict: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> GateOptions:
        check_output(args.markdown, "--markdown")  # before reading two commits
        check_output(args.json, "--json")
        summary = os.environ.get(SUMMARY_ENV)
        return cls(
            base=args.base,
            head=args.head,
            repo=args.repo,
            fmt=args.format,
            markdown=args.markdown,
            json=args.json,
            summary=Path(summary) if summary else None,
            strict_waivers=args.strict_waivers,
            strict=args.strict,
        )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gate",
        help="pull-request gate: compare every image's dependencies between two git refs",
        description="What a pull request does to every image's dependencies: reads both refs "
        "straight from git (no checkout), compares every image stage by stage and applies the "
        "head's policy. Markdown is also appended to $GITHUB_STEP_SUMMARY when it is set.",
    )
    parser.add_argument(
        "--base", required=True, metavar="REF", help="the ref to compare with, e.g. origin/main"
    )
    parser.add_argument(
        "--head", default="HEAD", metavar="REF", help="the pull request's ref (default: HEAD)"
    )
    parser.add_argument(
        "--repo",
        type=Path,
        default=Path(),
        metavar="PATH",
        help="the git repository (default: the current folder)",
    )
    parser.add_argument(
        "--markdown", type=Path, metavar="FILE", help="also write the report as Markdown to FILE"
    )
    parser.add_argument(
        "--json", type=Path, metavar="FILE", help="also write the report as JSON to FILE"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="report format on stdout (default: table)",
    )
    parser.add_argument(
        "--strict-waivers",
        action="store_true",
        help="fail when the pull request adds or widens a policy waiver (a waiver then lands "
        "through its own pull request, reviewed by the image's owners)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail (exit 1) on every image that is not audited (no base record), not only on "
        "those the pull request touches",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    options = GateOptions.from_args(args)
    frontdoor.use_root(options.repo.resolve())  # hints name the commands of the gated repo
    try:
        result = gate_refs(
            options.repo,
            options.base,
            options.head,
            today=date.today(),
            strict_waivers=options.strict_waivers,
            strict=options.strict,
        )
    finally:
        frontdoor.use_root(None)
    report = result.report
    markdown = gate_markdown(report, result.matrices)
    _print(report, options.fmt, markdown)
    _write_files(report, options, markdown)
    return report_exit_code(report)


def _print(report: Report, fmt: str, markdown: str) -> None:
    if fmt == "markdown":
        console.stdout.print(markdown, markup=False, highlight=False, end="")
    else:
        write_report(report, fmt, None, console.stdout)


def _write_files(report: Report, options: GateOptions, markdown: str) -> None:
    if options.markdown:
        atomic.write_text(options.markdown, markdown)
    if options.json:
        atomic.write_text(options.json, render_text(report, "json"))
    if options.summary:
        _append_summary(options.summary, markdown)


def _append_summary(path: Path, markdown: str) -> None:
    """GitHub collects every step's summary from this file, so add to it, never replace it."""
    try:
        with path.open("a", encoding="utf-8") as summary:
            summary.write(markdown)
    except OSError as exc:
        raise EnvironmentProblem(
            f"{SUMMARY_ENV}={path}: cannot write the job summary ({exc.strerror})",
            f"unset {SUMMARY_ENV} outside GitHub Actions",
        ) from exc
