"""The gate's shortcuts must show exactly what the plain computation shows.

- The stage walk leaves out the change findings an earlier stage reported and that do not fail
  (``evaluate(reported=...)`` and ``gate._carried``): every stage reports what the plain walk
  reports (every finding built, then the seen ones dropped), waivers, spent waivers, expiries,
  declared re-pins and reverted changes included.
- The head matrix compares each stage column with the one before only at its locks' pins
  (``columns_matrix(among=...)``, ``Comparison(among=...)``): the same rows as comparing all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from audit.gate.compare import FindingKey, _carried, _seen_keys, finding_key
from audit.gate.matrix import columns_matrix
from audit.history.diff import Comparison
from audit.history.snapshot import Distribution
from audit.policy.findings import Finding
from audit.policy.model import Policy, Waiver
from audit.policy.verdict import Scope, WaiverLedger, evaluate

TODAY = dt.date(2026, 12, 1)
NAMES = ("alpha", "beta", "delta-cu12")
VERSIONS = ("1.0", "1.1", "2.0+cu130")
Env = Mapping[str, Distribution]

_DISTS = {
    (n, v): Distribution(n, v) for n in (*NAMES, "gamma") for v in (*VERSIONS, "2.0")
}  # shared, as predicted

envs = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VERSIONS), max_size=4).map(
    lambda pins: {name: _DISTS[name, version] for name, version in sorted(pins.items())}
)
waivers = st.builds(
    Waiver,
    package=st.sampled_from(NAMES),
    from_version=st.sampled_from(("*", *VERSIONS)),
    to_version=st.sampled_from(("*", *VERSIONS)),
    reason=st.just("known"),
    expires=st.sampled_from((None, TODAY - dt.timedelta(days=1))),
    rule=st.sampled_from((None, None, "cuda-suffix")),
    stage=st.sampled_from((None, "v1", "v2", "v3")),
)
policies = st.builds(
    Policy,
    downgrade=st.sampled_from(("fail", "warn", "allow")),
    removal=st.sampled_from(("fail", "allow")),
    cuda=st.sampled_from((None, "cu130")),
    waivers=st.lists(waivers, max_size=5).map(tuple),
)


def _walk(
    pairs: Sequence[tuple[Env, Env]],
    policy: Policy,
    declared: Sequence[tuple[str, ...]],
    *,
    leave_out: bool,
) -> list[list[Finding]]:
    """Per stage, the findings the gate shows there: with the reported changes left out (the
    gate's walk) or every finding built and the seen ones dropped (the plain walk)."""
    ledger, seen, shown = WaiverLedger(), set[FindingKey](), []
    for index, ((old, new), names) in enumerate(zip(pairs, declared, strict=True), start=1):
        stage, pair = f"v{index}", Comparison(old, new)
        found = evaluate(old, new, policy, where=stage, today=TODAY, scope=Scope(stage),
                         ledger=ledger, declared=names, compared=pair,
                         reported=seen if leave_out else frozenset())  # fmt: skip
        shown.append([f for f in found if finding_key(f) not in seen])
        seen = _seen_keys(found) | (_carried(seen, pair) if leave_out else set())
    return shown


@settings(max_examples=600, deadline=None)
@given(
    st.lists(st.tuples(envs, envs), min_size=1, max_size=4),
    policies,
    st.lists(st.lists(st.sampled_from(NAMES), max_size=2).map(tuple), min_size=4, max_size=4),
)
def test_leaving_reported_changes_out_shows_what_the_plain_walk_shows(
    pairs: list[tuple[Env, Env]], policy: Policy, declared: list[tuple[str, ...]]
) -> None:
    names = declared[: len(pairs)]
    assert _walk(pairs, policy, names, leave_out=True) == _walk(
        pairs, policy, names, leave_out=False
    )


def test_a_change_every_stage_inherits_is_shown_once_and_its_waiver_spent_once() -> None:
    """The fleet's case: v1 downgrades beta under an unscoped waiver and adds gamma; v2 and v3
    inherit both (and v3 upgrades alpha). Each is shown in v1 only, the waiver is spent there,
    and no later stage builds their findings again."""
    waiver = Waiver("beta", "2.0", "1.0", "known")
    policy = Policy(waivers=(waiver,))
    base = {"alpha": _DISTS["alpha", "1.0"], "beta": _DISTS["beta", "2.0"]}
    v1 = {**base, "beta": _DISTS["beta", "1.0"], "gamma": _DISTS["gamma", "1.0"]}
    v3 = {**v1, "alpha": _DISTS["alpha", "1.1"]}
    pairs = [(base, v1), (base, v1), (base, v3)]
    shown = _walk(pairs, policy, [(), (), ()], leave_out=True)
    assert [[(f.rule, f.package, f.waiver is not None) for f in stage] for stage in shown] == [
        [("downgraded", "beta", True), ("added", "gamma", False)],
        [],
        [("upgraded", "alpha", False)],
    ]
    assert shown == _walk(pairs, policy, [(), (), ()], leave_out=False)


def test_a_failing_change_an_earlier_stage_showed_still_spends_the_next_waiver() -> None:
    """v1 downgrades beta 2.0 -> 1.0 under the exact waiver; v2 inherits it, and the catch-all
    waiver (the next that matches) is spent on it there, although v2 shows nothing; so v3's
    own downgrade of beta to 1.1 fails with a spent note. Leaving a failing change out as
    reported would let the catch-all waive v3's."""
    exact, catch_all = Waiver("beta", "2.0", "1.0", "exact"), Waiver("beta", "*", "*", "any")
    policy = Policy(waivers=(exact, catch_all))
    base = {"beta": _DISTS["beta", "2.0"]}
    v1, v3 = {"beta": _DISTS["beta", "1.0"]}, {"beta": _DISTS["beta", "1.1"]}
    shown = _walk([(base, v1), (base, v1), (base, v3)], policy, [(), (), ()], leave_out=True)
    assert [[(f.rule, f.after, f.severity) for f in stage] for stage in shown] == [
        [("downgraded", "1.0", "info")],
        [],
        [("downgraded", "1.1", "error"), ("waiver-spent", "1.1", "warning")],
    ]


pins = st.dictionaries(st.sampled_from((*NAMES, "gamma")), st.sampled_from(VERSIONS), max_size=3)


@settings(max_examples=300, deadline=None)
@given(envs, st.lists(pins, min_size=1, max_size=5))
def test_comparing_only_at_the_pins_draws_the_same_head_matrix(
    base: Env, layers: list[dict[str, str]]
) -> None:
    """Each column installs its pins over the one before (replacing, adding, never removing),
    as prediction does; a pin at the version already there keeps the object."""
    columns: dict[str, Env] = {"base": base}
    for index, layer in enumerate(layers, start=1):
        last = list(columns.values())[-1]
        columns[f"v{index}"] = {**last, **{n: _DISTS[n, v] for n, v in layer.items()}}
    among = [frozenset(layer) for layer in layers]
    for (old, new), names in zip(pairwise(columns.values()), among, strict=True):
        narrowed, plain = Comparison(old, new, names), Comparison(old, new)
        assert sorted(narrowed.touched) == sorted(plain.touched)
        assert narrowed.removed == plain.removed == []
        assert narrowed.changes == plain.changes
    assert columns_matrix("img", columns, {}, among=among) == columns_matrix("img", columns, {})
