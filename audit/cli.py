"""``python -m audit``: the command line under the nox sessions, and the only error boundary.

Each subcommand lives in its own ``audit/cmd_*.py`` module exposing
``register(subparsers) -> None``, which adds a parser whose default ``handler`` takes the
parsed arguments and returns an exit code. Errors from :mod:`audit.errors` are caught here and
only here: printed as "error: what and where" plus "hint: what to do", never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rich.markup import escape

from audit import __version__, console
from audit.errors import EXIT_BAD_INPUT, AuditError

COMMAND_MODULES = (
    "audit.cmd_render",
    "audit.cmd_base_image",
    "audit.cmd_snapshot",
    "audit.cmd_diff",
    "audit.cmd_lock",
    "audit.cmd_audit_deps",
    "audit.cmd_gate",
    "audit.cmd_build",
)


class _Parser(argparse.ArgumentParser):
    """argparse that exits with the contract's bad-input code instead of printing usage twice."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        console.stderr.print(f"[bold red]error:[/] {escape(message)}")
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m audit", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def report_error(error: AuditError) -> None:
    console.stderr.print(f"[bold red]error:[/] {escape(error.message)}", markup=True)
    if error.hint:
        console.stderr.print(f"  [yellow]hint:[/] {escape(error.hint)}", markup=True)
    output = getattr(error, "output", "")
    if output:
        console.stderr.print(output.rstrip(), markup=False)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except AuditError as error:
        report_error(error)
        return error.exit_code
    except KeyboardInterrupt:
        console.stderr.print("interrupted")
        return 130
    return code
