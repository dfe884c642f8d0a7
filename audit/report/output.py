"""Writing a report where the user asked: atomically to a file, or to the terminal."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from audit.host import atomic
from audit.report.findings import Report, print_report, render_text


def write_report(report: Report, fmt: str, output: Path | None, console: Console) -> None:
    """Print the report to ``console`` or write it atomically to ``output``."""
    if output is not None:  # callers check_output() before their work, atomic the rest
        atomic.write_text(output, render_text(report, fmt))
    elif fmt == "terminal":
        print_report(report, console)
    else:
        console.print(
            render_text(report, fmt), markup=False, highlight=False, end="", soft_wrap=True
        )
