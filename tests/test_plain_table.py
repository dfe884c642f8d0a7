"""The gate's tables drawn without rich equal rich's drawing, byte for byte.

:func:`audit.gate.plain_table.plain_text` is the fast path for a console without colour (a
pipe, a CI log: the fleet case). It must print exactly what rich prints for the same table at
the same width and wrap mode, or decline (None) so that rich draws it. A property test over
table shapes (long words that fold or collapse a column, wrapping, unicode wide and combining
characters, brackets and backslashes that rich's markup reads, empty cells and titles, narrow
consoles); the automatic ``plain_tables_as_rich`` fixture checks the same for every table any
other test prints (the gate's, audit-deps'). The checks here also make sure the fast path is
taken where it should be, so the property cannot hold by always declining.
"""

from __future__ import annotations

from collections.abc import Sequence
from io import StringIO
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.markup import escape

from audit.gate.plain_table import (
    Column,
    Grid,
    Printer,
    TextCell,
    cell,
    escape_markup,
    plain_console,
    plain_text,
)
from tests.support.plain_check import colourless, rich_line, rich_text

WORDS = [
    "a", "pkg-0005", "nvidia-cutlass-dsl-libs-base", "1.0 → 0.9", "–", "é", "Łódź", " ", "  ",
    "x" * 27, "waived:", "[b]", "[", "]", "\\", "[/]", "[bold red]", ";", ",", "(x)", "↳ ", "…",
    ":smile:",
]  # fmt: skip
DECLINED = ["中文", "e\u0301", "\t", "\u00a0", "\n"]  # not one cell each: left to rich
STYLES = ["", "bold", "dim", "bold red", "yellow"]

texts = st.lists(st.sampled_from(WORDS * 40 + DECLINED), max_size=8).map("".join)
runs = st.lists(st.tuples(texts, st.sampled_from(STYLES)), max_size=2)
columns = st.builds(
    Column,
    header=st.lists(st.sampled_from(WORDS[:12]), max_size=2).map("".join),
    no_wrap=st.booleans(),
    min_width=st.none() | st.integers(0, 30),
    overflow=st.sampled_from(["fold", "ellipsis"]),
    ratio=st.none() | st.just(1),
)


@st.composite
def grids(draw: st.DrawFn) -> Grid:
    heads = tuple(draw(st.lists(columns, min_size=1, max_size=5)))
    row = st.tuples(*(runs.map(lambda r: cell(*r)) for _ in heads))
    title = draw(runs.map(lambda r: cell(*r)))
    header = draw(st.sampled_from(["table.header", "bold"]))
    return Grid(title, heads, tuple(draw(st.lists(row, max_size=4))), header)


@settings(max_examples=800, deadline=None)
@given(grids(), st.integers(6, 140), st.booleans())
def test_a_table_drawn_without_rich_is_what_rich_draws_or_is_left_to_rich(
    grid: Grid, width: int, soft_wrap: bool
) -> None:
    text = plain_text(grid, width, soft_wrap)
    assert text is None or text == rich_text(grid, width, soft_wrap)


@settings(max_examples=300, deadline=None)
@given(runs, st.integers(6, 140), st.booleans(), st.sampled_from([None, False]))
def test_a_line_drawn_without_rich_is_what_rich_prints(
    line: list[tuple[str, str]], width: int, soft_wrap: bool, highlight: bool | None
) -> None:
    console, buffer = colourless(width, soft_wrap)
    content = cell(*line)
    out = Printer(console)
    out.line(content, highlight=highlight)
    out.flush()
    assert buffer.getvalue() == rich_line(content, width, soft_wrap, highlight)


def gate_table(note: str) -> Grid:
    """A table as the gate's change view prints it (severity, package, change, note)."""
    heads = (
        Column("", no_wrap=True),
        Column("package", min_width=20, no_wrap=True),
        Column("change", no_wrap=True),
        Column("note", overflow="fold", ratio=1),
    )
    row = (
        cell(("warning", "yellow")),
        cell(("nvidia-cutlass-dsl", "")),
        cell(("4.8.1 → 4.4.0", "yellow")),
        cell((note, "")),
    )
    return Grid(
        TextCell("dsl v2: 0 errors, 1 warning", "dsl v2: 0 errors, 1 warning"), heads, (row,)
    )


def test_the_gate_tables_take_the_fast_path_at_80_and_100_columns() -> None:
    """Wrapping notes, a folded long word: drawn here, and the same as rich."""
    notes = ["downgraded; waived: upstream pin, expires 2099-01-31; v2 layer 1", "y" * 70, ""]
    for note in notes:
        for width, soft_wrap in ((80, True), (100, False)):
            text = plain_text(gate_table(note), width, soft_wrap)
            assert text is not None and text == rich_text(gate_table(note), width, soft_wrap)


def test_what_the_fast_path_declines() -> None:
    """A wide or combining character, or a console too narrow for the table: rich draws it."""
    assert plain_text(gate_table("中文 note"), 80, True) is None
    assert plain_text(gate_table("e\u0301"), 80, True) is None
    assert plain_text(gate_table("note"), 30, True) is None  # the no-wrap columns do not fit


def test_only_a_console_without_colour_takes_the_fast_path() -> None:
    """A pipe or file does; a terminal (colours) or a console reading emoji codes keeps rich."""
    pipe, _ = colourless(80, True)
    assert plain_console(pipe)
    terminal = Console(file=StringIO(), width=80, force_terminal=True, emoji=False)
    emoji = Console(file=StringIO(), width=80, emoji=True)
    assert not plain_console(terminal) and not plain_console(emoji)
    for console in (terminal, emoji):
        print_all(Printer(console), [gate_table("a note")])
        buffer = console.file
        assert isinstance(buffer, StringIO) and "nvidia-cutlass-dsl" in buffer.getvalue()


def print_all(out: Printer, items: Sequence[Grid | TextCell], *, flush: bool = True) -> None:
    """Each table and line through ``out``, in order (then flushed, with ``flush``)."""
    for item in items:
        if isinstance(item, Grid):
            out.grid(item)
        else:
            out.line(item)
    if flush:
        out.flush()


class CountingConsole(Console):
    """A colourless console that counts its ``print`` calls."""

    prints = 0

    def print(self, *objects: Any, **options: Any) -> None:
        self.prints += 1
        super().print(*objects, **options)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(grids() | runs.map(lambda r: cell(*r)), max_size=6),
    st.integers(6, 140),
    st.booleans(),
)
def test_a_printer_prints_what_rich_prints_for_each_table_and_line_in_turn(
    items: list[Grid | TextCell], width: int, soft_wrap: bool
) -> None:
    """Gathered text (and rich's drawing of what the fast path declines, in its place) is
    the text rich prints for each table and line alone, in order."""
    console = CountingConsole(
        file=StringIO(), width=width, soft_wrap=soft_wrap, highlight=False, emoji=False
    )
    print_all(Printer(console), items)
    expected = [
        rich_text(item, width, soft_wrap)
        if isinstance(item, Grid)
        else rich_line(item, width, soft_wrap)
        for item in items
    ]
    buffer = console.file
    assert isinstance(buffer, StringIO) and buffer.getvalue() == "".join(expected)


def test_a_printer_gathers_the_gate_tables_into_one_print() -> None:
    """What the fast path draws is printed once; a table it declines is printed by rich in
    its place, after what was gathered before it."""
    console = CountingConsole(file=StringIO(), width=100, highlight=False, emoji=False)
    out = Printer(console)
    items: list[Grid | TextCell] = [
        gate_table("a"), TextCell("a line", "a line"), gate_table("b"), gate_table("中文 note")
    ]  # fmt: skip
    print_all(out, items, flush=False)
    out.line(TextCell("after", "after"))
    assert console.prints == 2  # what was gathered, then the declined table
    out.flush()
    assert console.prints == 3
    expected = [rich_text(t, 100, False) for t in (gate_table("a"),)]
    expected += [rich_line(TextCell("a line", "a line"), 100, False)]
    expected += [rich_text(t, 100, False) for t in (gate_table("b"), gate_table("中文 note"))]
    expected += [rich_line(TextCell("after", "after"), 100, False)]
    buffer = console.file
    assert isinstance(buffer, StringIO) and buffer.getvalue() == "".join(expected)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab[]/\\@#x ")) | st.text())
def test_escape_markup_returns_what_rich_escape_returns(text: str) -> None:
    assert escape_markup(text) == escape(text)
