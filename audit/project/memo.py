"""What one command has already parsed or made, kept for the rest of that command only.

A :class:`Memo` is made by the command line with the run's context and handed to every
:class:`~audit.project.sources.Source` the command reads (a source made without one gets its
own), so the gate's two refs share it and two commands never do. It holds one bounded
:class:`Remembered` per :class:`Kind`; each kind is declared beside the code that fills it, with
the benchmark that shows it matters (a speed trick stays only where one does):

- ``lock.files.LOCKS``, ``BODIES``, ``BASES``: verified locks and base records by their bytes;
- ``recipe.requirements_in.VALIDATED``: requirements files validated once per text;
- ``history.predict.DISTRIBUTIONS``: one object per predicted distribution, so "the same
  object" means "unchanged" across refs and images;
- ``gate.matrix.ROWS``: the gate's matrix rows by everything they are made of;
- ``lock.standins.STANDINS``: a lock run's stand-in wheels.

What did not pay for itself was removed (each under 5 % of its benchmark's instructions): the
garbage collector's threshold, the Markdown cell and plain-table caches, the redaction cache,
the TOML parse cache, digest and name caches.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Remembered(Generic[K, V]):
    """A bounded map: ``made(key, make)`` answers from the table or remembers what ``make()``
    returns (a failure is never remembered). Full, it lets go of the least recently used entry;
    a ``flat`` table (looked up far more often than it fills: millions of hits in a fleet's gate)
    skips that bookkeeping and starts over instead."""

    def __init__(self, limit: int, *, flat: bool = False) -> None:
        self.limit = limit
        self.flat = flat
        self.entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The entry for ``key`` (now the most recent), or None."""
        found = self.entries.get(key)
        if found is not None and not self.flat:
            self.entries.move_to_end(key)
        return found

    def peek(self, key: K) -> V | None:
        """The entry for ``key``, or None, with no bookkeeping: a flat table's hot loops (the
        gate looks a fleet's distributions up tens of thousands of times)."""
        return self.entries.get(key)

    def made(self, key: K, make: Callable[[], V]) -> V:
        found = self.get(key)
        if found is not None:
            return found
        if self.flat and len(self.entries) >= self.limit:
            self.entries.clear()
        value = self.entries[key] = make()
        if len(self.entries) > self.limit:
            self.entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self.entries)


@dataclass(frozen=True, eq=False)
class Kind(Generic[K, V]):
    """One kind of thing a command remembers: its name, how many, and how they go
    (see :class:`Remembered`). Declared once, beside the code that fills it."""

    name: str
    limit: int
    flat: bool = False


@dataclass
class Memo:
    """The tables of one command, one per :class:`Kind`, made on first use."""

    tables: dict[Kind[Any, Any], Remembered[Any, Any]] = field(default_factory=dict)

    def table(self, kind: Kind[K, V]) -> Remembered[K, V]:
        found = self.tables.get(kind)
        if found is None:
            found = self.tables[kind] = Remembered(kind.limit, flat=kind.flat)
        return cast("Remembered[K, V]", found)
