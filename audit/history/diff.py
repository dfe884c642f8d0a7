"""What changed between two environments, and in which direction. Pure functions, no I/O.

PURE CORE: stdlib + ``packaging`` only, Python 3.9 syntax (the guard runs it inside images).
Both sides map canonical names to the distribution that wins the import (see
:meth:`audit.history.snapshot.Environment.winners`); versions are compared with ``packaging``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from audit.history.snapshot import Distribution, Environment

if TYPE_CHECKING:
    pass

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


def _same_version_kind(old: Distribution, new: Distribution) -> str | None:
    if old.digest and new.digest and old.digest != new.digest:
        return REBUILT
    return None


def compare(old: Distribution, new: Distribution) -> str | None:
    """The kind of change from ``old`` to ``new`` (same name), or None when unchanged: what
    :func:`diff` reports for one name installed on both sides."""
    if old.version == new.version:  # equal text, equal version: no need to parse either
        return _same_version_kind(old, new)
    old_version, new_version = old.parsed_version, new.parsed_version
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
        return UNPARSABLE if new.parsed_version is None else ADDED
    if new is None:
        return REMOVED
    return compare(old, new)


def diff(before: Mapping[str, Distribution], after: Mapping[str, Distribution]) -> list[Change]:
    """Every change from ``before`` to ``after``, sorted by canonical name."""
    return Comparison(before, after).changes


class Comparison:
    """Two environments and what differs between them, each part worked out once when first
    read (the gate judges a pair of columns and draws it in its change matrix: one scan).

    ``touched``: the names of ``after`` whose distribution may have changed kind (not the same
    object, and absent before or at another version or digest: what :func:`compare` looks at);
    ``removed``: the names only ``before`` has; ``differing``: both, every name that may
    differ; ``moved``: the touched names new or at another version text; ``changes``:
    :func:`diff`. Neither mapping may change once compared.

    ``among``, when given, holds every name at which ``after`` may differ from ``before``, and
    ``after`` keeps every name of ``before`` (a predicted layer over the one before it: its
    lock's pins; pip never removes): then only those names are looked at.
    """

    def __init__(
        self,
        before: Mapping[str, Distribution],
        after: Mapping[str, Distribution],
        among: Collection[str] | None = None,
    ):
        self.before = before
        self.after = after
        self._among = among
        self._touched: list[str] | None = None
        self._removed: list[str] | None = [] if among is not None else None
        self._changes: list[Change] | None = None

    @property
    def touched(self) -> list[str]:
        if self._touched is None:
            before, after = self.before, self.after
            pairs = after.items() if self._among is None else _present(self._among, after)
            # predicted environments share most of their objects: the identity test skips them
            # (inlined: it runs for every name)
            self._touched = [
                name
                for name, dist in pairs
                if (old := before.get(name)) is not dist
                and (old is None or old.version != dist.version or old.digest != dist.digest)
            ]
        return self._touched

    @property
    def removed(self) -> list[str]:
        if self._removed is None:
            before, after = self.before, self.after
            # usually nothing is (pip never removes): the key views compare in C, 3x faster
            gone = not before.keys() <= after.keys()
            self._removed = [name for name in before if name not in after] if gone else []
        return self._removed

    @property
    def differing(self) -> list[str]:
        return [*self.touched, *self.removed]

    @property
    def moved(self) -> list[str]:
        before, after = self.before, self.after
        return [n for n in self.touched if n not in before or before[n].version != after[n].version]

    @property
    def changes(self) -> list[Change]:
        """Every change, sorted by canonical name (a new list at each read)."""
        if self._changes is None:
            before, after = self.before, self.after
            found = []
            for name in sorted(self.differing):
                old, new = before.get(name), after.get(name)
                kind = _kind(old, new)
                if kind is not None:
                    found.append(Change(kind, name, old, new))
            self._changes = found
        return list(self._changes)


def _present(
    names: Collection[str], env: Mapping[str, Distribution]
) -> list[tuple[str, Distribution]]:
    return [(name, dist) for name in names if (dist := env.get(name)) is not None]


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
