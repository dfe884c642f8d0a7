"""The gate's report as Markdown for a pull request: one line of verdict, one table per image.

A reviewer reads the verdict, then per image what moved, downgrades and other failures first
with the stage and layer that did it; routine changes (upgrades, additions) and the fixes fold
into ``<details>`` so a long list never buries a failure. Text from recipes is escaped: a cell
never breaks the table or injects HTML.

Each image's part leads with its stage matrices (:mod:`audit.plan.matrix`), when the gate made
them: what the pull request changes per stage (base ref -> head ref), then the packages x
stages at the head ref; only rows that change, folded into ``<details>`` when long.
"""

from __future__ import annotations

from collections.abc import Iterable

from audit.core.findings import ERROR, INFO, WARNING, Finding
from audit.core.redact import redact
from audit.core.rules import CHANGE_RULES
from audit.plan.gate import BASE_IMAGE_RULE, NEEDS_REVIEW, WAIVER_RULE, ImageMatrices, image_of
from audit.plan.matrix import matrix_markdown
from audit.plan.report import (
    DETAILS_AFTER,
    SEVERITY_ICON,
    Report,
    not_audited_images,
    ordered,
)

# Changes whose row says it all (an unparsable version's note says why it is one).
PLAIN_CHANGES = CHANGE_RULES - {"unparsable-version"}
MATRIX_ROWS = 60  # rows per matrix: a job summary or comment has a size limit
HEADER = ("| | change | package | version | where | note |", "|---|---|---|---|---|---|")


def gate_markdown(report: Report, matrices: Iterable[ImageMatrices] = ()) -> str:
    """The whole comment: heading, one-line verdict, the waivers that need owner review, then
    a part per image (in the report's order, each image once), led by its matrices."""
    lines = [f"## {_escape(report.title)}", "", _verdict(report), "", *_not_audited(report)]
    lines += _owner_review(report)
    by_image: dict[str, list[Finding]] = {}
    for section in report.sections:
        by_image.setdefault(image_of(section), []).extend(section.findings)
    tables = {matrix.image: matrix for matrix in matrices}
    for image, findings in by_image.items():
        lines += _image_part(image, tuple(findings), tables.get(image))
    if not report.sections:
        lines += ["No image's dependencies change.", ""]
    return redact("\n".join(lines).rstrip("\n") + "\n")


def _owner_review(report: Report) -> list[str]:
    """Waivers this pull request adds or widens, before anything else: a reviewer who owns
    the image must agree with each (CODEOWNERS on ``images/*/image.toml``)."""
    waivers = [
        (image_of(section), finding)
        for section in report.sections
        for finding in section.findings
        if finding.rule == WAIVER_RULE
    ]
    if not waivers:
        return []
    lines = [f"### ⚠️ {NEEDS_REVIEW.capitalize()}", "", *HEADER]
    lines += [_row(image, finding) for image, finding in waivers]
    return [*lines, ""]


def _not_audited(report: Report) -> list[str]:
    """One line naming the images nothing was predicted for (no base record)."""
    names = not_audited_images(report)
    if not names:
        return []
    listed = ", ".join(f"`{_escape(name)}`" for name in names)
    return [f"⚠️ **Not audited** (no base record: rendered, not recorded): {listed}", ""]


def _verdict(report: Report) -> str:
    counts = report.counts
    tally = ", ".join(f"{counts[severity]} {severity}" for severity in (ERROR, WARNING, INFO))
    if report.failed:
        return f"**❌ FAIL**: this pull request breaks the dependency policy ({tally})."
    return f"**✅ PASS**: no dependency change breaks the policy ({tally})."


def _image_part(
    image: str, findings: tuple[Finding, ...], matrices: ImageMatrices | None = None
) -> list[str]:
    rows = ordered(tuple(f for f in findings if f.rule != BASE_IMAGE_RULE))
    important = [f for f in rows if _must_read(f)]
    routine = [f for f in rows if not _must_read(f)]
    lines = [f"### `{_escape(image)}`", "", *_matrices(image, matrices)]
    lines += [
        f"**Base image:** {_escape(f.message)}\n" for f in findings if f.rule == BASE_IMAGE_RULE
    ]
    if important:
        lines += [*HEADER, *(_row(image, f) for f in important), ""]
    if routine and (important or len(routine) > DETAILS_AFTER):
        lines += _details(_tally(routine), [*HEADER, *(_row(image, f) for f in routine)])
    elif routine:
        lines += [*HEADER, *(_row(image, f) for f in routine), ""]
    return lines + _fixes(important)


def _matrices(image: str, matrices: ImageMatrices | None) -> list[str]:
    """The change matrix (base ref -> head ref per stage), then the head's stage matrix."""
    if matrices is None:
        return []
    name = f"`{_escape(image)}`"
    lines: list[str] = []
    changes = matrices.changes
    if changes is not None and changes.rows:
        title = (
            f"**What this pull request changes** in {name}: {len(changes.rows)} package(s), "
            "base ref → head ref per stage"
        )
        lines += [matrix_markdown(changes, title, MATRIX_ROWS).rstrip("\n"), ""]
    head = matrices.head
    title = f"**Stage matrix at the head ref**: {len(head.rows)} package(s) change across stages"
    lines += [matrix_markdown(head, title, MATRIX_ROWS).rstrip("\n"), ""]
    return lines


def _must_read(finding: Finding) -> bool:
    """Failures, warnings and anything a waiver let through; the rest may fold away."""
    return finding.severity != INFO or finding.waiver is not None


def _row(image: str, finding: Finding) -> str:
    version = _version(finding)
    where = finding.where.removeprefix(image).strip() or "-"
    package = f"`{finding.package}`" if finding.package else ""
    cells = (SEVERITY_ICON[finding.severity], finding.rule, package, version, where, _note(finding))
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _version(finding: Finding) -> str:
    if finding.before is None and finding.after is None:
        return ""
    return f"{finding.before or '–'} → {finding.after or '–'}"


def _note(finding: Finding) -> str:
    if finding.waiver:
        return f"waived: {finding.waiver}"
    return "" if finding.rule in PLAIN_CHANGES else finding.message


def _tally(findings: list[Finding]) -> str:
    """``12 upgraded, 3 added``: what the folded rows are, in the report's rule order."""
    counts: dict[str, int] = {}
    for finding in findings:
        counts[finding.rule] = counts.get(finding.rule, 0) + 1
    return ", ".join(f"{number} {rule}" for rule, number in counts.items())


def _fixes(important: list[Finding]) -> list[str]:
    hints = [f for f in important if f.fails and f.hint]
    if not hints:
        return []
    body: list[str] = []
    for finding in hints:
        subject = f"`{finding.package}` ({finding.rule})" if finding.package else finding.rule
        body += [f"- {_escape(subject)}:", "", "  ```", *_indented(finding.hint), "  ```", ""]
    return _details("How to fix", body)


def _indented(text: str) -> list[str]:
    return [f"  {line.replace('```', '` ` `')}" for line in text.splitlines()]


def _details(summary: str, body: list[str]) -> list[str]:
    return ["<details>", f"<summary>{_escape(summary)}</summary>", "", *body, "", "</details>", ""]


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cell(text: str) -> str:
    return _escape(text).replace("|", "\\|").replace("\r", " ").replace("\n", "<br>")
