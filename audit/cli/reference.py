"""``docs/commands.md``: the command reference, generated from the argument parser.

``python -m audit.cli.reference docs/commands.md`` (or ``nox -s docs``) writes it;
``tests/test_command_reference.py`` fails while the file is not what the parser says, so a new
option is documented by running it. The text depends on the parser alone (usage lines are
wrapped at a fixed width, not the terminal's): the same parser gives the same bytes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from audit.cli.main import COMMANDS, PROG, build_parser

WIDTH = 100
GLOBAL = ("--project", "--docker-host", "-v", "-h")  # documented once, at the top
TITLE = "# Command reference"
LEAD = (
    "Generated from the argument parser by `python -m audit.cli.reference docs/commands.md` "
    "(or `nox -s docs`); `tests/test_command_reference.py` fails when it is stale. Every "
    "command is also a nox session (`nox -s <session> -- ARGS`)."
)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    choices = "{" + ",".join(map(str, action.choices)) + "}" if action.choices else None
    value = "" if action.nargs == 0 else f" {action.metavar or choices or action.dest.upper()}"
    return ", ".join(f"`{option}{value}`" for option in action.option_strings)


def _arguments(parser: argparse.ArgumentParser, *, skip: tuple[str, ...]) -> list[str]:
    rows = ["| argument | meaning |", "| --- | --- |"]
    for action in parser._actions:
        shown = action.help is not argparse.SUPPRESS and not isinstance(
            action, argparse._SubParsersAction
        )
        if shown and not set(action.option_strings) & set(skip):
            rows.append(f"| {_name(action)} | {_cell(str(action.help or ''))} |")
    return rows


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def reference(parser: argparse.ArgumentParser) -> str:
    """The whole page for ``parser`` (the top-level one, with its commands)."""
    lines = [TITLE, "", LEAD, "", f"```\n{_usage(parser)}\n```", ""]
    lines += [*_arguments(parser, skip=("-h",)), ""]
    commands = _subcommands(parser)
    for name in COMMANDS:
        command = commands[name]
        lines += [f"## `{PROG} {name}`", "", _cell(command.description or ""), ""]
        lines += [f"```\n{_usage(command)}\n```", ""]
        lines += [*_arguments(command, skip=GLOBAL), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the reference to the file named (``-``: stdout)."""
    target = (argv if argv is not None else sys.argv[1:]) or ["-"]
    text = reference(build_parser(prog=PROG))
    if target[0] == "-":
        sys.stdout.write(text)
    else:
        Path(target[0]).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
