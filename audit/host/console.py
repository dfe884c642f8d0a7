"""The two rich consoles: results on stdout, progress and diagnostics on stderr.

Both are made on first use (``console.stdout``), not at import: rich costs more to import than
a quick command (``lock`` on unchanged inputs) takes to run, so :func:`plain` prints a line
without loading rich at all while no console exists yet.

Everything printed through this module passes :func:`audit.redact.redact` as the very last
step (the rendered text, live views included), so no URL userinfo or token reaches a terminal
or a CI log, whoever printed it; and ``:name:`` is never turned into an emoji. The text of
what is printed (not rich's own styling) passes :func:`audit.redact.printable`: a control
character read from an image or a file (``ESC[2J`` in a package's name) is shown, never
acted on by the terminal.
"""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING

from audit.redact import printable, redact

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.console import Console

    stdout: Console
    stderr: Console

_NAMES = ("stdout", "stderr")


def __getattr__(name: str) -> Console:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    made = _redacting_console()(
        stderr=name == "stderr", highlight=False, soft_wrap=True, emoji=False
    )
    globals()[name] = made  # later look-ups find the attribute and skip this function
    return made


def _redacting_console() -> type[Console]:
    """A rich Console whose rendered output is redacted just before it is written, and whose
    text segments (never rich's control segments) are made :func:`printable` first."""
    from rich.console import Console
    from rich.segment import Segment

    class RedactingConsole(Console):
        def _render_buffer(self, buffer: Iterable[Segment]) -> str:
            shown = (
                segment if segment.control else segment._replace(text=printable(segment.text))
                for segment in buffer
            )
            return redact(super()._render_buffer(shown))

        def on_broken_pipe(self) -> None:
            """The reader went away (``| head``): let the command line end quietly, as
            other tools do (rich's own answer would be exit 1, a policy violation here)."""
            raise BrokenPipeError

    return RedactingConsole


def plain(text: str, *, err: bool = False) -> None:
    """Print ``text`` as is (no markup) on stdout or stderr, through rich only if it is loaded."""
    name = _NAMES[err]
    made = globals().get(name)
    if made is not None:
        made.print(text, markup=False, emoji=False)
    else:
        print(redact(printable(text)), file=sys.stderr if err else sys.stdout, flush=True)


def file_console(file: IO[str], width: int) -> Console:
    """A console drawing into ``file`` (a report written to a file): no colour, ``width``
    columns, text made :func:`printable` and redacted as on stdout."""
    return _redacting_console()(file=file, width=width, no_color=True, highlight=False, emoji=False)
