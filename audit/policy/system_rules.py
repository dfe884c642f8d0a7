"""Findings below Python: OS package changes and shadowed native libraries.

PURE CORE: standard library only (plus the core), Python 3.9 syntax (the guard runs it).

OS packages changes use the Python change kinds and the same policy actions (``downgraded``,
``removed`` fail by default), with Debian's version order for dpkg and apk databases; a package
is named ``deb:<name>`` (see :mod:`audit.history.system`), which is how a waiver names it.
``shadowed-native`` is a state rule: a library that an ``nvidia-*`` wheel installed, where a
loader (a package library that needs the SONAME, or a dlopen by name when none does) maps
another copy whose version differs from the wheel's (or is unknown). ``missing-symbol`` is
one too: a loaded library imports a versioned symbol (or needs a version node) that the copy
the process maps for it does not define (``libcusparse.so.12: undefined symbol:
__nvJitLinkComplete_12_4, version libnvJitLink.so.12``); it fires only where the facts carry
symbols (the layer walk's), never on a guess. Both are reported at the layer that made it
so, like every state rule, from the loader model's resolution (:mod:`audit.native.bridge`),
made once per system in one judge run (:class:`Resolutions`), with :func:`load_changes`: which
copy of each library loads, and why, where that changed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from audit.history import diff as _diff
from audit.history.system import NativeCopy, NativeLibrary, OsPackage, System
from audit.policy.findings import ERROR, INFO, WARNING, Finding, UnmetSymbol
from audit.policy.model import ALLOW, FAIL, WARN, Policy
from audit.policy.verdict import Scope, WaiverLedger, apply_waivers, cuda_major, waiver_snippet

if TYPE_CHECKING:
    import datetime as _dt

    from audit.native.bridge import Resolution
    from audit.native.versions import VersionFinding

SHADOWED_NATIVE = "shadowed-native"
MISSING_SYMBOL_RULE = "missing-symbol"
_ACTION_SEVERITY = {FAIL: ERROR, WARN: WARNING, ALLOW: INFO}


def _direction(old: str, new: str) -> str | None:
    """The change kind from ``old`` to ``new`` under Debian's order (None: same version)."""
    # Imported here: most guarded layers change no OS package, and the guard pays every import.
    from audit.history.debversion import DebianVersionError, compare_debian_versions

    try:
        order = compare_debian_versions(old, new)
    except DebianVersionError:
        return _diff.UNPARSABLE
    if order < 0:
        return _diff.UPGRADED
    return _diff.DOWNGRADED if order > 0 else None


def os_changes(before: System, after: System) -> Iterator[tuple[str, str, str | None, str | None]]:
    """(kind, ``deb:<name>``, old version, new version) for every package that changed."""
    old, new = before.keyed(), after.keyed()
    for key in sorted(set(old) | set(new)):
        was, now = old.get(key), new.get(key)
        kind = _kind(was, now)
        if kind is not None:
            yield kind, key, was.version if was else None, now.version if now else None


def _kind(was: OsPackage | None, now: OsPackage | None) -> str | None:
    if was is None:
        return _diff.ADDED
    if now is None:
        return _diff.REMOVED
    return None if was.version == now.version else _direction(was.version, now.version)


def _severity(kind: str, policy: Policy) -> str:
    actions = {_diff.DOWNGRADED: policy.downgrade, _diff.REMOVED: policy.removal}
    return _ACTION_SEVERITY[actions.get(kind, WARN if kind == _diff.UNPARSABLE else ALLOW)]


def os_findings(before: System, after: System, policy: Policy, where: str) -> list[Finding]:
    """One finding per changed OS package (``rule`` is the change kind, like Python's)."""
    found = []
    for kind, key, old, new in os_changes(before, after):
        rule = "unparsable-version" if kind == _diff.UNPARSABLE else kind
        message = f"{key} {old or '(none)'} -> {new or '(none)'}: {kind} (OS package)"
        finding = Finding(rule, _severity(kind, policy), key, old, new, message, where)
        found.append(_hinted(finding, _os_fix(key, old)) if finding.fails else finding)
    return found


def _os_fix(key: str, old: str | None) -> str:
    name = key.split(":")[1]
    if old is None:
        return f"remove {name} again in the layer that installed it"
    return f"keep {name} at {old} in that layer (apt-get install {name}={old}, or apt-mark hold)"


def _hinted(finding: Finding, fix: str) -> Finding:
    """``finding`` with what to do and a ready-to-paste waiver for exactly it."""
    hint = f"{fix}; or waive it in image.toml:\n{waiver_snippet(finding)}"
    return replace(finding, hint=hint)


def _same_release(promised: str, found: str) -> bool:
    """``2.30.7`` and ``2.30.7``; ``9.1.0.70`` (wheel) and ``9.1.0`` (file): one is a prefix."""
    a, b = promised.split("."), found.split(".")
    return a[: len(b)] == b or b[: len(a)] == a


def _owner(copy: NativeCopy) -> tuple[str, str]:
    name, _, version = copy.owner.partition(" ")
    return name, version


def shadowed_loads(library: NativeLibrary) -> Iterator[tuple[NativeCopy, str, str, list[str]]]:
    """(wheel copy, loaded path, loaded version, loaders) where a loader maps another copy of a
    wheel's library whose version is not the wheel's (or cannot be told)."""
    wheel = [copy for copy in library.copies if copy.origin == "wheel"]
    if not wheel:
        return
    ours = {copy.path for copy in wheel}
    by_path: dict[str, list[str]] = {}
    for load in library.loads:
        if load.path and load.path not in ours:
            by_path.setdefault(load.path, []).append(load.by)
    for path in sorted(by_path):
        loaded = library.copy_at(path)
        version = loaded.version if loaded else ""
        if version and _same_release(_owner(wheel[0])[1], version):
            continue
        yield wheel[0], path, version, by_path[path]


def native_severity(policy: Policy) -> str:
    action = policy.native_shadowed or (FAIL if cuda_major(policy.cuda or "") else WARN)
    return _ACTION_SEVERITY[action]


class Resolutions:
    """The loader model's resolution of each system judged in one run, made once per system
    (a walk's consecutive states share theirs; each step reads two). Local to one run."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, tuple[NativeLibrary, ...]], Resolution] = {}

    def of(self, system: System) -> Resolution:
        key = (system.loader, system.native)
        found = self._found.get(key)
        if found is None:
            # Imported here: only images with CUDA libraries record loader facts, and the
            # guard pays every import.
            from audit.native.bridge import resolve_system

            found = self._found[key] = resolve_system(system)
        return found


def native_findings(
    system: System, policy: Policy, where: str, resolutions: Resolutions | None = None
) -> list[Finding]:
    """``shadowed-native`` findings of one image state (no waivers applied). Where the snapshot
    recorded loader facts, the loads are the loader model's (:mod:`audit.native.bridge`): a
    copy is "shadowed" only where the resolution says the other copy really loads."""
    found = []
    for library in _resolved(system, resolutions):
        for wheel, path, version, users in shadowed_loads(library):
            name, promised = _owner(wheel)
            shown = version or "version unknown"
            message = (
                f"{library.soname}: {name} {promised} installed {wheel.path}, but "
                f"{', '.join(users)} loads {path} ({shown}): shadowed native library"
            )
            fix = (
                f"remove or move {path}, or take its folder out of LD_LIBRARY_PATH / the ld.so "
                f"cache (ldconfig), or pin {name} to the version of that copy"
            )
            finding = Finding(SHADOWED_NATIVE, native_severity(policy), name, promised,
                              version or None, message, where)  # fmt: skip
            found.append(_hinted(finding, fix))
    return found


def _resolved(system: System, resolutions: Resolutions | None) -> tuple[NativeLibrary, ...]:
    if not system.loader:
        return system.native
    return (resolutions or Resolutions()).of(system).libraries


def symbol_findings(
    system: System, where: str, resolutions: Resolutions | None = None
) -> list[Finding]:
    """``missing-symbol`` findings of one image state (no waivers applied): one per versioned
    need of a loaded library that the copy mapped for it does not meet. The finding's package
    is the requirer's wheel (else its SONAME, as a waiver names a package), ``before`` the
    requirer's version and ``after`` the loaded copy's."""
    if not system.loader:
        return []
    resolution = (resolutions or Resolutions()).of(system)
    return [_symbol_finding(resolution, unmet, where) for unmet in resolution.unmet]


def _symbol_finding(resolution: Resolution, unmet: VersionFinding, where: str) -> Finding:
    from packaging.utils import canonicalize_name

    from audit.native.catalog import version_of

    scene = resolution.scene
    owners = scene.owners if scene is not None else {}
    requirer, loaded = owners.get(unmet.requirer), unmet.loaded
    requirer_facts = scene.view.files.get(unmet.requirer) if scene is not None else None
    soname = getattr(requirer_facts, "soname", "") or posixpath.basename(unmet.requirer)
    package = requirer.name if requirer and requirer.kind == "wheel" else soname
    from audit.native.bridge import requester

    detail = UnmetSymbol(
        unmet.requirer, unmet.needed, unmet.version, unmet.symbol, loaded.path,
        loaded.reason.value, loaded.entry, requester(loaded), unmet.satisfying,
    )  # fmt: skip
    # its hint comes with the waivers (audit.policy.verdict's fix reads the typed fields)
    return Finding(
        MISSING_SYMBOL_RULE, ERROR, canonicalize_name(package),
        version_of(unmet.requirer, soname, requirer) or None,
        version_of(loaded.path, loaded.soname, owners.get(loaded.path)) or None,
        unmet.describe(), where, symbol=detail,
    )  # fmt: skip


@dataclass(frozen=True)
class LoadChange:
    """Which copy of a library loads after a step, where that changed: ``path`` ("" none
    found), whose copy it is (``owner``, ``version``), who asked for it (``requirer``) and
    why the loader took it (``reason`` one of :class:`audit.native.search.Reason`'s values,
    ``entry`` the search-list entry or folder); ``before`` the copies that loaded before."""

    soname: str
    path: str
    owner: str
    version: str
    requirer: str
    reason: str
    entry: str
    before: tuple[str, ...] = ()

    def describe(self) -> str:
        """``libnccl.so.2 loads /p/libnccl.so.2 (nvidia-nccl-cu13 2.30.7): <requirer> (why)``."""
        whose = self.owner or self.version
        how = self.reason + (f" {self.entry}" if self.entry else "")
        was = f"; was {', '.join(self.before)}" if self.before else ""
        shown = f"{self.path or '(nothing)'}" + (f" ({whose})" if whose else "")
        return f"{self.soname} loads {shown}: {self.requirer} ({how}){was}"


def load_changes(
    before: System | None, after: System | None, resolutions: Resolutions | None = None
) -> tuple[LoadChange, ...]:
    """The loads of every library whose loaded copies differ after the step (a library new
    at it included): one per copy that loads now and did not before (each copy that loads
    where copies only went away), by SONAME; none where ``after`` recorded no loader
    facts."""
    if after is None or not after.loader:
        return ()
    memo = resolutions or Resolutions()
    was = {lib.soname: _paths(lib) for lib in _resolved(before, memo)} if before else {}
    found = []
    for library in memo.of(after).libraries:
        paths, earlier = _paths(library), was.get(library.soname, ())
        if not paths or earlier == paths:
            continue
        paths = tuple(p for p in paths if p not in earlier) or paths  # the copies new here
        for load in library.loads:
            if load.path and load.path in paths:
                paths = tuple(p for p in paths if p != load.path)
                copy = library.copy_at(load.path)
                found.append(LoadChange(
                    library.soname, load.path, copy.owner if copy else "",
                    copy.release if copy else "", load.requirer or load.by, load.reason,
                    load.entry, was.get(library.soname, ()),
                ))  # fmt: skip
    return tuple(found)


def _paths(library: NativeLibrary) -> tuple[str, ...]:
    return tuple(sorted({load.path for load in library.loads if load.path}))


def evaluate_system(
    before: System | None,
    after: System | None,
    policy: Policy,
    *,
    where: str,
    today: _dt.date,
    scope: Scope | None = None,
    ledger: WaiverLedger | None = None,
    resolutions: Resolutions | None = None,
) -> list[Finding]:
    """Findings below Python for one step; none when ``after`` was not recorded. OS package
    changes need ``before`` too; shadowed libraries and missing symbols count only where
    ``before`` had not the same (a base recorded without ``system`` compares nothing below
    Python at the first layer, and reports what is already broken there as it is)."""
    if after is None:
        return []
    findings = os_findings(before, after, policy, where) if before is not None else []
    if before is not None and before == after:
        return apply_waivers(findings, policy, today, scope or Scope(), ledger)
    memo = resolutions or Resolutions()
    known = {(f.package, f.message) for f in _state_findings(before, policy, where, memo)}
    fresh = _state_findings(after, policy, where, memo)
    findings += [f for f in fresh if (f.package, f.message) not in known]
    return apply_waivers(findings, policy, today, scope or Scope(), ledger)


def _state_findings(
    system: System | None, policy: Policy, where: str, memo: Resolutions
) -> list[Finding]:
    if system is None:
        return []
    return native_findings(system, policy, where, memo) + symbol_findings(system, where, memo)
