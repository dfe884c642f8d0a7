"""``lock IMAGE`` on unchanged inputs, answered from its stamp by the lock command's own parser.

:func:`quick_exit` parses with :func:`audit.cli.lock.add_arguments` (argparse only: one grammar
for both paths) and asks :func:`audit.lock.stamp.fresh_answer`; a hit is all the process
runs. Anything argparse would refuse, and every run that asks for work, takes the full path.
"""

from __future__ import annotations

import argparse

from audit.cli.lock import add_arguments

TYPE_CHECKING = False  # typing costs import time this path exists to avoid
if TYPE_CHECKING:
    from typing import Any


class _Miss(Exception):
    """The command line is not one the quick path answers (argparse would say why)."""


class _QuietParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise _Miss(message)


def quick_exit(argv: list[str]) -> int | None:
    """Answer ``lock IMAGE …`` from its stamp (exit 0), or None: take the full path.

    Only command lines that ask for no work are answered: no base recording, no upgrade, no
    other resolver, text output; anything argparse would refuse is left to the full parser.
    """
    argv, project = _peel_project(argv)
    if argv[:1] != ["lock"]:
        return None
    parser = _QuietParser(prog="lock", add_help=False)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv[1:])
    except _Miss:
        return None
    if args.record_base or args.upgrade or args.upgrade_package or args.resolver:
        return None
    if args.outputs or args.formats not in (None, ["terminal"]):  # a report, or an old name
        return None
    return _stamp_answer(args, project)


def _stamp_answer(args: argparse.Namespace, project: str | None) -> int | None:
    from audit.lock.stamp import fresh_answer, project_root

    root = project_root(project)
    answer = None if root is None else fresh_answer(root, args.image, args.stage, check=args.check)
    if answer is None:
        return None
    print(answer, flush=True)
    return 0


def _peel_project(argv: list[str]) -> tuple[list[str], str | None]:
    """``argv`` without its one leading ``--project DIR`` (or ``--project=DIR``), and DIR."""
    for index, word in enumerate(argv):
        if word == "--project" and index + 1 < len(argv):
            return argv[:index] + argv[index + 2 :], argv[index + 1]
        if word.startswith("--project="):
            return argv[:index] + argv[index + 1 :], word.partition("=")[2]
    return argv, None
