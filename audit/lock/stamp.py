"""A content-addressed "verified fresh" stamp: ``lock`` on unchanged inputs without the parsers.

A run that finds (or makes) locks fresh, and judges them clean under the recipe's policy,
records every observation its check made of the project tree through a :class:`RecordingSource`
(the sha256 of each file read, each existence test, each folder listing), the sha256 of the tool
code that ran (every loaded ``audit`` and ``packaging`` module), the interpreter, today's date
(waivers expire by it) and the answer per ``--stage``, in
``build/.layer-audit/lock-state/<image>.stamp``. The next run replays those observations with
sha256 and os only: when every one still holds, the full check would read the same bytes with
the same code and so must give the same answer. Any difference, a missing or malformed stamp,
or an option the stamp does not key (``--record-base``) sends the run down the full path, which
re-verifies everything and rewrites the stamp. A hand-edited lock is a changed digest, so the
full path sees it and refuses it.

``python -m audit`` reaches this module through the lock command's own parser before anything
else (see :mod:`audit.cli.entry`) and on a hit that is all the process runs, so it imports only
os, sys, time and the built-in sha256: os rather than pathlib, and a line format rather than
json (json brings re and enum: 3-4 ms on an interpreter whose site has not loaded them already).
The format, one record a line::

    layer-audit.lock-state/2
    python<TAB>sys.version<TAB>sys.executable
    today<TAB>YYYY-MM-DD<TAB>
    image<TAB>IMAGE<TAB>
    stage<TAB>STAGE (empty: every stage)<TAB>how many locks are fresh up to it
    read<TAB>project-relative path<TAB>sha256 hex
    exists<TAB>project-relative path<TAB>1 or 0
    listed<TAB>project-relative folder<TAB>its names joined by /
    code<TAB>module file<TAB>sha256 hex
    end
"""

# ruff: noqa: PTH103, PTH105, PTH109, PTH111, PTH107, PTH110, PTH112, PTH118, PTH120, PTH123, PTH208

from __future__ import annotations

import os
import sys

try:  # CPython's built-in SHA-256: hashlib loads OpenSSL first, ~3 ms on a 30 ms run
    import _sha256 as _sha  # type: ignore[import-not-found]
except ImportError:  # other interpreters, Python 3.12+: the same digests through hashlib
    import hashlib as _sha

TYPE_CHECKING = False  # typing itself costs import time this module exists to avoid
if TYPE_CHECKING:
    from audit.project.sources import Source

SCHEMA = "layer-audit.lock-state/2"
END = "end"
STATE_DIR = ("build", ".layer-audit", "lock-state")
CODE_PACKAGES = ("audit", "packaging")  # what decides freshness, besides the interpreter
KINDS = ("python", "today", "image", "stage", "read", "exists", "listed", "code")
ALL_STAGES = ""  # the stage key of a run without --stage

Stamp = dict[str, dict[str, str]]  # kind -> key -> value, as the lines say


def fresh_message(count: int, *, check: bool) -> str:
    """The answer of a run that found ``count`` locks fresh (the full path prints it too)."""
    return f"all {count} locks are fresh" + ("" if check else ": nothing to compile")


def stamp_path(root: str, image: str) -> str:
    return os.path.join(root, *STATE_DIR, f"{image}.stamp")


def _hex_sha256(data: bytes) -> str:
    digest: str = _sha.sha256(data).hexdigest()
    return digest


def _digest(path: str) -> str:
    with open(path, "rb") as handle:
        return _hex_sha256(handle.read())


def parse_stamp(text: str) -> Stamp | None:
    """The records of a stamp, or None unless it is whole and every line has its three fields."""
    lines = text.split("\n")
    if lines[:1] != [SCHEMA] or lines[-2:] != [END, ""]:
        return None
    stamp: Stamp = {kind: {} for kind in KINDS}
    for line in lines[1:-2]:
        fields = line.split("\t")
        if len(fields) != 3 or fields[0] not in stamp:
            return None
        stamp[fields[0]][fields[1]] = fields[2]
    return stamp


def render_stamp(stamp: Stamp) -> str | None:
    """The stamp's text; None when a field holds a tab or a line break (nothing to escape)."""
    fields = [(kind, key, value) for kind in KINDS for key, value in stamp[kind].items()]
    if any(_unsafe(text) for record in fields for text in record):
        return None
    lines = [SCHEMA, *("\t".join(record) for record in fields), END]
    return "\n".join(lines) + "\n"


def _unsafe(text: str) -> bool:
    return "\t" in text or "\n" in text or "\r" in text


# -- reading: the quick path ----------------------------------------------------------------


def project_root(folder: str | None) -> str | None:
    """``--project``'s folder, or the nearest folder at or above the working folder, holding
    ``images/`` (as :func:`audit.project.paths.find_root` decides); None: take the full path."""
    if folder is None:
        return _find_root()
    here = os.path.realpath(os.path.expanduser(folder)) if folder else ""
    return here if here and os.path.isdir(os.path.join(here, "images")) else None


def _find_root() -> str | None:
    here = os.path.realpath(os.getcwd())
    while True:
        if os.path.isdir(os.path.join(here, "images")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def fresh_answer(root: str, image: str, stage: str | None, *, check: bool) -> str | None:
    """The stamp's answer for this run when every observation it records still holds."""
    if not _plain_name(image) or stage == ALL_STAGES:
        return None
    stamp = _load(stamp_path(root, image))
    if stamp is None or stamp["image"] != {image: ""} or stamp["python"] != _interpreter():
        return None
    if stamp["today"] != _today():
        return None  # waivers expire by the day: the verdict may differ from yesterday's
    count = stamp["stage"].get(ALL_STAGES if stage is None else stage, "")
    if not count.isdigit() or not _still_holds(root, stamp):
        return None
    return fresh_message(int(count), check=check)


def _plain_name(image: str) -> bool:
    return bool(image) and image[0].isalnum() and "/" not in image and "\\" not in image


def _interpreter() -> dict[str, str]:
    """The interpreter's identity: its standard library (tomllib, json) decides freshness too."""
    return {sys.version.replace("\n", " "): sys.executable}


def _today() -> dict[str, str]:
    """Today's date (local, as ``date.today()``): the policy's waivers expire by it."""
    import time

    return {time.strftime("%Y-%m-%d", time.localtime()): ""}


def _load(path: str) -> Stamp | None:
    try:
        with open(path, "rb") as handle:
            return parse_stamp(handle.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError):
        return None  # absent or unreadable: the full path rewrites it


def _still_holds(root: str, stamp: Stamp) -> bool:
    """Every recorded observation gives the same result now (cheapest kinds first)."""
    return (
        all(_exists(root, path) == seen for path, seen in stamp["exists"].items())
        and all(_listing(root, path) == seen for path, seen in stamp["listed"].items())
        and all(_file_holds(os.path.join(root, p), d) for p, d in stamp["read"].items())
        and all(_file_holds(path, digest) for path, digest in stamp["code"].items())
    )


def _exists(root: str, relpath: str) -> str:
    return "1" if os.path.exists(os.path.join(root, relpath)) else "0"


def _listing(root: str, relpath: str) -> str:
    """What :meth:`audit.project.sources.DirectorySource.listdir` answers, as the stamp
    writes it."""
    folder = os.path.join(root, relpath)
    return "/".join(sorted(os.listdir(folder)) if os.path.isdir(folder) else [])


def _file_holds(path: str, digest: str) -> bool:
    try:
        return _digest(path) == digest
    except OSError:
        return False


# -- writing: after the full path found every lock fresh ------------------------------------


class RecordingSource:
    """A :class:`audit.project.sources.Source` that remembers what each of its answers was."""

    def __init__(self, inner: Source) -> None:
        self.inner = inner
        self.memo = inner.memo
        self.front = inner.front
        self.read: dict[str, str] = {}
        self.exists_seen: dict[str, bool] = {}
        self.listed: dict[str, list[str]] = {}
        self.complete = True  # False once a read failed: a failure is not replayed

    def read_bytes(self, relpath: str) -> bytes:
        try:
            data = self.inner.read_bytes(relpath)
        except BaseException:
            self.complete = False
            raise
        self.read[relpath] = _hex_sha256(data)
        return data

    def exists(self, relpath: str) -> bool:
        found = self.exists_seen[relpath] = self.inner.exists(relpath)
        return found

    def listdir(self, relpath: str) -> list[str]:
        names = self.listed[relpath] = list(self.inner.listdir(relpath))
        return names

    def describe(self, relpath: str) -> str:
        return self.inner.describe(relpath)


def write_stamp(
    root: str, image: str, source: RecordingSource, stages: list[tuple[str | None, int]]
) -> bool:
    """Record what ``source`` saw and the fresh answers; False when nothing was written.

    Best effort: the stamp only saves time, so a folder that cannot be written costs the next
    run its quick path, never this run its result.
    """
    if not source.complete or not stages or not _plain_name(image):
        return False
    stamp: Stamp = {
        "python": _interpreter(),
        "today": _today(),
        "image": {image: ""},
        "stage": {ALL_STAGES if stage is None else stage: str(n) for stage, n in stages},
        "read": source.read,
        "exists": {path: "1" if seen else "0" for path, seen in source.exists_seen.items()},
        "listed": {path: "/".join(names) for path, names in source.listed.items()},
        "code": _code_digests(),
    }
    text = render_stamp(stamp)
    return text is not None and _replace(stamp_path(root, image), text.encode())


def _code_digests() -> dict[str, str]:
    """sha256 of the source of every loaded module of the packages that decide freshness."""
    files = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.partition(".")[0] in CODE_PACKAGES and isinstance(path, str):
            files.add(path)
    return {path: _digest(path) for path in sorted(files)}


def _replace(path: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` by rename (readers see the old stamp or the new, whole)."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        if _same_bytes(path, data):
            return False
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except OSError:
        _remove(temporary)
        return False
    return True


def _same_bytes(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read() == data
    except OSError:
        return False


def _remove(path: str) -> None:
    import contextlib

    with contextlib.suppress(OSError):  # never created, or already gone
        os.remove(path)
