"""The ``layer-audit`` console script and ``python -m audit``: the quick path, then the parser.

``lock`` on unchanged inputs is answered from its verified-fresh stamp after only the lock
command's own parser has read the command line (:func:`audit.cli.lock_quick.quick_exit`: argparse,
then :mod:`audit.lock.stamp`, which imports os, sys and sha256); every other run, and
every miss, goes through :mod:`audit.cli.main`. Nothing heavier is imported here.
"""

from __future__ import annotations

import sys


def run(prog: str) -> int:
    """The exit code of the command line in ``sys.argv``, shown to the user as ``prog``."""
    from audit.cli.lock_quick import quick_exit

    code = quick_exit(sys.argv[1:])
    if code is not None:
        return code
    from audit.cli.main import main as full_main

    return full_main(prog=prog)


def main() -> int:
    """``layer-audit ARGS``: the console script's entry point."""
    return run("layer-audit")
