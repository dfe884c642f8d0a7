"""The policy applied: findings from the changes between two environments and from the state.

PURE CORE: stdlib + ``packaging`` only, Python 3.9 syntax (the guard runs it inside images).

Change rules give one finding per change (see :mod:`audit.history.diff`). State rules (lockstep,
cuda-suffix, requirement, forbidden) look at one environment; :func:`evaluate` reports a state
violation only at the layer that caused it (broken after, not broken before). Waivers then turn
matching errors into allowed, reported changes; an expired waiver fails with its date.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from audit.errors import BadInput
from audit.history import diff as _diff
from audit.history.snapshot import Distribution, Environment, canonical_name, parse_version
from audit.policy.findings import ERROR, INFO, WARNING, Finding, UnmetSymbol
from audit.policy.model import ALLOW, FAIL, WARN, LockstepGroup, Policy, Waiver
from audit.policy.presets import PRESETS, label
from audit.policy.rules import CHANGE_RULES

if TYPE_CHECKING:
    import datetime as _dt

    ChangeKey = tuple[str, str, str | None, str | None]  # rule, package, before, after

    from packaging.requirements import Requirement

_ACTION_SEVERITY = {FAIL: ERROR, WARN: WARNING, ALLOW: INFO}
_RULE_OF_KIND = {_diff.UNPARSABLE: "unparsable-version"}
_PACKAGE_CUDA = re.compile(r"-cu(\d+)$")
_LOCAL_CUDA = re.compile(r"^cu(\d+)$")
_CUDA_TAG = re.compile(r"^cu(\d{2,3})$")
_WILDCARD = re.compile(r"[*?[]")  # what makes fnmatch treat a member as a pattern

Env = Mapping[str, Distribution]


def rule_of(kind: str) -> str:
    """The finding rule of a change kind (``unparsable`` -> ``unparsable-version``)."""
    return _RULE_OF_KIND.get(kind, kind)


def _change_severity(kind: str, policy: Policy) -> str:
    """The policy's action on ``kind`` (its field named in :data:`_ACTION_KEY`) as severity;
    an unparsable version warns, anything else (added, upgraded) is allowed."""
    key = _ACTION_KEY.get(kind)
    if key is not None:
        return _ACTION_SEVERITY[getattr(policy, key)]
    return _ACTION_SEVERITY[WARN if kind == _diff.UNPARSABLE else ALLOW]


_ACTION_KEY = {
    _diff.DOWNGRADED: "downgrade",
    _diff.REMOVED: "removal",
    _diff.VARIANT: "variant",
    _diff.REBUILT: "rebuilt",
    _diff.SHADOWED: "shadowed",
}


def _origin(policy: Policy, rule_id: str) -> str:
    """The message prefix of a finding raised by a preset rule (``""`` for the recipe's own)."""
    return label(policy.preset, rule_id, policy.preset_rules)


def _preset_rule(policy: Policy, rule_id: str) -> str | None:
    """``rule_id`` when the policy's preset raised it (its findings say so), else None."""
    return rule_id if _origin(policy, rule_id) else None


def change_key(change: _diff.Change) -> ChangeKey:
    """What :func:`change_finding` makes of ``change`` (rule, package, old and new version):
    the key the gate knows a reported finding by."""
    before = change.before.version if change.before else None
    return rule_of(change.kind), change.name, before, change.after.version if change.after else None


def _reported(change: _diff.Change, reported: Collection[ChangeKey], policy: Policy) -> bool:
    """Whether ``change``'s finding is in ``reported`` and would not fail."""
    return _change_severity(change.kind, policy) != ERROR and change_key(change) in reported


def change_finding(change: _diff.Change, policy: Policy, where: str) -> Finding:
    severity = _change_severity(change.kind, policy)
    rule_id = _ACTION_KEY.get(change.kind, "")
    origin = _origin(policy, rule_id) if severity == ERROR else ""
    return Finding(
        rule=rule_of(change.kind),
        severity=severity,
        package=change.name,
        before=change.before.version if change.before else None,
        after=change.after.version if change.after else None,
        message=origin + change.message,
        where=where,
        preset_rule=rule_id if origin else None,
    )


# --- state rules -------------------------------------------------------------------------


def _state(
    rule: str,
    package: str,
    after: str | None,
    message: str,
    where: str,
    *,
    preset_rule: str | None = None,
) -> Finding:
    return Finding(
        rule=rule,
        severity=ERROR,
        package=package,
        before=None,
        after=after,
        message=message,
        where=where,
        preset_rule=preset_rule,
    )


def _group_members(names: Collection[str], group: LockstepGroup) -> list[str]:
    """The ``names`` that ``group`` covers, sorted: a member without ``*?[`` is looked up, only
    patterns are matched against every name."""
    patterns = [canonical_name(member) for member in group.members]
    found = {p for p in patterns if not _WILDCARD.search(p) and p in names}
    wild = [p for p in patterns if _WILDCARD.search(p)]
    if wild:
        found.update(n for n in names if any(fnmatchcase(n, p) for p in wild))
    return sorted(found)


def _lockstep(env: Env, policy: Policy, where: str) -> Iterator[Finding]:
    for group in policy.lockstep:
        members = _group_members(env, group)
        versions = {n: env[n].parsed_version for n in members}
        public = {v.public for v in versions.values() if v is not None}
        if len(public) > 1:
            listed = ", ".join(f"{n} {env[n].version}" for n in members)
            rule_id = f"lockstep {group.name}"
            origin = _origin(policy, rule_id) or f"lockstep group {group.name}: "
            message = f"{origin}members must share one version: {listed}"
            preset = _preset_rule(policy, rule_id)
            yield _state("lockstep", group.name, None, message, where, preset_rule=preset)


def cuda_major(tag: str) -> str | None:
    """``cu130`` -> ``13``, ``cu128`` -> ``12``; None for ``cpu``, None or another tag."""
    match = _CUDA_TAG.match(tag or "")
    return match.group(1)[:-1] if match else None


def _cuda_marks(dist: Distribution) -> Iterator[tuple[str, str]]:
    """(kind, digits) for a ``-cuNN`` name suffix and each ``+cuNNN`` or ``+cpu`` label segment."""
    named = _PACKAGE_CUDA.search(dist.name)
    if named:
        yield "package", named.group(1)
    if "+" not in dist.version:  # no local label (PEP 440 has no other separator): skip parsing
        return
    version = dist.parsed_version
    for segment in (version.local or "").split(".") if version else ():
        local = _LOCAL_CUDA.match(segment)
        if local:
            yield "build", local.group(1)
        elif segment == "cpu":  # the CPU wheel of a CUDA project (torch 2.9.0+cpu)
            yield "build", "cpu"


def _cuda_ok(kind: str, digits: str, tag: str) -> bool:
    major = cuda_major(tag)
    if kind == "package":
        return digits in (major, tag[2:])
    return digits == tag[2:]


def _cuda_suffix(
    env: Env, policy: Policy, where: str, markers: Mapping[str, str] | None = None
) -> Iterator[Finding]:
    """A ``-cuNN`` package or ``+cuNNN``/``+cpu`` build of another CUDA than the image's.

    Exception, decided from the vendor's own metadata: a ``-cuNN`` *package* that an installed
    distribution's ``Requires-Dist`` asks for (unconditionally, by markers true in this image,
    or under an extra another installed requirement requests) passes: ``nvidia-cutlass-dsl
    4.8.0`` requires ``nvidia-cutlass-dsl-libs-cu12`` in a cu130 image. A requirer that itself
    fails the rule vouches for nothing. Builds (``+cu12x``, ``+cpu``) have no exception.
    """
    if not policy.cuda_suffix:
        return
    tag = policy.cuda or "cpu"
    major = cuda_major(tag)
    suspects = dict(_suspects(env, tag, major))
    packages = [name for name, (kind, _) in suspects.items() if kind == "package"]
    needed = required_by_metadata(env, packages, markers) if packages and major else set()
    for name in sorted(suspects):
        kind, digits = suspects[name]
        if kind == "package" and name in needed:
            continue
        dist = env[name]
        what = "a CPU build" if digits == "cpu" else f"{kind} for cu{digits}"
        unasked = "; no installed package requires it" if kind == "package" and major else ""
        origin = _origin(policy, "cuda_suffix")
        message = f"{origin}{name} {dist.version}: {what} in an image built for {tag}{unasked}"
        preset = _preset_rule(policy, "cuda_suffix")
        finding = _state("cuda-suffix", name, dist.version, message, where, preset_rule=preset)
        yield finding if major else replace(finding, severity=WARNING)


def _suspects(env: Env, tag: str, major: str | None) -> Iterator[tuple[str, tuple[str, str]]]:
    """(name, (kind, digits)) of the first CUDA mark of each distribution that does not fit.
    Only a name ending in ``-cuNN`` or a version with a local label can carry a mark, so the
    rest are skipped without parsing (the gate runs this on every stage of every image)."""
    marked = [name for name, dist in env.items() if "+" in dist.version or "-cu" in dist.name]
    for name in sorted(marked):
        dist = env[name]
        for kind, digits in _cuda_marks(dist):
            if major is None and digits == "cpu":
                continue  # a CPU build in a CPU image
            if major is not None and _cuda_ok(kind, digits, tag):
                continue
            yield name, (kind, digits)
            break


def required_by_metadata(
    env: Env, suspects: Sequence[str], markers: Mapping[str, str] | None
) -> set[str]:
    """Which of ``suspects`` some installed distribution requires, as pip would install them.

    A requirement counts when its marker is true for ``markers`` (the image's; this machine's
    when None) with no extra or with an extra that a counted requirement requests of its
    owner (``x[cu13]`` makes ``x``'s ``extra == "cu13"`` requirements count). Distributions
    in ``suspects`` count as requirers only once they are required themselves. Only texts that
    name a suspect or request extras are parsed (the guard runs this on every layer).
    """
    wanted = [canonical_name(name) for name in suspects]
    requirements = {name: _relevant(dist, wanted) for name, dist in env.items()}
    extras: dict[str, set[str]] = {}
    needed: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, parsed in requirements.items():
            if name in wanted and name not in needed:
                continue
            for requirement in parsed:
                if not _applies(requirement, markers, extras.get(name, set())):
                    continue
                target = canonical_name(requirement.name)
                known = extras.setdefault(target, set())
                if target not in needed or not set(requirement.extras) <= known:
                    needed.add(target)
                    known.update(requirement.extras)
                    changed = True
    return needed & set(wanted)


def _relevant(dist: Distribution, wanted: Sequence[str]) -> list[Requirement]:
    from packaging.requirements import InvalidRequirement, Requirement

    found = []
    for text in dist.requires_dist or ():
        if "[" in text or _names_any_of(text, wanted):
            try:
                found.append(Requirement(text))
            except InvalidRequirement:
                continue
    return found


def _applies(
    requirement: Requirement, markers: Mapping[str, str] | None, extras: Collection[str]
) -> bool:
    if requirement.marker is None:
        return True
    from packaging.markers import UndefinedComparison, UndefinedEnvironmentName, default_environment

    base = {key: str(value) for key, value in default_environment().items()}
    base.update(markers or {})
    try:
        return any(requirement.marker.evaluate(dict(base, extra=e)) for e in ("", *extras))
    except (UndefinedComparison, UndefinedEnvironmentName):
        return True  # cannot tell: never a false positive from an odd marker


def parse_requirement(text: str, key: str) -> Requirement:
    # Imported here: the guard runs this module on every layer, and packaging.requirements
    # costs more to import than the rest of the guard; only policies with floors or
    # forbidden packages need it.
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise BadInput(
            f"policy: {key}: {text!r} is not a PEP 508 requirement ({exc})",
            "fix the [policy] table of the recipe (image.toml)",
        ) from exc


def _outside(requirement: Requirement, dist: Distribution) -> bool:
    version = dist.parsed_version
    return version is None or not requirement.specifier.contains(version, prereleases=True)


def _requirements(env: Env, policy: Policy, where: str) -> Iterator[Finding]:
    for index, text in enumerate(policy.requirements):
        requirement = parse_requirement(text, f"require[{index}]")
        dist = env.get(canonical_name(requirement.name))
        if dist is not None and _outside(requirement, dist):
            rule_id = f"require {dist.name}"
            origin = _origin(policy, rule_id)
            message = f"{origin}{dist.name} {dist.version} breaks the policy requirement {text}"
            preset = _preset_rule(policy, rule_id)
            yield _state("requirement", dist.name, dist.version, message, where, preset_rule=preset)


def _forbidden(env: Env, policy: Policy, where: str) -> Iterator[Finding]:
    for index, text in enumerate(policy.forbidden):
        requirement = parse_requirement(text, f"forbid[{index}]")
        dist = env.get(canonical_name(requirement.name))
        if dist is None:
            continue
        if not requirement.specifier or not _outside(requirement, dist):
            rule_id = f"forbid {dist.name}"
            origin = _origin(policy, rule_id)
            message = f"{origin}{dist.name} {dist.version} is forbidden by the policy ({text})"
            preset = _preset_rule(policy, rule_id)
            yield _state("forbidden", dist.name, dist.version, message, where, preset_rule=preset)


def check_state(
    env: Env, policy: Policy, *, where: str, markers: Mapping[str, str] | None = None
) -> list[Finding]:
    """Violations of the state rules in one environment (no waivers applied); ``markers``
    are the image's PEP 508 markers (the CUDA rule evaluates requirements with them)."""
    return [
        *_lockstep(env, policy, where),
        *_cuda_suffix(env, policy, where, markers),
        *_requirements(env, policy, where),
        *_forbidden(env, policy, where),
    ]


# --- waivers and hints -------------------------------------------------------------------


def _version_matches(pattern: str, actual: str | None) -> bool:
    if pattern == "*":
        return True
    if actual is None:
        return False
    wanted, found = parse_version(pattern), parse_version(actual)
    return wanted == found if wanted is not None and found is not None else pattern == actual


@dataclass(frozen=True)
class Scope:
    """Where in a recipe a step is: stage name and 1-based layer; None outside a recipe."""

    stage: str | None = None
    layer: int | None = None


class WaiverLedger:
    """The stage where each unscoped waiver was first used: it waives that stage only.

    Steps are evaluated in build order with one ledger, so a waiver written for the v2 nightly
    does not also waive the same move when v5 makes it again (the field's regression).
    """

    def __init__(self) -> None:
        self.first: dict[int, str] = {}

    def allows(self, index: int, waiver: Waiver, scope: Scope) -> bool:
        if waiver.stage is not None or scope.stage is None:
            return True
        return self.first.get(index, scope.stage) == scope.stage

    def use(self, index: int, scope: Scope) -> None:
        if scope.stage is not None:
            self.first.setdefault(index, scope.stage)

    def replay(self, findings: Sequence[Finding], stage: str) -> None:
        """Record the waivers that earlier findings (of ``stage``) used."""
        for finding in findings:
            if finding.waiver_index is not None:
                self.first.setdefault(finding.waiver_index, stage)


def _in_scope(waiver: Waiver, scope: Scope) -> bool:
    if waiver.stage is not None and scope.stage is not None and waiver.stage != scope.stage:
        return False
    return waiver.layer is None or scope.layer is None or waiver.layer == scope.layer


def waiver_matches(waiver: Waiver, finding: Finding, scope: Scope = Scope()) -> bool:
    """Same rule (a rule-less waiver only change rules), same package, ``from`` matches the old
    version (state findings have none), ``to`` the new, and the step is in its scope."""
    if canonical_name(waiver.package) != canonical_name(finding.package):
        return False
    rule_ok = finding.rule in CHANGE_RULES if waiver.rule is None else waiver.rule == finding.rule
    if not rule_ok or not _in_scope(waiver, scope):
        return False
    from_ok = finding.before is None or _version_matches(waiver.from_version, finding.before)
    return from_ok and _version_matches(waiver.to_version, finding.after)


def _expired(waiver: Waiver, today: _dt.date) -> bool:
    return waiver.expires is not None and waiver.expires < today


def _waived(finding: Finding, index: int, waiver: Waiver) -> Finding:
    expiry = f", expires {waiver.expires}" if waiver.expires else ""
    text = f"{waiver.reason} (waiver {waiver.describe()}{expiry})"
    return replace(finding, severity=INFO, waiver=text, waiver_index=index)


def _waive(
    finding: Finding, policy: Policy, today: _dt.date, scope: Scope, ledger: WaiverLedger
) -> list[Finding]:
    matching = [(i, w) for i, w in enumerate(policy.waivers) if waiver_matches(w, finding, scope)]
    usable = [(i, w) for i, w in matching if ledger.allows(i, w, scope)]
    valid = [(i, w) for i, w in usable if not _expired(w, today)]
    if valid:
        ledger.use(valid[0][0], scope)
        return [_waived(finding, *valid[0])]
    notes = [_expired_finding(finding, w) for _, w in usable]
    notes += [_spent_note(finding, w, ledger, i) for i, w in matching if (i, w) not in usable][:1]
    return [finding, *notes]


def _spent_note(finding: Finding, waiver: Waiver, ledger: WaiverLedger, index: int) -> Finding:
    stage = ledger.first.get(index, "?")
    message = (
        f"the waiver {waiver.describe()} was used in stage {stage}; it does not waive the same "
        f"change again in a later stage: {finding.message}"
    )
    return Finding(
        rule="waiver-spent",
        severity=WARNING,
        package=finding.package,
        before=finding.before,
        after=finding.after,
        message=message,
        where=finding.where,
    )


def _expired_finding(finding: Finding, waiver: Waiver) -> Finding:
    message = (
        f"the waiver for {waiver.package} {waiver.from_version} -> {waiver.to_version} "
        f"expired on {waiver.expires} ({waiver.reason}); it no longer allows: {finding.message}"
    )
    return Finding(
        "waiver-expired",
        ERROR,
        finding.package,
        finding.before,
        finding.after,
        message,
        finding.where,
    )


def apply_waivers(
    findings: Sequence[Finding],
    policy: Policy,
    today: _dt.date,
    scope: Scope = Scope(),
    ledger: WaiverLedger | None = None,
) -> list[Finding]:
    """Waive matching errors (severity info, ``waiver`` says which and why); then give every
    error a hint. ``ledger`` (one per walk through a recipe's steps) binds unscoped waivers to
    the first stage that uses them."""
    book = ledger if ledger is not None else WaiverLedger()
    waived = [
        out
        for finding in findings
        for out in (_waive(finding, policy, today, scope, book) if finding.fails else [finding])
    ]
    return [_with_hint(f, scope, policy) if f.fails and not f.hint else f for f in waived]


def waiver_snippet(finding: Finding, scope: Scope = Scope()) -> str:
    """A ready-to-paste waiver for exactly this finding: its rule, package, versions, stage."""
    rule = "" if finding.rule in CHANGE_RULES else f'rule = "{finding.rule}"\n'
    stage = f'stage = "{scope.stage}"\n' if scope.stage else ""
    return (
        "[[policy.waiver]]\n"
        f'package = "{finding.package}"\n'
        f'from = "{finding.before or "*"}"\n'
        f'to = "{finding.after or "*"}"\n'
        f"{rule}{stage}"
        'reason = "why this is safe"\n'
        "expires = 2099-12-31  # optional"
    )


def _fix(finding: Finding) -> str:
    name, old = finding.package, finding.before
    fixes = {
        "lockstep": f"pin every member of lockstep group {name} to one version",
        "cuda-suffix": "install the package or build for the image's CUDA tag instead",
        "requirement": f"pin {name} to a version the policy requires in this layer",
        "forbidden": f"remove {name} (or the requirement that pulls it in)",
        "waiver-expired": "fix the change, or extend `expires` of the waiver in image.toml",
        "shadowed-native": (
            "remove or move the copy that loads, or take its folder out of LD_LIBRARY_PATH / "
            f"the ld.so cache (ldconfig), or pin {name} to the version of that copy"
        ),
    }
    if finding.rule == "missing-symbol" and finding.symbol is not None:
        return _symbol_fix(finding.symbol)
    pin = f'keep it with override = ["{name}=={old}"] on this layer' if old else f"pin {name}"
    return fixes.get(finding.rule, pin)


def _symbol_fix(symbol: UnmetSymbol) -> str:
    """Make a copy that defines the symbol the one that loads (its typed fields say which)."""
    folder = symbol.loaded.rsplit("/", 1)[0]
    ways = {"ld_library_path": f"take {folder} out of LD_LIBRARY_PATH",
            "cache": f"drop {folder} from the ld.so cache (ld.so.conf, ldconfig)"}  # fmt: skip
    way = ways.get(symbol.reason, f"remove {symbol.loaded}")
    what = symbol.symbol or symbol.version
    then = (
        f"so that {symbol.satisfying[0]} (which defines {what}) loads"
        if symbol.satisfying
        else (f"and install a copy that defines {what}")
    )
    return f"{way} {then}; or pin the requirer to a release the loaded copy serves"


def hint_text(
    finding: Finding,
    scope: Scope,
    policy: Policy,
    fix: str | None = None,
    place: str = "image.toml",
) -> str:
    """What to do about a failing finding: ``fix`` (the rule's own fix by default), or a waiver
    in ``place`` (a recipe's ``image.toml``, or the policy file of an image with no recipe)."""
    waive = f"{fix or _fix(finding)}; or waive it in {place}:\n{waiver_snippet(finding, scope)}"
    return _preset_note(finding, policy) + waive


def _with_hint(finding: Finding, scope: Scope, policy: Policy) -> Finding:
    return replace(finding, hint=hint_text(finding, scope, policy))


def _preset_note(finding: Finding, policy: Policy) -> str:
    """Why the preset has the rule that fired, and the recipe key that turns it off."""
    rule_id = finding.preset_rule
    if policy.preset is None or rule_id is None:
        return ""
    reason = PRESETS[policy.preset].reason(rule_id) if policy.preset in PRESETS else ""
    return (
        f"preset {policy.preset} has `{rule_id}` because {reason}; to turn it off, set "
        f'preset_skip = ["{rule_id}"] in [policy] (docs/recipes.md); '
    )


# --- entry points ------------------------------------------------------------------------


def _state_keys(findings: Sequence[Finding]) -> set[tuple[str, str]]:
    return {(f.rule, f.package) for f in findings}


def _names_any_of(text: str, names: Sequence[str]) -> bool:
    """Could requirement ``text`` be about one of ``names``? Never a false "no".

    A PEP 508 name comes first and ends with a letter, digit or ``_``, so PEP 503 applied to the
    whole text starts with the canonical name; the full parse happens only for a "yes".
    """
    text = canonical_name(text.lstrip())
    return any(text.startswith(name) for name in names)


def _rules_for_moved(policy: Policy, pair: _diff.Comparison) -> Policy:
    """``policy`` without the floors, bans and lockstep groups about packages that did not move
    (another version text, or new) between ``pair``'s environments.

    Their verdict is the same before and after, so :func:`evaluate` would drop it anyway; this
    spares the guard importing the PEP 508 parser on layers that leave those packages alone,
    and a recipe's audit a scan of every name for every group on every layer. A group counts
    as touched when a member moved or went away.
    """
    if not (policy.requirements or policy.forbidden or policy.lockstep):
        return policy  # nothing to narrow (replace() walks every field of a policy)
    moved = pair.moved
    touched = {*moved, *pair.removed}
    return replace(
        policy,
        requirements=tuple(t for t in policy.requirements if _names_any_of(t, moved)),
        forbidden=tuple(t for t in policy.forbidden if _names_any_of(t, moved)),
        lockstep=tuple(g for g in policy.lockstep if _group_members(touched, g)),
    )


def evaluate(
    before: Env,
    after: Env,
    policy: Policy,
    *,
    where: str,
    today: _dt.date,
    scope: Scope = Scope(),
    ledger: WaiverLedger | None = None,
    declared: Collection[str] = (),
    markers: Mapping[str, str] | None = None,
    compared: _diff.Comparison | None = None,
    reported: Collection[ChangeKey] = frozenset(),
) -> list[Finding]:
    """Findings for the step from ``before`` to ``after``: changes, then new state violations.

    ``declared`` names the packages the step re-pins on purpose (a ``no_deps`` layer): their
    moves are ``override`` warnings naming the requirements they break (evaluated with
    ``markers``), not downgrade or variant errors; every state rule still applies to them.
    ``compared`` is the comparison of exactly ``before`` and ``after`` when the caller has one
    (the gate reads the same pair for its change matrix): then nothing is scanned again.
    ``reported`` holds keys (:func:`change_key`) of changes the caller has reported already and
    drops (the gate: one an earlier stage showed): a change with such a key whose finding would
    not fail is left out, unbuilt (no waiver is consulted for a finding that does not fail).
    """
    pair = compared if compared is not None else _diff.Comparison(before, after)
    assert pair.before is before and pair.after is after, "compared is of another pair"
    changes = pair.changes
    moved = {c.name for c in changes}
    held = _held_with(declared, moved, after, markers or {})
    kept = [_kept_override(n, after, markers, where, held) for n in declared if n not in moved]
    findings = [f for f in kept if f is not None] + [
        _override(c, after, markers, where)
        if c.name in declared
        else _with_askers(change_finding(c, policy, where), after, markers)
        for c in changes
        if not reported or c.name in declared or not _reported(c, reported, policy)
    ]
    relevant = _rules_for_moved(policy, pair)
    known = _state_keys(check_state(before, relevant, where=where, markers=markers))
    state = check_state(after, relevant, where=where, markers=markers)
    findings.extend(f for f in state if (f.rule, f.package) not in known)
    return apply_waivers(findings, policy, today, scope, ledger)


# --- overrides ----------------------------------------------------------------------------


def _with_askers(finding: Finding, after: Env, markers: Mapping[str, str] | None) -> Finding:
    """A failing downgrade or variant names who asks for the new version, as ``lock`` does:
    ``torch 2.13.0 requires nvidia-nccl-cu13==2.29.7`` (its ``askers``)."""
    if not finding.fails or finding.rule not in ("downgraded", "variant"):
        return finding
    askers = asking_for(after, finding.package, markers or {}, finding.before)
    return replace(finding, askers=tuple(askers)) if askers else finding


def asking_for(
    env: Env, name: str, markers: Mapping[str, str], before: str | None = None
) -> list[str]:
    """``other version requires <requirement>`` for each installed distribution whose recorded
    requirement on ``name`` (for these markers, no extras) pins it to the installed version:
    its specifier allows that version and not ``before`` (the version it moved from). A
    requirement that allows both (``>=2.20``) asked for nothing: the move came from elsewhere.
    """
    old = parse_version(before) if before is not None else None
    return [
        f"{other.raw_name or other.name} {other.version} requires {text}"
        for other, text, requirement, dist in _requirements_on(env, name, markers)
        if str(requirement.specifier)
        and requirement.specifier.contains(dist.version, prereleases=True)
        and (old is None or not requirement.specifier.contains(old, prereleases=True))
    ]


def _requirements_on(
    env: Env, name: str, markers: Mapping[str, str]
) -> Iterator[tuple[Distribution, str, Requirement, Distribution]]:
    """(requirer, its requirement text, the parsed requirement, ``name``'s installed
    distribution) for every recorded requirement on ``name`` that applies under ``markers``."""
    dist = env.get(name)
    if dist is None:
        return
    found = [
        (other, text, requirement, dist)
        for other in env.values()
        if other.requires_dist
        for text in other.requires_dist
        if (requirement := _requirement_on(text, name, markers)) is not None
    ]
    # by requirer name, each requirer's in its own order (a stable sort of the few found, not
    # of every installed distribution: this runs for every downgrade of every stage)
    yield from sorted(found, key=lambda item: item[0].name)


def _override(
    change: _diff.Change, after: Env, markers: Mapping[str, str] | None, where: str
) -> Finding:
    old = change.before.version if change.before else None
    new = change.after.version if change.after else None
    broken = broken_requirements(after, change.name, markers or {})
    moved = f"{old} -> {new}" if old else f"{new}"
    tail = "; ".join(broken) if broken else "no installed package requires another version"
    message = f"{change.name} {moved}: re-pinned on purpose (override); {tail}"
    return Finding("override", WARNING, change.name, old, new, message, where)


def _held_with(
    declared: Collection[str], moved: Collection[str], after: Env, markers: Mapping[str, str]
) -> dict[str, str]:
    """Overrides kept because another live override pins them exactly, each with what pins it.

    A live override is one the step moves, or keeps against a requirement it breaks. Whatever a
    live override requires ``==`` its installed version moved with it in the resolution the
    override undoes (``nvidia-cutlass-dsl`` 4.8.1 brings its ``-libs-*`` 4.8.1), so an override
    of that pin is part of the same re-pin, not a dead entry; followed transitively."""
    if not declared:
        return {}
    names = set(declared)
    live = [  # sorted: which live override names a held one is the same on every run
        n
        for n in sorted(names, reverse=True)
        if n in moved or (n in after and broken_requirements(after, n, markers))
    ]
    held: dict[str, str] = {}
    while live:
        dist = after.get(live.pop())
        if dist is None:
            continue
        for text in dist.requires_dist or ():
            requirement = _exact_pin(text, markers)
            if requirement is None:
                continue
            pinned = canonical_name(requirement.name)
            if pinned not in names or pinned in held or pinned in moved or pinned == dist.name:
                continue
            kept = after.get(pinned)
            if kept is not None and requirement.specifier.contains(kept.version, prereleases=True):
                held[pinned] = f"{dist.raw_name or dist.name} {dist.version} requires {text}"
                live.append(pinned)
    return held


def _exact_pin(text: str, markers: Mapping[str, str]) -> Requirement | None:
    """``text`` parsed when it is one ``==`` pin that applies under ``markers`` (no extras)."""
    from packaging.requirements import InvalidRequirement, Requirement

    if "==" not in text:
        return None
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        return None
    specs = list(requirement.specifier)
    if len(specs) != 1 or specs[0].operator != "==":
        return None
    marker = requirement.marker
    applies = marker is None or not markers or marker.evaluate(dict(markers, extra=""))
    return requirement if applies else None


def _kept_override(
    name: str,
    after: Env,
    markers: Mapping[str, str] | None,
    where: str,
    held: Mapping[str, str] | None = None,
) -> Finding | None:
    """An override the step did not move: it keeps what was installed against a requirement
    that wants another version, or together with another override that pins it exactly
    (:func:`_held_with`), or it changes nothing (a warning that says so)."""
    dist = after.get(name)
    if dist is None:
        return _no_op(name, None, "this step leaves it uninstalled", where)
    broken = broken_requirements(after, name, markers or {})
    if broken:
        message = f"{name} kept at {dist.version} on purpose (override); " + "; ".join(broken)
        return Finding("override", WARNING, name, dist.version, dist.version, message, where)
    if held and name in held:
        message = (
            f"{name} kept at {dist.version} on purpose (override), with the override it "
            f"belongs to: {held[name]}"
        )
        return Finding("override", WARNING, name, dist.version, dist.version, message, where)
    if all(d.requires_dist is not None for d in after.values()):  # else: cannot be told
        why = "the step does not move it and no installed package requires another version"
        return _no_op(name, dist.version, why, where)
    return None


def _no_op(name: str, version: str | None, why: str, where: str) -> Finding:
    """An ``override`` entry that changes nothing: a warning, with the entry to remove."""
    shown = f"{name} {version}" if version else name
    message = f"{shown}: the override changes nothing: {why}"
    hint = f"remove {name} from the layer's override list (or check its name and version)"
    return Finding("override", WARNING, name, version, version, message, where, hint)


def broken_requirements(env: Env, name: str, markers: Mapping[str, str]) -> list[str]:
    """What ``pip check`` would say about ``name`` in ``env``: every installed distribution
    whose recorded ``Requires-Dist`` (for these markers, no extras) excludes its version."""
    return [
        f"{other.raw_name or other.name} {other.version} has requirement "
        f"{requirement}, but you have {dist.raw_name or name} {dist.version}"
        for other, _, requirement, dist in _requirements_on(env, name, markers)
        if not requirement.specifier.contains(dist.version, prereleases=True)
    ]


def _requirement_on(text: str, name: str, markers: Mapping[str, str]) -> Requirement | None:
    if not _names_any_of(text, [name]):
        return None
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        return None
    if canonical_name(requirement.name) != name:
        return None
    marker = requirement.marker
    applies = marker is None or not markers or marker.evaluate(dict(markers, extra=""))
    return requirement if applies else None


def evaluate_shadowed(
    before: Environment | None,
    after: Environment,
    policy: Policy,
    *,
    where: str,
    today: _dt.date,
) -> list[Finding]:
    """Shadowed copies in ``after`` that were not already shadowed in ``before``."""
    seen: dict[str, set[str]] = {}
    for change in _diff.shadowed(before) if before else []:
        seen.setdefault(change.name, set()).add(change.before.location if change.before else "")
    fresh = [
        c
        for c in _diff.shadowed(after)
        if (c.before.location if c.before else "") not in seen.get(c.name, set())
    ]
    return apply_waivers([change_finding(c, policy, where) for c in fresh], policy, today)
