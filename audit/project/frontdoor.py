"""The command a hint names: the one the user actually has.

In a nox project (a ``noxfile.py`` at the project root with the job's session, as this
repository and every ``layer-audit init`` project have) hints say ``nox -s lock -- IMAGE``;
everywhere else (the CLI installed alone, no project found) they say ``layer-audit lock IMAGE``.
A :class:`FrontDoor` is that decision for one project, read once from its noxfile; the sources
of a project carry theirs (``Source.front``) and every hint that names a command asks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

CLI = "layer-audit"
# CLI command -> the nox session that runs it, where the names differ
SESSIONS = {"build": "build-image", "import": "import-dockerfile"}


@dataclass(frozen=True)
class FrontDoor:
    """The front door of the project at ``root`` (None: no project, the console script). Its
    noxfile is read on the first hint made, never before (a run that names no command reads
    nothing more than its own inputs)."""

    root: Path | None = None

    def command(self, name: str, args: str = "") -> str:
        """``layer-audit NAME ARGS`` as the user runs it here: ``nox -s SESSION -- ARGS`` when
        the project's noxfile has that session, else the console script."""
        session = SESSIONS.get(name, name)
        if session in self.sessions:
            return f"nox -s {session}" + (f" -- {args}" if args else "")
        return f"{CLI} {name}" + (f" {args}" if args else "")

    @cached_property
    def sessions(self) -> frozenset[str]:
        return nox_sessions(self.root)

    @classmethod
    def of(cls, root: Path | None) -> FrontDoor:
        """The front door of the project at ``root``."""
        return cls(root)


CONSOLE_SCRIPT = FrontDoor()  # no project, or one without a noxfile

_DECORATED = re.compile(r"@nox\.session\(([^)]*)\)\s*\ndef (\w+)\(", re.MULTILINE)
_NAME = re.compile(r"""name\s*=\s*["']([\w.-]+)["']""")


def nox_sessions(root: Path | None) -> frozenset[str]:
    """The session names ``root/noxfile.py`` declares (empty without one)."""
    if root is None:
        return frozenset()
    try:
        text = (root / "noxfile.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return frozenset()
    names = set()
    for arguments, function in _DECORATED.findall(text):
        named = _NAME.search(arguments)
        names.add(named.group(1) if named else function)
    return frozenset(names)
