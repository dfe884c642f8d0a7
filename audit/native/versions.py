"""The versioned-symbol rule: what a mapped object imports must be defined by what loads.

PURE: standard library only, Python 3.9 syntax.

For every mapped object R and every version R needs from a DT_NEEDED file F (its verneed),
the copy of F that the process maps must

1. define the version node (else the loader refuses to load R: "version `V' not found
   (required by R)"); a weak need (``VER_FLG_WEAK``) is exempt; and
2. define, at that version, every undefined non-weak dynamic symbol R binds to it (else "R:
   undefined symbol: S, version V"). Node names alone are not enough: both nvJitLink 12.4 and
   12.1 define ``libnvJitLink.so.12``, only 12.4 defines ``__nvJitLinkComplete_12_4``.

No false positives: nothing is claimed where the facts cannot tell. A copy without version
definitions accepts any version (glibc only warns in verbose mode), a copy whose facts were
not read is skipped, and so is a need whose file is not mapped (another rule reports that).
A finding is a :class:`VersionFinding`: typed data, never prose parsed back.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

from audit.native.elf import ElfFacts

if TYPE_CHECKING:
    from collections.abc import Iterator

    from audit.native.elf import NeededVersion
    from audit.native.fsview import FileSystemView
    from audit.native.process import Load, Outcome

MISSING_SYMBOL = "missing-symbol"
MISSING_VERSION = "missing-version"


@dataclass(frozen=True)
class VersionFinding:
    """``requirer`` needs ``symbol`` (empty: the version node itself) at ``version`` of
    ``needed``; ``loaded`` is the copy the process maps and why; ``satisfying`` the other copies
    present that define it (real paths, sorted)."""

    kind: str
    requirer: str
    needed: str
    version: str
    symbol: str
    loaded: Load
    satisfying: tuple[str, ...]

    def describe(self) -> str:
        """The loader's own words, then why that copy loads."""
        name = posixpath.basename(self.requirer)
        if self.kind == MISSING_VERSION:
            text = f"version `{self.version}' not found (required by {name})"
        else:
            text = f"{name}: undefined symbol: {self.symbol}, version {self.version}"
        via = self.loaded.entry or self.loaded.opened_as
        why = f"{self.loaded.path} loads ({self.loaded.reason.value}: {via})"
        better = f"; {', '.join(self.satisfying)} would satisfy it" if self.satisfying else ""
        return f"{text}: {why}{better}"


def version_findings(outcome: Outcome, view: FileSystemView) -> list[VersionFinding]:
    """Every versioned need of every mapped object that the mapped copy does not meet."""
    loads = outcome.by_path()
    found: list[VersionFinding] = []
    for load in outcome.loads:
        facts = _facts(view, load.path)
        if facts is None:
            continue
        for need in facts.imports:
            target = _provider(outcome, load, need.file)
            provider = _facts(view, target.path) if target else None
            if target is None or provider is None or not provider.has_versions:
                continue
            for version in need.versions:
                for kind, symbol in _unmet(provider, version):
                    loaded = loads[target.path]
                    found.append(VersionFinding(
                        kind, load.path, need.file, version.name, symbol, loaded,
                        _satisfying(view, loaded, version.name, symbol),
                    ))  # fmt: skip
    return found


def _unmet(provider: ElfFacts, version: NeededVersion) -> Iterator[tuple[str, str]]:
    """(kind, symbol) of what ``provider`` lacks of ``version`` (symbol "" for the node)."""
    if version.name not in provider.version_names():
        if not version.weak:
            yield MISSING_VERSION, ""
        return
    for symbol in version.symbols:
        if not provider.defines_symbol(symbol, version.name):
            yield MISSING_SYMBOL, symbol


def _facts(view: FileSystemView, path: str) -> ElfFacts | None:
    facts = view.files.get(path)
    return facts if isinstance(facts, ElfFacts) else None


def _provider(outcome: Outcome, requirer: Load, file: str) -> Load | None:
    """The mapped object the requirer's DT_NEEDED ``file`` resolved to."""
    use = next(
        (u for u in outcome.uses if u.name == file and u.requirer == requirer.opened_as), None
    )
    if use is not None and use.path:
        return outcome.by_path().get(use.path)
    loaded = outcome.loaded(file)
    return loaded[0] if loaded else None


def _satisfying(view: FileSystemView, loaded: Load, version: str, symbol: str) -> tuple[str, ...]:
    """Other copies with the loaded copy's SONAME that define the version (and symbol)."""
    soname = loaded.soname
    found = []
    for path, facts in view.elf_files():
        if path == loaded.path or not soname or facts.soname != soname:
            continue
        if version in facts.version_names() and (
            not symbol or facts.defines_symbol(symbol, version)
        ):
            found.append(path)
    return tuple(found)
