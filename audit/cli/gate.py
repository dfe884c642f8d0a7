"""``python -m audit gate``: what a pull request does to every image's dependencies.

``gate --base REF [--head REF] [--repo PATH]`` reads both refs straight from git (no checkout),
compares every image stage by stage and applies the head's policy (see :mod:`audit.gate.compare`).
An image with no base record is "not audited" (a warning, counted; an error where the pull
request touches it, and for every such image with ``--strict``).
Prints the change view (``--format``: a terminal table with the change matrices, Markdown or
JSON), writes Markdown to ``--markdown FILE`` and to ``$GITHUB_STEP_SUMMARY`` when set, JSON to
``--json FILE`` and a self-contained HTML page to ``--html FILE``. Exit 0 pass, 1 a policy
violation, 2 bad input (a ref that does not resolve, an unreadable file), 3 git missing or failing.
"""

from __future__ import annotations

import argparse
import gc
import os
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from audit.errors import EnvironmentProblem
from audit.gate.change_render import gate_html, gate_json, print_views
from audit.gate.compare import GateResult
from audit.gate.markdown import gate_markdown
from audit.gate.matrix import StageMatrix
from audit.host import atomic, console
from audit.project import frontdoor
from audit.project.gitsource import gate_refs
from audit.report.findings import FORMATS, check_output, report_exit_code

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
    html: Path | None
    summary: Path | None  # GitHub's job summary file, appended to
    strict_waivers: bool = False
    strict: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> GateOptions:
        check_output(args.markdown, "--markdown")  # before reading two commits
        check_output(args.json, "--json")
        check_output(args.html, "--html")
        summary = os.environ.get(SUMMARY_ENV)
        return cls(
            base=args.base,
            head=args.head,
            repo=args.repo,
            fmt=args.format,
            markdown=args.markdown,
            json=args.json,
            html=args.html,
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
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the change view as a self-contained HTML page to FILE",
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


# The gate over a fleet makes millions of small objects and hardly a reference cycle: the
# collector's default (a young-generation pass every 700 new objects, a full pass now and then
# over everything alive) costs it a few percent for nothing, so it runs less often meanwhile.
GC_THRESHOLD = (10_000, 10, 10)


def handle(args: argparse.Namespace) -> int:
    threshold = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        return _handle(args)
    finally:
        gc.set_threshold(*threshold)


def _handle(args: argparse.Namespace) -> int:
    options = GateOptions.from_args(args)
    # the Markdown (and the head stage matrices only it shows) when something prints or keeps it
    wanted = bool(options.fmt == "markdown" or options.markdown or options.summary)
    frontdoor.use_root(options.repo.resolve())  # hints name the commands of the gated repo
    try:
        result = gate_refs(
            options.repo,
            options.base,
            options.head,
            today=date.today(),
            strict_waivers=options.strict_waivers,
            strict=options.strict,
            head_matrices=wanted,
        )
    finally:
        frontdoor.use_root(None)
    markdown = gate_markdown(result.report, result.matrices, result.views) if wanted else ""
    _print(result, options.fmt, markdown)
    _write_files(result, options, markdown)
    return report_exit_code(result.report)


def _changes(result: GateResult) -> list[StageMatrix]:
    return [m.changes for m in result.matrices if m.changes is not None]


def _print(result: GateResult, fmt: str, markdown: str) -> None:
    """The change view on stdout: as a terminal table with the change matrices, Markdown or
    JSON (the report document with the view as ``changes``)."""
    if fmt == "markdown":
        console.stdout.print(markdown, markup=False, highlight=False, end="")
    elif fmt == "json":
        text = gate_json(result.report, result.views)
        console.stdout.print(text, markup=False, highlight=False, end="", soft_wrap=True)
    else:
        print_views(result.report, result.views, _changes(result), console.stdout)


def _write_files(result: GateResult, options: GateOptions, markdown: str) -> None:
    if options.markdown:
        atomic.write_text(options.markdown, markdown)
    if options.json:
        atomic.write_text(options.json, gate_json(result.report, result.views))
    if options.html:
        atomic.write_text(options.html, gate_html(result.report, result.views, _changes(result)))
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
