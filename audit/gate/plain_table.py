"""The gate's tables, built once and drawn two ways: by rich, or as the plain text rich draws.

A :class:`Grid` is a table of the one shape the terminal views use (a left-justified title,
the ``HEAVY_HEAD`` box, one line of header, cells of plain text runs each with one style).
:func:`rich_table` turns it into the :class:`rich.table.Table` the views always printed;
:func:`plain_text` draws it without rich's generic layout machinery, for a console that shows
no style at all (a pipe, a file, a CI log: :func:`plain_console`), where a table is only its
characters: the same widths (measure, collapse, reduce), the same word wrap and fold, the same
ellipsis, the same box. It is an order of magnitude cheaper, and a fleet's gate prints hundreds
of tables.

Invariant (``tests/test_plain_table.py``, a property test over table shapes and every table
the gate tests print): ``plain_text`` returns exactly the text rich prints for the same grid
on a colourless console of the same width and wrap mode, or None where it does not promise
that (a character that is not one cell wide on its own, a cell narrower than one character, a
table wider than the console), and the caller then prints the rich table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Literal, NamedTuple

from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.markup import render as render_markup
from rich.segment import Segment

if TYPE_CHECKING:
    from rich.table import Table  # imported where a table is made: a pipe gets none

Run = tuple[str, str]  # a piece of text and its rich style ("": none)
Overflow = Literal["fold", "ellipsis"]
# what a non-ASCII character may be and still take one cell on its own, whatever follows it:
# the arrows and dashes the views print, and the precomposed Latin letters of names
_ONE_CELL = frozenset("→↳–—…") | frozenset(map(chr, range(0xC0, 0x250)))
_WORD = re.compile(r"\s*\S+\s*")
_TRAILING_SPACE = re.compile(r"\s+$")
_ELLIPSIS = "…"


@dataclass(frozen=True)
class Column:
    """A column as rich's ``Table.add_column`` takes it (its header is plain text)."""

    header: str
    no_wrap: bool = False
    min_width: int | None = None
    overflow: Overflow = "ellipsis"  # rich's default
    ratio: int | None = None  # passed to rich; it sizes nothing in a table that does not expand


class TextCell(NamedTuple):
    """A cell's rich markup and the text it shows: the two agree wherever the text holds no
    bracket or backslash (escaping changes nothing else); where it does, :func:`shown` reads
    the markup back through rich."""

    markup: str
    text: str


@dataclass(frozen=True)
class Grid:
    """A table: its title and cells as :class:`TextCell`, its columns, the header's style."""

    title: TextCell
    columns: tuple[Column, ...]
    rows: tuple[tuple[TextCell, ...], ...]
    header_style: str = "table.header"  # rich's default


def cell(*runs: Run) -> TextCell:
    """Runs of (text, style) as one cell: each text escaped, a styled one in its style."""
    return TextCell(
        "".join(
            f"[{style}]{escape_markup(text)}[/]" if style else escape_markup(text)
            for text, style in runs
        ),
        "".join(text for text, _ in runs),
    )


def escape_markup(text: str) -> str:
    """rich's ``escape``, which changes only a text holding a bracket or a backslash."""
    return escape(text) if "[" in text or "\\" in text else text


def shown(content: TextCell) -> str:
    """The characters rich shows for ``content`` (on a console that reads no emoji codes)."""
    text = content.text
    return render_markup(content.markup, emoji=False).plain if "[" in text or "\\" in text else text


def rich_table(grid: Grid) -> Table:
    """The rich table of ``grid`` (what a terminal with colours gets)."""
    from rich.table import Table

    table = Table(title=grid.title.markup, title_justify="left", header_style=grid.header_style)
    for column in grid.columns:
        table.add_column(
            escape(column.header),
            min_width=column.min_width,
            no_wrap=column.no_wrap,
            overflow=column.overflow,
            ratio=column.ratio,
        )
    for row in grid.rows:
        table.add_row(*(content.markup for content in row))
    return table


def plain_console(console: Console) -> bool:
    """Whether ``console`` prints characters only: no colour system (not a terminal), UTF-8
    box characters, no emoji codes, no Windows console: there a table is its plain text."""
    return (
        console.color_system is None
        and not console.is_terminal
        and not console.legacy_windows
        and console.encoding.lower().startswith("utf")
        and not getattr(console, "_emoji", True)
    )


class Drawn:
    """Text drawn already, printed as it is (one segment: rich neither measures nor wraps it)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Segment(self.text)


class Printer:
    """Tables and lines printed in order on one console. On a console that shows only
    characters (``plain``: :func:`plain_console`) the text drawn here for consecutive tables
    and lines is gathered and printed by one ``console.print`` (rich's cost per call: console
    options, size, environment look-ups, a redaction of each write); what rich must draw is
    printed after what is gathered. Call :meth:`flush` before anything else prints.

    The same characters reach the console: each drawn text is whole lines (it ends with a line
    break), so a soft-wrapping console writes them as they are and another crops each line as
    it would have cropped it alone."""

    def __init__(self, console: Console, *, plain: bool | None = None) -> None:
        self.console = console
        self.plain = plain_console(console) if plain is None else plain
        # read once (rich reads the environment and the terminal's size at every look)
        self.width = console.width
        self.drawn: list[str] = []

    def grid(self, grid: Grid) -> None:
        console = self.console
        text = plain_text(grid, self.width, console.soft_wrap) if self.plain else None
        if text is None:
            self.flush()
            console.print(rich_table(grid))
        else:
            self.drawn.append(text)

    def line(self, content: TextCell, *, highlight: bool | None = None) -> None:
        """As ``console.print(content.markup, highlight=highlight)`` prints it."""
        text = shown(content)
        console = self.console
        if self.plain and _one_cell(text):  # highlighting shows as styles only
            width = self.width
            lines = [text] if console.soft_wrap else _wrapped(text, width, "fold", pad=False)
            self.drawn.append("".join(line + "\n" for line in lines))
        else:
            self.flush()
            console.print(content.markup, highlight=highlight)

    def flush(self) -> None:
        """Print what is gathered (nothing when nothing is)."""
        if self.drawn:
            self.console.print(Drawn("".join(self.drawn)))
            self.drawn.clear()


def plain_text(grid: Grid, width: int, soft_wrap: bool) -> str | None:
    """The text rich prints for ``grid`` on a colourless console ``width`` wide (``soft_wrap``:
    the console's mode, in which a title is never wrapped); None where that is not promised."""
    title = shown(grid.title)
    body = _body(grid.columns, grid.rows, width) if _one_cell(title) else None
    if body is None:
        return None
    table_width, text = body
    lines = _title(title, table_width, soft_wrap) if grid.title.markup else []
    return "".join(line + "\n" for line in lines) + text


def _body(
    columns: tuple[Column, ...], rows: tuple[tuple[TextCell, ...], ...], width: int
) -> tuple[int, str] | None:
    """A table's text below its title, and the table's width; None where :func:`plain_text`
    promises nothing. It depends on the columns, the cells and the console's width alone
    (a title is drawn at the table's width)."""
    texts = [
        [shown(cell((column.header, ""))), *(shown(row[index]) for row in rows)]
        for index, column in enumerate(columns)
    ]
    if not all(_one_cell(text) for column_texts in texts for text in column_texts):
        return None
    extra = len(columns) + 1  # the box's edges and dividers
    widths = _widths(columns, texts, width - extra)
    if min(widths, default=0) < 3 or sum(widths) + extra > width:
        return None
    lines = ["┏" + "┳".join("━" * w for w in widths) + "┓"]
    lines += _row(columns, widths, [column_texts[0] for column_texts in texts], header=True)
    lines.append("┡" + "╇".join("━" * w for w in widths) + "┩")
    for index in range(1, len(rows) + 1):
        lines += _row(
            columns, widths, [column_texts[index] for column_texts in texts], header=False
        )
    lines.append("└" + "┴".join("─" * w for w in widths) + "┘")
    return sum(widths) + extra, "".join(line + "\n" for line in lines)


def _one_cell(text: str) -> bool:
    """Every character printable and one cell wide on its own (no tab, newline, combining
    mark, wide or zero-width character: where rich's cell arithmetic is string length)."""
    if text.isascii():
        return text.isprintable()
    return all(ch in _ONE_CELL or (ch.isascii() and ch.isprintable()) for ch in text)


def _title(title: str, table_width: int, soft_wrap: bool) -> list[str]:
    """A soft-wrapping console prints the title whole; another wraps it at the table's
    width and pads it (left-justified)."""
    return [title] if soft_wrap else _wrapped(title, table_width, "fold", pad=True)


# --- widths: rich's Table._calculate_column_widths for a table that does not expand ---------


Measure = tuple[int, int]  # minimum, maximum


def _widths(columns: Sequence[Column], texts: Sequence[Sequence[str]], room: int) -> list[int]:
    """Each column's width, padding included (rich's measure, collapse and last resort)."""
    ranges = [_column(column, cells, room) for column, cells in zip(columns, texts, strict=True)]
    widths = [maximum or 1 for _, maximum in ranges]
    if sum(widths) > room:
        widths = _collapse(widths, [not column.no_wrap for column in columns], room)
        if sum(widths) > room:
            widths = _reduce(sum(widths) - room, [1] * len(widths), widths, widths)
        ranges = [
            _column(column, cells, width)
            for column, cells, width in zip(columns, texts, widths, strict=True)
        ]
        widths = [maximum or 0 for _, maximum in ranges]
    return widths


def _column(column: Column, cells: Sequence[str], room: int) -> Measure:
    if room < 1:
        return 0, 0
    measured = [_padded(text, room) for text in cells]
    low = min(max(m[0] for m in measured), room)
    high = min(max(m[1] for m in measured), room)
    if column.min_width is not None:
        floor = max(0, column.min_width + 2)
        low, high = max(low, floor), max(high, floor)
    return low, high


def _padded(text: str, room: int) -> Measure:
    """A cell (one space each side) as rich measures it within ``room`` cells: its longest
    word at least, its whole line at most (a checked text is one line), both capped."""
    if room - 2 < 1:
        return _fitted((room, room), room)
    high = len(text)
    words = text.split()
    low = min(max(map(len, words)) if words else high, room)
    high = min(high, room)
    if high < 1:
        low = high = 0
    return min(low + 2, room), min(high + 2, room)


def _fitted(measure: Measure, room: int) -> Measure:
    """rich's ``Measurement.get`` after a renderable measured itself."""
    low, high = _normal(measure)
    low, high = min(low, room), min(high, room)
    return (0, 0) if high < 1 else _normal((low, high))


def _normal(measure: Measure) -> Measure:
    low, high = measure
    low = min(max(0, low), high)
    return max(0, low), max(0, low, high)


def _collapse(widths: list[int], wrapable: list[bool], room: int) -> list[int]:
    """rich's ``Table._collapse_widths``: narrow the widest wrapable columns first."""
    total = sum(widths)
    excess = total - room
    if not any(wrapable):
        return widths
    while total and excess > 0:
        widest = max(w for w, can in zip(widths, wrapable, strict=True) if can)
        second = max(
            w if can and w != widest else 0 for w, can in zip(widths, wrapable, strict=True)
        )
        ratios = [
            1 if (w == widest and can) else 0 for w, can in zip(widths, wrapable, strict=True)
        ]
        if not any(ratios) or not widest - second:
            break
        widths = _reduce(excess, ratios, [min(excess, widest - second)] * len(widths), widths)
        total = sum(widths)
        excess = total - room
    return widths


def _reduce(total: int, ratios: list[int], maximums: list[int], values: list[int]) -> list[int]:
    """rich's ``ratio_reduce``: take ``total`` off ``values`` in proportion to ``ratios``."""
    ratios = [ratio if most else 0 for ratio, most in zip(ratios, maximums, strict=True)]
    total_ratio = sum(ratios)
    if not total_ratio:
        return values[:]
    remaining = total
    result: list[int] = []
    for ratio, most, value in zip(ratios, maximums, values, strict=True):
        if ratio and total_ratio > 0:
            taken = min(most, round(ratio * remaining / total_ratio))
            result.append(value - taken)
            remaining -= taken
            total_ratio -= ratio
        else:
            result.append(value)
    return result


# --- drawing ----------------------------------------------------------------------------------


def _row(
    columns: Sequence[Column], widths: Sequence[int], texts: Sequence[str], *, header: bool
) -> list[str]:
    """One table row as lines: each cell wrapped in its column, one space each side; a header
    cell aligned to the bottom, a body cell to the top."""
    cells = [
        [f" {line} " for line in _cell(text, width - 2, column)]
        for column, width, text in zip(columns, widths, texts, strict=True)
    ]
    height = max(len(cell) for cell in cells)
    for cell, width in zip(cells, widths, strict=True):
        blank = [" " * width] * (height - len(cell))
        cell[:] = blank + cell if header else cell + blank
    edge = "┃" if header else "│"
    return [edge + edge.join(cell[i] for cell in cells) + edge for i in range(height)]


def _cell(text: str, width: int, column: Column) -> list[str]:
    if column.no_wrap:
        return [_fit(text, width, column.overflow, pad=True)]
    return _wrapped(text, width, column.overflow, pad=True)


def _wrapped(text: str, width: int, overflow: Overflow, *, pad: bool) -> list[str]:
    """rich's ``Text.wrap`` of one line: word wrap at ``width`` (a word longer than a line is
    folded with ``fold``, else cut with an ellipsis), spaces past the width dropped."""
    edges = [0, *_breaks(text, width, overflow == "fold"), len(text)]
    lines = [text[start:end] for start, end in pairwise(edges)]
    return [_fit(_rstrip_end(line, width), width, overflow, pad=pad) for line in lines]


def _breaks(text: str, width: int, fold: bool) -> list[int]:
    """rich's ``divide_line`` where a character is a cell: the offsets to break ``text`` at."""
    breaks: list[int] = []
    offset = 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            if fold:
                chunks = [word[i : i + width] for i in range(0, len(word), width)]
                for chunk in chunks[:-1]:
                    breaks += [start] if start else []
                    start += len(chunk)
                breaks += [start] if start else []
                offset = len(chunks[-1])
            else:
                breaks += [start] if start else []
                offset = len(word)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    return breaks


def _rstrip_end(line: str, width: int) -> str:
    if len(line) <= width:
        return line
    space = _TRAILING_SPACE.search(line)
    return line[: len(line) - min(len(space.group(0)), len(line) - width)] if space else line


def _fit(line: str, width: int, overflow: Overflow, *, pad: bool) -> str:
    """rich's ``Text.truncate``: cut to ``width`` (with an ellipsis for ``ellipsis``), pad."""
    if len(line) > width:
        return line[: width - 1] + _ELLIPSIS if overflow == "ellipsis" else line[:width]
    return line.ljust(width) if pad else line
