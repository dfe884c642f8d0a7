"""``layer-audit`` (and ``python -m audit``): the command line, and the only error boundary.

:data:`COMMANDS` is the table of commands: each lives in its own ``audit/cli/<name>.py``
module with ``HELP``, ``DESCRIPTION``, ``add_arguments(parser)`` and ``handle(args, context)
-> int`` (and ``NEEDS_PROJECT = False`` when it runs outside a project); :func:`build_parser`
makes every command's parser the same way from them. The handler builds the command's frozen
options, makes one call into the package that does the job, and returns an exit code; it gets
the command's :class:`~audit.cli.context.RunContext`, made here once. Errors from
:mod:`audit.errors` are caught here and only here: printed as "error: what and where" plus
"hint: what to do", never as a traceback. A reader that goes away (``| head``) ends the
command quietly with 141, as a process killed by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from audit import __version__
from audit.cli.context import RunContext
from audit.docker import endpoint as docker_endpoint
from audit.errors import EXIT_BAD_INPUT, AuditError
from audit.host import console
from audit.host.process import echoing
from audit.redact import redact

# Command name -> module. Only the module of the command being run is imported, so a quick
# command (``lock --check`` on unchanged inputs) does not pay for docker, jinja2 and the rest.
COMMANDS = {
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
EXIT_PIPE = 128 + 13  # what a shell reports for a process SIGPIPE ended
DOCKER_HOST_HELP = (
    "the Docker engine for every Docker call (tcp://HOST:2375, ssh://USER@HOST, unix:///PATH); "
    "default: $DOCKER_HOST, else the active docker context, else the local socket"
)
PROJECT_HELP = (
    "the project folder (the one holding images/); default: the nearest such folder at or "
    "above the working folder"
)
VERBOSE_HELP = "echo every program run ($ git …, $ docker …) on stderr"


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


def _wanted(argv: Sequence[str]) -> dict[str, str]:
    """The one command the command line names, or all of them (for help and for errors)."""
    words = [word for word in _without_globals(argv) if not word.startswith("-")]
    if words and words[0] in COMMANDS:
        return {words[0]: COMMANDS[words[0]]}
    return dict(COMMANDS)


GLOBAL_PAIRS = ("--project", "--docker-host")  # options taking a value, before the command


def _without_globals(argv: Sequence[str]) -> list[str]:
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


def _add_globals(parser: argparse.ArgumentParser, *, command: bool) -> None:
    """``--project``, ``--docker-host`` and ``-v``: before the command, or after it (then a
    command that was not given one leaves the top-level value alone: SUPPRESS)."""
    unset: object = argparse.SUPPRESS if command else None
    parser.add_argument("--project", metavar="DIR", type=Path, help=PROJECT_HELP, default=unset)
    parser.add_argument("--docker-host", metavar="URL", help=DOCKER_HOST_HELP, default=unset)
    verbose = argparse.SUPPRESS if command else False
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP, default=verbose)


def add_command(
    subparsers: argparse._SubParsersAction[_Parser], name: str, module: ModuleType
) -> None:
    """One command's parser, made alike for every command from its module."""
    parser = subparsers.add_parser(
        name, help=module.HELP, description=module.DESCRIPTION, epilog=EXIT_CODES
    )
    module.add_arguments(parser)
    _add_globals(parser, command=True)
    parser.set_defaults(handler=module.handle, needs_project=getattr(module, "NEEDS_PROJECT", True))


def build_parser(argv: Sequence[str] = (), prog: str = PROG) -> argparse.ArgumentParser:
    """The parser of ``prog``; the global options are accepted before or after the command."""
    from audit.project.docs import docs_line

    epilog = "; ".join(filter(None, (EXIT_CODES, docs_line())))
    parser = _Parser(prog=prog, description=DESCRIPTION, epilog=epilog, formatter_class=_Formatter)
    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {__version__}")
    _add_globals(parser, command=False)
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, module in _wanted(argv).items():
        add_command(subparsers, name, importlib.import_module(module))
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
        project = args.project if args.needs_project else None
        context = RunContext.of_command_line(
            project, docker_host=args.docker_host, verbose=args.verbose
        )
        docker_endpoint.use_host(context.docker_host)
        with echoing(context.verbose):
            code: int = args.handler(args, context)
    except AuditError as error:
        report_error(error)
        return error.exit_code
    except KeyboardInterrupt:
        console.stderr.print("interrupted")
        return 130
    except BrokenPipeError:
        return closed_pipe()
    finally:
        docker_endpoint.use_host(None)  # in-process callers (tests) start the next command afresh
    return code


def closed_pipe() -> int:
    """The reader of stdout went away: point stdout at /dev/null (so the interpreter's last
    flush finds nowhere to fail) and end as SIGPIPE would, without a word."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file (a test's capture): nothing to flush
        pass
    return EXIT_PIPE
