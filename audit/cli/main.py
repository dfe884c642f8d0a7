"""``layer-audit`` (and ``python -m audit``): the command line, and the only error boundary.

Each subcommand lives in its own ``audit/cli/<name>.py`` module exposing
``register(subparsers) -> None``, which adds a parser whose default ``handler`` is the module's
``handle(args) -> int``: it builds the command's frozen options (``Options.from_args(args)``),
makes one call into :mod:`audit.plan` or :mod:`audit.engines`, and returns an exit code.
Errors from :mod:`audit.errors` are caught here and only here: printed as "error: what
and where" plus "hint: what to do", never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from audit import __version__
from audit.docker import endpoint as docker_endpoint
from audit.errors import EXIT_BAD_INPUT, AuditError
from audit.host import console
from audit.project import paths
from audit.redact import redact

# Command name -> module. Only the module of the command being run is imported, so a quick
# command (``lock --check`` on unchanged inputs) does not pay for docker, jinja2 and the rest.
COMMAND_MODULES = {
    "render": "audit.cli.render",
    "base-image": "audit.cli.base_image",
    "snapshot": "audit.cli.snapshot",
    "diff": "audit.cli.diff",
    "lock": "audit.cli.lock",
    "audit-deps": "audit.cli.audit_deps",
    "gate": "audit.cli.gate",
    "build": "audit.cli.build",
    "init": "audit.cli.init",
    "import": "audit.cli.import_dockerfile",
    "export": "audit.cli.export",
    "completion": "audit.cli.completion",
    "pr-comment": "audit.cli.pr_comment",
}
PROG = "layer-audit"
DOCKER_HOST_HELP = (
    "the Docker engine for every Docker call (tcp://HOST:2375, ssh://USER@HOST, unix:///PATH); "
    "default: $DOCKER_HOST, else the active docker context, else the local socket"
)
PROJECT_HELP = (
    "the project folder (the one holding images/); default: the nearest such folder at or "
    "above the working folder"
)


DESCRIPTION = (
    "layer-audit: render, lock, audit and build container images whose pip layers cannot "
    "silently downgrade what an earlier layer installed. Each command is also a nox session."
)
EXIT_CODES = (
    "exit codes: 0 clean, 1 policy violation (or a stale lock), 2 bad input (recipe, lock, "
    "snapshot, arguments), 3 environment (Docker, git, network, disk)"
)


class _Formatter(argparse.HelpFormatter):
    """argparse's, except that a paragraph never breaks a path at a hyphen or inside a word."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(
            " ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
            break_on_hyphens=False, break_long_words=False,
        )  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """argparse that exits with the contract's bad-input code instead of printing usage twice."""

    def error(self, message: str) -> None:  # type: ignore[override]
        from rich.markup import escape

        self.print_usage(sys.stderr)
        console.stderr.print(f"[bold red]error:[/] {escape(redact(message))}", emoji=False)
        raise SystemExit(EXIT_BAD_INPUT)


def _wanted_modules(argv: Sequence[str]) -> list[str]:
    """The one module the command line names, or all of them (for help and for errors)."""
    words = [word for word in _without_project(argv) if not word.startswith("-")]
    if words and words[0] in COMMAND_MODULES:
        return [COMMAND_MODULES[words[0]]]
    return list(COMMAND_MODULES.values())


GLOBAL_PAIRS = ("--project", "--docker-host")  # options taking a value, before the command


def _without_project(argv: Sequence[str]) -> list[str]:
    """``argv`` less its ``--project DIR`` and ``--docker-host URL`` pairs, so that neither
    value is ever taken for a command."""
    words: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in GLOBAL_PAIRS:
            skip = True
        else:
            words.append(word)
    return words


def build_parser(argv: Sequence[str] = (), prog: str = PROG) -> argparse.ArgumentParser:
    """The parser of ``prog``; ``--project DIR`` is accepted before or after the command."""
    from audit.project.docs import docs_line

    epilog = "; ".join(filter(None, (EXIT_CODES, docs_line())))
    parser = _Parser(prog=prog, description=DESCRIPTION, epilog=epilog, formatter_class=_Formatter)
    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--project", metavar="DIR", type=Path, help=PROJECT_HELP)
    parser.add_argument("--docker-host", metavar="URL", help=DOCKER_HOST_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in _wanted_modules(argv):
        importlib.import_module(name).register(subparsers)
    for command in subparsers.choices.values():
        command.epilog = command.epilog or EXIT_CODES  # one wording for every command's --help
        if not any("--project" in action.option_strings for action in command._actions):
            # SUPPRESS: a subcommand that was not given it leaves the top-level value alone
            command.add_argument(
                "--project", metavar="DIR", type=Path, default=argparse.SUPPRESS, help=PROJECT_HELP
            )
        command.add_argument(
            "--docker-host", metavar="URL", default=argparse.SUPPRESS, help=DOCKER_HOST_HELP
        )
    return parser


def report_error(error: AuditError) -> None:
    """Print an error and its hint: redacted (no URL userinfo, no token), markup escaped and
    no emoji codes, so the text the error carries is shown exactly, and only safely."""
    from rich.markup import escape  # here, not at the top: a clean quick run never loads rich

    message = escape(redact(error.message))
    console.stderr.print(f"[bold red]error:[/] {message}", markup=True, emoji=False)
    if error.hint:
        hint = escape(redact(error.hint))
        console.stderr.print(f"  [yellow]hint:[/] {hint}", markup=True, emoji=False)
    output = getattr(error, "output", "")
    if output:
        console.stderr.print(redact(output.rstrip()), markup=False, emoji=False)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run one command; every :class:`AuditError` becomes its message, hint and exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv, prog).parse_args(argv)
    try:
        if getattr(args, "needs_project", True):
            paths.use_project(args.project)
        docker_endpoint.use_host(getattr(args, "docker_host", None))
        code: int = args.handler(args)
    except AuditError as error:
        report_error(error)
        return error.exit_code
    except KeyboardInterrupt:
        console.stderr.print("interrupted")
        return 130
    finally:
        paths.use_project(None)  # in-process callers (tests) start the next command afresh
        docker_endpoint.use_host(None)
    return code
