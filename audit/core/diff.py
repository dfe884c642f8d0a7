"""What changed between two environments, and in which direction. Pure functions, no I/O.

PURE CORE: stdlib + ``packaging`` only, Python 3.9 syntax (the guard runs it inside images).
Both sides map canonical names to the distribution that wins the import (see
:meth:`audit.core.snapshot.Environment.winners`); versions are compared with ``packaging``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from audit.core.snapshot import Distribution, Environment

if TYPE_CHECKING:
    from packaging.version import Version

ADDED = "added"
REMOVED = "removed"
UPGRADED = "upgraded"
DOWNGRADED = "downgraded"
VARIANT = "variant"
REBUILT = "rebuilt"
SHADOWED = "shadowed"
UNPARSABLE = "unparsable"
KINDS = (DOWNGRADED, REMOVED, VARIANT, REBUILT, SHADOWED, UNPARSABLE, UPGRADED, ADDED)


@dataclass(frozen=True)
class Change:
    """One package's change. For ``shadowed``, ``after`` wins the import over ``before``."""

    kind: str
    name: str
    before: Distribution | None
    after: Distribution | None

    @property
    def message(self) -> str:
        return _MESSAGES[self.kind](self)


@lru_cache(maxsize=4096)
def parse_version(text: str) -> Version | None:
    """The PEP 440 version, or None when ``text`` is not one (reported, never crashed on).

    Remembered: a recipe's environments repeat the same few hundred versions, and a Version
    is never changed by its readers.
    """
    # Imported on first use: a guarded layer that changed nothing never needs it.
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def _same_version_kind(old: Distribution, new: Distribution) -> str | None:
    if old.digest and new.digest and old.digest != new.digest:
        return REBUILT
    return None


def compare(old: Distribution, new: Distribution) -> str | None:
    """The kind of change from ``old`` to ``new`` (same name), or None when unchanged: what
    :func:`diff` reports for one name installed on both sides."""
    if old.version == new.version:  # equal text, equal version: no need to parse either
        return _same_version_kind(old, new)
    old_version, new_version = parse_version(old.version), parse_version(new.version)
    if old_version is None or new_version is None:
        return UNPARSABLE
    if old_version.local != new_version.local and old_version.public == new_version.public:
        return VARIANT
    if new_version > old_version:
        return UPGRADED
    if new_version < old_version:
        return DOWNGRADED
    return _same_version_kind(old, new)


def _kind(old: Distribution | None, new: Distribution | None) -> str | None:
    if old is None:
        assert new is not None
        return UNPARSABLE if parse_version(new.version) is None else ADDED
    if new is None:
        return REMOVED
    return compare(old, new)


def diff(before: Mapping[str, Distribution], after: Mapping[str, Distribution]) -> list[Change]:
    """Every change from ``before`` to ``after``, sorted by canonical name."""
    changes = []
    # only a name that is not the same object (predicted environments share most of theirs)
    # and not at the same version and digest can change (inlined: it runs for every name)
    touched = [
        name
        for name, dist in after.items()
        if (old := before.get(name)) is not dist
        and (old is None or old.version != dist.version or old.digest != dist.digest)
    ]
    for name in sorted([*touched, *(name for name in before if name not in after)]):
        old, new = before.get(name), after.get(name)
        kind = _kind(old, new)
        if kind is not None:
            changes.append(Change(kind, name, old, new))
    return changes


def shadowed(env: Environment) -> list[Change]:
    """One change per copy hidden by an earlier copy of the same name on the path."""
    winners: dict[str, Distribution] = {}
    changes = []
    for dist in env.distributions:
        winner = winners.setdefault(dist.name, dist)
        if winner is not dist:
            changes.append(Change(SHADOWED, dist.name, dist, winner))
    return sorted(changes, key=lambda c: c.name)


def _where(dist: Distribution) -> str:
    return f"{dist.version} in {dist.location}" if dist.location else dist.version


def _pair(change: Change) -> str:
    old = change.before.version if change.before else "(none)"
    new = change.after.version if change.after else "(none)"
    return f"{old} -> {new}"


def _shadowed_message(change: Change) -> str:
    assert change.before is not None and change.after is not None
    return (
        f"{change.name} is installed twice: {_where(change.after)} wins the import, "
        f"{_where(change.before)} is hidden"
    )


def _rebuilt_message(change: Change) -> str:
    assert change.after is not None
    return f"{change.name} {change.after.version} was reinstalled with other files"


def _unparsable_message(change: Change) -> str:
    return f"{change.name} {_pair(change)}: a version is not PEP 440, direction unknown"


_MESSAGES: dict[str, Callable[[Change], str]] = {
    ADDED: lambda c: f"{c.name} {_pair(c)}: added",
    REMOVED: lambda c: f"{c.name} {_pair(c)}: removed",
    UPGRADED: lambda c: f"{c.name} {_pair(c)}: upgraded",
    DOWNGRADED: lambda c: f"{c.name} {_pair(c)}: downgraded",
    VARIANT: lambda c: f"{c.name} {_pair(c)}: same version, other build variant (local label)",
    REBUILT: _rebuilt_message,
    SHADOWED: _shadowed_message,
    UNPARSABLE: _unparsable_message,
}
