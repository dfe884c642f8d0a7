"""The change view (:mod:`audit.gate.change_view`) in a terminal (rich) and as an HTML page.

The HTML page says what the Markdown says, row for row: per image and stage, the rows a
reviewer must read (a waived change as a warning with its waiver's reason and expiry), each
lockstep group as one block naming its members, and the folded counts. The terminal is for a
reviewer reading a fleet: per stage it shows the error and warning rows and the lockstep
blocks, and folds routine info rows (a plain upgrade, an override-free addition) behind a count
in the stage's title; a stage with nothing left to read is its title line alone (no table).
Its change matrix keeps the alarming rows (downgraded, removed, waived, ...) and folds the rest
behind a count; the Markdown, JSON and HTML keep every row. The HTML page is self-contained
(inline CSS, no script, no external asset: its Content-Security-Policy forbids every load).
Package names are never shortened.
Pure: the same inputs render the same text.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from io import StringIO
from typing import TYPE_CHECKING

from rich.console import Console

from audit.gate.change_view import (
    IMAGE_WIDE,
    Group,
    ImageView,
    StageView,
    ViewRow,
    severity_of,
    view_json,
)
from audit.gate.matrix import (
    CSS,
    StageMatrix,
    alarming_only,
    html_matrix,
    matrix_grids,
    page_head,
)
from audit.gate.plain_table import (
    Column,
    Grid,
    Printer,
    TextCell,
    cell,
    escape_markup,
    rich_table,
)
from audit.policy.findings import ERROR, INFO, WARNING
from audit.redact import redact
from audit.report import json_text
from audit.report.findings import (
    Report,
    print_footer,
    report_document,
    severity_tally,
    summary_line,
)

if TYPE_CHECKING:
    from rich.table import Table

STYLE = {ERROR: "bold red", WARNING: "yellow", INFO: "dim"}
WORD = {ERROR: "error", WARNING: "warning", INFO: "info"}


# --- JSON ---------------------------------------------------------------------------------


def gate_json(report: Report, views: Iterable[ImageView]) -> str:
    """The report document (``layer-audit.report/1``) with the change view as ``changes``;
    every string redacted."""
    document = report_document(report)
    document["changes"] = view_json(views)
    return json_text.redacted_dumps(document) + "\n"


# --- terminal -------------------------------------------------------------------------------


def print_views(
    report: Report, views: Iterable[ImageView], matrices: Iterable[StageMatrix], console: Console
) -> None:
    """Per image its stages (a table where a row is left to read, else the title line) and
    its change matrix's alarming rows (split to fit), then the fixes and the summary line.
    Routine rows fold behind counts: no table is built for them. On a console without colour
    (a pipe, a CI log) the tables are drawn as rich draws them, without rich
    (:mod:`audit.gate.plain_table`)."""
    tables = {matrix.image: matrix for matrix in matrices}
    out = Printer(console)
    for view in views:
        for table in view_grids(view):
            if isinstance(table, Grid):
                out.grid(table)
            else:
                out.line(table)
        if view.image in tables:
            _print_matrix(tables[view.image], out)
    out.flush()
    print_footer(report, console)


def _print_matrix(matrix: StageMatrix, out: Printer) -> None:
    """The alarming rows as tables that fit; the routine rows as one count line."""
    shown = alarming_only(matrix)
    folded = len(matrix.rows) - len(shown.rows)
    if shown.rows:
        for grid in matrix_grids(shown, out.width):
            out.grid(grid)
    if folded:
        rows = "row" if folded == 1 else "rows"
        line = (
            f": stage matrix: {folded} routine {rows} folded "
            "(--format markdown or --html shows them)"
        )
        folded_line = TextCell(escape_markup(matrix.image) + line, matrix.image + line)
        out.line(folded_line, highlight=False)


def render_views(
    report: Report, views: Iterable[ImageView], matrices: Iterable[StageMatrix], width: int = 100
) -> str:
    """:func:`print_views` as plain text at ``width`` columns (no colour)."""
    buffer = StringIO()
    console = Console(file=buffer, width=width, no_color=True, highlight=False, emoji=False)
    print_views(report, views, matrices, console)
    return redact(buffer.getvalue())


def view_tables(view: ImageView) -> list[Table | str]:
    """The owner review first (as the Markdown), then per stage with rows a table of what a
    reviewer must read, or only its title line when every row is routine (folded)."""
    return [rich_table(t) if isinstance(t, Grid) else t.markup for t in view_grids(view)]


def view_grids(view: ImageView) -> list[Grid | TextCell]:
    """:func:`view_tables` as grids and title lines."""
    review: list[Grid | TextCell] = [_review_table(view)] if view.review else []
    return review + [_stage_table(view, stage) for stage in view.stages if _has_rows(stage)]


def _has_rows(stage: StageView) -> bool:
    return bool(stage.rows or stage.groups or stage.added)


def _routine(row: ViewRow) -> bool:
    """An info row outside a lockstep group: folded in the terminal."""
    return severity_of(row.finding) == INFO


def _title(view: ImageView, stage: StageView, routine: int) -> TextCell:
    where = "image" if stage.stage == IMAGE_WIDE else stage.stage
    parts = [f"{routine} routine info"] if routine else []
    parts += [stage.folded] if stage.folded else []
    folded = f"; {', '.join(parts)} (folded)" if parts else ""
    tail = f": {severity_tally(stage.counts)}{folded}"
    return TextCell(
        f"{escape_markup(view.image)} {escape_markup(where)}{tail}", f"{view.image} {where}{tail}"
    )


def _table(title: TextCell, names: Sequence[str], rows: list[tuple[TextCell, ...]]) -> Grid:
    width = max([len("package"), *(len(name) + 2 for name in names)])
    columns = (
        Column("", no_wrap=True),
        Column("package", min_width=width, no_wrap=True),
        Column("change", no_wrap=True),
        Column("note", overflow="fold", ratio=1),
    )
    return Grid(title, columns, tuple(rows), header_style="bold")


def _stage_table(view: ImageView, stage: StageView) -> Grid | TextCell:
    rows = [row for row in stage.rows if not _routine(row)]
    title = _title(view, stage, len(stage.rows) - len(rows))
    if not rows and not stage.groups:
        return title
    names = [r.package for r in rows] + [m.package for g in stage.groups for m in g.members]
    cells = [_row_cells(view.image, row) for row in rows]
    for group in stage.groups:
        cells += _group_cells(view.image, group)
    return _table(title, names, cells)


def _review_table(view: ImageView) -> Grid:
    title = f"{view.image}: needs owner review"
    cells = [_row_cells(view.image, row) for row in view.review]
    return _table(
        TextCell(f"{escape_markup(view.image)}: needs owner review", title),
        [r.package for r in view.review],
        cells,
    )


def _row_cells(image: str, row: ViewRow, prefix: str = "") -> tuple[TextCell, ...]:
    """severity, package, ``before → after``, then rule, note and layer (these wrap)."""
    severity = severity_of(row.finding)
    style = STYLE[severity]
    where = row.finding.where.removeprefix(image).strip()
    note = "; ".join(part for part in (row.finding.rule, row.note, where) if part)
    return (
        cell((WORD[severity], style)),
        cell((prefix + row.package, "")),
        cell((row.change, style)),
        cell((note, "")),
    )


def _group_cells(image: str, group: Group) -> list[tuple[TextCell, ...]]:
    style = STYLE[group.severity]
    members = ", ".join(member.text for member in group.members)
    head = (
        cell((WORD[group.severity], style)),
        cell((f"lockstep group {group.name}", "bold")),
        cell(),
        cell((group.status, style), (f": {members}", "")),
    )
    return [head, *(_row_cells(image, row, prefix="↳ ") for row in group.rows)]


# --- HTML -----------------------------------------------------------------------------------

VIEW_CSS = """
table.view td { white-space: normal; }
table.view td:nth-child(2), table.view td:nth-child(3) { white-space: nowrap; }
tr.error td:first-child { color: #cf222e; font-weight: bold; }
tr.warning td:first-child { color: #9a6700; font-weight: bold; }
tr.group td { background: #f6f8fa; font-weight: bold; }
tr.member td:nth-child(2) { padding-left: 24px; }
.folded { color: #57606a; }
"""


def gate_html(report: Report, views: Iterable[ImageView], matrices: Iterable[StageMatrix]) -> str:
    """One self-contained page: the verdict, the owner review, each image's change view, then
    its change matrix."""
    verdict = "fail" if report.failed else "pass"
    tables = {matrix.image: matrix for matrix in matrices}
    parts = [
        *page_head(report.title, CSS + VIEW_CSS),
        f"<h1>{_h(report.title)}</h1>",
        f'<p class="verdict-{verdict}">{_h(summary_line(report))}</p>',
    ]
    shown = list(views)
    review = [(view.image, row) for view in shown for row in view.review]
    if review:
        parts += ["<h2>Needs owner review</h2>", *_html_table([_html_row(i, r) for i, r in review])]
    for view in shown:
        parts += _html_image(view, tables.get(view.image))
    parts.append("</body></html>")
    return redact("\n".join(parts) + "\n")


def _html_image(view: ImageView, matrix: StageMatrix | None) -> list[str]:
    parts = [f'<h2 id="{_h(view.image)}">{_h(view.image)}</h2>']
    for stage in view.stages:
        if not _has_rows(stage):
            continue
        name = "image" if stage.stage == IMAGE_WIDE else stage.stage
        head = f"{_h(name)}: {_h(severity_tally(stage.counts))}"
        parts.append(f'<h3 data-stage="{_h(name)}">{head}</h3>')
        rows = [_html_row(view.image, row) for row in stage.rows]
        rows += [line for group in stage.groups for line in _html_group(view.image, group)]
        parts += _html_table(rows) if rows else []
        if stage.added:
            added = [_html_row(view.image, row) for row in stage.added]
            parts += [f"<details><summary>{_h(stage.folded)}</summary>", *_html_table(added)]
            parts.append("</details>")
        elif stage.folded:
            parts.append(f'<p class="folded">{_h(stage.folded)}</p>')
    if matrix is not None and matrix.rows:
        title = "What this pull request changes: base ref → head ref per stage"
        parts += [f"<h3>{_h(title)}</h3>", *html_matrix(matrix)[1:]]  # its own h2 is the image's
    return parts


def _html_table(rows: list[str]) -> list[str]:
    head = "<tr><th></th><th>package</th><th>change</th><th>where</th><th>note</th></tr>"
    return ['<table class="view">', f"<thead>{head}</thead><tbody>", *rows, "</tbody></table>"]


def _html_row(image: str, row: ViewRow, css: str = "") -> str:
    severity = severity_of(row.finding)
    where = row.finding.where.removeprefix(image).strip()
    change = f"{row.change} {row.finding.rule}".strip()
    cells = (WORD[severity], row.package, change, where, row.note)
    body = "".join(f"<td>{_h(cell)}</td>" for cell in cells)
    return f'<tr class="{severity}{css}">{body}</tr>'


def _html_group(image: str, group: Group) -> list[str]:
    members = ", ".join(member.text for member in group.members)
    cells = (WORD[group.severity], f"lockstep group {group.name}", group.status, "", members)
    head = "".join(f"<td>{_h(cell)}</td>" for cell in cells)
    rows = [f'<tr class="{group.severity} group">{head}</tr>']
    return rows + [_html_row(image, row, " member") for row in group.rows]


def _h(text: str) -> str:
    return html.escape(text, quote=True)
