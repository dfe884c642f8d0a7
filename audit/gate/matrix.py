"""The stage matrix: packages x stages (base, v1 ... vN), the version in each, how it changed.

Built from a recipe's predicted steps (:class:`audit.gate.audit_deps.RecipeAudit`): a column is
the environment after the stage's last layer, the base column the environment before the first.
A cell's kind is the change from the column before it (added, removed, upgraded, downgraded,
variant, rebuilt), ``override`` when a layer of that stage re-pins the package on purpose (a
finding of rule ``override``: shown even when the re-pin keeps the installed version), or
``waived`` when a waiver allowed that package's finding in that stage (waived wins).
:func:`change_matrix` is the other matrix the gate shows: per stage, the environment it ships at
the pull request's base ref against the head ref (each changed cell says ``old → new``).
Rendered three ways: a rich table, Markdown (folded when long) and a self-contained HTML page
(inline CSS, no script, no external asset: a Content-Security-Policy forbids every load).
Invariants: pure (no I/O); the same audit renders the same bytes; every text is escaped.
"""

from __future__ import annotations

import html
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from operator import attrgetter
from typing import TYPE_CHECKING

from audit.gate.audit_deps import RecipeAudit
from audit.gate.change_view import severity_of
from audit.gate.plain_table import Column, Grid, TextCell, escape_markup, rich_table
from audit.gate.plain_table import cell as plain_cell
from audit.history.diff import ADDED, REMOVED, Comparison, compare
from audit.history.predict import PredictedStep, declared_overrides
from audit.history.snapshot import Distribution
from audit.policy.findings import Finding
from audit.project.memo import Kind, Memo, Remembered
from audit.report.findings import Report, ordered, summary_line

if TYPE_CHECKING:
    from rich.table import Table

WAIVED = "waived"
OVERRIDE = "override"
ALARM = ("downgraded", "removed", "variant", "override", "waived", "rebuilt", "unparsable")
STYLES = {
    "added": "green",
    "upgraded": "cyan",
    "downgraded": "bold red",
    "removed": "bold red",
    "variant": "bold magenta",
    "override": "bold blue",
    "rebuilt": "yellow",
    "waived": "yellow",
    "unparsable": "yellow",
}
MARKDOWN_MARK = {
    "added": "🟢 ",
    "upgraded": "🔼 ",
    "downgraded": "🔻 ",
    "removed": "❌ ",
    "variant": "🟣 ",
    "override": "📌 ",
    "rebuilt": "🟡 ",
    "waived": "⚪ ",
    "unparsable": "❔ ",
}
_ALARMING = frozenset(ALARM)
_KIND = attrgetter("kind")
FOLD_AFTER = 15  # Markdown matrices with more rows fold into <details>


@dataclass(frozen=True)
class Cell:
    """One package in one column. In a change matrix (``compared``) ``before`` is the version
    the base ref ships in that stage; a changed cell then reads ``before → version``."""

    version: str | None  # None: not installed in this column
    kind: str = ""  # "" when unchanged from the column before (or from the base ref)
    before: str | None = None
    compared: bool = False
    previous: str | None = field(default=None, compare=False)  # the column before's version

    @property
    def text(self) -> str:
        """``2.30.1``, ``—`` when absent, ``2.30.1 → 2.29.7`` for a changed compared cell, and
        for a cell that moves from a version the column before had (an addition has none)."""
        now = self.version or "—"
        if self.compared and self.kind and self.before != self.version:
            return f"{self.before or '—'} → {now}"
        if not self.compared and self.kind and self.previous not in (None, self.version):
            return f"{self.previous} → {now}"
        return now


@dataclass(frozen=True)
class Row:
    package: str
    cells: tuple[Cell, ...]

    # computed once per row: rows are remembered (Memo.rows) and shared by a fleet's matrices
    @cached_property
    def changes(self) -> bool:
        return any(map(_KIND, self.cells))

    @cached_property
    def alarming(self) -> bool:
        return not _ALARMING.isdisjoint(map(_KIND, self.cells))

    @cached_property
    def markdown(self) -> str:
        """The row as a Markdown table line."""
        cells = [_md_code(self.package), *(_md_cell(cell) for cell in self.cells)]
        return "| " + " | ".join(cells) + " |"


@dataclass(frozen=True)
class StageMatrix:
    image: str
    columns: tuple[str, ...]  # "base", then the stage names
    rows: tuple[Row, ...]  # alarming rows first, then by name


Marks = Mapping[tuple[str, str], str]  # (column, package) -> "override" | "waived"


def stage_matrix(
    audit: RecipeAudit, *, all_rows: bool = False, memo: Memo | None = None
) -> StageMatrix:
    """The matrix of one audited recipe; only rows that change unless ``all_rows``."""
    marks = {**declared_marks(audit.steps), **finding_marks(audit.findings)}
    columns = _columns(audit)
    return columns_matrix(audit.recipe.name, columns, marks, all_rows=all_rows, memo=memo)


def columns_matrix(
    image: str,
    columns: Mapping[str, Mapping[str, Distribution]],
    marks: Marks,
    *,
    all_rows: bool = False,
    among: Sequence[Collection[str]] | None = None,
    memo: Memo | None = None,
) -> StageMatrix:
    """Packages x ``columns`` (in order: each cell compared with the column before it).
    ``among``, when given, holds per column after the first every name at which it may differ
    from the one before (its stage's lock pins; nothing removed): only those are compared.
    With the command's ``memo``, a row made before of the same parts is that row again."""
    # only a name that moves between two columns, or is marked, can change: the rest of a row
    # is read without comparing (a base of 300 packages moves a handful per stage)
    envs = list(columns.values())
    moved_at: dict[str, set[int]] = {}  # name -> the column indexes it may change at
    for index, (old, new) in enumerate(pairwise(envs), start=1):
        pair = Comparison(old, new, among[index - 1] if among is not None else None)
        for name in pair.differing:
            moved_at.setdefault(name, set()).add(index)
    marked_at = _marks_by_name(tuple(columns), marks)
    if all_rows:
        names = {name for env in envs for name in env}
    else:  # what moves is in a column; a mark counts for a package some column has
        marked = {name for _, name in marks} - moved_at.keys()
        names = {*moved_at, *(name for name in marked if any(name in env for env in envs))}
    nothing: dict[int, str] = {}
    table = memo.table(ROWS) if memo is not None else None
    rows = [
        _known_row(name, envs, moved_at, marked_at.get(name, nothing), table)
        for name in sorted(names)
    ]
    return _matrix(image, tuple(columns), rows, all_rows)


# Matrix rows by everything they are made of, in the command's memo: a fleet's images, and both
# refs of one, repeat the same rows. Without it callgrind counts 34 % more instructions for
# benchmarks/bench_gate.py's 40-image gate.
ROWS: Kind[tuple[object, ...], Row] = Kind("matrix rows", 1 << 14, flat=True)


def _known_row(
    name: str,
    envs: Sequence[Mapping[str, Distribution]],
    moved_at: Mapping[str, Collection[int]],
    marked_at: Mapping[int, str],
    table: Remembered[tuple[object, ...], Row] | None,
) -> Row:
    """:func:`_row`, remembered in the memo's ``table`` by everything it reads: a row is a
    function of its package's (version, digest) in each column and its marks (where it moves
    follows from them), and a fleet's images, and both refs of one, repeat the same rows."""
    if table is None:
        return _row(name, envs, moved_at.get(name, ()), marked_at)
    seen = tuple([(d.version, d.digest) if (d := env.get(name)) else None for env in envs])
    key = ("stage", name, seen, tuple(sorted(marked_at.items())) if marked_at else ())
    row = table.peek(key)
    if row is None:
        row = table.made(key, lambda: _row(name, envs, moved_at.get(name, ()), marked_at))
    return row


def _marks_by_name(columns: Sequence[str], marks: Marks) -> dict[str, dict[int, str]]:
    """name -> {column index: mark}; a mark of the first column or of no column is dropped
    (the first column has nothing before it to change from)."""
    index_of = {column: index for index, column in enumerate(columns) if index}
    found: dict[str, dict[int, str]] = {}
    for (column, name), mark in marks.items():
        if column in index_of:
            found.setdefault(name, {})[index_of[column]] = mark
    return found


def _same(old: Distribution | None, new: Distribution | None) -> bool:
    return old is new or old == new


def column_pairs(
    old: Mapping[str, Mapping[str, Distribution]], new: Mapping[str, Mapping[str, Distribution]]
) -> dict[str, Comparison]:
    """What a pull request changes, per column of ``new`` (base, v1 … vN at the head ref): the
    same column at the base ref ``old`` compared with it; a column the base ref lacks compares
    with the base ref's last column (a new stage extends the last one)."""
    last: Mapping[str, Distribution] = list(old.values())[-1] if old else {}
    return {column: Comparison(old.get(column, last), env) for column, env in new.items()}


def change_matrix(
    image: str,
    pairs: Mapping[str, Comparison],
    marks: Marks,
    *,
    all_rows: bool = False,
    memo: Memo | None = None,
) -> StageMatrix:
    """The pull request's change matrix from :func:`column_pairs`: a row per package that
    differs between the refs in some column (every package with ``all_rows``)."""
    if all_rows:
        names = {name for pair in pairs.values() for name in (*pair.before, *pair.after)}
    else:  # a cell changes only where the two refs differ in its column
        names = {name for pair in pairs.values() for name in pair.differing}
    table = memo.table(ROWS) if memo is not None else None
    rows = [_known_compared_row(name, pairs, marks, table) for name in sorted(names)]
    return _matrix(image, tuple(pairs), rows, all_rows)


def _known_compared_row(
    name: str,
    pairs: Mapping[str, Comparison],
    marks: Marks,
    table: Remembered[tuple[object, ...], Row] | None,
) -> Row:
    """:func:`_compared_row`, remembered in the memo's ``table`` by everything it reads: per
    column the package's version and digest at both refs and its mark."""
    if table is None:
        return _compared_row(name, pairs, marks)
    key = (
        "compared",
        name,
        tuple(
            [
                (
                    (d.version, d.digest) if (d := pair.before.get(name)) else None,
                    (d.version, d.digest) if (d := pair.after.get(name)) else None,
                    marks.get((column, name)),
                )
                for column, pair in pairs.items()
            ]
        ),
    )
    row = table.peek(key)
    if row is None:
        row = table.made(key, lambda: _compared_row(name, pairs, marks))
    return row


def _matrix(image: str, columns: tuple[str, ...], rows: list[Row], all_rows: bool) -> StageMatrix:
    kept = [row for row in rows if all_rows or row.changes]
    kept.sort(key=lambda row: (not row.alarming, row.package))
    return StageMatrix(image, columns, tuple(kept))


def _columns(audit: RecipeAudit) -> dict[str, Mapping[str, Distribution]]:
    """Environment by column: before the first layer, then after each stage's last."""
    if not audit.steps:
        return {}
    columns: dict[str, Mapping[str, Distribution]] = {"base": audit.steps[0].before}
    for predicted in audit.steps:
        columns[predicted.step.stage.name] = predicted.after
    return columns


def declared_marks(steps: Iterable[PredictedStep]) -> dict[tuple[str, str], str]:
    """(stage, package) -> ``override`` for every package a layer of that stage re-pins on
    purpose (its ``override`` names; every package a ``no_deps`` layer moves)."""
    return {
        (p.step.stage.name, package): OVERRIDE
        for p in steps
        for package in declared_overrides(p.step, p.after, p.before)
    }


def finding_marks(findings: Iterable[Finding]) -> dict[tuple[str, str], str]:
    """(stage, package) -> ``override`` for a declared re-pin, ``waived`` (which wins) for a
    finding a waiver allowed; a finding of no stage (the base image's) marks nothing."""
    marks: dict[tuple[str, str], str] = {}
    for finding in findings:
        stage = finding.stage
        if stage is None or not finding.package:
            continue
        if finding.waiver:
            marks[(stage, finding.package)] = WAIVED
        elif finding.rule == OVERRIDE:
            marks.setdefault((stage, finding.package), OVERRIDE)
    return marks


def _kind(name: str, before: Mapping[str, Distribution], after: Mapping[str, Distribution]) -> str:
    """The change kind of ``name`` from ``before`` to ``after`` ("" when none)."""
    return _change(name, before.get(name), after.get(name))


def _change(name: str, old: Distribution | None, now: Distribution | None) -> str:
    """:func:`_kind` of two distributions of ``name`` (None: not installed)."""
    if _same(old, now):  # the common cases, without parsing a version
        return ""
    if old is None or now is None:
        return ADDED if old is None else REMOVED
    return compare(old, now) or ""


def _marked(kind: str, mark: str | None) -> str:
    """A mark replaces the change's kind; ``override`` shows even on an unchanged cell."""
    if mark == OVERRIDE or (mark == WAIVED and kind):
        return mark
    return kind


def _row(
    name: str,
    envs: Sequence[Mapping[str, Distribution]],
    moved_at: Collection[int],
    marked_at: Mapping[int, str],
) -> Row:
    """One package across the columns ``envs``. ``moved_at``: the column indexes where the
    package may change from the column before; ``marked_at``: its marks by column index. Any
    other cell after an unchanged one is that same cell again, without a look at the envs."""
    first = envs[0].get(name)
    cells = [Cell(first.version if first else None, "")]
    for index in range(1, len(envs)):
        last = cells[-1]
        if not last.kind and index not in moved_at and index not in marked_at:
            cells.append(last)  # shared: an unchanged cell is the same object
            continue
        old, now = envs[index - 1].get(name), envs[index].get(name)
        change = _change(name, old, now) if index in moved_at else ""
        kind = _marked(change, marked_at.get(index))
        version = now.version if now else None
        if not kind and not last.kind and last.version == version:
            cells.append(last)
        else:
            cells.append(Cell(version, kind, previous=old.version if old else None))
    return Row(name, tuple(cells))


def _compared_row(name: str, pairs: Mapping[str, Comparison], marks: Marks) -> Row:
    """A change matrix row: a cell is marked only where its (base ref, head ref) pair first
    differs from the column before it (a v1 change that v2…vN inherit is marked once, in v1,
    as the gate reports it)."""
    cells: list[Cell] = []
    previous: tuple[str | None, str | None] = (None, None)
    for column, compared in pairs.items():
        old, new = compared.before, compared.after
        was, now = old.get(name), new.get(name)
        pair = (was.version if was else None, now.version if now else None)
        kind = _kind(name, old, new) if pair != previous or not cells else ""
        kind = _marked(kind, marks.get((column, name))) if kind else ""
        cells.append(Cell(pair[1], kind, pair[0], compared=True))
        previous = pair
    return Row(name, tuple(cells))


# --- terminal -------------------------------------------------------------------------------


def matrix_table(matrix: StageMatrix, columns: Sequence[int] | None = None) -> Table:
    """A rich table: one row per package, the kind of change as colour and a word; only the
    ``columns`` given (indexes into ``matrix.columns``; default all). A package name is never
    shortened: its column is as wide as the longest name."""
    return rich_table(matrix_grid(matrix, columns))


def matrix_grid(matrix: StageMatrix, columns: Sequence[int] | None = None) -> Grid:
    """:func:`matrix_table` as a :class:`~audit.gate.plain_table.Grid` (drawn by rich, or as
    its plain text on a console without colour)."""
    shown = list(range(len(matrix.columns))) if columns is None else list(columns)
    part = "" if len(shown) == len(matrix.columns) else f" ({', '.join(_picked(matrix, shown))})"
    text = "" if not part else f" ({', '.join(matrix.columns[index] for index in shown)})"
    title = TextCell(
        f"{escape_markup(matrix.image)}: stage matrix{part}", f"{matrix.image}: stage matrix{text}"
    )
    heads = [Column("package", min_width=_name_width(matrix), no_wrap=True)]
    heads += [Column(matrix.columns[index], overflow="fold") for index in shown]
    rows = [
        (plain_cell((row.package, "")), *(_grid_cell(row.cells[index]) for index in shown))
        for row in matrix.rows
    ]
    if not matrix.rows:
        rows.append((plain_cell(("(no package changes)", "dim")), *([plain_cell()] * len(shown))))
    return Grid(title, tuple(heads), tuple(rows))


def alarming_only(matrix: StageMatrix) -> StageMatrix:
    """The matrix with only its alarming rows (a kind in :data:`ALARM`), in the same order."""
    return StageMatrix(matrix.image, matrix.columns, tuple(r for r in matrix.rows if r.alarming))


def matrix_tables(matrix: StageMatrix, width: int) -> list[Table]:
    """The matrix as tables that fit ``width`` columns: when the stages do not fit beside the
    names, they split into several tables, each repeating the package column (a name is never
    cut, a column never dropped)."""
    return [rich_table(grid) for grid in matrix_grids(matrix, width)]


def matrix_grids(matrix: StageMatrix, width: int) -> list[Grid]:
    """:func:`matrix_tables` as grids."""
    room = width - _name_width(matrix) - 4  # the name column's padding and borders
    chunks: list[list[int]] = [[]]
    used = 0
    for index in range(len(matrix.columns)):
        need = _column_width(matrix, index) + 3
        if chunks[-1] and used + need > room:
            chunks.append([])
            used = 0
        chunks[-1].append(index)
        used += need
    return [matrix_grid(matrix, chunk) for chunk in chunks]


def _picked(matrix: StageMatrix, shown: Sequence[int]) -> list[str]:
    return [escape_markup(matrix.columns[index]) for index in shown]


def _name_width(matrix: StageMatrix) -> int:
    return max([len("package"), *(len(row.package) for row in matrix.rows)])


def _column_width(matrix: StageMatrix, index: int) -> int:
    """The narrowest the column can be: its longest word (cells wrap at spaces)."""
    texts = [matrix.columns[index]]
    texts += [f"{row.cells[index].text} {row.cells[index].kind}" for row in matrix.rows]
    return max(len(word) for text in texts for word in text.split())


def _grid_cell(cell: Cell) -> TextCell:
    """The version(s) dim when unchanged, else in the kind's style followed by the kind."""
    text = escape_markup(cell.text)
    if not cell.kind:
        return TextCell(f"[dim]{text}[/]", cell.text)
    style = STYLES.get(cell.kind, "bold")
    return TextCell(f"[{style}]{text} {cell.kind}[/]", f"{cell.text} {cell.kind}")


# --- Markdown -------------------------------------------------------------------------------


def matrix_markdown(
    matrix: StageMatrix, title: str | None = None, max_rows: int | None = None
) -> str:
    """A Markdown table (GitHub): versions, a mark and a word per change; folded when long.

    ``title`` (Markdown, already escaped) replaces the default "<image>: N package(s) change
    across stages". ``max_rows`` keeps the first rows (alarming rows lead) and says how many
    were left out: a pull-request comment or job summary has a size limit.
    """
    header = ["package", *matrix.columns]
    lines = [
        "| " + " | ".join(_md(text) for text in header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    shown = matrix.rows if max_rows is None else matrix.rows[:max_rows]
    lines += [row.markdown for row in shown]
    default = f"**{_md(matrix.image)}**: {len(matrix.rows)} package(s) change across stages"
    title = title or default
    if not matrix.rows:
        return f"{title}\n"
    left = len(matrix.rows) - len(shown)
    more = (
        f"\n\n… and {left} more package(s): the most alarming come first; "
        f"`layer-audit audit-deps {_md(matrix.image)} --format html` shows every row"
        if left
        else ""
    )
    table = "\n".join(lines) + more
    if len(matrix.rows) > FOLD_AFTER:
        return f"<details><summary>{summary_html(title)}</summary>\n\n{table}\n\n</details>\n"
    return f"{title}\n\n{table}\n"


_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def summary_html(title: str) -> str:
    """An escaped Markdown title as a ``<summary>`` shows it on GitHub, which renders no
    Markdown there: ``**x**`` becomes ``<b>x</b>`` and a code span ``<code>x</code>``."""
    return _CODE.sub(r"<code>\1</code>", _BOLD.sub(r"<b>\1</b>", title))


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _md_code(text: str) -> str:
    """``text`` as a code span in a table cell: a backquote in it cannot end the span early
    (it shows as ``'``)."""
    return f"`{_md(text).replace('`', chr(39))}`"


def _md_cell(cell: Cell) -> str:
    text = _md(cell.text)
    if not cell.kind:
        return text
    bold = "**" if cell.kind in ALARM else ""
    return f"{MARKDOWN_MARK.get(cell.kind, '')}{bold}{text}{bold} {cell.kind}"


# --- HTML -----------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1f2328; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 10px; text-align: left; white-space: nowrap; }
thead th { background: #f6f8fa; position: sticky; top: 0; }
tbody th { font-family: ui-monospace, monospace; font-weight: normal; }
td { font-family: ui-monospace, monospace; }
td.same { color: #8c959f; }
.added { background: #dafbe1; } .upgraded { background: #ddf4ff; }
.downgraded, .removed { background: #ffcecb; font-weight: bold; }
.variant { background: #fbefff; font-weight: bold; }
.override { background: #ddebff; font-weight: bold; }
.rebuilt, .waived, .unparsable { background: #fff8c5; }
table.findings td { white-space: normal; font-family: system-ui, sans-serif; }
.kind { font-size: 11px; color: #57606a; margin-left: 6px; font-family: system-ui, sans-serif; }
.verdict-fail { color: #cf222e; font-weight: bold; } .verdict-pass { color: #1a7f37; }
.legend span { display: inline-block; padding: 2px 8px; margin-right: 6px; }
.legend span { border: 1px solid #d0d7de; }
"""


def page_head(title: str, css: str) -> list[str]:
    """The start of a self-contained page: no external asset, and a CSP that allows none."""
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        f"<title>layer-audit: {_h(title)}</title>",
        f"<style>{css}</style></head><body>",
    ]


def matrix_html(matrices: Iterable[StageMatrix], report: Report) -> str:
    """One self-contained HTML page: a matrix per image, then every finding."""
    verdict = "fail" if report.failed else "pass"
    parts = [
        *page_head(report.title, CSS),
        f"<h1>layer-audit {_h(report.title)}: stage matrix</h1>",
        f'<p class="verdict-{verdict}">{_h(summary_line(report))}</p>',
        _legend(),
    ]
    for matrix in matrices:
        parts += html_matrix(matrix)
    parts += _html_findings(report)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _h(text: str) -> str:
    return html.escape(text, quote=True)


def _legend() -> str:
    kinds = [
        "added",
        "upgraded",
        "downgraded",
        "removed",
        "variant",
        "override",
        "rebuilt",
        "waived",
    ]
    spans = "".join(f'<span class="{k}">{k}</span>' for k in kinds)
    return f'<p class="legend">{spans}</p>'


def html_matrix(matrix: StageMatrix) -> list[str]:
    parts = [f'<h2 id="{_h(matrix.image)}">{_h(matrix.image)}</h2>']
    if not matrix.rows:
        return [*parts, "<p>No package changes across stages.</p>"]
    head = "".join(f'<th scope="col">{_h(column)}</th>' for column in matrix.columns)
    parts += [
        f'<table class="matrix" data-image="{_h(matrix.image)}">',
        f'<thead><tr><th scope="col">package</th>{head}</tr></thead><tbody>',
    ]
    for row in matrix.rows:
        cells = "".join(_html_cell(cell) for cell in row.cells)
        parts.append(f'<tr><th scope="row">{_h(row.package)}</th>{cells}</tr>')
    parts.append("</tbody></table>")
    return parts


def _html_cell(cell: Cell) -> str:
    text = _h(cell.text)
    if not cell.kind:
        return f'<td class="same">{text}</td>'
    return f'<td class="{_h(cell.kind)}">{text}<span class="kind">{_h(cell.kind)}</span></td>'


def _html_findings(report: Report) -> list[str]:
    findings = ordered(report.findings)
    if not findings:
        return ["<h2>Findings</h2>", "<p>None.</p>"]
    parts = [
        "<h2>Findings</h2>",
        '<table class="findings"><thead><tr><th>severity</th><th>rule</th><th>package</th>'
        "<th>change</th><th>where</th><th>message</th></tr></thead><tbody>",
    ]
    for finding in findings:
        change = f"{finding.before or '—'} → {finding.after or '—'}"
        message = finding.told + (f" (waived: {finding.waiver})" if finding.waiver else "")
        parts.append(
            f"<tr><td>{_h(severity_of(finding))}</td><td>{_h(finding.rule)}</td>"
            f"<td>{_h(finding.package)}</td><td>{_h(change)}</td>"
            f"<td>{_h(finding.where)}</td><td>{_h(message)}</td></tr>"
        )
    parts.append("</tbody></table>")
    return parts
