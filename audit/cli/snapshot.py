"""``python -m audit snapshot``: record the environment of an interpreter on this machine."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from audit.cli.context import RunContext
from audit.cli.output import check_output
from audit.errors import EXIT_OK
from audit.history.host_snapshot import take_snapshot
from audit.host import atomic, console


@dataclass(frozen=True)
class SnapshotOptions:
    """The command line, parsed and checked once (an unwritable --output: exit 2)."""

    python: str
    output: Path | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SnapshotOptions:
        check_output(args.output)  # before running anything
        return cls(python=args.python, output=args.output)


HELP = "record the distributions an interpreter sees (JSON)"
DESCRIPTION = (
    "Record every distribution an interpreter on this machine sees, as sealed JSON (schema "
    "layer-audit.snapshot/1)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--python",
        metavar="PATH",
        default=sys.executable,
        help="the interpreter to snapshot (default: the one running this command)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the snapshot to FILE (atomically) instead of stdout",
    )


def handle(args: argparse.Namespace, context: RunContext) -> int:
    options = SnapshotOptions.from_args(args)
    data = take_snapshot(options.python)
    if options.output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        atomic.write_bytes(options.output, data)
        console.stderr.print(f"wrote {options.output}")
    return EXIT_OK
