"""The body of a lock: pip requirements lines, each pinned with ``==`` and carrying ``--hash``.

One reader for everyone: the host (``audit.lock.files``: lock, audit-deps, the gate) and the
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

from audit.history.snapshot import canonical_name

COMMENT = re.compile(r"(^|\s+)#.*$")
_HASH = re.compile(r"^--hash=(?P<algo>sha256|sha384|sha512):(?P<hex>[0-9a-f]+)$")
# The shape pip-compile writes; anything else (extras, markers, ===) goes to packaging's parser.
_SIMPLE_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==(?P<version>[A-Za-z0-9.+!_-]+)$"
)


_RELEASE_ONLY = re.compile(r"[0-9]+(?:\.[0-9]+)*$")
_NOT_A_BREAK = r"[^\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]"  # what splitlines keeps in a line
# One pin block of pip-compile's layout, or a run of whole-line comments and blank lines.
_LAYOUT = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==(?P<version>[0-9]+(?:\.[0-9]+)*)"
    r"(?P<hashes>(?: \\\n[ \t]+--hash=sha256:[0-9a-f]+)+)\n"
    rf"|(?:[ \t]*(?:#{_NOT_A_BREAK}*)?\n)+"
)
_LAYOUT_HASH = re.compile(r"--hash=(sha256:[0-9a-f]+)")


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
        comment = raw.lstrip().startswith("#")  # what COMMENT.match(raw) finds, cheaper
        if comment and not pieces:  # a whole-line comment ends nothing and holds nothing
            start = 0
            continue
        if raw.endswith("\\") and not comment:
            pieces.append(raw[:-1])
            continue
        pieces.append(" " + raw if comment else raw)
        line = _uncommented("".join(pieces))
        if line:
            yield start, line
        start, pieces = 0, []
    line = _uncommented("".join(pieces))
    if line:
        yield start, line


def _uncommented(line: str) -> str:
    """``line`` without its comment, stripped (no ``#``, no comment: the regex is skipped)."""
    return (COMMENT.sub("", line) if "#" in line else line).strip()


def _simple(requirement: str) -> tuple[str, str] | None:
    match = _SIMPLE_PIN.match(requirement)
    if match is None:
        return None
    version = match["version"]
    if not _RELEASE_ONLY.match(version):  # 1.26.4 is valid PEP 440: only others are parsed
        from packaging.version import InvalidVersion, Version

        try:
            Version(version)
        except InvalidVersion:
            return None  # the full parser says precisely what is wrong
    return canonical_name(match["name"]), version


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


_OPTION = re.compile(r"\s+--")  # an option starts after any whitespace (pip: a tab too)


def parse_pin(line: str) -> Pin:
    """One logical line, ``name==version [; marker] --hash=...``; :class:`LockFormatError`."""
    words = _OPTION.split(line)
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
    fast = _layout_pins(text)
    return fast if fast is not None else _line_pins(text)


def _layout_pins(text: str) -> dict[str, Pin] | None:
    """The pins of a body in exactly the layout pip-compile and uv write (``name==1.2 \\`` then
    ``    --hash=sha256:...`` lines; whole-line comments; blank lines), read block by block; None
    as soon as anything else shows up, and :func:`_line_pins` reads it (and names the line).

    Same result as :func:`_line_pins` on every text it accepts: a release-only version needs no
    parsing, and no other line break than LF is accepted (``splitlines`` splits on more).
    """
    pins: dict[str, Pin] = {}
    position, end = 0, len(text)
    while position < end:
        match = _LAYOUT.match(text, position)
        if match is None:
            return None
        position = match.end()
        if match["name"] is None:
            continue
        name = canonical_name(match["name"])
        if name in pins:
            return None
        pins[name] = Pin(name, match["version"], tuple(_LAYOUT_HASH.findall(match["hashes"])))
    return pins


def _line_pins(text: str) -> dict[str, Pin]:
    """:func:`parse_pins` for any text, one logical line at a time."""
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
