"""What rich itself prints for a :class:`audit.gate.plain_table.Grid`: the reference that the
plain drawing must equal, byte for byte (``tests/test_plain_table.py`` and the automatic
``plain_tables_as_rich`` fixture, which checks every table any test prints)."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from audit.gate.plain_table import Grid, TextCell, rich_table


def colourless(width: int, soft_wrap: bool) -> tuple[Console, StringIO]:
    """A console that shows characters only (not a terminal), as the gate's stdout in a pipe."""
    buffer = StringIO()
    console = Console(file=buffer, width=width, soft_wrap=soft_wrap, highlight=False, emoji=False)
    return console, buffer


def rich_text(grid: Grid, width: int, soft_wrap: bool) -> str:
    console, buffer = colourless(width, soft_wrap)
    console.print(rich_table(grid))
    return buffer.getvalue()


def rich_line(line: TextCell, width: int, soft_wrap: bool, highlight: bool | None = None) -> str:
    console, buffer = colourless(width, soft_wrap)
    console.print(line.markup, highlight=highlight)
    return buffer.getvalue()
