"""``python -m audit gate``: what a pull request does to every image's dependencies.

``gate --base REF [--head REF] [--repo PATH]`` reads both refs straight from git (no checkout),
compares every image stage by stage and applies the head's policy (see :mod:`audit.gate.compare`).
An image with no base record is "not audited" (a warning, counted; an error where the pull
request touches it, and for every such image with ``--strict``).
Writes the change view (``--format``: a terminal table with the change matrices, Markdown, JSON,
or a self-contained HTML page) on stdout or to ``--output FILE``, several at once when repeated,
and the Markdown to ``$GITHUB_STEP_SUMMARY`` when set. Exit 0 pass, 1 a policy violation, 2 bad
input (a ref that does not resolve, an unreadable file), 3 git missing or failing.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from datetime import date
from io import StringIO
from pathlib import Path

from rich.console import Console

from audit.cli.context import RunContext
from audit.cli.options import HTML, JSON, MARKDOWN, TERMINAL, add_report_arguments
from audit.cli.output import FILE_WIDTH, check_output, checked_reports
from audit.errors import EnvironmentProblem
from audit.gate.change_render import gate_html, gate_json, print_views
from audit.gate.compare import GateResult
from audit.gate.markdown import gate_markdown
from audit.gate.matrix import StageMatrix
from audit.host import atomic, console
from audit.project.gitsource import gate_refs
from audit.redact import redact
from audit.report.findings import report_exit_code

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
FORMATS = (TERMINAL, JSON, MARKDOWN, HTML)
OLD_OPTIONS = ("--markdown", "--json", "--html")  # deprecated: --format F --output FILE
HELP = "pull-request gate: compare every image's dependencies between two git refs"
DESCRIPTION = (
    "What a pull request does to every image's dependencies: reads both refs straight from "
    "git (no checkout), compares every image stage by stage and applies the head's policy. "
    "Markdown is also appended to $GITHUB_STEP_SUMMARY when it is set."
)


@dataclass(frozen=True, kw_only=True)
class GateOptions:
    """The command line, parsed once."""

    base: str
    head: str
    repo: Path
    stdout: str | None  # the format printed on stdout (None: nothing)
    files: tuple[tuple[str, Path], ...]  # (format, file) for every report written
    summary: Path | None  # GitHub's job summary file, appended to
    strict_waivers: bool = False
    strict: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> GateOptions:
        old = [(option, getattr(args, option[2:])) for option in OLD_OPTIONS]
        given = [(option, path) for option, path in old if path is not None]
        for option, path in given:
            check_output(path, option)  # before reading two commits
        reports = checked_reports(
            args, TERMINAL, several=True, old_options=[option for option, _ in given]
        )
        summary = os.environ.get(SUMMARY_ENV)
        return cls(
            base=args.base,
            head=args.head,
            repo=args.repo,
            stdout=reports.stdout,
            files=(*reports.files, *((option[2:], path) for option, path in given)),
            summary=Path(summary) if summary else None,
            strict_waivers=args.strict_waivers,
            strict=args.strict,
        )

    @property
    def markdown(self) -> bool:
        """Whether the Markdown (and the head stage matrices only it shows) is wanted."""
        formats = [self.stdout, *(fmt for fmt, _ in self.files)]
        return MARKDOWN in formats or self.summary is not None


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
    add_report_arguments(parser, FORMATS, what="the change view", several=True)
    for option in OLD_OPTIONS:  # one more release, with a warning
        parser.add_argument(option, type=Path, metavar="FILE", help=argparse.SUPPRESS)
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


def handle(args: argparse.Namespace, context: RunContext) -> int:
    options = GateOptions.from_args(args)
    result = gate_refs(
        options.repo,
        options.base,
        options.head,
        today=date.today(),
        strict_waivers=options.strict_waivers,
        strict=options.strict,
        head_matrices=options.markdown,
        memo=context.memo,
    )
    markdown = (
        gate_markdown(result.report, result.matrices, result.views) if options.markdown else ""
    )
    if options.stdout is not None:
        _print(result, options.stdout, markdown)
    for fmt, path in options.files:
        atomic.write_text(path, _text(result, fmt, markdown))
    if options.summary:
        _append_summary(options.summary, markdown)
    return report_exit_code(result.report)


def _changes(result: GateResult) -> list[StageMatrix]:
    return [m.changes for m in result.matrices if m.changes is not None]


def _print(result: GateResult, fmt: str, markdown: str) -> None:
    """The change view on stdout: a terminal table with the change matrices, or the text of
    another format."""
    if fmt == TERMINAL:
        print_views(result.report, result.views, _changes(result), console.stdout)
    else:
        text = _text(result, fmt, markdown)
        console.stdout.print(text, markup=False, highlight=False, end="", soft_wrap=True)


def _text(result: GateResult, fmt: str, markdown: str) -> str:
    """The change view in ``fmt`` as text (the terminal table without colour, for a file)."""
    if fmt == MARKDOWN:
        return markdown
    if fmt == JSON:
        return gate_json(result.report, result.views)
    if fmt == HTML:
        return gate_html(result.report, result.views, _changes(result))
    buffer = StringIO()
    drawn = Console(file=buffer, width=FILE_WIDTH, no_color=True, highlight=False, emoji=False)
    print_views(result.report, result.views, _changes(result), drawn)
    return redact(buffer.getvalue())


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
