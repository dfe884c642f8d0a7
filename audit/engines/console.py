"""The two rich consoles: results on stdout, progress and diagnostics on stderr.

Both are made on first use (``console.stdout``), not at import: rich costs more to import than
a quick command (``lock`` on unchanged inputs) takes to run, so :func:`plain` prints a line
without loading rich at all while no console exists yet.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    stdout: Console
    stderr: Console

_NAMES = ("stdout", "stderr")


def __getattr__(name: str) -> Console:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    made = Console(stderr=name == "stderr", highlight=False, soft_wrap=True)
    globals()[name] = made  # later look-ups find the attribute and skip this function
    return made


def plain(text: str, *, err: bool = False) -> None:
    """Print ``text`` as is (no markup) on stdout or stderr, through rich only if it is loaded."""
    name = _NAMES[err]
    made = globals().get(name)
    if made is not None:
        made.print(text, markup=False, emoji=False)
    else:
        print(text, file=sys.stderr if err else sys.stdout, flush=True)
