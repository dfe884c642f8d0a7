"""``docs/commands.md`` is what the argument parser says, generated (``nox -s docs``)."""

from __future__ import annotations

from pathlib import Path

from audit.cli.main import COMMANDS, PROG, build_parser
from audit.cli.reference import reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "commands.md"


def test_the_command_reference_is_fresh() -> None:
    """Fails until ``python -m audit.cli.reference docs/commands.md`` is run after an option
    changes."""
    assert DOC.read_text(encoding="utf-8") == reference(build_parser(prog=PROG))


def test_every_command_and_its_report_options_are_documented() -> None:
    text = reference(build_parser(prog=PROG))
    for name in COMMANDS:
        assert f"## `{PROG} {name}`" in text
    gate = text.split(f"## `{PROG} gate`")[1].split("## ")[0]
    assert "`--format {terminal,json,markdown,html}`" in gate  # one convention, the new names
    assert "`--output FILE`" in gate and "`--markdown FILE`" not in gate  # the old: hidden
