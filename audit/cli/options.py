"""Options several commands share, worded alike; argparse only, so the quick path can use them.

Every command that writes a report takes ``--format`` (the same names everywhere: terminal,
json, markdown, html where they apply) and ``--output FILE`` (default: stdout). The gate writes
several reports from one read of two commits: its ``--format``/``--output`` may be repeated, the
n-th ``--output`` taking the n-th ``--format``, and one ``--format`` more than outputs goes to
stdout. Nothing below ``audit/cli`` defines or reads command-line options: the engines and the
plan take typed values, never an ``argparse.Namespace`` or a parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

# audit.docker.host.DOCKER_ENV (not imported: this module stays argparse-only)
DOCKER_ENV = "LAYER_AUDIT_DOCKER"
TERMINAL = "terminal"
JSON = "json"
MARKDOWN = "markdown"
HTML = "html"
# the old name of the terminal report (gate, audit-deps, diff, render, build: table; lock:
# text), accepted for one release with a warning
OLD_TABLE = {"table": TERMINAL}
OLD_TEXT = {"text": TERMINAL}


def add_client_option(parser: argparse.ArgumentParser) -> None:
    """The ``--docker PATH`` option of every command that runs a docker client."""
    parser.add_argument(
        "--docker",
        metavar="PATH",
        help=f"the docker client program, a path or a name (default: ${DOCKER_ENV}, else detected)",
    )


def add_report_arguments(
    parser: argparse.ArgumentParser,
    formats: Sequence[str],
    *,
    what: str = "the report",
    several: bool = False,
    old_names: Mapping[str, str] = OLD_TABLE,
) -> None:
    """``--format`` and ``--output FILE``, worded alike for every command that writes a report
    (``formats`` the ones this command writes, terminal first: the default; ``old_names`` the
    deprecated names it still reads)."""
    shown = "{" + ",".join(formats) + "}"
    again = "; repeat --format/--output to write several, the n-th file in the n-th format"
    again = again if several else ""
    parser.add_argument(
        "--format",
        dest="formats",
        action="append",
        type=_format_name(formats, old_names),
        choices=formats,
        metavar=shown,
        help=f"the format of {what} (default: {formats[0]}){again}",
    )
    parser.add_argument(
        "--output",
        dest="outputs",
        action="append",
        type=Path,
        metavar="FILE",
        help=f"write {what} to FILE (atomically) instead of stdout",
    )


class Renamed(str):
    """A deprecated format name given on the command line, read as its new name (``old``
    keeps what was written, for the warning)."""

    old: str = ""


def _format_name(formats: Sequence[str], old_names: Mapping[str, str]) -> Callable[[str], str]:
    """argparse's ``type`` for ``--format``: a deprecated name becomes its new one (so the
    choices, the help and the completion name only the new ones)."""

    def read(text: str) -> str:
        new = old_names.get(text)
        if new is None or new not in formats:
            return text
        renamed = Renamed(new)
        renamed.old = text
        return renamed

    return read
