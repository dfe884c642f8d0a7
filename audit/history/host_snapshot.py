"""Snapshot an interpreter on this machine: the in-image script, run and its output checked.

The same script (:data:`audit.history.snapshot.SCRIPT_PATH`) runs inside images; here it runs
under any local Python 3.9+ through :mod:`audit.host.process`, and what it printed is
parsed (a truncated or foreign document is refused) and sealed again.
"""

from __future__ import annotations

from audit.history.snapshot import SCRIPT_PATH, dump_snapshot, parse_snapshot
from audit.host import process


def take_snapshot(python: str) -> bytes:
    """Run the snapshot script with ``python``; verify and re-seal what it printed."""
    done = process.run(
        [python, str(SCRIPT_PATH)],
        hint=f"check that {python} is a Python >= 3.9 interpreter",
    )
    envs = parse_snapshot(done.stdout.encode("utf-8"), f"output of {python} {SCRIPT_PATH.name}")
    return dump_snapshot(envs)
