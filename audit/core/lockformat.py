"""The body of a lock: pip requirements lines, each pinned with ``==`` and carrying ``--hash``.

One reader for everyone: the host (``audit.plan.lockfile``: lock, audit-deps, the gate) and the
build guard inside images read a lock's lines through :func:`parse_pins`, so they cannot
disagree about what a lock pins. Line rules are pip's (``pip._internal.req.req_file``): a ``#``
at the start of a line or after whitespace starts a comment, a comment line never continues,
and a trailing backslash joins the next line.

Python 3.9-clean, standard library plus ``packaging`` (imported only when a line is not the
plain ``name==version`` that pip-compile writes): this module is vendored into build contexts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from audit.core.snapshot import canonical_name

COMMENT = re.compile(r"(^|\s+)#.*$")
_HASH = re.compile(r"^--hash=(?P<algo>sha256|sha384|sha512):(?P<hex>[0-9a-f]+)$")
# The shape pip-compile writes; anything else (extras, markers, ===) goes to packaging's parser.
_SIMPLE_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==(?P<version>[A-Za-z0-9.+!_-]+)$"
)


class LockFormatError(ValueError):
    """A line that is not a hash-pinned requirement; the message names the line."""


@dataclass(frozen=True)
class Pin:
    """One line of a lock: canonical name (PEP 503), exact version, hashes, optional marker."""

    name: str
    version: str
    hashes: tuple[str, ...]  # "sha256:<hex>", as pip's --hash takes them
    marker: str | None = None

    def applies(self, environment: Mapping[str, str]) -> bool:
        """Whether the pin is for an interpreter with these PEP 508 markers."""
        if self.marker is None:
            return True
        from packaging.markers import Marker

        return bool(Marker(self.marker).evaluate(dict(environment)))


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, text without comments) of each non-empty logical line."""
    start = 0
    pieces: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        start = start or number
        if raw.endswith("\\") and not COMMENT.match(raw):
            pieces.append(raw[:-1])
            continue
        pieces.append(" " + raw if COMMENT.match(raw) else raw)
        line = COMMENT.sub("", "".join(pieces)).strip()
        if line:
            yield start, line
        start, pieces = 0, []
    line = COMMENT.sub("", "".join(pieces)).strip()
    if line:
        yield start, line


def _simple(requirement: str) -> tuple[str, str] | None:
    match = _SIMPLE_PIN.match(requirement)
    if match is None:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        Version(match["version"])
    except InvalidVersion:
        return None  # the full parser says precisely what is wrong
    return canonical_name(match["name"]), match["version"]


def _full(requirement: str) -> tuple[str, str, str | None]:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        parsed = Requirement(requirement)
    except InvalidRequirement as exc:
        raise LockFormatError(f"not a requirement: {exc}") from exc
    specs = list(parsed.specifier)
    pinned = len(specs) == 1 and specs[0].operator in ("==", "===")
    if not pinned or specs[0].version.endswith(".*") or parsed.url:
        raise LockFormatError(f"{parsed.name}: not pinned with == to one version")
    marker = str(parsed.marker) if parsed.marker else None
    return canonical_name(parsed.name), specs[0].version, marker


def parse_pin(line: str) -> Pin:
    """One logical line, ``name==version [; marker] --hash=...``; :class:`LockFormatError`."""
    words = line.split(" --")
    simple = _simple(words[0].strip())
    name, version, marker = (*simple, None) if simple else _full(words[0].strip())
    hashes = []
    for option in words[1:]:
        match = _HASH.match("--" + option.strip())
        if match is None:
            raise LockFormatError(f"{name}: unexpected option --{option.strip()}")
        hashes.append(f"{match['algo']}:{match['hex']}")
    if not hashes:
        raise LockFormatError(f"{name}: no --hash (locks are compiled with hashes)")
    return Pin(name, version, tuple(hashes), marker)


def parse_pins(text: str) -> dict[str, Pin]:
    """Canonical name -> pin for every line; a bad or repeated line is :class:`LockFormatError`
    whose message starts with ``line N:``."""
    pins: dict[str, Pin] = {}
    for number, line in logical_lines(text):
        try:
            pin = parse_pin(line)
        except LockFormatError as exc:
            raise LockFormatError(f"line {number}: {exc}") from exc
        if pin.name in pins:
            raise LockFormatError(f"line {number}: {pin.name} pinned twice")
        pins[pin.name] = pin
    return pins
