"""Where a command's report goes: stdout, or ``--output FILE`` (written atomically).

:func:`command_reports` reads ``--format``/``--output`` (:mod:`audit.cli.options`) once,
refuses a file that cannot be written before any work is done, warns about deprecated
spellings, and hands back :class:`Output`: the format and the one place its text or its
terminal drawing goes.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING

from audit.cli.options import Renamed
from audit.errors import UsageError
from audit.host import atomic, console
from audit.redact import printable

if TYPE_CHECKING:
    from rich.console import RenderableType

FILE_WIDTH = 100  # a terminal report written to a file: no colour, this wide


@dataclass(frozen=True)
class Reports:
    """Where a command's reports go: ``stdout``'s format (None: nothing on stdout) and each
    file with its format, in command-line order; ``renamed`` lists deprecated names used."""

    stdout: str | None
    files: tuple[tuple[str, Path], ...]
    renamed: tuple[tuple[str, str], ...] = ()  # (old name, new name) of each deprecated one


def reports_of(args: argparse.Namespace, default: str, *, several: bool = False) -> Reports:
    """The reports a parsed command line asks for (see :mod:`audit.cli.options`); exit 2
    when it asks for more than the command writes or pairs them ambiguously."""
    given = list(getattr(args, "formats", None) or [])
    outputs = list(getattr(args, "outputs", None) or [])
    renamed = tuple((name.old, str(name)) for name in given if isinstance(name, Renamed))
    formats = [str(name) for name in given]
    if not several and (len(formats) > 1 or len(outputs) > 1):
        raise UsageError("--format and --output are given once (this command writes one report)")
    if len(formats) > len(outputs) + 1:
        raise UsageError(
            f"{len(formats)} --format for {len(outputs)} --output: each --output takes the "
            "--format of its turn, and one more --format goes to stdout"
        )
    paired = formats[: len(outputs)] + [default] * (len(outputs) - len(formats))
    files = tuple(zip(paired, outputs, strict=True))
    if len(formats) > len(outputs):
        stdout: str | None = formats[-1]
    else:
        stdout = None if outputs else default
    return Reports(stdout, files, renamed)


def deprecation_notes(reports: Reports, *, old_options: Sequence[str] = ()) -> list[str]:
    """One warning per deprecated spelling the command line used (printed on stderr)."""
    notes = [
        f"--format {old} is deprecated: write --format {new} (the old name goes in the next "
        "release)"
        for old, new in dict.fromkeys(reports.renamed)
    ]
    notes += [
        f"{option} FILE is deprecated: write --format {option.removeprefix('--')} --output FILE "
        "(add --format terminal to keep the table on stdout; the old option goes in the next "
        "release)"
        for option in dict.fromkeys(old_options)
    ]
    return notes


@dataclass(frozen=True)
class Output:
    """One report: its format and where it goes (``path`` None: stdout)."""

    fmt: str
    path: Path | None = None

    def write(self, text: str) -> None:
        """``text`` as it is, but for control characters (made :func:`printable`, as on
        stdout): atomically into the file, or on stdout."""
        if self.path is not None:
            atomic.write_text(self.path, printable(text))
        else:
            console.stdout.print(text, markup=False, highlight=False, end="", soft_wrap=True)

    def print(self, *items: RenderableType) -> None:
        """Rich items (tables, markup lines): drawn on stdout, or into the file without colour
        at :data:`FILE_WIDTH` columns."""
        if self.path is None:
            for item in items:
                console.stdout.print(item)
            return
        buffer = StringIO()
        drawn = console.file_console(buffer, FILE_WIDTH)
        for item in items:
            drawn.print(item)
        atomic.write_text(self.path, buffer.getvalue())


def checked_reports(
    args: argparse.Namespace,
    default: str,
    *,
    several: bool = False,
    old_options: Sequence[str] = (),
) -> Reports:
    """The reports the command line asks for, every file checked writable (exit 2 before any
    work) and every deprecated spelling warned about on stderr."""
    reports = reports_of(args, default, several=several)
    for _, path in reports.files:
        check_output(path)
    for note in deprecation_notes(reports, old_options=old_options):
        console.stderr.print(f"[yellow]warning:[/] {note}", emoji=False)
    return reports


def command_reports(
    args: argparse.Namespace, formats: Sequence[str], *, file_formats: Sequence[str] = ()
) -> Output:
    """The one report of a command that writes one (``formats[0]``: the default);
    ``file_formats``, when given, are the only ones ``--output`` takes (a command whose
    terminal form is its progress, printed as it goes, has no terminal report to keep)."""
    reports = checked_reports(args, formats[0])
    if not reports.files:
        return Output(reports.stdout or formats[0])
    fmt, path = reports.files[0]
    if file_formats and fmt not in file_formats:
        raise UsageError(
            f"--output {path}: the {fmt} form is not a report to keep",
            f"add --format {file_formats[0]}",
        )
    return Output(fmt, path)


def check_output(output: Path | None, option: str = "--output") -> None:
    """Refuse an output path that cannot become a file, before any work is done."""
    if output is None:
        return
    if output.is_dir():
        raise UsageError(f"{option} {output}: is a directory", "name a file to write")
    parent = next((p for p in output.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise UsageError(f"{option} {output}: {parent} is not a directory", "name a file to write")
