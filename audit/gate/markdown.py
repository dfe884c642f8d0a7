"""The gate's report as Markdown for a pull request: one line of verdict, then per image its
change view (:mod:`audit.gate.change_view`), stage by stage.

A reviewer reads the verdict, the waivers the pull request adds (once, before anything else),
then per image and stage what moved: failures first with the layer that did it, a waived change
as a warning with its waiver's reason and expiry, a lockstep group as one block naming every
member, plain additions and unchanged packages folded behind a count. The stage matrices follow
(folded when long), then the fixes. Text from recipes is escaped: a cell never breaks the table
or injects HTML; a ``<summary>`` holds HTML, never Markdown (GitHub shows it literally there).
"""

from __future__ import annotations

from collections.abc import Iterable

from audit.gate.change_view import (
    IMAGE_WIDE,
    Group,
    ImageInputs,
    ImageView,
    StageView,
    ViewRow,
    image_view,
    severity_of,
)
from audit.gate.compare import BASE_IMAGE_RULE, NEEDS_REVIEW, ImageMatrices, image_of
from audit.gate.matrix import matrix_markdown
from audit.policy.findings import INFO, SEVERITIES, Finding
from audit.redact import redact
from audit.report.findings import (
    DETAILS_AFTER,
    SEVERITY_ICON,
    Report,
    not_audited_images,
    severity_tally,
)

MATRIX_ROWS = 60  # rows per matrix: a job summary or comment has a size limit
HEADER = ("| | change | package | version | where | note |", "|---|---|---|---|---|---|")


def gate_markdown(
    report: Report,
    matrices: Iterable[ImageMatrices] = (),
    views: Iterable[ImageView] | None = None,
) -> str:
    """The whole comment: heading, one-line verdict, the waivers that need owner review, then
    a part per image (in the report's order, each image once). Without ``views`` (the gate's),
    each image's view is made from its findings alone (no groups, no unchanged counts)."""
    lines = [f"## {_escape(report.title)}", "", _verdict(report), "", *_not_audited(report)]
    by_image: dict[str, list[Finding]] = {}
    for section in report.sections:
        by_image.setdefault(image_of(section), []).extend(section.findings)
    known = {view.image: view for view in views or ()}
    shown = [known.get(i) or image_view(i, f, ImageInputs()) for i, f in by_image.items()]
    lines += _owner_review(shown)
    tables = {matrix.image: matrix for matrix in matrices}
    for view in shown:
        lines += _image_part(view, by_image[view.image], tables.get(view.image))
    if not report.sections:
        lines += ["No image's dependencies change.", ""]
    return redact("\n".join(lines).rstrip("\n") + "\n")


def _owner_review(views: list[ImageView]) -> list[str]:
    """Waivers this pull request adds or widens, before anything else: a reviewer who owns
    the image must agree with each (CODEOWNERS on ``images/*/image.toml``). Listed here only."""
    rows = [_row(view.image, row) for view in views for row in view.review]
    if not rows:
        return []
    return [f"### ⚠️ {NEEDS_REVIEW.capitalize()}", "", *HEADER, *rows, ""]


def _not_audited(report: Report) -> list[str]:
    """One line naming the images nothing was predicted for (no base record)."""
    names = not_audited_images(report)
    if not names:
        return []
    listed = ", ".join(f"`{_escape(name)}`" for name in names)
    return [f"⚠️ **Not audited** (no base record: rendered, not recorded): {listed}", ""]


def _verdict(report: Report) -> str:
    tally = severity_tally(report.counts)
    if report.failed:
        return f"**❌ FAIL**: this pull request breaks the dependency policy ({tally})."
    return f"**✅ PASS**: no dependency change breaks the policy ({tally})."


def _image_part(
    view: ImageView, findings: list[Finding], matrices: ImageMatrices | None
) -> list[str]:
    lines = [f"### `{_escape(view.image)}`", ""]
    lines += [
        f"**Base image:** {_escape(f.message)}\n" for f in findings if f.rule == BASE_IMAGE_RULE
    ]
    for stage in view.stages:
        lines += _stage_part(view.image, stage)
    lines += _matrices(view.image, matrices)
    return lines + _fixes(findings)


def _stage_part(image: str, stage: StageView) -> list[str]:
    """A stage's heading line, its table (groups as blocks), the folded routine rows and the
    folded additions."""
    rows = [row for row in stage.rows if row.finding.rule != BASE_IMAGE_RULE]
    if not rows and not stage.groups and not stage.added:
        return []
    important = [row for row in rows if severity_of(row.finding) != INFO]
    routine = [row for row in rows if severity_of(row.finding) == INFO]
    fold = len(routine) > DETAILS_AFTER
    table = [_row(image, row) for row in (important if fold else rows)]
    table += [line for group in stage.groups for line in _group_rows(image, group)]
    lines = [_stage_heading(stage), ""]
    lines += [*HEADER, *table, ""] if table else []
    if fold:
        lines += _details(_tally(routine), [*HEADER, *(_row(image, r) for r in routine)])
    if stage.added:
        body = [*HEADER, *(_row(image, row) for row in stage.added)]
        lines += _details(stage.folded, body)
    elif stage.folded:
        lines += [f"_{stage.folded}_", ""]
    return lines


def _stage_heading(stage: StageView) -> str:
    """``**`v2`**: 0 errors, 2 warnings, 1 info · 3 added by this layer, 12 unchanged``."""
    name = f"**`{_escape(stage.stage)}`**" if stage.stage != IMAGE_WIDE else "**image**"
    parts = [severity_tally(stage.counts)] + ([stage.folded] if stage.folded else [])
    return f"{name}: {' · '.join(parts)}"


def _group_rows(image: str, group: Group) -> list[str]:
    """The block: a head row naming the group, its status and every member, then each row."""
    cells = (SEVERITY_ICON[group.severity], "lockstep group", f"**{group.name}**", "", "")
    members = ", ".join(f"`{_cell(m.text)}`" for m in group.members)
    head = "| " + " | ".join(_cell(c) for c in cells) + f" | {_cell(group.status)}: {members} |"
    return [head, *(_row(image, row, member=True) for row in group.rows)]


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
    if head is not None:  # left out by a gate that prints no Markdown
        count = f"{len(head.rows)} package(s) change across stages"
        title = f"**Stage matrix at the head ref**: {count}"
        lines += [matrix_markdown(head, title, MATRIX_ROWS).rstrip("\n"), ""]
    return lines


def _row(image: str, row: ViewRow, *, member: bool = False) -> str:
    finding = row.finding
    where = finding.where.removeprefix(image).strip() or "-"
    package = f"`{finding.package}`" if finding.package else ""
    package = f"↳ {package}" if member and package else package
    icon = SEVERITY_ICON[severity_of(finding)]
    cells = (icon, finding.rule, package, row.change, where, row.note)
    return "| " + " | ".join([_cell(cell) for cell in cells]) + " |"


def _tally(rows: list[ViewRow]) -> str:
    """``12 upgraded, 3 added``: what the folded rows are, in the report's rule order."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.finding.rule] = counts.get(row.finding.rule, 0) + 1
    return ", ".join(f"{number} {rule}" for rule, number in counts.items())


def _fixes(findings: list[Finding]) -> list[str]:
    hints = [f for f in findings if f.fails and f.hint]
    if not hints:
        return []
    hints.sort(key=lambda f: SEVERITIES.index(f.severity))
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
    """``text`` as a table cell."""
    return _escape(text).replace("|", "\\|").replace("\r", " ").replace("\n", "<br>")
