"""``python -m audit snapshot``: record the environment of an interpreter on this machine."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit.core.snapshot import SCRIPT_PATH, dump_snapshot, parse_snapshot
from audit.engines import atomic, console
from audit.engines import process as commands
from audit.plan.report import check_output


@dataclass(frozen=True)
class SnapshotOptions:
    python: str
    output: Path | None


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "snapshot",
        help="record the distributions an interpreter sees (JSON)",
        description="Record every distribution an interpreter on this machine sees, as sealed "
        "JSON (schema layer-audit.snapshot/1).",
    )
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
    parser.set_defaults(handler=run)


def take_snapshot(python: str) -> bytes:
    """Run the in-image script with ``python``; verify and re-seal what it printed."""
    done = commands.run(
        [python, str(SCRIPT_PATH)],
        hint=f"check that {python} is a Python >= 3.9 interpreter",
    )
    envs = parse_snapshot(done.stdout.encode("utf-8"), f"output of {python} {SCRIPT_PATH.name}")
    return dump_snapshot(envs)


def run(args: argparse.Namespace) -> int:
    options = SnapshotOptions(python=args.python, output=args.output)
    check_output(options.output)
    data = take_snapshot(options.python)
    if options.output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        atomic.write_bytes(options.output, data)
        console.stderr.print(f"wrote {options.output}")
    return 0
