"""The command a hint names: the one the user actually has.

In a nox project (a ``noxfile.py`` at the project root with the job's session, as this
repository and every ``layer-audit init`` project have) hints say ``nox -s lock -- IMAGE``;
everywhere else (the CLI installed alone, no project found) they say ``layer-audit lock IMAGE``.
:func:`command` is the one place that decides; every hint that names a command calls it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from audit.errors import UsageError
from audit.project import paths

CLI = "layer-audit"
# CLI command -> the nox session that runs it, where the names differ
SESSIONS = {"build": "build-image", "import": "import-dockerfile"}


def command(name: str, args: str = "") -> str:
    """``layer-audit NAME ARGS`` as the user runs it here: ``nox -s SESSION -- ARGS`` when the
    project's noxfile has that session, else the console script."""
    session = SESSIONS.get(name, name)
    if session in nox_sessions(_project_root()):
        return f"nox -s {session}" + (f" -- {args}" if args else "")
    return f"{CLI} {name}" + (f" {args}" if args else "")


_roots: list[Path] = []  # at most one: the project a command names other than by --project


def use_root(folder: Path | None) -> None:
    """Decide by ``folder``'s noxfile (the gate's ``--repo``); None: the project around us."""
    _roots.clear()
    _roots.extend([folder] if folder is not None else [])


def _project_root() -> Path | None:
    if _roots:
        return _roots[0]
    try:
        return paths.find_root()
    except UsageError:
        return None


_DECORATED = re.compile(r"@nox\.session\(([^)]*)\)\s*\ndef (\w+)\(", re.MULTILINE)
_NAME = re.compile(r"""name\s*=\s*["']([\w.-]+)["']""")


def nox_sessions(root: Path | None) -> frozenset[str]:
    """The session names ``root/noxfile.py`` declares (empty without one)."""
    noxfile = (root or Path()) / "noxfile.py"
    try:
        stamp = noxfile.stat().st_mtime_ns
    except OSError:
        return frozenset()
    return _sessions(noxfile, stamp) if root is not None else frozenset()


@lru_cache(maxsize=8)
def _sessions(noxfile: Path, stamp: int) -> frozenset[str]:
    """The sessions of ``noxfile`` as it was at ``stamp`` (its mtime: the cache key)."""
    try:
        text = noxfile.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return frozenset()
    names = set()
    for arguments, function in _DECORATED.findall(text):
        named = _NAME.search(arguments)
        names.add(named.group(1) if named else function)
    return frozenset(names)
